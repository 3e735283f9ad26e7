// MIST's compiled kernels (ltdrnn.cells.mist): the element-wise part of one step of the "kernel" scan,
// forward and backward (the step's two matrix products stay in PyTorch, BLAS), and the one-call
// streaming step. Operators: torch.ops.ltdrnn.mist_forward_step / mist_backward_step / mist_stream.
//
// Scan layouts (contiguous, time-major; G = n_d + H):
//   gates (T, B, G): on entry the logits [a | r]; the forward step replaces row t in place by
//       softmax(a) and sigmoid(r), which the backward step reads.
//   states (N + T, B, H): h_s for s = t - N .. T - 1; h_{t - 2^i} is row N + t - 2^i.
//   reset_mixed (T, B, H): rm_t = r_t * m_t with the mix m_t = sum_i a_i h_{t-2^i}.
//   d_reset_mixed (B, H): the gradient of rm_t; grad (N + T, B, H): dL/dh of every row, the backward
//       step adds into the delayed rows; d_gates (T, B, G): gradient of the logits [a | r].
#include "common.h"

namespace {

using namespace ltdrnn;

constexpr const char* kForward = "mist_forward_step";
constexpr const char* kBackward = "mist_backward_step";

struct ScanSizes {
  int64_t past, batch, hidden, delays;
};

// Checks the scan's tensors and the step t; the delayed rows N + t - 2^i must exist.
ScanSizes check_scan(const at::Tensor& gates, const at::Tensor& states, const at::Tensor& reset_mixed, int64_t t,
                     const char* op) {
  check_floating(states, op, "states");
  TORCH_CHECK(states.dim() == 3 && states.is_contiguous(), op, ": states must be a contiguous (N + T, B, H) tensor, got ",
              states.sizes());
  TORCH_CHECK(reset_mixed.dim() == 3, op, ": reset_mixed must be (T, B, H), got ", reset_mixed.sizes());
  const int64_t steps = reset_mixed.size(0), batch = states.size(1), hidden = states.size(2);
  const int64_t past = states.size(0) - steps;
  check_tensor(reset_mixed, states, {steps, batch, hidden}, op, "reset_mixed");
  TORCH_CHECK(gates.dim() == 3 && gates.size(2) > hidden, op, ": gates must be (T, B, n_d + H), got ", gates.sizes());
  const int64_t delays = gates.size(2) - hidden;
  check_tensor(gates, states, {steps, batch, delays + hidden}, op, "gates");
  TORCH_CHECK(delays < 63 && past >= (int64_t(1) << (delays - 1)), op, ": ", delays,
              " delays need a history of at least 2^(n_d - 1) rows, got ", past);
  TORCH_CHECK(t >= 0 && t < steps, op, ": step t must be in [0, ", steps, "), got ", t);
  return {past, batch, hidden, delays};
}

template <typename T>
void forward_step(T* gates, const T* states, T* reset_mixed, int64_t t, const ScanSizes& s) {
  const int64_t G = s.delays + s.hidden, H = s.hidden;
  std::vector<T> mix(H);
  for (int64_t b = 0; b < s.batch; ++b) {
    T* a = gates + (t * s.batch + b) * G;
    T* r = a + s.delays;
    T* out = reset_mixed + (t * s.batch + b) * H;
    T top = a[0], total = 0;
    for (int64_t i = 1; i < s.delays; ++i) top = a[i] > top ? a[i] : top;
    for (int64_t i = 0; i < s.delays; ++i) {
      a[i] = std::exp(a[i] - top);
      total += a[i];
    }
    for (int64_t i = 0; i < s.delays; ++i) a[i] /= total;
    for (int64_t j = 0; j < H; ++j) r[j] = sigmoid(r[j]);
    std::fill(mix.begin(), mix.end(), T(0));
    for (int64_t i = 0; i < s.delays; ++i) {
      const T* h = states + ((s.past + t - (int64_t(1) << i)) * s.batch + b) * H;
      for (int64_t j = 0; j < H; ++j) mix[j] += a[i] * h[j];
    }
    for (int64_t j = 0; j < H; ++j) out[j] = r[j] * mix[j];
  }
}

void mist_forward_step(at::Tensor gates, const at::Tensor& states, at::Tensor reset_mixed, int64_t t) {
  const auto sizes = check_scan(gates, states, reset_mixed, t, kForward);
  AT_DISPATCH_FLOATING_TYPES(states.scalar_type(), kForward, [&] {
    forward_step<scalar_t>(gates.data_ptr<scalar_t>(), states.data_ptr<scalar_t>(), reset_mixed.data_ptr<scalar_t>(), t,
                           sizes);
  });
}

// Uses 1 - r = (dr/dlogit) / r, so only rm (not m) is needed: dL/dlogit_r = d_rm * rm * (1 - r).
template <typename T>
void backward_step(const T* gates, const T* reset_mixed, const T* d_rm, const T* states, T* grad, T* d_gates,
                   int64_t t, const ScanSizes& s) {
  const int64_t G = s.delays + s.hidden, H = s.hidden;
  std::vector<T> d_mix(H);
  for (int64_t b = 0; b < s.batch; ++b) {
    const T* a = gates + (t * s.batch + b) * G;
    const T* r = a + s.delays;
    const T* q = reset_mixed + (t * s.batch + b) * H;
    const T* d = d_rm + b * H;
    T* da = d_gates + (t * s.batch + b) * G;
    T* dr = da + s.delays;
    for (int64_t j = 0; j < H; ++j) {
      d_mix[j] = d[j] * r[j];
      dr[j] = d[j] * q[j] * (T(1) - r[j]);
    }
    T weighted = 0;
    for (int64_t i = 0; i < s.delays; ++i) {
      const int64_t row = ((s.past + t - (int64_t(1) << i)) * s.batch + b) * H;
      const T* h = states + row;
      T* gh = grad + row;
      T dot_i = 0;
      for (int64_t j = 0; j < H; ++j) {
        dot_i += h[j] * d_mix[j];
        gh[j] += a[i] * d_mix[j];
      }
      da[i] = dot_i;
      weighted += a[i] * dot_i;
    }
    for (int64_t i = 0; i < s.delays; ++i) da[i] = a[i] * (da[i] - weighted);
  }
}

void mist_backward_step(const at::Tensor& gates, const at::Tensor& reset_mixed, const at::Tensor& d_reset_mixed,
                        const at::Tensor& states, at::Tensor grad, at::Tensor d_gates, int64_t t) {
  const auto sizes = check_scan(gates, states, reset_mixed, t, kBackward);
  check_tensor(d_reset_mixed, states, {sizes.batch, sizes.hidden}, kBackward, "d_reset_mixed");
  check_tensor(grad, states, states.sizes(), kBackward, "grad");
  check_tensor(d_gates, states, gates.sizes(), kBackward, "d_gates");
  AT_DISPATCH_FLOATING_TYPES(states.scalar_type(), kBackward, [&] {
    backward_step<scalar_t>(gates.data_ptr<scalar_t>(), reset_mixed.data_ptr<scalar_t>(),
                            d_reset_mixed.data_ptr<scalar_t>(), states.data_ptr<scalar_t>(), grad.data_ptr<scalar_t>(),
                            d_gates.data_ptr<scalar_t>(), t, sizes);
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
  m.def("mist_forward_step(Tensor(a!) gates, Tensor states, Tensor(b!) reset_mixed, int t) -> ()");
  m.def("mist_backward_step(Tensor gates, Tensor reset_mixed, Tensor d_reset_mixed, Tensor states, Tensor(a!) grad, "
        "Tensor(b!) d_gates, int t) -> ()");
  m.def("mist_stream(Tensor[] weights, int[] options, Tensor x, Tensor state) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(ltdrnn, CPU, m) {
  m.impl("mist_forward_step", &mist_forward_step);
  m.impl("mist_backward_step", &mist_backward_step);
  m.impl("mist_stream", &mist_stream);
}
