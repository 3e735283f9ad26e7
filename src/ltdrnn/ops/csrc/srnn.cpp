// SRNN's compiled kernels (ltdrnn.ops.srnn_torch): the sequential scan with f_r's last layer and the gate, forward
// and backward (the "cpp" backend, KernelScan), the same scan with f_r read from a table of its linear pieces
// for a scalar input and one hidden layer (PiecewiseLinearScan; its own section below), and the one-call
// streaming step. Operators: torch.ops.ltdrnn.srnn_forward / srnn_backward / srnn_pwl_forward /
// srnn_pwl_backward / srnn_stream.
//
// The scan: h_t = act(roll(h_{t-1}, 1) + beta_t), act relu or tanh, roll(h, 1)[i] = h[i - 1 mod H],
//   beta_t = (f_t + b_f) * sigmoid(g_t + b_g)  with the gate, else beta_t = f_t + b_f,
//   f_t = features_t W_f^T: f_r's last layer on its last hidden activation (on x without hidden layers).
// With W_f no (T, B, H) array of f exists: each thread forms f for a chunk of consecutive steps of its block of
// batch rows with one product into a buffer that stays in cache (ReadoutChunks, ~512 rows), and the backward
// forms it again where the gate's derivative needs it. A stored f is a 51 MB product at the benchmark shape, read
// back once each way, and its gradient df another 51 MB written and read twice by BLAS. Without W_f, `features` is
// f itself (k = H, from BLAS) and the backward writes df into d_features: for wide features with the gate,
// where forming f_t twice costs more (ltdrnn.ops.srnn_torch, READOUT_IN_KERNEL_MAX_WIDTH). The gate's logits come
// one of two ways: as g (T, B, H) from a BLAS product, or, for a small input size d, as x (T, B, d) and
// W_g (H, d), formed here (forward and backward); the backward then returns dL/dW_g and dL/dx instead of dg,
// which spares two (T, B, H) arrays and a product each way.
// The biases b_f, b_g (H,) are added here: in a matrix product a bias is a copy into every row first.
//
// Layouts: features (T, B, k) and dh (T, B, H) are read with their own time and batch strides and a contiguous
// last axis (dh's may also be broadcast, stride 0), so that a batch-first input or gradient, or the expanded
// gradient of a sum, needs no copy; features' rows are BLAS operands, so they must not overlap within a step.
// Everything else is contiguous and time-major: W_f (H, k), g, h (T, B, H), d_features (T, B, k) (df without W_f),
// x (T, B, d), W_g (H, d), and the (B, H) and (H,) tensors.
//
// The backward walks time in reverse: with gz_t = dL/dz_t (z_t the pre-activation),
//   dL/dh_t[i] = dh[t][i] + gz_{t+1}[i + 1 mod H]   and   gz_t = dL/dh_t * act'(z_t),
// act' read from the output (relu' = [h > 0], tanh' = 1 - h^2). With df_t = dL/df_t (gz_t, times the gate's
// sigmoid with a gate), each chunk of steps adds its df^T features to dL/dW_f and writes df W_f into
// d_features (k wide: 4x less than H at the benchmark shape). The bias gradients and dL/dW_g are summed over a
// chunk in the data's type, then, like dL/dW_f, into double.
//
// Threads: the batch rows are independent through the whole recurrence, so each loop splits the batch
// once into one block of rows per thread and runs all T steps of a block on its own thread
// (common.h, over_batch_blocks): one thread start per call instead of a hand-off per step. The
// backward's shared sums (the bias gradients, dL/dW_f, dL/dW_g) are kept per block and added at the end in
// block order (the result depends on the thread count, not on the timing).
#include "common.h"

#include <cstring>
#include <optional>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

using namespace ltdrnn;

constexpr const char* kForward = "srnn_forward";
constexpr const char* kBackward = "srnn_backward";

// sigmoid of a float without a call into libm: the vectorised expf is a call per 16 elements, around which
// the loop's live registers are saved and restored. exp(-v) = 2^n e^r with n = round(-v log2 e) and
// r = -v - n ln 2 (ln 2 in two parts, so r keeps its low bits), |r| <= ln 2 / 2, e^r from a degree-7
// polynomial (Cephes' expf: relative error ~1e-7); 2^n is added into the exponent's bits. v is clamped to
// +-87, where n stays within [-126, 126] and 2^n e^r a normal float; below -88 the value is exactly 0 and NaN
// stays NaN, as common.h's sigmoid gives; in (-88, -87] it is 1 / (1 + e^87) = 1.6e-38 instead of a denormal.
inline float sigmoid_inline(float v) {
  const float z = -std::min(std::max(v, -87.0f), 87.0f);
  const float n = std::floor(z * 1.44269504088896341f + 0.5f);
  // The reduction in two parts (Cody-Waite) must not be regrouped: -fassociative-math folds n C1 and n C2 into
  // n (C1 - C2), whose rounded constant costs up to 30 ulps at |v| ~ 69 (measured). fma is never regrouped; a CPU
  // without it (x86-64 before AVX2) reduces in double instead.
  const int32_t exponent = static_cast<int32_t>(n);
#if defined(__FMA__)
  const float r = std::fma(n, 2.12194440e-4f, std::fma(n, -0.693359375f, z));
#else
  const float r = static_cast<float>(static_cast<double>(z) - static_cast<double>(n) * 0.6931471805599453);
#endif
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = (p * r) * r + r + 1.0f;
  const float e = std::bit_cast<float>(std::bit_cast<int32_t>(p) + (exponent << 23));
  // Under -ffast-math gcc divides by a reciprocal estimate and one Newton step: from AVX2's 12-bit vrcpps
  // that gives 1 - 2^-24 for 1 / 1. Below e = 2^-25 the quotient rounds to exactly 1, as torch's does.
  const float s = e < 0x1p-25f ? 1.0f : 1.0f / (1.0f + e);
  return is_nan(v) ? v : v < -88.0f ? 0.0f : s;
}

// The gate's sigmoid in every loop here: sigmoid_inline for float, common.h's for double.
template <typename T>
inline T gate_sigmoid(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return sigmoid_inline(v);
  } else {
    return sigmoid(v);
  }
}

// f_r's last layer without its bias on the rows of each step (k wide, `ld` apart): features_t W_f^T with W_f (H, k),
// or, without W_f, the rows themselves: then they are f (k = H), from a BLAS product outside.
template <typename T>
struct Readout {
  const T* features;
  int64_t time_stride, ld, k;
  const T* w;  // null without W_f
  int64_t hidden;

  const T* rows(int64_t t, int64_t begin) const { return features + t * time_stride + begin * ld; }
  int64_t weights() const { return w ? hidden * k : 0; }
};

// Rows per readout product: a chunk of consecutive steps of one block of batch rows goes through one product.
// One step's rows are too few to pay for a call (50 x 128 x 8 at the adding shape, once per step forward
// and three times backward); ~512 are not, and a chunk's f and df (256 KB each in float32 at H = 128) stay in
// L2 between the product and the loop that reads or fills them (lab/2026-11-29-srnn-speed).
constexpr int64_t kChunkRows = 512;

