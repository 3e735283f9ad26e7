// MIST's compiled kernels (ltdrnn.cells.mist): the whole training recurrence, forward and backward, each
// time loop in one call (the "kernel" scan), and the one-call streaming step. Operators:
// torch.ops.ltdrnn.mist_forward / mist_backward / mist_stream.
//
// Scan layouts (contiguous, time-major; G = n_d + H, N the history length):
//   gates (T, B, G): on entry the input part of the logits [a | r] (W_ih x + b); the forward adds
//       W_hh h_{t-1} and replaces them in place by softmax(a) and sigmoid(r), which the backward reads.
//   states (N + T, B, H): rows 0 .. N - 1 the initial history; on entry row N + t holds the input part
//       of the tanh argument (W_x x_t + b), which the forward completes and replaces by h_t. h_{t - 2^i}
//       is row N + t - 2^i.
//   reset_mixed (T, B, H): rm_t = r_t * m_t with the mix m_t = sum_i a_i h_{t-2^i}.
//   w_hh (G, H), w_mix (H, H): the recurrent weights as the cell holds them (not transposed).
//   grad (N + T, B, H): on entry dL/dh_s from outside the recurrence; the backward adds what flows back
//       through it, so on exit rows 0 .. N - 1 are the gradient of the initial history.
//   d_gates (T, B, G): gradient of the logits [a | r]; d_pre (T, B, H): gradient of the tanh argument.
// The weight and input gradients are left to the caller: one large product each over all T * B rows.
//
// Threads: a batch row depends only on its own earlier states (the delayed ones included), so each loop
// splits the batch once into one block of rows per thread and runs all T steps of a block on its own
// thread with single-threaded BLAS (common.h, over_batch_blocks). Nothing is shared between blocks: the
// result does not depend on the thread count.
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

// Row-major products on contiguous operands (common.h, gemm).
// c (m x n) = beta c + a (m x k) b^T, b (n x k)
template <typename T>
void product_bt(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k, T beta) {
  gemm(false, true, m, n, k, T(1), a, k, b, k, beta, c, n);
}

// c (m x n) = beta c + a (m x k) b, b (k x n)
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

template <typename T>
void forward_rows(const ScanSizes& s, T* gates, T* states, T* reset_mixed, const T* w_hh, const T* w_mix,
                  int64_t begin, int64_t rows) {
  const int64_t G = s.delays + s.hidden, H = s.hidden, stride = s.batch * H;
  for (int64_t t = 0; t < s.steps; ++t) {
    T* g = gates + (t * s.batch + begin) * G;
    T* h = states + ((s.past + t) * s.batch + begin) * H;
    T* rm = reset_mixed + (t * s.batch + begin) * H;
    product_bt(h - stride, w_hh, g, rows, G, H, T(1));  // + W_hh h_{t-1}
    for (int64_t b = 0; b < rows; ++b) forward_row(g + b * G, h + b * H, rm + b * H, s.delays, H, stride);
    product_bt(rm, w_mix, h, rows, H, H, T(1));  // + W_mix rm_t
    for (int64_t j = 0; j < rows * H; ++j) h[j] = std::tanh(h[j]);
  }
}

