// MIST's compiled kernels (ltdrnn.ops.mist_torch): the whole training recurrence, forward and backward, each
// time loop in one call (the "cpp" backend), and the one-call streaming step. Operators:
// torch.ops.ltdrnn.mist_forward / mist_backward / mist_stream.
//
// Scan layouts (contiguous, time-major; G = n_d + H, N the history length):
//   gates (T, B, G): the logits [a | r] = W_ih x + b + W_hh h_{t-1}, which the forward replaces in
//       place by softmax(a) and sigmoid(r), which the backward reads.
//   states (N + T, B, H): rows 0 .. N - 1 the initial history, row N + t the state h_t (first its tanh
//       argument, W_x x_t + b + W_mix rm_t). h_{t - 2^i} is row N + t - 2^i.
//   reset_mixed (T, B, H): rm_t = r_t * m_t with the mix m_t = sum_i a_i h_{t-2^i}.
//   w_hh (G, H), w_mix (H, H): the recurrent weights as the cell holds them (not transposed).
//   grad (N + T, B, H): the backward's work buffer, dL/dh_s in full: row s starts as its gradient from
//       outside the recurrence (d_outside) when the first step that adds into it comes, then gathers
//       what flows back through the recurrence.
// The backward forms every gradient itself: the parameters' summed over each step's rows while that step's
// gradients of the logits [a | r] and of the tanh argument are hot, so no (T, B, .) buffer of them exists.
//
// Threads: a batch row depends only on its own earlier states (the delayed ones included), so each loop
// splits the batch once into one block of rows per thread and runs all T steps of a block on its own
// thread with single-threaded BLAS (common.h, over_batch_blocks). Nothing is shared between blocks: the
// forward's result does not depend on the thread count; the backward's parameter gradients are one sum
// per block, added in block order (deterministic for a given thread count, rounded differently across
// thread counts).
#include "common.h"