// One block of batch rows [begin, end) walked chunk by chunk: the chunk's features as one matrix, with W_f its f
// (one product) and, in the backward, its df, from which dL/dW_f and dL/dfeatures follow with one product each.
// Without W_f, f is the features themselves and df is written straight into dL/dfeatures.
// The products: f with StepProduct (products.h; W_f packed once per call); dL/dW_f with add_at_b; dL/dfeatures,
// k columns, with products.h's AVX-512 tiles on W_f padded to whole registers. MKL's sgemm took 75-80 us for
// each of the last two at 512 x 128 x 8 (13 GFLOP/s), four times its time for f.
template <typename T>
class ReadoutChunks {
 public:
  ReadoutChunks(const Readout<T>& r, int64_t begin, int64_t end, int64_t batch, bool backward)
      : r_(r), begin_(begin), rows_(end - begin), batch_(batch),
        steps_(std::max<int64_t>(1, kChunkRows / std::max<int64_t>(1, end - begin))) {
    if (!r.w) return;
    const int64_t size = steps_ * rows_, hidden = r.hidden, k = r.k;
    product_.emplace(hidden, Strided<T>{r.w, 1, k}, k);  // W_f^T (k x H)
    f_.resize(size * hidden);
    // a gather (scatter) buffer where a chunk's rows do not lie one after another
    if (!(r.ld == k && r.time_stride == rows_ * k)) features_.resize(size * k);
    if (!backward) return;
    df_.resize(size * hidden);
    d_wt_.resize(k * hidden);
    if (rows_ != batch) d_features_.resize(size * k);
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
      padded_ = (k + avx512::kLanes - 1) / avx512::kLanes * avx512::kLanes;
      w_padded_.assign(hidden * padded_, 0.0f);
      for (int64_t i = 0; i < hidden; ++i) std::copy_n(r.w + i * k, k, w_padded_.data() + i * padded_);
    }
#endif
  }

  int64_t steps() const { return steps_; }

  // Starts the chunk of steps [t0, t0 + n), n <= steps(); with W_f gathers its features and, if `form`, forms f.
  void start(int64_t t0, int64_t n, bool form) {
    t0_ = t0;
    n_ = n;
    if (!r_.w) return;
    a_ = r_.rows(t0, begin_);
    lda_ = r_.ld;
    if (n > 1 && !features_.empty()) {
      for (int64_t t = 0; t < n; ++t)
        for (int64_t b = 0; b < rows_; ++b)
          std::copy_n(r_.rows(t0 + t, begin_ + b), r_.k, features_.data() + (t * rows_ + b) * r_.k);
      a_ = features_.data();
      lda_ = r_.k;
    }
    if (form) product_->run(n * rows_, a_, lda_, nullptr, 0, f_.data(), r_.hidden, Start::zero);
  }

  // f (without b_f) of batch row b at step t of the chunk.
  const T* f(int64_t t, int64_t b) const {
    return r_.w ? f_.data() + ((t - t0_) * rows_ + b - begin_) * r_.hidden : r_.rows(t, b);
  }

  // Where df = dL/df of batch row b at step t goes: the chunk's buffer with W_f, else dL/dfeatures (T, B, H).
  T* df(int64_t t, int64_t b, T* d_features) {
    return r_.w ? df_.data() + ((t - t0_) * rows_ + b - begin_) * r_.hidden : d_features + (t * batch_ + b) * r_.hidden;
  }

  // With W_f, once the chunk's df is complete: adds df^T features into sum_w (H, k) and, unless d_features
  // (T, B, k) is null, writes df W_f into its rows of the chunk.
  void finish(double* sum_w, T* d_features) {
    if (!r_.w) return;
    const int64_t m = n_ * rows_, k = r_.k, hidden = r_.hidden;
    std::fill(d_wt_.begin(), d_wt_.end(), T(0));
    add_at_b<T>(k, hidden, m, a_, lda_, df_.data(), hidden, d_wt_.data(), hidden);  // (k x H), summed in T
    for (int64_t i = 0; i < hidden; ++i)
      for (int64_t c = 0; c < k; ++c) sum_w[i * k + c] += d_wt_[c * hidden + i];
    if (!d_features) return;
    T* first = d_features + (t0_ * batch_ + begin_) * k;
    const bool direct = n_ == 1 || d_features_.empty();  // the chunk's rows lie one after another there
    features_gradient(m, direct ? first : d_features_.data());
    if (direct) return;
    for (int64_t t = 0; t < n_; ++t) std::copy_n(d_features_.data() + t * rows_ * k, rows_ * k, first + t * batch_ * k);
  }

 private:
  // out (m x k) = df W_f.
  void features_gradient(int64_t m, T* out) {
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
      for (int64_t col = 0; col < r_.k; col += avx512::kPanel) {
        avx512::Sum sum{df_.data(), r_.hidden, 1, w_padded_.data() + col, padded_, r_.hidden};
        avx512::column_block(m, std::min(avx512::kPanel, r_.k - col), &sum, 1, Start::zero, nullptr, out + col, r_.k);
      }
      return;
    }
#endif
    gemm<T>(false, false, m, r_.k, r_.hidden, T(1), df_.data(), r_.hidden, r_.w, r_.k, T(0), out, r_.k);
  }

  const Readout<T>& r_;
  int64_t begin_, rows_, batch_, steps_, t0_ = 0, n_ = 0;
  std::optional<StepProduct<T>> product_;
  std::vector<T> f_, df_, features_, d_features_, d_wt_;
  const T* a_ = nullptr;  // the chunk's features, lda_ apart
  int64_t lda_ = 0;
#if defined(__AVX512F__)
  std::vector<float> w_padded_;  // W_f (H x k) with rows padded to whole registers (padded_ wide), zeros past k
  int64_t padded_ = 0;
#endif
};

// Checks features (T, B, k), W_f (H, k) if given and b_f (H) before any is read; returns H.
int64_t check_readout(const at::Tensor& features, const std::optional<at::Tensor>& w_f, const at::Tensor& b_f,
                      const char* op) {
  check_floating(features, op, "features");
  TORCH_CHECK(features.dim() == 3, op, ": features must be (T, B, k), got ", features.sizes());
  const int64_t k = features.size(2);
  TORCH_CHECK(k <= 1 || features.stride(2) == 1, op, ": features' last axis must be contiguous, got strides ",
              features.strides());
  TORCH_CHECK(features.size(1) <= 1 || features.stride(1) >= k, op,
              ": features' rows of one step must not overlap, got strides ", features.strides());
  if (w_f) {
    TORCH_CHECK(w_f->dim() == 2, op, ": w_f must be (H, k), got ", w_f->sizes());
    check_tensor(*w_f, features, {w_f->size(0), k}, op, "w_f");
  }
  const int64_t hidden = w_f ? w_f->size(0) : k;
  TORCH_CHECK(hidden > 0, op, ": the hidden size must be positive");
  check_tensor(b_f, features, {hidden}, op, "b_f");
  return hidden;
}

template <typename T>
Readout<T> readout_of(const at::Tensor& features, const std::optional<at::Tensor>& w_f, int64_t hidden) {
  const int64_t k = features.size(2);
  return {features.data_ptr<T>(), features.stride(0), std::max(features.stride(1), k), k,
          w_f ? w_f->data_ptr<T>() : nullptr, hidden};
}

// Where the gate's logits come from; null pointers where a source is absent.
template <typename T>
struct Gate {
  const T* g = nullptr;    // (T, B, H) logits without bias
  const T* bg = nullptr;   // (H)
  const T* x = nullptr;    // (T, B, d), with w_g: logits formed here
  const T* w_g = nullptr;  // (H, d)
  int64_t d = 0;
  std::vector<T> w_gt;  // W_g transposed (d, H), with w_g: each input's column contiguous, read vectorised

  bool on() const { return g || w_g; }
  bool in_kernel() const { return !g && w_g; }

  // The logits of row `row` (time-major (t * B + b)) into out (H).
  void logits(T* out, int64_t row, int64_t hidden) const {
    if (g) {
      const T* g_row = g + row * hidden;
      for (int64_t i = 0; i < hidden; ++i) out[i] = g_row[i] + bg[i];
      return;
    }
    const T* x_row = x + row * d;
    for (int64_t i = 0; i < hidden; ++i) out[i] = bg[i];
    for (int64_t c = 0; c < d; ++c) {
      const T v = x_row[c];
      const T* column = w_gt.data() + c * hidden;
      for (int64_t i = 0; i < hidden; ++i) out[i] += column[i] * v;
    }
  }
};

// Checks the gate's tensors against the scan's (T, B, H) and `like`'s dtype and returns them as a Gate;
// exactly one source, or none at all (no b_g either).
template <typename T>
Gate<T> gate_of(const at::Tensor& like, int64_t steps, int64_t batch, int64_t hidden,
                const std::optional<at::Tensor>& g, const std::optional<at::Tensor>& b_g,
                const std::optional<at::Tensor>& x, const std::optional<at::Tensor>& w_g, const char* op) {
  Gate<T> gate;
  TORCH_CHECK(!(g && w_g), op, ": give the gate's logits g or x and w_g, not both");
  TORCH_CHECK(bool(w_g) == bool(x), op, ": x and w_g come together");
  if (!g && !w_g) {
    TORCH_CHECK(!b_g, op, ": b_g without a gate");
    return gate;
  }
  TORCH_CHECK(b_g, op, ": the gate needs b_g");
  check_tensor(*b_g, like, {hidden}, op, "b_g");
  gate.bg = b_g->data_ptr<T>();
  if (g) {
    check_tensor(*g, like, {steps, batch, hidden}, op, "g");
    gate.g = g->data_ptr<T>();
    return gate;
  }
  TORCH_CHECK(x->dim() == 3, op, ": x must be (T, B, d), got ", x->sizes());
  gate.d = x->size(2);
  check_tensor(*x, like, {steps, batch, gate.d}, op, "x");
  check_tensor(*w_g, like, {hidden, gate.d}, op, "w_g");
  gate.x = x->data_ptr<T>();
  gate.w_g = w_g->data_ptr<T>();
  gate.w_gt.resize(gate.d * hidden);
  for (int64_t i = 0; i < hidden; ++i)
    for (int64_t c = 0; c < gate.d; ++c) gate.w_gt[c * hidden + i] = gate.w_g[i * gate.d + c];
  return gate;
}

// The last part of a forward step for one row, shared by both scans: out = act(out + roll(prev, 1)).
template <typename T>
inline void add_shifted_and_activate(T* __restrict__ out, const T* __restrict__ prev, int64_t hidden, bool relu) {
  if (relu) {
    out[0] = activate<0>(out[0] + prev[hidden - 1]);
    for (int64_t i = 1; i < hidden; ++i) out[i] = activate<0>(out[i] + prev[i - 1]);
  } else {
    out[0] = std::tanh(out[0] + prev[hidden - 1]);
    for (int64_t i = 1; i < hidden; ++i) out[i] = std::tanh(out[i] + prev[i - 1]);
  }
}

// gz = dL/dh_t for one row: the output gradient d_h of step t plus roll(gz_{t+1}, -1) (next).
template <typename T>
inline void state_gradient(T* gz, const T* d_h, const T* next, int64_t hidden, bool broadcast) {
  if (broadcast) {
    const T v = d_h[0];
    for (int64_t i = 0; i < hidden - 1; ++i) gz[i] = v + next[i + 1];
    gz[hidden - 1] = v + next[0];
  } else {
    for (int64_t i = 0; i < hidden - 1; ++i) gz[i] = d_h[i] + next[i + 1];
    gz[hidden - 1] = d_h[hidden - 1] + next[0];
  }
}