// The forward over all T steps; gates and the rows N .. N + T - 1 of states are completed in place (see
// the layouts above), reset_mixed is written.
void mist_forward(at::Tensor gates, at::Tensor states, at::Tensor reset_mixed, const at::Tensor& w_hh,
                  const at::Tensor& w_mix) {
  const auto sizes = check_scan(gates, states, reset_mixed, w_hh, w_mix, kForward);
  AT_DISPATCH_FLOATING_TYPES(states.scalar_type(), kForward, [&] {
    over_batch_blocks(sizes.batch, rows_per_thread(sizes.batch), [&](int64_t begin, int64_t end, int64_t) {
      forward_rows<scalar_t>(sizes, gates.data_ptr<scalar_t>(), states.data_ptr<scalar_t>(),
                             reset_mixed.data_ptr<scalar_t>(), w_hh.data_ptr<scalar_t>(), w_mix.data_ptr<scalar_t>(),
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

// d_rm (rows x H): this block's work buffer, the gradient of rm_t, then of the mix.
template <typename T>
void backward_rows(const ScanSizes& s, const T* gates, const T* states, const T* reset_mixed, const T* w_hh,
                   const T* w_mix, T* grad, T* d_gates, T* d_pre, T* d_rm, int64_t begin, int64_t rows) {
  const int64_t G = s.delays + s.hidden, H = s.hidden, stride = s.batch * H;
  for (int64_t t = s.steps - 1; t >= 0; --t) {
    const int64_t row = (s.past + t) * s.batch + begin;
    const T* h = states + row * H;
    T* gh = grad + row * H;
    const T* a = gates + (t * s.batch + begin) * G;
    const T* rm = reset_mixed + (t * s.batch + begin) * H;
    T* da = d_gates + (t * s.batch + begin) * G;
    T* dz = d_pre + (t * s.batch + begin) * H;
    for (int64_t j = 0; j < rows * H; ++j) dz[j] = gh[j] * (T(1) - h[j] * h[j]);
    product(dz, w_mix, d_rm, rows, H, H, T(0));  // d rm_t = dz_t W_mix
    for (int64_t b = 0; b < rows; ++b) {
      backward_row(a + b * G, rm + b * H, d_rm + b * H, h + b * H, gh + b * H, da + b * G, s.delays, H, stride);
    }
    product(da, w_hh, gh - stride, rows, H, G, T(1));  // d h_{t-1} += d_gates_t W_hh
  }
}

// The backward over all T steps, last to first: grad gets what flows back through the recurrence (see
// the layouts above), d_gates and d_pre are written.
void mist_backward(const at::Tensor& gates, const at::Tensor& states, const at::Tensor& reset_mixed,
                   const at::Tensor& w_hh, const at::Tensor& w_mix, at::Tensor grad, at::Tensor d_gates,
                   at::Tensor d_pre) {
  const auto sizes = check_scan(gates, states, reset_mixed, w_hh, w_mix, kBackward);
  check_tensor(grad, states, states.sizes(), kBackward, "grad");
  check_tensor(d_gates, states, gates.sizes(), kBackward, "d_gates");
  check_tensor(d_pre, states, reset_mixed.sizes(), kBackward, "d_pre");
  AT_DISPATCH_FLOATING_TYPES(states.scalar_type(), kBackward, [&] {
    over_batch_blocks(sizes.batch, rows_per_thread(sizes.batch), [&](int64_t begin, int64_t end, int64_t) {
      at::Tensor d_rm = at::empty({end - begin, sizes.hidden}, states.options());
      backward_rows<scalar_t>(sizes, gates.data_ptr<scalar_t>(), states.data_ptr<scalar_t>(),
                              reset_mixed.data_ptr<scalar_t>(), w_hh.data_ptr<scalar_t>(), w_mix.data_ptr<scalar_t>(),
                              grad.data_ptr<scalar_t>(), d_gates.data_ptr<scalar_t>(), d_pre.data_ptr<scalar_t>(),
                              d_rm.data_ptr<scalar_t>(), begin, end - begin);
    });
  });
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
  check_stream_input(x, state, {past, hidden}, kStream);
  TORCH_CHECK(weights[2].dim() == 2 && weights[2].size(0) > hidden, kStream, ": W_hh must be (n_d + H, H), got ",
              weights[2].sizes());
  const int64_t delays = weights[2].size(0) - hidden;
  check_tensor(weights[0], x, {delays + 2 * hidden, d}, kStream, "W_ih");
  check_tensor(weights[1], x, {delays + 2 * hidden}, kStream, "bias");
  check_tensor(weights[2], x, {delays + hidden, hidden}, kStream, "W_hh");
  check_tensor(weights[3], x, {hidden, hidden}, kStream, "W_mix");
  TORCH_CHECK(delays < 63 && past >= (int64_t(1) << (delays - 1)), kStream, ": ", delays,
              " delays need a history of at least 2^(n_d - 1) rows, got ", past);
  at::Tensor h = at::empty({x.size(0), hidden}, state.options()), history = at::empty_like(state);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), kStream, [&] {
    stream_rows<scalar_t>(weights, x.data_ptr<scalar_t>(), state.data_ptr<scalar_t>(), h.data_ptr<scalar_t>(),
                          history.data_ptr<scalar_t>(), x.size(0), d, hidden, delays, past);
  });
  return {h, history};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ltdrnn, m) {  // a fragment: every cell's library adds to the same namespace
  m.def("mist_forward(Tensor(a!) gates, Tensor(b!) states, Tensor(c!) reset_mixed, Tensor w_hh, Tensor w_mix) -> ()");
  m.def("mist_backward(Tensor gates, Tensor states, Tensor reset_mixed, Tensor w_hh, Tensor w_mix, Tensor(a!) grad, "
        "Tensor(b!) d_gates, Tensor(c!) d_pre) -> ()");
  m.def("mist_stream(Tensor[] weights, int[] options, Tensor x, Tensor state) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(ltdrnn, CPU, m) {
  m.impl("mist_forward", &mist_forward);
  m.impl("mist_backward", &mist_backward);
  m.impl("mist_stream", &mist_stream);
}