namespace {

using namespace ltdrnn;

constexpr const char* kForward = "mist_forward";
constexpr const char* kBackward = "mist_backward";

struct ScanSizes {
  int64_t steps, past, batch, hidden, delays;
};

// Checks the scan's buffers and weights; the delayed rows N + t - 2^i must exist at t = 0.
ScanSizes check_scan(const at::Tensor& gates, const at::Tensor& states, const at::Tensor& reset_mixed,
                     const at::Tensor& w_hh, const at::Tensor& w_mix, const char* op) {
  check_floating(states, op, "states");
  TORCH_CHECK(states.dim() == 3 && states.is_contiguous() && states.size(2) > 0, op,
              ": states must be a contiguous (N + T, B, H) tensor with H > 0, got ", states.sizes());
  TORCH_CHECK(reset_mixed.dim() == 3, op, ": reset_mixed must be (T, B, H), got ", reset_mixed.sizes());
  const int64_t steps = reset_mixed.size(0), batch = states.size(1), hidden = states.size(2);
  const int64_t past = states.size(0) - steps;
  check_tensor(reset_mixed, states, {steps, batch, hidden}, op, "reset_mixed");
  TORCH_CHECK(gates.dim() == 3 && gates.size(2) > hidden, op, ": gates must be (T, B, n_d + H), got ", gates.sizes());
  const int64_t delays = gates.size(2) - hidden;
  check_tensor(gates, states, {steps, batch, delays + hidden}, op, "gates");
  TORCH_CHECK(delays < 63 && past >= (int64_t(1) << (delays - 1)), op, ": ", delays,
              " delays need a history of at least 2^(n_d - 1) rows, got ", past);
  check_tensor(w_hh, states, {delays + hidden, hidden}, op, "w_hh");
  check_tensor(w_mix, states, {hidden, hidden}, op, "w_mix");
  return {steps, past, batch, hidden, delays};
}

// c (m x n) = beta c + a (m x k) b, b (k x n), row-major and contiguous (common.h, gemm): the input's
// gradient, whose few columns are no work for the packed products
template <typename T>
void product(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k, T beta) {
  gemm(false, false, m, n, k, T(1), a, k, b, n, beta, c, n);
}

// One batch row of step t: the logits [a | r] become softmax(a), sigmoid(r); rm = r * sum_i a_i h_{t-2^i}.
// h_t points at the row's (not yet written) state h_t; h_{t - k} is `k * stride` entries before it.
template <typename T>
void forward_row(T* __restrict a, const T* h_t, T* __restrict rm, int64_t delays, int64_t hidden, int64_t stride) {
  T* __restrict r = a + delays;
  T top = a[0], total = 0;
  for (int64_t i = 1; i < delays; ++i) top = a[i] > top ? a[i] : top;
  for (int64_t i = 0; i < delays; ++i) {
    a[i] = std::exp(a[i] - top);
    total += a[i];
  }
  for (int64_t i = 0; i < delays; ++i) a[i] /= total;
  for (int64_t i = 0; i < delays; ++i) {
    const T* __restrict h = h_t - (int64_t(1) << i) * stride;
    const T weight = a[i];
    if (i == 0) {
      for (int64_t j = 0; j < hidden; ++j) rm[j] = weight * h[j];
    } else {
      for (int64_t j = 0; j < hidden; ++j) rm[j] += weight * h[j];
    }
  }
  for (int64_t j = 0; j < hidden; ++j) {
    const T reset = sigmoid(r[j]);
    r[j] = reset;
    rm[j] *= reset;
  }
}

// The forward's inputs as raw pointers: x (T, B, d), W_ih (n_d + 2H, d), bias (n_d + 2H) and the initial
// history (B, N, H) with its strides (a carried history is a transposed view of the last scan's states).
template <typename T>
struct ForwardInputs {
  const T *x, *w_ih, *bias, *history0;
  int64_t inputs, history_strides[3];
};

// The block's rows of the initial history into states' rows 0 .. N - 1.
template <typename T>
void read_history(const ScanSizes& s, const ForwardInputs<T>& in, T* states, int64_t begin, int64_t rows) {
  const int64_t* stride = in.history_strides;
  for (int64_t row = 0; row < s.past; ++row) {
    for (int64_t b = begin; b < begin + rows; ++b) {
      const T* from = in.history0 + b * stride[0] + row * stride[1];
      T* to = states + (row * s.batch + b) * s.hidden;
      for (int64_t j = 0; j < s.hidden; ++j) to[j] = from[j * stride[2]];
    }
  }
}

// The forward's two products per step, their weights packed once for all T steps (products.h):
// gates = bias_g + h_{t-1} W_hh^T + x_t W_ih[:G]^T and h_t = tanh(bias_h + rm_t W_mix^T + x_t W_ih[G:]^T).
template <typename T>
struct ForwardProducts {
  StepProduct<T> gates, state;
  ForwardProducts(const ScanSizes& s, const T* w_hh, const T* w_mix, const T* w_ih, int64_t d)
      : gates(s.delays + s.hidden, {w_hh, 1, s.hidden}, s.hidden, {w_ih, 1, d}, d),
        state(s.hidden, {w_mix, 1, s.hidden}, s.hidden, {w_ih + (s.delays + s.hidden) * d, 1, d}, d) {}
};

template <typename T>
void forward_rows(const ScanSizes& s, const ForwardInputs<T>& in, const ForwardProducts<T>& products, T* gates,
                  T* states, T* reset_mixed, int64_t begin, int64_t rows) {
  const int64_t G = s.delays + s.hidden, H = s.hidden, stride = s.batch * H, d = in.inputs;
  read_history(s, in, states, begin, rows);
  for (int64_t t = 0; t < s.steps; ++t) {
    const T* x_t = in.x + (t * s.batch + begin) * d;
    T* g = gates + (t * s.batch + begin) * G;
    T* h = states + ((s.past + t) * s.batch + begin) * H;
    T* rm = reset_mixed + (t * s.batch + begin) * H;
    products.gates.run(rows, h - stride, H, x_t, d, g, G, Start::bias, in.bias);
    for (int64_t b = 0; b < rows; ++b) forward_row(g + b * G, h + b * H, rm + b * H, s.delays, H, stride);
    products.state.run(rows, rm, H, x_t, d, h, H, Start::bias, in.bias + G);
    for (int64_t j = 0; j < rows * H; ++j) h[j] = std::tanh(h[j]);
  }
}

// The forward over all T steps from x, the initial history (B, N, H, any strides) and the weights:
// writes gates, states and reset_mixed (see the layouts above; none is read first).
void mist_forward(at::Tensor gates, at::Tensor states, at::Tensor reset_mixed, const at::Tensor& w_hh,
                  const at::Tensor& w_mix, const at::Tensor& x, const at::Tensor& w_ih, const at::Tensor& bias,
                  const at::Tensor& history0) {
  const auto sizes = check_scan(gates, states, reset_mixed, w_hh, w_mix, kForward);
  const int64_t split = sizes.delays + 2 * sizes.hidden;
  TORCH_CHECK(x.dim() == 3, kForward, ": x must be (T, B, d), got ", x.sizes());
  check_tensor(x, states, {sizes.steps, sizes.batch, x.size(2)}, kForward, "x");
  check_tensor(w_ih, states, {split, x.size(2)}, kForward, "w_ih");
  check_tensor(bias, states, {split}, kForward, "bias");
  check_tensor(history0, states, {sizes.batch, sizes.past, sizes.hidden}, kForward, "history0", false);
  AT_DISPATCH_FLOATING_TYPES(states.scalar_type(), kForward, [&] {
    using T = scalar_t;
    const ForwardInputs<T> in{x.data_ptr<T>(),
                              w_ih.data_ptr<T>(),
                              bias.data_ptr<T>(),
                              history0.data_ptr<T>(),
                              x.size(2),
                              {history0.stride(0), history0.stride(1), history0.stride(2)}};
    const ForwardProducts<T> products(sizes, w_hh.data_ptr<T>(), w_mix.data_ptr<T>(), in.w_ih, in.inputs);
    over_batch_blocks(sizes.batch, rows_per_thread(sizes.batch), [&](int64_t begin, int64_t end, int64_t) {
      forward_rows<T>(sizes, in, products, gates.data_ptr<T>(), states.data_ptr<T>(), reset_mixed.data_ptr<T>(),
                      begin, end - begin);
    });
  });
}

// One batch row of step t, backward: d (the gradient of rm_t) becomes the gradient of the mix, d_mix =
// d * r; writes the gradient of the logits [a | r] into da and adds a_i d_mix into the rows of the
// delayed states' gradient (grad_t: the row's own gradient, h_t as in forward_row). Uses
// 1 - r = (dr/dlogit) / r, so only rm (not m) is needed: dL/dlogit_r = d * rm * (1 - r).
template <typename T>
void backward_row(const T* __restrict a, const T* __restrict rm, T* __restrict d, const T* h_t, T* grad_t,
                  T* __restrict da, int64_t delays, int64_t hidden, int64_t stride) {
  const T* __restrict r = a + delays;
  T* __restrict dr = da + delays;
  for (int64_t j = 0; j < hidden; ++j) {
    const T dj = d[j];
    dr[j] = dj * rm[j] * (T(1) - r[j]);
    d[j] = dj * r[j];
  }
  T weighted = 0;
  for (int64_t i = 0; i < delays; ++i) {
    const int64_t back = (int64_t(1) << i) * stride;
    const T* __restrict h = h_t - back;
    T* __restrict gh = grad_t - back;
    const T weight = a[i];
    T dot_i = 0;
    for (int64_t j = 0; j < hidden; ++j) {
      dot_i += h[j] * d[j];
      gh[j] += weight * d[j];
    }
    da[i] = dot_i;
    weighted += weight * dot_i;
  }
  for (int64_t i = 0; i < delays; ++i) da[i] = a[i] * (da[i] - weighted);
}

// One block's share of the backward's results that are sums over all its rows and steps: the parameter
// gradients, each (rows x cols) row-major like its parameter. A block adds into its own copy, the copies
// are summed in block order afterwards (deterministic for a given thread count).
template <typename T>
struct ParameterGradients {
  T *w_ih, *bias, *w_hh, *w_mix;  // (n_d + 2H, d), (n_d + 2H), (n_d + H, H), (H, H)
};

// The backward's tensors as raw pointers (layouts at the top of this file); d_x is null when x needs no
// gradient.
template <typename T>
struct BackwardData {
  const T *gates, *states, *reset_mixed, *x, *w_ih, *w_hh, *w_mix, *d_outside;
  T *grad, *d_x, *d_history0;
  int64_t inputs, outside_rows;  // d; the rows of states that d_outside covers (the last ones)
};

// c (m x n) += a^T b for a (k x m), b (k x n): a parameter gradient summed over a step's k batch rows.
template <typename T>
void add_product_at(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k) {
  add_at_b(m, n, k, a, m, b, n, c, n);
}

// sums[c] += sum over rows of a[row, c], a (rows x cols): a bias gradient.
template <typename T>
void add_column_sums(const T* __restrict a, T* __restrict sums, int64_t rows, int64_t cols) {
  for (int64_t b = 0; b < rows; ++b) {
    for (int64_t c = 0; c < cols; ++c) sums[c] += a[b * cols + c];
  }
}

// Sets the block's rows of state row s of grad to their gradient from outside the recurrence (zero where
// d_outside does not reach). Row s is set just before the first step that adds into it (step
// s - N + 2^(n_d - 1), its longest delay), so grad needs no filling beforehand.
template <typename T>
void start_state_gradient(const ScanSizes& s, const BackwardData<T>& d, int64_t row, int64_t begin, int64_t rows) {
  const int64_t H = s.hidden, first_outside = s.past + s.steps - d.outside_rows;
  T* out = d.grad + (row * s.batch + begin) * H;
  if (row >= first_outside) {
    const T* from = d.d_outside + ((row - first_outside) * s.batch + begin) * H;
    std::copy(from, from + rows * H, out);
  } else {
    std::fill(out, out + rows * H, T(0));
  }
}

// This block's rows of the gradient of the initial history, (B, N, H) from grad's rows 0 .. N - 1.
template <typename T>
void write_history_gradient(const ScanSizes& s, const BackwardData<T>& d, int64_t begin, int64_t rows) {
  const int64_t H = s.hidden;
  for (int64_t b = begin; b < begin + rows; ++b) {
    for (int64_t row = 0; row < s.past; ++row) {
      const T* from = d.grad + (row * s.batch + b) * H;
      std::copy(from, from + H, d.d_history0 + (b * s.past + row) * H);
    }
  }
}

// The rows' share of step t's parameter and input gradients, from the gradients of the logits da
// (rows x G) and of the tanh argument dz (rows x H) while they are hot (one product of k = rows per
// weight, instead of re-reading (T, B, .) buffers after the loop).
template <typename T>
void add_step_gradients(const ScanSizes& s, const BackwardData<T>& d, const ParameterGradients<T>& p, const T* da,
                        const T* dz, int64_t t, int64_t begin, int64_t rows) {
  const int64_t G = s.delays + s.hidden, H = s.hidden, n = d.inputs;
  const T* x_t = d.x + (t * s.batch + begin) * n;
  add_product_at(da, d.states + ((s.past + t - 1) * s.batch + begin) * H, p.w_hh, G, H, rows);  // da^T h_{t-1}
  add_product_at(dz, d.reset_mixed + (t * s.batch + begin) * H, p.w_mix, H, H, rows);             // dz^T rm_t
  add_product_at(da, x_t, p.w_ih, G, n, rows);
  add_product_at(dz, x_t, p.w_ih + G * n, H, n, rows);
  add_column_sums(da, p.bias, rows, G);
  add_column_sums(dz, p.bias + G, rows, H);
  if (d.d_x) {  // dx_t = da W_ih[:G] + dz W_ih[G:]
    T* dx = d.d_x + (t * s.batch + begin) * n;
    product(da, d.w_ih, dx, rows, n, G, T(0));
    product(dz, d.w_ih + G * n, dx, rows, n, H, T(1));
  }
}

// The backward's per-step products through the weights, packed once (products.h): d rm_t = dz_t W_mix and
// d h_{t-1} += d gates_t W_hh.
template <typename T>
struct BackwardProducts {
  StepProduct<T> mix, state;
  BackwardProducts(const ScanSizes& s, const T* w_hh, const T* w_mix)
      : mix(s.hidden, {w_mix, s.hidden, 1}, s.hidden), state(s.hidden, {w_hh, s.hidden, 1}, s.delays + s.hidden) {}
};

// Work buffers (this block's, one step each): da (rows x G) the gradient of the logits [a | r], dz
// (rows x H) of the tanh argument, d_rm (rows x H) of rm_t, then of the mix.
template <typename T>
void backward_rows(const ScanSizes& s, const BackwardData<T>& d, const ParameterGradients<T>& p,
                   const BackwardProducts<T>& products, T* da, T* dz, T* d_rm, int64_t begin, int64_t rows) {
  const int64_t G = s.delays + s.hidden, H = s.hidden, stride = s.batch * H;
  const int64_t longest = int64_t(1) << (s.delays - 1);
  int64_t started = s.past + s.steps;  // grad's rows from here on hold their outside gradient
  for (int64_t t = s.steps - 1; t >= 0; --t) {
    while (started > s.past + t - longest) start_state_gradient(s, d, --started, begin, rows);
    const int64_t row = (s.past + t) * s.batch + begin;
    const T* h = d.states + row * H;
    T* gh = d.grad + row * H;
    const T* a = d.gates + (t * s.batch + begin) * G;
    const T* rm = d.reset_mixed + (t * s.batch + begin) * H;
    for (int64_t j = 0; j < rows * H; ++j) dz[j] = gh[j] * (T(1) - h[j] * h[j]);
    products.mix.run(rows, dz, H, nullptr, 0, d_rm, H, Start::zero);  // d rm_t = dz_t W_mix
    for (int64_t b = 0; b < rows; ++b) {
      backward_row(a + b * G, rm + b * H, d_rm + b * H, h + b * H, gh + b * H, da + b * G, s.delays, H, stride);
    }
    products.state.run(rows, da, G, nullptr, 0, gh - stride, H, Start::add);  // d h_{t-1} += d_gates_t W_hh
    add_step_gradients(s, d, p, da, dz, t, begin, rows);
  }
  while (started > 0) start_state_gradient(s, d, --started, begin, rows);  // rows no step reads
  write_history_gradient(s, d, begin, rows);
}

// The backward over all T steps, last to first: writes the gradients of the initial history (d_history0),
// of every parameter and, when d_x is given, of x. d_outside (R, B, H) is dL/dh from outside the
// recurrence for the last R rows of states (the rest get none); grad is a work buffer, not read first.
void mist_backward(const at::Tensor& gates, const at::Tensor& states, const at::Tensor& reset_mixed,
                   const at::Tensor& w_hh, const at::Tensor& w_mix, const at::Tensor& x, const at::Tensor& w_ih,
                   const at::Tensor& d_outside, at::Tensor grad, const std::optional<at::Tensor>& d_x,
                   at::Tensor d_history0, at::Tensor d_w_ih, at::Tensor d_bias, at::Tensor d_w_hh, at::Tensor d_w_mix) {
  const auto sizes = check_scan(gates, states, reset_mixed, w_hh, w_mix, kBackward);
  const int64_t G = sizes.delays + sizes.hidden, H = sizes.hidden;
  TORCH_CHECK(x.dim() == 3, kBackward, ": x must be (T, B, d), got ", x.sizes());
  check_tensor(x, states, {sizes.steps, sizes.batch, x.size(2)}, kBackward, "x");
  check_tensor(w_ih, states, {G + H, x.size(2)}, kBackward, "w_ih");
  TORCH_CHECK(d_outside.dim() == 3 && d_outside.size(0) <= states.size(0), kBackward,
              ": d_outside must be (R, B, H) with R <= N + T, got ", d_outside.sizes());
  check_tensor(d_outside, states, {d_outside.size(0), sizes.batch, H}, kBackward, "d_outside");
  check_tensor(grad, states, states.sizes(), kBackward, "grad");
  if (d_x) check_tensor(*d_x, states, x.sizes(), kBackward, "d_x");
  check_tensor(d_history0, states, {sizes.batch, sizes.past, H}, kBackward, "d_history0");
  check_tensor(d_w_ih, states, w_ih.sizes(), kBackward, "d_w_ih");
  check_tensor(d_bias, states, {G + H}, kBackward, "d_bias");
  check_tensor(d_w_hh, states, w_hh.sizes(), kBackward, "d_w_hh");
  check_tensor(d_w_mix, states, w_mix.sizes(), kBackward, "d_w_mix");
  std::vector<at::Tensor> results{d_w_ih, d_bias, d_w_hh, d_w_mix};  // ParameterGradients' order
  int64_t per_block = 0;
  for (const auto& result : results) per_block += result.numel();
  per_block = (per_block + 15) / 16 * 16;  // whole cache lines: two blocks never write into the same one
  const int64_t chunk = rows_per_thread(sizes.batch);
  at::Tensor parts = at::zeros({batch_blocks(sizes.batch, chunk), per_block}, states.options());
  AT_DISPATCH_FLOATING_TYPES(states.scalar_type(), kBackward, [&] {
    using T = scalar_t;
    const BackwardData<T> data{gates.data_ptr<T>(),     states.data_ptr<T>(), reset_mixed.data_ptr<T>(),
                               x.data_ptr<T>(),         w_ih.data_ptr<T>(),   w_hh.data_ptr<T>(),
                               w_mix.data_ptr<T>(),     d_outside.data_ptr<T>(), grad.data_ptr<T>(),
                               d_x ? d_x->data_ptr<T>() : nullptr, d_history0.data_ptr<T>(), x.size(2),
                               d_outside.size(0)};
    const BackwardProducts<T> products(sizes, data.w_hh, data.w_mix);
    over_batch_blocks(sizes.batch, chunk, [&](int64_t begin, int64_t end, int64_t part) {
      T* block = parts.data_ptr<T>() + part * per_block;
      T* w_hh_part = block + d_w_ih.numel() + d_bias.numel();
      const ParameterGradients<T> mine{block, block + d_w_ih.numel(), w_hh_part, w_hh_part + d_w_hh.numel()};
      const int64_t rows = end - begin;
      at::Tensor work = at::empty({rows * (G + 2 * H)}, states.options());
      T* da = work.data_ptr<T>();
      backward_rows<T>(sizes, data, mine, products, da, da + rows * G, da + rows * (G + H), begin, rows);
    });
  });
  at::Tensor total = parts[0];
  for (int64_t part = 1; part < parts.size(0); ++part) total = total + parts[part];  // in block order
  int64_t offset = 0;
  for (auto& result : results) {
    result.copy_(total.narrow(0, offset, result.numel()).view(result.sizes()));
    offset += result.numel();
  }
}

// ---- the streaming step -------------------------------------------------------------------------------
// weights: [W_ih (n_d + 2H, d), bias (n_d + 2H), W_hh (n_d + H, H), W_mix (H, H)]; no options.
// state: the history (B, N, H), h_{t-N} .. h_{t-1}. Returns h_t (B, H) and the shifted history
// (h_{t-N+1} .. h_t).
constexpr const char* kStream = "mist_stream";

template <typename T>
void stream_rows(at::TensorList w, const T* x, const T* history, T* h_out, T* new_history, int64_t batch, int64_t d,
                 int64_t hidden, int64_t delays, int64_t past) {
  const T* w_ih = w[0].data_ptr<T>();
  const T* bias = w[1].data_ptr<T>();
  const T* w_hh = w[2].data_ptr<T>();
  const T* w_mix = w[3].data_ptr<T>();
  const int64_t H = hidden, split = delays + H;
  std::vector<T> work(split + 3 * H);
  T *gates = work.data(), *pre = gates + split, *rm = pre + H, *hn = rm + H;
  for (int64_t b = 0; b < batch; ++b) {
    const T* xb = x + b * d;
    const T* hist = history + b * past * H;
    std::copy(bias, bias + split + H, gates);  // gates, then pre
    add_matvec(gates, w_ih, xb, split, d);
    add_matvec(pre, w_ih + split * d, xb, H, d);
    add_matvec(gates, w_hh, hist + (past - 1) * H, split, H);
    T *a = gates, *r = gates + delays, top = a[0], total = 0;
    for (int64_t i = 1; i < delays; ++i) top = a[i] > top ? a[i] : top;
    for (int64_t i = 0; i < delays; ++i) {
      a[i] = std::exp(a[i] - top);
      total += a[i];
    }
    for (int64_t i = 0; i < delays; ++i) a[i] /= total;
    std::fill(rm, rm + H, T(0));
    for (int64_t i = 0; i < delays; ++i) {
      const T* delayed = hist + (past - (int64_t(1) << i)) * H;
      for (int64_t j = 0; j < H; ++j) rm[j] += a[i] * delayed[j];
    }
    for (int64_t j = 0; j < H; ++j) rm[j] *= sigmoid(r[j]);
    std::copy(pre, pre + H, hn);
    add_matvec(hn, w_mix, rm, H, H);
    for (int64_t j = 0; j < H; ++j) hn[j] = std::tanh(hn[j]);
    T* nh = new_history + b * past * H;
    std::copy(hist + H, hist + past * H, nh);
    std::copy(hn, hn + H, nh + (past - 1) * H);
    std::copy(hn, hn + H, h_out + b * H);
  }
}

std::tuple<at::Tensor, at::Tensor> mist_stream(at::TensorList weights, at::IntArrayRef options, const at::Tensor& x,
                                               const at::Tensor& state) {
  TORCH_CHECK(options.empty(), kStream, ": takes no options, got ", options.size());
  check_weight_count(weights, 4, kStream);
  TORCH_CHECK(state.dim() == 3, kStream, ": state must be the history (B, N, H), got ", state.sizes());
  const int64_t past = state.size(1), hidden = state.size(2), d = x.dim() == 2 ? x.size(1) : 0;
  check_stream_input(x, state, {past, hidden}, kStream, /*whole_state=*/false);
  TORCH_CHECK(weights[2].dim() == 2 && weights[2].size(0) > hidden, kStream, ": W_hh must be (n_d + H, H), got ",
              weights[2].sizes());
  const int64_t delays = weights[2].size(0) - hidden;
  check_tensor(weights[0], x, {delays + 2 * hidden, d}, kStream, "W_ih");
  check_tensor(weights[1], x, {delays + 2 * hidden}, kStream, "bias");
  check_tensor(weights[2], x, {delays + hidden, hidden}, kStream, "W_hh");
  check_tensor(weights[3], x, {hidden, hidden}, kStream, "W_mix");
  TORCH_CHECK(delays < 63 && past >= (int64_t(1) << (delays - 1)), kStream, ": ", delays,
              " delays need a history of at least 2^(n_d - 1) rows, got ", past);
  // Only the delayed rows h_{t-2^i} enter the arithmetic; the others are copied bit for bit, NaN included,
  // as the reference's concatenation copies them. Checking those rows alone halves the bytes read.
  const auto read_rows_finite = [&](auto zero) {
    using T = decltype(zero);
    const T* rows = state.data_ptr<T>();
    for (int64_t b = 0; b < x.size(0); ++b)
      for (int64_t i = 0; i < delays; ++i)
        if (!all_finite(rows + (b * past + past - (int64_t(1) << i)) * hidden, hidden)) return false;
    return true;
  };
  const bool finite = x.scalar_type() == at::kFloat ? read_rows_finite(0.0f) : read_rows_finite(0.0);
  TORCH_CHECK_NOT_IMPLEMENTED(finite, kStream, ": a delayed state holds NaN or an infinity; use the general path");
  at::Tensor h = at::empty({x.size(0), hidden}, state.options()), history = at::empty_like(state);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), kStream, [&] {
    stream_rows<scalar_t>(weights, x.data_ptr<scalar_t>(), state.data_ptr<scalar_t>(), h.data_ptr<scalar_t>(),
                          history.data_ptr<scalar_t>(), x.size(0), d, hidden, delays, past);
  });
  return {h, history};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ltdrnn, m) {  // a fragment: every cell's library adds to the same namespace
  m.def("mist_forward(Tensor(a!) gates, Tensor(b!) states, Tensor(c!) reset_mixed, Tensor w_hh, Tensor w_mix, "
        "Tensor x, Tensor w_ih, Tensor bias, Tensor history0) -> ()");
  m.def("mist_backward(Tensor gates, Tensor states, Tensor reset_mixed, Tensor w_hh, Tensor w_mix, Tensor x, "
        "Tensor w_ih, Tensor d_outside, Tensor(a!) grad, Tensor(b!)? d_x, Tensor(c!) d_history0, Tensor(d!) d_w_ih, "
        "Tensor(e!) d_bias, Tensor(f!) d_w_hh, Tensor(g!) d_w_mix) -> ()");
  m.def("mist_stream(Tensor[] weights, int[] options, Tensor x, Tensor state) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(ltdrnn, CPU, m) {
  m.impl("mist_forward", &mist_forward);
  m.impl("mist_backward", &mist_backward);
  m.impl("mist_stream", &mist_stream);
}