// The first part of a backward step for one row, shared by both scans: gz = dL/dz_t from the output
// gradient d_h of step t, gz_{t+1} (next) and h_t (act' from the output).
template <typename T>
inline void pre_activation_gradient(T* gz, const T* d_h, const T* next, const T* h_row, int64_t hidden,
                                    bool broadcast, bool relu) {
  state_gradient(gz, d_h, next, hidden, broadcast);
  if (relu) {
    for (int64_t i = 0; i < hidden; ++i) gz[i] = h_row[i] > 0 ? gz[i] : T(0);
  } else {
    for (int64_t i = 0; i < hidden; ++i) gz[i] *= T(1) - h_row[i] * h_row[i];
  }
}

// dL/dh0 of the rows [begin, end) from gz of step 0 (the block's rows from `begin`): roll(gz_0, -1).
template <typename T>
inline void write_initial_state_gradient(T* dh0, const T* gz0, int64_t hidden, int64_t begin, int64_t end) {
  for (int64_t b = begin; b < end; ++b) {
    const T* row = gz0 + (b - begin) * hidden;
    for (int64_t i = 0; i < hidden - 1; ++i) dh0[b * hidden + i] = row[i + 1];
    dh0[b * hidden + hidden - 1] = row[0];
  }
}

// Calls body(std::integral_constant<int, D>{}) with D = d for the gate formed here from d <= 4 inputs, else
// with D = 0 (the gate's logits read from g, no gate, or wider inputs). With D a constant, the loops over a
// row form the gate's logits, its sigmoid and every term that depends on them in one vectorised pass; with d
// a run-time count they took a pass per input and one per term (a third of each loop's time at d = 2).
template <typename T, typename Body>
void with_gate_inputs(const Gate<T>& gate, Body body) {
  if (gate.in_kernel()) {
    switch (gate.d) {
      case 1: return body(std::integral_constant<int, 1>{});
      case 2: return body(std::integral_constant<int, 2>{});
      case 3: return body(std::integral_constant<int, 3>{});
      case 4: return body(std::integral_constant<int, 4>{});
      default: break;
    }
  }
  body(std::integral_constant<int, 0>{});
}

// The gate's logit at unit i from the D inputs v of a row: b_g[i] + sum_c W_g[i, c] v[c] (w_gt: W_g transposed).
template <int D, typename T>
inline T input_logit(const T* __restrict__ bg, const T* __restrict__ w_gt, const T (&v)[D], int64_t i,
                     int64_t hidden) {
  T logit = bg[i];
  for (int c = 0; c < D; ++c) logit += w_gt[c * hidden + i] * v[c];
  return logit;
}

// The forward over the rows [begin, end) of the batch; D as with_gate_inputs gives it.
template <int D, typename T>
void forward_loop(const Readout<T>& readout, const T* bf, const Gate<T>& gate, const T* h0, T* h, int64_t steps,
                  int64_t batch, bool relu, int64_t begin, int64_t end) {
  const int64_t hidden = readout.hidden;
  ReadoutChunks<T> chunks(readout, begin, end, batch, false);
  std::vector<T> logits(hidden);
  for (int64_t t0 = 0; t0 < steps; t0 += chunks.steps()) {
    const int64_t stop = std::min(steps, t0 + chunks.steps());
    chunks.start(t0, stop - t0, true);
    for (int64_t t = t0; t < stop; ++t) {
      const T* prev_t = t ? h + (t - 1) * batch * hidden : h0;
      for (int64_t b = begin; b < end; ++b) {
        const T* __restrict__ f = chunks.f(t, b);
        T* __restrict__ out = h + (t * batch + b) * hidden;
        if constexpr (D > 0) {
          T v[D];
          for (int c = 0; c < D; ++c) v[c] = gate.x[(t * batch + b) * D + c];
          const T *bg = gate.bg, *w_gt = gate.w_gt.data();
          for (int64_t i = 0; i < hidden; ++i)
            out[i] = (f[i] + bf[i]) * gate_sigmoid(input_logit<D>(bg, w_gt, v, i, hidden));
        } else if (gate.on()) {
          gate.logits(logits.data(), t * batch + b, hidden);
          for (int64_t i = 0; i < hidden; ++i) out[i] = (f[i] + bf[i]) * gate_sigmoid(logits[i]);
        } else {
          for (int64_t i = 0; i < hidden; ++i) out[i] = f[i] + bf[i];
        }
        add_shifted_and_activate(out, prev_t + b * hidden, hidden, relu);
      }
    }
  }
}

void srnn_forward(const at::Tensor& features, const at::Tensor& b_f, const std::optional<at::Tensor>& g,
                  const std::optional<at::Tensor>& b_g, const std::optional<at::Tensor>& x,
                  const std::optional<at::Tensor>& w_g, const at::Tensor& h0, bool relu, at::Tensor h,
                  const std::optional<at::Tensor>& w_f) {
  const int64_t hidden = check_readout(features, w_f, b_f, kForward);
  const int64_t steps = features.size(0), batch = features.size(1);
  check_tensor(h0, features, {batch, hidden}, kForward, "h0");
  check_tensor(h, features, {steps, batch, hidden}, kForward, "h");
  AT_DISPATCH_FLOATING_TYPES(features.scalar_type(), kForward, [&] {
    const auto gate = gate_of<scalar_t>(features, steps, batch, hidden, g, b_g, x, w_g, kForward);
    const auto readout = readout_of<scalar_t>(features, w_f, hidden);
    with_gate_inputs(gate, [&](auto inputs) {
      over_batch_blocks(batch, rows_per_thread(batch), [&](int64_t begin, int64_t end, int64_t) {
        forward_loop<decltype(inputs)::value, scalar_t>(readout, b_f.data_ptr<scalar_t>(), gate,
                                                       h0.data_ptr<scalar_t>(), h.data_ptr<scalar_t>(), steps, batch,
                                                       relu, begin, end);
      });
    });
  });
}

// The outputs of the backward pass; null where not asked for.
template <typename T>
struct Grads {
  T* d_features;  // (T, B, k); dL/df (T, B, H) without W_f
  T* d_wf;        // (H, k), with W_f
  T* dg;          // (T, B, H), with a logits buffer g
  T* dh0;         // (B, H)
  T* dbf;         // (H)
  T* dbg;         // (H), with a gate
  T* d_wg;        // (H, d), with the gate formed here
  T* dx;          // (T, B, d), likewise, when asked for
};

// The sums of one block of rows, in this order: dL/db_f, dL/db_g, dL/dW_f (`weights` of them) and, with the
// gate formed here, dL/dW_g transposed.
int64_t sums_per_block(int64_t hidden, int64_t weights, int64_t d, bool in_kernel) {
  return 2 * hidden + weights + (in_kernel ? hidden * d : 0);
}

// sums[i] += running[i] for i < n, then running[i] = 0.
template <typename T>
void add_running_sums(T* running, double* sums, int64_t n) {
  for (int64_t i = 0; i < n; ++i) sums[i] += running[i];
  std::fill_n(running, n, T(0));
}

// One row of the backward with the gate formed here from D inputs, in one pass: df = gz s into dfr, and into the
// running sums dL/db_f (df), dL/db_g (dL/dlogits = gz (f + b_f) s (1 - s), kept in d_logits) and dL/dW_g
// transposed (D, H); then dL/dx of the row into dx unless null (a reduction: its own pass, or the first would
// not vectorise).
template <int D, typename T>
inline void gated_row_gradient(const T* __restrict__ gz, const T* __restrict__ fr, const T* __restrict__ bf,
                               const Gate<T>& gate, int64_t row, int64_t hidden, T* __restrict__ dfr,
                               T* __restrict__ d_logits, T* __restrict__ sum_f, T* __restrict__ sum_g,
                               T* __restrict__ sum_w, T* dx) {
  const T *bg = gate.bg, *w_gt = gate.w_gt.data();
  T v[D];
  for (int c = 0; c < D; ++c) v[c] = gate.x[row * D + c];
  std::copy_n(bg, hidden, d_logits);
  for (int c = 0; c < D; ++c)
    for (int64_t i = 0; i < hidden; ++i) d_logits[i] += w_gt[c * hidden + i] * v[c];
  for (int64_t i = 0; i < hidden; ++i) {
    const T s = gate_sigmoid(d_logits[i]);
    const T df = gz[i] * s, d_logit = gz[i] * (fr[i] + bf[i]) * s * (T(1) - s);
    dfr[i] = df;
    d_logits[i] = d_logit;
    sum_f[i] += df;
    sum_g[i] += d_logit;
    for (int c = 0; c < D; ++c) sum_w[c * hidden + i] += d_logit * v[c];
  }
  if (!dx) return;
  for (int c = 0; c < D; ++c) {
    const T* __restrict__ column = w_gt + c * hidden;
    T acc = 0;
    for (int64_t i = 0; i < hidden; ++i) acc += d_logits[i] * column[i];
    dx[row * D + c] = acc;
  }
}

// The backward over the rows [begin, end) of the batch; adds this block's sums into `sums` (zeroed). D as
// with_gate_inputs gives it.
template <int D, typename T>
void backward_loop(const at::Tensor& dh, const T* h, const Readout<T>& readout, const T* bf, const Gate<T>& gate,
                   const Grads<T>& out, int64_t steps, int64_t batch, bool relu, int64_t begin, int64_t end,
                   double* sums) {
  if (begin == end) return;  // the one empty block at B = 0 adds nothing
  const T* dh_base = dh.data_ptr<T>();
  const int64_t hidden = readout.hidden, d = gate.d, rows = end - begin;
  const int64_t time_stride = dh.stride(0), batch_stride = dh.stride(1);
  const bool broadcast = hidden > 1 && dh.stride(2) == 0;  // e.g. the gradient of out.sum(): one value per row
  ReadoutChunks<T> chunks(readout, begin, end, batch, true);
  // gz of steps t + 1 and t, the gate's logits of one row, then a chunk's running sums of dL/db_f, dL/db_g and
  // dL/dW_g transposed in the data's type: added into the block's double sums once per chunk, not per element
  // (four double additions and their conversions per element took a fifth of the backward)
  const int64_t in_sums = 2 * hidden + (gate.in_kernel() ? d * hidden : 0);
  std::vector<T> block(2 * rows * hidden + hidden + in_sums, T(0));
  // raw pointers, not vector accesses: gcc vectorises the loops below only then
  T *next = block.data(), *cur = next + rows * hidden, *work = cur + rows * hidden;
  T *sum_f = work + hidden, *sum_g = sum_f + hidden, *sum_w = sum_g + hidden;
  double* sum_wf = sums + 2 * hidden;
  for (int64_t stop = steps; stop > 0; stop -= chunks.steps()) {
    const int64_t t0 = std::max<int64_t>(0, stop - chunks.steps());
    chunks.start(t0, stop - t0, gate.on());  // f only for the gate's derivative
    for (int64_t t = stop - 1; t >= t0; --t) {
      for (int64_t b = begin; b < end; ++b) {
        const int64_t row = t * batch + b;
        const T* d_h = dh_base + t * time_stride + b * batch_stride;
        prefetch_previous_step(d_h, t, time_stride, batch_stride, hidden);
        T* gz = cur + (b - begin) * hidden;
        pre_activation_gradient(gz, d_h, next + (b - begin) * hidden, h + row * hidden, hidden, broadcast, relu);
        T* dfr = chunks.df(t, b, out.d_features);
        if (!gate.on()) {  // df_t is gz_t itself
          for (int64_t i = 0; i < hidden; ++i) sum_f[i] += gz[i];
          std::copy_n(gz, hidden, dfr);
          continue;
        }
        const T* fr = chunks.f(t, b);
        if constexpr (D > 0) {
          gated_row_gradient<D>(gz, fr, bf, gate, row, hidden, dfr, work, sum_f, sum_g, sum_w, out.dx);
          continue;
        }
        T* dgr = gate.in_kernel() ? work : out.dg + row * hidden;
        gate.logits(dgr, row, hidden);
        for (int64_t i = 0; i < hidden; ++i) {
          const T s = gate_sigmoid(dgr[i]);
          dfr[i] = gz[i] * s;
          dgr[i] = gz[i] * (fr[i] + bf[i]) * s * (T(1) - s);
        }
        for (int64_t i = 0; i < hidden; ++i) {
          sum_f[i] += dfr[i];
          sum_g[i] += dgr[i];
        }
        if (!gate.in_kernel()) continue;
        const T* x_row = gate.x + row * d;
        for (int64_t c = 0; c < d; ++c) {
          const T v = x_row[c];
          T* sw = sum_w + c * hidden;  // column c of d_wg, transposed
          const T* column = gate.w_gt.data() + c * hidden;
          T acc = 0;
          for (int64_t i = 0; i < hidden; ++i) {
            sw[i] += dgr[i] * v;
            acc += dgr[i] * column[i];
          }
          if (out.dx) out.dx[row * d + c] = acc;
        }
      }
      std::swap(next, cur);
    }
    chunks.finish(sum_wf, out.d_features);
    add_running_sums(sum_f, sums, 2 * hidden);
    add_running_sums(sum_w, sum_wf + readout.weights(), in_sums - 2 * hidden);
  }
  write_initial_state_gradient(out.dh0, next, hidden, begin, end);
}

// The blocks' sums (`blocks` consecutive runs of sums_per_block), added in block order, into the outputs.
template <typename T>
void write_sums(const std::vector<double>& sums, int64_t blocks, const Gate<T>& gate, const Grads<T>& out,
                int64_t hidden, int64_t weights) {
  const int64_t d = gate.d, per = sums_per_block(hidden, weights, d, gate.in_kernel());
  std::vector<double> total(sums.begin(), sums.begin() + per);
  for (int64_t part = 1; part < blocks; ++part) {
    const double* own = sums.data() + part * per;
    for (int64_t i = 0; i < per; ++i) total[i] += own[i];
  }
  const double *sum_f = total.data(), *sum_g = sum_f + hidden, *sum_wf = sum_g + hidden, *sum_w = sum_wf + weights;
  for (int64_t i = 0; i < hidden; ++i) {
    out.dbf[i] = static_cast<T>(sum_f[i]);
    if (gate.on()) out.dbg[i] = static_cast<T>(sum_g[i]);
  }
  for (int64_t j = 0; j < weights; ++j) out.d_wf[j] = static_cast<T>(sum_wf[j]);
  if (gate.in_kernel()) {
    for (int64_t i = 0; i < hidden; ++i)
      for (int64_t c = 0; c < d; ++c) out.d_wg[i * d + c] = static_cast<T>(sum_w[c * hidden + i]);
  }
}

template <typename T>
T* optional_output(const std::optional<at::Tensor>& t, bool wanted, const at::Tensor& like, at::IntArrayRef shape,
                   const char* name) {
  TORCH_CHECK(bool(t) == wanted, kBackward, ": ", name, wanted ? " is needed here" : " must be None here");
  if (!t) return nullptr;
  check_tensor(*t, like, shape, kBackward, name);
  return t->data_ptr<T>();
}

void srnn_backward(const at::Tensor& dh, const at::Tensor& h, const at::Tensor& features, const at::Tensor& b_f,
                   const std::optional<at::Tensor>& g, const std::optional<at::Tensor>& b_g,
                   const std::optional<at::Tensor>& x, const std::optional<at::Tensor>& w_g, bool relu,
                   const std::optional<at::Tensor>& d_features, const std::optional<at::Tensor>& dg, at::Tensor dh0,
                   at::Tensor d_bf, const std::optional<at::Tensor>& d_bg, const std::optional<at::Tensor>& d_wg,
                   const std::optional<at::Tensor>& d_x, const std::optional<at::Tensor>& w_f,
                   const std::optional<at::Tensor>& d_wf) {
  const int64_t hidden = check_readout(features, w_f, b_f, kBackward);
  const int64_t steps = features.size(0), batch = features.size(1), k = features.size(2);
  check_tensor(h, features, {steps, batch, hidden}, kBackward, "h");
  check_tensor(dh, features, {steps, batch, hidden}, kBackward, "dh", false);
  TORCH_CHECK(hidden == 1 || dh.stride(2) <= 1, kBackward,
              ": dh's last axis must be contiguous or broadcast, got strides ", dh.strides());
  check_tensor(dh0, features, {batch, hidden}, kBackward, "dh0");
  check_tensor(d_bf, features, {hidden}, kBackward, "d_bf");
  AT_DISPATCH_FLOATING_TYPES(features.scalar_type(), kBackward, [&] {
    const auto gate = gate_of<scalar_t>(features, steps, batch, hidden, g, b_g, x, w_g, kBackward);
    const int64_t d = gate.d;
    TORCH_CHECK(!d_x || gate.in_kernel(), kBackward, ": d_x is only written with the gate formed here");
    const Grads<scalar_t> out{
        // without W_f, dL/df is the only way out for f's gradient
        optional_output<scalar_t>(d_features, bool(d_features) || !w_f, features, features.sizes(), "d_features"),
        optional_output<scalar_t>(d_wf, bool(w_f), features, {hidden, k}, "d_wf"),
        optional_output<scalar_t>(dg, bool(gate.g), features, {steps, batch, hidden}, "dg"),
        dh0.data_ptr<scalar_t>(),
        d_bf.data_ptr<scalar_t>(),
        optional_output<scalar_t>(d_bg, gate.on(), features, {hidden}, "d_bg"),
        optional_output<scalar_t>(d_wg, gate.in_kernel(), features, {hidden, d}, "d_wg"),
        d_x ? optional_output<scalar_t>(d_x, true, features, {steps, batch, d}, "d_x") : nullptr,
    };
    const auto readout = readout_of<scalar_t>(features, w_f, hidden);
    const int64_t chunk = rows_per_thread(batch), blocks = std::max<int64_t>(1, (batch + chunk - 1) / chunk);
    const int64_t per = sums_per_block(hidden, readout.weights(), d, gate.in_kernel());
    std::vector<double> sums(blocks * per, 0.0);
    with_gate_inputs(gate, [&](auto inputs) {
      over_batch_blocks(batch, chunk, [&](int64_t begin, int64_t end, int64_t part) {
        backward_loop<decltype(inputs)::value, scalar_t>(dh, h.data_ptr<scalar_t>(), readout, b_f.data_ptr<scalar_t>(),
                                                        gate, out, steps, batch, relu, begin, end,
                                                        sums.data() + part * per);
      });
    });
    write_sums<scalar_t>(sums, blocks, gate, out, hidden, readout.weights());
  });
}

// ---- f_r as a piecewise-linear function of a scalar input ----------------------------------------------
// For d = 1 and one hidden layer, f_r(x) = W_f relu(A x + a) + b_f is piecewise linear in the scalar x: on
// segment s of the real line (between two consecutive knots -a_j / A_j) the active units are fixed, so
// f(x) = slope[s] x + offset[s], (H,) each (b_f in offset). ltdrnn.cells.srnn (PiecewiseLinearScan) builds
// the (S, H) tables and the S - 1 sorted knots; the forward finds each (t, b)'s segment (the number of knots
// below x) and writes it for the backward; each element of f costs one multiply-add instead of k. The gate's
// logits are w_g x + b_g, w_g (H,) (W_g's one column).
//   forward:  h_t = act(roll(h_{t-1}, 1) + (slope[s] x + offset[s]) * sigmoid(w_g x + b_g))
//   backward: with df = dL/df (gz times the gate's sigmoid with a gate), the per-segment sums
//             m0[s] = sum_{(t,b) in s} df_{t,b},  m1[s] = sum_{(t,b) in s} df_{t,b} x_{t,b}   (double, (S, H))
//             from which PyTorch forms every gradient of f_r's parameters, and, when asked for,
//             dL/dx_{t,b} = df . slope[s] + dL/dlogits . w_g; with the gate also dL/db_g and dL/dw_g.
// act' comes from h for tanh; for relu from `positive`, the bits [h > 0] the forward writes (pack_positive): the
// backward then reads 1.6 MB instead of h's 51 MB at the pixel-MNIST shape. In float32 the gate's sigmoid is
// inlined (sigmoid_inline): the libm call it replaces took over half of each loop's time (forward 13-25 ->
// 10 ms at one thread; lab/notes/srnn-speed.md, 2026-11-27). With relu in float32 on AVX-512 each row is one
// pass in registers (piece512, below).
// Layouts: x and segment (T, B) (segment int32 in [0, S)), knots (S - 1), slope and offset (S, H), w_g, b_g (H),
// h (T, B, H), positive uint8 (T, B, ceil(H / 8)), all contiguous; dh as in srnn_backward (own time and batch
// strides, last axis contiguous or broadcast).
constexpr const char* kPieceForward = "srnn_pwl_forward";
constexpr const char* kPieceBackward = "srnn_pwl_backward";

template <typename T>
struct Pieces {
  const T* x;               // (T, B)
  const int32_t* segment;   // (T, B)
  const T* slope;           // (S, H)
  const T* offset;          // (S, H)
  const T* w_g = nullptr;   // (H), null without the gate
  const T* b_g = nullptr;   // (H)
  int64_t segments, hidden;

  bool gated() const { return w_g != nullptr; }
};

// segment: an int32 CPU tensor shaped like x (T, B), contiguous.
void check_segment(const at::Tensor& segment, const at::Tensor& x, const char* op) {
  TORCH_CHECK(segment.device().is_cpu() && segment.scalar_type() == at::kInt, op,
              ": segment must be an int32 CPU tensor, got ", segment.scalar_type(), " on ", segment.device());
  TORCH_CHECK(segment.sizes() == x.sizes() && segment.is_contiguous(), op, ": segment must be a contiguous ",
              x.sizes(), " tensor, got ", segment.sizes(), segment.is_contiguous() ? "" : " (not contiguous)");
}

// Checks slope and offset (S, H), the gate's w_g, b_g (H) and, unless `segment` is an output (null here),
// segment (T, B) with every value in [0, S), before any is read; returns them as Pieces.
template <typename T>
Pieces<T> pieces_of(const at::Tensor& x, const at::Tensor* segment, const at::Tensor& slope, const at::Tensor& offset,
                    const std::optional<at::Tensor>& w_g, const std::optional<at::Tensor>& b_g, const char* op) {
  TORCH_CHECK(slope.dim() == 2 && slope.size(0) > 0 && slope.size(1) > 0, op,
              ": slope must be a nonempty (S, H) tensor, got ", slope.sizes());
  const int64_t segments = slope.size(0), hidden = slope.size(1);
  check_tensor(slope, x, {segments, hidden}, op, "slope");
  check_tensor(offset, x, {segments, hidden}, op, "offset");
  TORCH_CHECK(bool(w_g) == bool(b_g), op, ": w_g and b_g come together");
  Pieces<T> pieces{x.data_ptr<T>(), nullptr, slope.data_ptr<T>(), offset.data_ptr<T>()};
  if (segment) {
    check_segment(*segment, x, op);
    // an index out of range would read outside the tables: one pass over T B ints
    const int32_t* seg = segment->data_ptr<int32_t>();
    const auto [lowest, highest] = std::minmax_element(seg, seg + segment->numel());
    TORCH_CHECK(segment->numel() == 0 || (*lowest >= 0 && *highest < segments), op,
                ": segment's values must lie in [0, ", segments, "), got [", segment->numel() ? *lowest : 0, ", ",
                segment->numel() ? *highest : 0, "]");
    pieces.segment = seg;
  }
  pieces.segments = segments;
  pieces.hidden = hidden;
  if (w_g) {
    check_tensor(*w_g, x, {hidden}, op, "w_g");
    check_tensor(*b_g, x, {hidden}, op, "b_g");
    pieces.w_g = w_g->data_ptr<T>();
    pieces.b_g = b_g->data_ptr<T>();
  }
  return pieces;
}

// x (T, B): the scan's time and batch sizes come from it.
void check_scalar_input(const at::Tensor& x, const char* op) {
  check_floating(x, op, "x");
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), op, ": x must be a contiguous (T, B) tensor, got ", x.sizes(),
              x.is_contiguous() ? "" : " (not contiguous)");
}

// The segment of v: how many knots lie below it (searchsorted(knots, v) on sorted knots; in [0, S) for any v,
// NaN included): a branch-free count over the S - 1 knots.
template <typename T>
inline int32_t knots_below(const T* knots, int64_t count, T v) {
  int32_t below = 0;
  for (int64_t j = 0; j < count; ++j) below += knots[j] < v;
  return below;
}

// With relu the backward needs only act'(z) = [h > 0] of each element, not h: the forward keeps it as one bit per
// element (common.h, pack_positive: T B H / 8 bytes, 1.6 MB at the pixel-MNIST shape), and the backward reads
// those instead of the 51 MB of h.

// gz[i] = 0 where bit i of `bits` (pack_positive's layout) is clear: relu's derivative applied.
template <typename T>
inline void zero_where_not_positive(T* gz, const uint8_t* bits, int64_t hidden) {
  int64_t i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    for (; i + 16 <= hidden; i += 16) {
      uint16_t m;
      std::memcpy(&m, bits + i / 8, sizeof(m));
      _mm512_storeu_ps(gz + i, _mm512_maskz_mov_ps(m, _mm512_loadu_ps(gz + i)));
    }
  } else {
    for (; i + 8 <= hidden; i += 8) _mm512_storeu_pd(gz + i, _mm512_maskz_mov_pd(bits[i / 8], _mm512_loadu_pd(gz + i)));
  }
#elif defined(__AVX2__)
  if constexpr (std::is_same_v<T, float>) {
    const __m256i select = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (; i + 8 <= hidden; i += 8) {
      const __m256i set = _mm256_and_si256(_mm256_set1_epi32(bits[i / 8]), select);
      const __m256 keep = _mm256_castsi256_ps(_mm256_cmpeq_epi32(set, select));
      _mm256_storeu_ps(gz + i, _mm256_and_ps(keep, _mm256_loadu_ps(gz + i)));
    }
  } else {
    const __m256i low = _mm256_setr_epi64x(1, 2, 4, 8), high = _mm256_setr_epi64x(16, 32, 64, 128);
    for (; i + 8 <= hidden; i += 8) {
      const __m256i byte = _mm256_set1_epi64x(bits[i / 8]);
      const __m256d keep_low = _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(byte, low), low));
      const __m256d keep_high = _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(byte, high), high));
      _mm256_storeu_pd(gz + i, _mm256_and_pd(keep_low, _mm256_loadu_pd(gz + i)));
      _mm256_storeu_pd(gz + i + 4, _mm256_and_pd(keep_high, _mm256_loadu_pd(gz + i + 4)));
    }
  }
#endif
  for (; i < hidden; ++i)
    if (!((bits[i / 8] >> (i % 8)) & 1)) gz[i] = T(0);
}

// ---- the relu rows in float32 with AVX-512 ----------------------------------------------------------------
// With relu, float32 and AVX-512 each row of both piece loops is one pass over its 16-lane chunks, in registers:
// the forward forms f, the gate, the shifted add, relu and the bits [h > 0] of a chunk before storing it, where
// the generic code below makes four passes over the row (f times the gate, the shifted add, relu, the bits);
// the backward forms gz, applies relu's bits and adds the chunk into all its running sums, where the generic
// code makes three. The gate's sigmoid (sigmoid16) is ~22 vector operations, gcc's vectorised sigmoid_inline
// ~28. At the pixel-MNIST shape, one thread: forward 11.2 -> 8.0 ms, backward 17.3 -> 11.7 ms with the
// prefetch into L2 below (lab/notes/srnn-speed.md, 2026-11-27, eighth session).
#if defined(__AVX512F__) && defined(__AVX512DQ__)
namespace piece512 {

using avx512::kLanes;
using avx512::lanes;

// The chunk of `in` lanes at p: the whole register or, at a row's end, its first lanes (the rest 0).
inline __m512 load(const float* p, __mmask16 in) {
  return in == 0xFFFF ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(in, p);
}

// Masked stores are slow on Zen 4: only at a row's end.
inline void store(float* p, __mmask16 in, __m512 v) {
  if (in == 0xFFFF) {
    _mm512_storeu_ps(p, v);
  } else {
    _mm512_mask_storeu_ps(p, in, v);
  }
}

// Runs chunk(i, whole) over the 16-lane chunks of a row of n values, `whole` a std::bool_constant: true for
// the full chunks, so that their masks and byte counts are constants (with a run-time mask gcc kept the
// loop's values on the stack), false for the last one when n is no multiple of 16.
template <typename Chunk>
inline void over_chunks(int64_t n, const Chunk& chunk) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) chunk(i, std::true_type{});
  if (i < n) chunk(i, std::false_type{});
}

// The lanes of the chunk at i of a row of n values.
template <bool Whole>
inline __mmask16 chunk_lanes(int64_t i, int64_t n) {
  return Whole ? __mmask16(0xFFFF) : lanes(n - i);
}

// The bytes of a chunk's bits (pack_positive's layout): 2, or 1 for a last chunk of at most 8 lanes.
template <bool Whole>
inline size_t bit_bytes(int64_t i, int64_t n) {
  return Whole || n - i > 8 ? 2 : 1;
}

// sigmoid_inline's arithmetic on 16 lanes: 2^n by vscalefps on the rounded n (no conversion to integers and
// back), rcp14 with one Newton step for the division (what gcc makes of the scalar code's division too).
// Exactly 0 below -88 and NaN kept, as sigmoid_inline: the clamp replaces NaN by a bound (min and max under
// -ffast-math, and vrangeps too, tried), so NaN lanes are selected back at the end.
inline __m512 sigmoid16(__m512 v) {
  const __m512 clamped = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(87.0f));
  // exp(-clamped) = 2^n e^r, n = round(-clamped log2 e), r = -clamped - n ln 2 with ln 2 in two parts
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(clamped, _mm512_set1_ps(-1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f),
                                   _mm512_fnmsub_ps(n, _mm512_set1_ps(0.693359375f), clamped));
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  for (const float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f, 1.0f,
                        1.0f})
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 d = _mm512_add_ps(one, _mm512_scalef_ps(p, n));
  const __m512 guess = _mm512_rcp14_ps(d);
  const __m512 s = _mm512_fmadd_ps(guess, _mm512_fnmadd_ps(d, guess, one), guess);
  constexpr int kNaN = 0x81;  // vfpclassps: quiet or signalling NaN
  return _mm512_mask_mov_ps(_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_set1_ps(-88.0f), _CMP_NLT_UQ), s),
                            _mm512_fpclass_ps_mask(v, kNaN), v);
}

// One forward row: out = relu(roll(prev, 1) + (slope x + offset) * gate) and its bits [out > 0], slope and
// offset the row's segment's.
template <bool Gated>
inline void forward_row(const Pieces<float>& p, const float* slope, const float* offset, float x, const float* prev,
                        float* out, uint8_t* bits) {
  const int64_t hidden = p.hidden;
  const __m512 xv = _mm512_set1_ps(x), zero = _mm512_setzero_ps(), wrap = _mm512_set1_ps(prev[hidden - 1]);
  over_chunks(hidden, [&](int64_t i, auto whole) {
    const __mmask16 in = chunk_lanes<whole>(i, hidden);
    // roll(prev, 1) holds prev[i - 1 + lane]; lane 0 of the first chunk is prev[H - 1]
    const __m512 shifted = i ? load(prev + i - 1, in)
                             : _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(load(prev, in)),
                                                                       _mm512_castps_si512(wrap), kLanes - 1));
    const __m512 f = _mm512_fmadd_ps(load(slope + i, in), xv, load(offset + i, in));
    __m512 q;
    if constexpr (Gated) {
      const __m512 gate = sigmoid16(_mm512_fmadd_ps(load(p.w_g + i, in), xv, load(p.b_g + i, in)));
      q = _mm512_fmadd_ps(f, gate, shifted);
    } else {
      q = _mm512_add_ps(f, shifted);
    }
    store(out + i, in, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(q, zero, _CMP_NLE_UQ), q));  // relu keeping NaN
    const uint16_t positive = _mm512_cmp_ps_mask(q, zero, _CMP_GT_OQ) & in;
    std::memcpy(bits + i / 8, &positive, bit_bytes<whole>(i, hidden));
  });
}

// One backward row: gz = (d_h + roll(next, -1)) where the bits are set, else 0, into gz; adds df (gz times the
// gate) and df x into m0, m1 (the row's segment's), the gate's logit gradient and its product with x into sum_g,
// sum_wg; returns dL/dx of the row when InputGradient. d_h is one value for the whole row when broadcast.
template <bool Gated, bool InputGradient>
inline float backward_row(const Pieces<float>& p, const float* slope, const float* offset, float x, const float* d_h,
                          bool broadcast, const float* next, const uint8_t* bits, float* gz, float* m0, float* m1,
                          float* sum_g, float* sum_wg) {
  const int64_t hidden = p.hidden;
  const __m512 xv = _mm512_set1_ps(x), wrap = _mm512_set1_ps(next[0]);
  __m512 dx = _mm512_setzero_ps();
  over_chunks(hidden, [&](int64_t i, auto whole) {
    const __mmask16 in = chunk_lanes<whole>(i, hidden);
    // roll(next, -1) holds next[i + 1 + lane]; the row's last lane is next[0]
    const int64_t last = hidden - 1 - i;
    const __mmask16 inner = last < kLanes ? __mmask16(in & ~(1u << last)) : in;
    const __m512 rolled = _mm512_mask_loadu_ps(wrap, inner, next + i + 1);
    uint16_t positive = 0;
    std::memcpy(&positive, bits + i / 8, bit_bytes<whole>(i, hidden));
    const __m512 g = _mm512_maskz_add_ps(positive & in, broadcast ? _mm512_set1_ps(d_h[0]) : load(d_h + i, in), rolled);
    store(gz + i, in, g);
    __m512 df = g;
    if constexpr (Gated) {
      const __m512 w = load(p.w_g + i, in);
      const __m512 s = sigmoid16(_mm512_fmadd_ps(w, xv, load(p.b_g + i, in)));
      const __m512 f = _mm512_fmadd_ps(load(slope + i, in), xv, load(offset + i, in));
      df = _mm512_mul_ps(g, s);
      const __m512 d_logit = _mm512_mul_ps(df, _mm512_fnmadd_ps(f, s, f));  // gz f s (1 - s)
      store(sum_g + i, in, _mm512_add_ps(load(sum_g + i, in), d_logit));
      store(sum_wg + i, in, _mm512_fmadd_ps(d_logit, xv, load(sum_wg + i, in)));
      if constexpr (InputGradient) dx = _mm512_fmadd_ps(d_logit, w, dx);
    }
    store(m0 + i, in, _mm512_add_ps(load(m0 + i, in), df));
    store(m1 + i, in, _mm512_fmadd_ps(df, xv, load(m1 + i, in)));
    if constexpr (InputGradient) dx = _mm512_fmadd_ps(df, load(slope + i, in), dx);
  });
  return InputGradient ? _mm512_reduce_add_ps(dx) : 0.0f;
}

}  // namespace piece512
#endif

// The forward over the rows [begin, end) of the batch; writes each row's segment into `segment`.
template <typename T>
void piece_forward_loop(const Pieces<T>& p, const T* knots, int32_t* segment, const T* h0, T* h, uint8_t* positive,
                        int64_t steps, int64_t batch, bool relu, int64_t begin, int64_t end) {
  const int64_t hidden = p.hidden, bytes = sign_bytes(hidden);
  for (int64_t t = 0; t < steps; ++t) {
    const T* prev_t = t ? h + (t - 1) * batch * hidden : h0;
    for (int64_t b = begin; b < end; ++b) {
      const int64_t row = t * batch + b;
      const T v = p.x[row];
      const int64_t start = (segment[row] = knots_below(knots, p.segments - 1, v)) * hidden;
      const T *slope = p.slope + start, *offset = p.offset + start;
      T* out = h + row * hidden;
#if defined(__AVX512F__) && defined(__AVX512DQ__)
      if constexpr (std::is_same_v<T, float>) {
        if (positive) {  // relu
          (p.gated() ? piece512::forward_row<true> : piece512::forward_row<false>)(
              p, slope, offset, v, prev_t + b * hidden, out, positive + row * bytes);
          continue;
        }
      }
#endif
      if (p.gated()) {
        for (int64_t i = 0; i < hidden; ++i) out[i] = (slope[i] * v + offset[i]) * gate_sigmoid(p.w_g[i] * v + p.b_g[i]);
      } else {
        for (int64_t i = 0; i < hidden; ++i) out[i] = slope[i] * v + offset[i];
      }
      add_shifted_and_activate(out, prev_t + b * hidden, hidden, relu);
      if (positive) pack_positive(positive + row * bytes, out, hidden);
    }
  }
}

// positive: relu's derivative as pack_positive writes it, a contiguous uint8 CPU tensor (T, B, ceil(H / 8)).
void check_positive(const at::Tensor& positive, int64_t steps, int64_t batch, int64_t hidden, const char* op) {
  const std::vector<int64_t> shape{steps, batch, sign_bytes(hidden)};
  TORCH_CHECK(positive.device().is_cpu() && positive.scalar_type() == at::kByte, op,
              ": positive must be a uint8 CPU tensor, got ", positive.scalar_type(), " on ", positive.device());
  TORCH_CHECK(positive.sizes() == at::IntArrayRef(shape) && positive.is_contiguous(), op,
              ": positive must be a contiguous ", at::IntArrayRef(shape), " tensor, got ", positive.sizes(),
              positive.is_contiguous() ? "" : " (not contiguous)");
}

void srnn_pwl_forward(const at::Tensor& x, const at::Tensor& knots, const at::Tensor& slope,
                      const at::Tensor& offset, const std::optional<at::Tensor>& w_g,
                      const std::optional<at::Tensor>& b_g, const at::Tensor& h0, bool relu, at::Tensor h,
                      at::Tensor segment, const std::optional<at::Tensor>& positive) {
  check_scalar_input(x, kPieceForward);
  const int64_t steps = x.size(0), batch = x.size(1);
  check_segment(segment, x, kPieceForward);
  TORCH_CHECK(relu || !positive, kPieceForward, ": positive is relu's derivative; give None with tanh");
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), kPieceForward, [&] {
    const auto pieces = pieces_of<scalar_t>(x, nullptr, slope, offset, w_g, b_g, kPieceForward);
    check_tensor(knots, x, {pieces.segments - 1}, kPieceForward, "knots");
    check_tensor(h0, x, {batch, pieces.hidden}, kPieceForward, "h0");
    check_tensor(h, x, {steps, batch, pieces.hidden}, kPieceForward, "h");
    if (positive) check_positive(*positive, steps, batch, pieces.hidden, kPieceForward);
    uint8_t* bits = positive ? positive->data_ptr<uint8_t>() : nullptr;
    over_batch_blocks(batch, rows_per_thread(batch), [&](int64_t begin, int64_t end, int64_t) {
      piece_forward_loop<scalar_t>(pieces, knots.data_ptr<scalar_t>(), segment.data_ptr<int32_t>(),
                                   h0.data_ptr<scalar_t>(), h.data_ptr<scalar_t>(), bits, steps, batch, relu, begin,
                                   end);
    });
  });
}

// One block's sums, in this order: m0 (S, H), m1 (S, H) and, with the gate, dL/db_g (H), dL/dw_g (H).
int64_t piece_sums_per_block(int64_t segments, int64_t hidden, bool gated) {
  return 2 * segments * hidden + (gated ? 2 * hidden : 0);
}

// Rows summed in the data's type before the running sums move into double. Double accumulators cost a
// conversion and twice the vector operations for each of the four sums per element; a run of 256 float32
// terms stays accurate before the double sum over runs (both measured: lab/notes/srnn-speed.md).
constexpr int64_t kRowsPerFlush = 256;

// For gz = dL/dz of row `row` (pre-activation): adds df and df x into its segment's m0, m1, the gate's
// gradients into sum_g, sum_wg and returns dL/dx of the row (computed only when InputGradient).
// __restrict__: with accumulators of the data's type, gcc would otherwise not vectorise (too many pointer
// pairs to check for overlap at run time).
template <bool Gated, bool InputGradient, typename T>
inline T piece_row_gradient(const Pieces<T>& p, const T* __restrict__ gz, int64_t row, T* __restrict__ m0,
                            T* __restrict__ m1, T* __restrict__ sum_g, T* __restrict__ sum_wg) {
  const int64_t hidden = p.hidden, start = p.segment[row] * hidden;
  const T v = p.x[row];
  const T *__restrict__ slope = p.slope + start, *__restrict__ offset = p.offset + start;
  const T *__restrict__ w_g = p.w_g, *__restrict__ b_g = p.b_g;
  m0 += start;
  m1 += start;
  T dx = 0;
  for (int64_t i = 0; i < hidden; ++i) {
    T df = gz[i];
    if constexpr (Gated) {
      const T s = gate_sigmoid(w_g[i] * v + b_g[i]);
      const T d_logit = gz[i] * (slope[i] * v + offset[i]) * s * (T(1) - s);
      df *= s;
      sum_g[i] += d_logit;
      sum_wg[i] += d_logit * v;
      if constexpr (InputGradient) dx += d_logit * w_g[i];
    }
    m0[i] += df;
    m1[i] += df * v;
    if constexpr (InputGradient) dx += df * slope[i];
  }
  return dx;
}

// Adds the running sums into the block's double sums and zeroes them.
template <typename T>
void flush_sums(std::vector<T>& running, double* sums) {
  for (size_t i = 0; i < running.size(); ++i) sums[i] += running[i];
  std::fill(running.begin(), running.end(), T(0));
}

// The backward over the rows [begin, end) of the batch; adds this block's sums into `sums` (zeroed).
template <bool Gated, bool InputGradient, typename T>
void piece_backward_loop(const at::Tensor& dh, const T* h, const uint8_t* positive, const Pieces<T>& p, T* dh0, T* dx,
                         int64_t steps, int64_t batch, int64_t begin, int64_t end, double* sums) {
  if (begin == end) return;  // the one empty block at B = 0 adds nothing
  const T* dh_base = dh.data_ptr<T>();
  const int64_t hidden = p.hidden, rows = end - begin, bytes = sign_bytes(hidden);
  const int64_t time_stride = dh.stride(0), batch_stride = dh.stride(1);
  const bool broadcast = hidden > 1 && dh.stride(2) == 0, batch_first = batch_stride > hidden;
  const int64_t steps_per_flush = std::max<int64_t>(1, kRowsPerFlush / rows);
  std::vector<T> block(2 * rows * hidden, T(0));  // gz of steps t + 1 and t
  T *next = block.data(), *cur = next + rows * hidden;
  std::vector<T> running(piece_sums_per_block(p.segments, hidden, Gated), T(0));  // laid out as `sums`
  T *m0 = running.data(), *m1 = m0 + p.segments * hidden;
  T *sum_g = Gated ? m1 + p.segments * hidden : nullptr, *sum_wg = Gated ? sum_g + hidden : nullptr;
  for (int64_t t = steps - 1; t >= 0; --t) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t row = t * batch + b;
      const T* d_h = dh_base + t * time_stride + b * batch_stride;
      if (batch_first) {
        // a step early into L2 only: a step's rows (64 KB at the pixel-MNIST shape) fit there, while in L1 they
        // share 8 sets; the backward waited for these loads (13.7 -> 11.9 ms at one thread,
        // lab/notes/srnn-speed.md, 2026-11-27, eighth session)
        prefetch_previous_step<Into::l2>(d_h, t, time_stride, batch_stride, hidden);
        if (b + kPrefetchRowsAhead < end) prefetch_row(d_h + kPrefetchRowsAhead * batch_stride, hidden);
      }
      T* gz = cur + (b - begin) * hidden;
#if defined(__AVX512F__) && defined(__AVX512DQ__)
      if constexpr (std::is_same_v<T, float>) {
        if (positive) {  // relu
          const int64_t start = p.segment[row] * hidden;
          const float d_x = piece512::backward_row<Gated, InputGradient>(
              p, p.slope + start, p.offset + start, p.x[row], d_h, broadcast, next + (b - begin) * hidden,
              positive + row * bytes, gz, m0 + start, m1 + start, sum_g, sum_wg);
          if constexpr (InputGradient) dx[row] = d_x;
          continue;
        }
      }
#endif
      if (positive) {  // relu
        state_gradient(gz, d_h, next + (b - begin) * hidden, hidden, broadcast);
        zero_where_not_positive(gz, positive + row * bytes, hidden);
      } else {  // tanh
        pre_activation_gradient(gz, d_h, next + (b - begin) * hidden, h + row * hidden, hidden, broadcast, false);
      }
      const T d_x = piece_row_gradient<Gated, InputGradient>(p, gz, row, m0, m1, sum_g, sum_wg);
      if constexpr (InputGradient) dx[row] = d_x;
    }
    if (t % steps_per_flush == 0) flush_sums(running, sums);  // at t = 0 always: nothing is left behind
    std::swap(next, cur);
  }
  write_initial_state_gradient(dh0, next, hidden, begin, end);
}

// A float64 CPU tensor with exactly `shape`, contiguous: the per-segment sums stay in double.
void check_double_output(const at::Tensor& t, at::IntArrayRef shape, const char* op, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kDouble, op, ": ", name,
              " must be a float64 CPU tensor, got ", t.scalar_type(), " on ", t.device());
  TORCH_CHECK(t.sizes() == shape && t.is_contiguous(), op, ": ", name, " must be a contiguous ", shape,
              " tensor, got ", t.sizes(), t.is_contiguous() ? "" : " (not contiguous)");
}

void srnn_pwl_backward(const at::Tensor& dh, const std::optional<at::Tensor>& h, const at::Tensor& x,
                       const at::Tensor& segment,
                       const at::Tensor& slope, const at::Tensor& offset, const std::optional<at::Tensor>& w_g,
                       const std::optional<at::Tensor>& b_g, bool relu, at::Tensor dh0, at::Tensor m0, at::Tensor m1,
                       const std::optional<at::Tensor>& d_bg, const std::optional<at::Tensor>& d_wg,
                       const std::optional<at::Tensor>& d_x, const std::optional<at::Tensor>& positive) {
  constexpr const char* op = kPieceBackward;
  check_scalar_input(x, op);
  const int64_t steps = x.size(0), batch = x.size(1);
  TORCH_CHECK(relu ? positive && !h : h && !positive, op,
              relu ? ": relu reads positive (from the forward), not h" : ": tanh reads h, not positive");
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), op, [&] {
    const auto p = pieces_of<scalar_t>(x, &segment, slope, offset, w_g, b_g, op);
    const int64_t hidden = p.hidden, segments = p.segments;
    if (h) check_tensor(*h, x, {steps, batch, hidden}, op, "h");
    if (positive) check_positive(*positive, steps, batch, hidden, op);
    const scalar_t* h_data = h ? h->data_ptr<scalar_t>() : nullptr;
    const uint8_t* bits = positive ? positive->data_ptr<uint8_t>() : nullptr;
      check_tensor(dh, x, {steps, batch, hidden}, op, "dh", false);
    TORCH_CHECK(hidden == 1 || dh.stride(2) <= 1, op, ": dh's last axis must be contiguous or broadcast, got strides ",
                dh.strides());
    check_tensor(dh0, x, {batch, hidden}, op, "dh0");
    check_double_output(m0, {segments, hidden}, op, "m0");
    check_double_output(m1, {segments, hidden}, op, "m1");
    TORCH_CHECK(bool(d_bg) == p.gated() && bool(d_wg) == p.gated(), op, ": d_bg and d_wg ",
                p.gated() ? "are needed with the gate" : "must be None without the gate");
    if (p.gated()) {
      check_tensor(*d_bg, x, {hidden}, op, "d_bg");
      check_tensor(*d_wg, x, {hidden}, op, "d_wg");
    }
    if (d_x) check_tensor(*d_x, x, {steps, batch}, op, "d_x");
    scalar_t* dx = d_x ? d_x->data_ptr<scalar_t>() : nullptr;
    const int64_t chunk = rows_per_thread(batch), blocks = std::max<int64_t>(1, (batch + chunk - 1) / chunk);
    const int64_t per = piece_sums_per_block(segments, hidden, p.gated());
    std::vector<double> sums(blocks * per, 0.0);
    // the gate and dL/dx as template arguments: each inner loop is one branch-free, vectorised pass
    auto run = [&](auto gated, auto input_gradient) {
      over_batch_blocks(batch, chunk, [&](int64_t begin, int64_t end, int64_t part) {
        piece_backward_loop<decltype(gated)::value, decltype(input_gradient)::value, scalar_t>(
            dh, h_data, bits, p, dh0.data_ptr<scalar_t>(), dx, steps, batch, begin, end, sums.data() + part * per);
      });
    };
    using Yes = std::true_type;
    using No = std::false_type;
    if (p.gated()) {
      dx ? run(Yes{}, Yes{}) : run(Yes{}, No{});
    } else {
      dx ? run(No{}, Yes{}) : run(No{}, No{});
    }
    // the blocks' sums, added in block order (the result depends on the thread count, not on the timing)
    std::vector<double> total(sums.begin(), sums.begin() + per);
    for (int64_t part = 1; part < blocks; ++part)
      for (int64_t i = 0; i < per; ++i) total[i] += sums[part * per + i];
    std::copy_n(total.data(), segments * hidden, m0.data_ptr<double>());
    std::copy_n(total.data() + segments * hidden, segments * hidden, m1.data_ptr<double>());
    if (p.gated()) {
      const double* sum_g = total.data() + 2 * segments * hidden;
      for (int64_t i = 0; i < hidden; ++i) {
        d_bg->data_ptr<scalar_t>()[i] = static_cast<scalar_t>(sum_g[i]);
        d_wg->data_ptr<scalar_t>()[i] = static_cast<scalar_t>(sum_g[hidden + i]);
      }
    }
  });
}

// ---- the streaming step -------------------------------------------------------------------------------
// weights: [A_1, a_1, ..., A_L, a_L, W_out (H, k), b_out (H)] and, with the gate, [W_g (H, d), b_g (H)];
// options: [L, relu]. h' = act(roll(h, 1) + f_r(x) * sigmoid(W_g x + b_g)), f_r's hidden layers relu.
constexpr const char* kStream = "srnn_stream";

template <typename T>
void stream_rows(at::TensorList w, int64_t layers, bool gated, bool relu, const T* x, const T* h, T* out,
                 int64_t batch, int64_t d, int64_t hidden, int64_t k) {
  std::vector<T> work(2 * std::max(d, k) + hidden);
  T* f = work.data() + 2 * std::max(d, k);
  const T* w_out = w[2 * layers].data_ptr<T>();
  const T* b_out = w[2 * layers + 1].data_ptr<T>();
  for (int64_t b = 0; b < batch; ++b) {
    const T *xb = x + b * d, *hb = h + b * hidden, *feat = xb;
    int64_t cols = d;
    for (int64_t l = 0; l < layers; ++l) {
      T* next = work.data() + (l % 2) * std::max(d, k);
      const T* bias = w[2 * l + 1].data_ptr<T>();
      std::copy(bias, bias + k, next);
      add_matvec(next, w[2 * l].data_ptr<T>(), feat, k, cols);
      for (int64_t i = 0; i < k; ++i) next[i] = activate<0>(next[i]);
      feat = next;
      cols = k;
    }
    std::copy(b_out, b_out + hidden, f);
    add_matvec(f, w_out, feat, hidden, cols);
    if (gated) {
      const T* w_g = w[2 * layers + 2].data_ptr<T>();
      const T* b_g = w[2 * layers + 3].data_ptr<T>();
      for (int64_t i = 0; i < hidden; ++i) f[i] *= sigmoid(b_g[i] + dot(w_g + i * d, xb, d));
    }
    T* ob = out + b * hidden;
    ob[0] = f[0] + hb[hidden - 1];
    for (int64_t i = 1; i < hidden; ++i) ob[i] = f[i] + hb[i - 1];
    for (int64_t i = 0; i < hidden; ++i) ob[i] = relu ? activate<0>(ob[i]) : activate<1>(ob[i]);
  }
}

at::Tensor srnn_stream(at::TensorList weights, at::IntArrayRef options, const at::Tensor& x, const at::Tensor& state) {
  const int64_t layers = option(options, 2, 0, kStream), relu = options[1];
  TORCH_CHECK(layers >= 0, kStream, ": the number of f_r layers must be >= 0, got ", layers);
  TORCH_CHECK(state.dim() == 2, kStream, ": state must be (B, H), got ", state.sizes());
  check_stream_input(x, state, {state.size(1)}, kStream);
  const bool gated = weights.size() == size_t(2 * layers + 4);
  if (!gated) check_weight_count(weights, 2 * layers + 2, kStream);
  const int64_t d = x.size(1), hidden = state.size(1);
  const int64_t k = layers ? weights[1].size(0) : d;
  for (int64_t l = 0; l < layers; ++l) {
    check_tensor(weights[2 * l], x, {k, l ? k : d}, kStream, "an f_r weight");
    check_tensor(weights[2 * l + 1], x, {k}, kStream, "an f_r bias");
  }
  check_tensor(weights[2 * layers], x, {hidden, k}, kStream, "W_out");
  check_tensor(weights[2 * layers + 1], x, {hidden}, kStream, "b_out");
  if (gated) {
    check_tensor(weights[2 * layers + 2], x, {hidden, d}, kStream, "W_g");
    check_tensor(weights[2 * layers + 3], x, {hidden}, kStream, "b_g");
  }
  at::Tensor out = at::empty_like(state);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), kStream, [&] {
    stream_rows<scalar_t>(weights, layers, gated, relu != 0, x.data_ptr<scalar_t>(), state.data_ptr<scalar_t>(),
                          out.data_ptr<scalar_t>(), x.size(0), d, hidden, k);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ltdrnn, m) {  // a fragment: every cell's library adds to the same namespace
  m.def("srnn_forward(Tensor features, Tensor b_f, Tensor? g, Tensor? b_g, Tensor? x, Tensor? w_g, Tensor h0, "
        "bool relu, Tensor(a!) h, Tensor? w_f=None) -> ()");
  m.def("srnn_backward(Tensor dh, Tensor h, Tensor features, Tensor b_f, Tensor? g, Tensor? b_g, Tensor? x, "
        "Tensor? w_g, bool relu, Tensor(a!)? d_features, Tensor(b!)? dg, Tensor(c!) dh0, Tensor(d!) d_bf, "
        "Tensor(e!)? d_bg, Tensor(f!)? d_wg, Tensor(g!)? d_x, Tensor? w_f=None, Tensor(h!)? d_wf=None) -> ()");
  m.def("srnn_pwl_forward(Tensor x, Tensor knots, Tensor slope, Tensor offset, Tensor? w_g, Tensor? b_g, "
        "Tensor h0, bool relu, Tensor(a!) h, Tensor(b!) segment, Tensor(c!)? positive=None) -> ()");
  m.def("srnn_pwl_backward(Tensor dh, Tensor? h, Tensor x, Tensor segment, Tensor slope, Tensor offset, Tensor? w_g, "
        "Tensor? b_g, bool relu, Tensor(a!) dh0, Tensor(b!) m0, Tensor(c!) m1, Tensor(d!)? d_bg, Tensor(e!)? d_wg, "
        "Tensor(f!)? d_x, Tensor? positive=None) -> ()");
  m.def("srnn_stream(Tensor[] weights, int[] options, Tensor x, Tensor state) -> Tensor");
}

TORCH_LIBRARY_IMPL(ltdrnn, CPU, m) {
  m.impl("srnn_forward", &srnn_forward);
  m.impl("srnn_backward", &srnn_backward);
  m.impl("srnn_pwl_forward", &srnn_pwl_forward);
  m.impl("srnn_pwl_backward", &srnn_pwl_backward);
  m.impl("srnn_stream", &srnn_stream);
}
