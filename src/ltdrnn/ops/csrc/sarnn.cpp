// The whole training recurrence of SA-RNN with the GRU recurrence (ltdrnn.ops.sarnn_torch, FusedSARNNGRU),
// forward and backward, each time loop in one call: the per-step product is a BLAS call on raw pointers
// (common.h, gemm), the gates, the candidate and the update one pass over the rows. No tensor, view or
// ATen operator is made or called inside a time loop: the views, the product and ATen's sigmoid, tanh
// and addcmul were about 45 operator calls and four extra passes a step (35,370 calls per 784-step
// sequence), 70 % of the time at batch 1. The file also holds the one-call streaming step. Operators:
// torch.ops.ltdrnn.sarnn_gru_forward / sarnn_gru_backward / sarnn_stream.
//
// Layouts (time-major, contiguous unless said otherwise):
//   gi (T, B, 3H): the input map W_ih x, gates [r | z | n], with b_ih added (bias_ih given: the forward adds
//   it, one pass over gi less) or already in it (bias_ih None);
//   coord_in (T, B, H): the coordinator's input half, already (alpha/2)(W_i x + b) + 1/2;
//   h0 (B, H); w_t (H, 3H) = W_hh^T, any strides (W_hh.t() is read in place); bias_hh (3H);
//   coord_weight (H) = (alpha/2) w_u; weight_hh (3H, H), any strides (copied once if not contiguous);
//   outputs, probs, masks (T, B, H): h_t, the coordinator's clamp(pre, 0, 1) and the decision u_t (0/1);
//   gates (T or 1, B, 3H): per step [r | z | W_hn h + b_hn], kept for the backward (1 row when not);
//   news (T or 1, B, H): the candidate's n, likewise.
//   d_outputs, d_probs (T, B, H): the incoming gradients, any time and batch strides, the last axis contiguous
//   (unit stride lets the loop vectorise; a batch-first layer's gradient is read in place, not copied);
//   d_probs may be absent (None: zero, when nothing used the probabilities; no zero tensor is filled).
//   bias_sums (4H, float64, written by the backward): [d_r | d_z | d_n | d_gh_n] summed over time and batch,
//   from which both biases' gradients follow (no pass over d_gi after the loop);
//   d_weight_hh (3H, H, written by the backward): sum_t [d_r | d_z | d_gh_n]_t^T h_{t-1}, W_hh's gradient,
//   summed step by step while a step's rows are in cache (d_gh_n = d_n r is never stored);
//   x (T, B, d), optional, the input of the map gi = W_ih x (+ b_ih); with it the backward also writes
//   d_weight_ih (3H, d) = sum_t d_gi_t^T x_t, summed in the loop likewise (reading d_gi back after the loop
//   took 16 ms a training step at d = 1, bound by memory); without it d_weight_ih is an empty tensor.
// Per step (sigma the logistic function):
//   gh = W_hh h + b_hh;  r = sigma(gi_r + gh_r);  z = sigma(gi_z + gh_z);  n = tanh(gi_n + r gh_n)
//   cand = n + z (h - n);  pre = coord_in + coord_weight h;  u = [pre > 1/2];  h_t = h + u (cand - h)
// The backward is the straight-through estimator (d u / d pre = 1 inside the hard sigmoid's linear
// range 0 < pre < 1, else 0), as FusedSARNNGRU.backward writes it in PyTorch; 0 < pre < 1 exactly when
// 0 < clamp(pre, 0, 1) < 1, so the backward reads the probabilities the forward returned.
//
// Threads: the batch rows are independent through the whole recurrence (the per-row sums of
// d_coord_weight included), so each loop splits the batch once into one block of rows per thread and
// runs all T steps of a block on its own thread with single-threaded BLAS (common.h,
// over_batch_blocks): one thread start per call instead of a hand-off for each of the step's
// operations. Nothing is shared between blocks.
#include "common.h"

#include <array>
#include <utility>
#include <vector>

namespace {

using namespace ltdrnn;

constexpr const char* kLoop = "sarnn_gru";  // both time-loop operators' checks

void check_shape(const at::Tensor& t, const at::Tensor& like, at::IntArrayRef shape, bool contiguous,
                 const char* name) {
  check_tensor(t, like, shape, kLoop, name, contiguous);
}

// The sizes (T, B, H) from gi, after checking gi itself.
std::array<int64_t, 3> sequence_sizes(const at::Tensor& gi) {
  check_floating(gi, kLoop, "gi");
  TORCH_CHECK(gi.dim() == 3 && gi.is_contiguous(), kLoop, ": gi must be a contiguous CPU (T, B, 3H) tensor, got ",
              gi.sizes());
  const int64_t hidden = gi.size(2) / 3;
  TORCH_CHECK(gi.size(2) == 3 * hidden && hidden > 0 && gi.size(0) > 0,
              kLoop, ": gi's last axis must be 3H > 0 and T > 0, got ", gi.sizes());
  return {gi.size(0), gi.size(1), hidden};
}

// Rows of the per-step saved tensors: all T when the backward needs them, else one reused row.
void check_saved(const at::Tensor& t, const at::Tensor& gi, int64_t width, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == gi.scalar_type(), kLoop, ": ", name,
              " must be a CPU tensor of gi's dtype");
  TORCH_CHECK(t.dim() == 3 && (t.size(0) == gi.size(0) || t.size(0) == 1) && t.size(1) == gi.size(1) &&
                  t.size(2) == width && t.is_contiguous(),
              kLoop, ": ", name, " must be a contiguous (T or 1, B, ", width, ") tensor, got ", t.sizes());
}

// One step after the product gh = W_hh h (rows x 3H, in gates, without b_hh): gates become
// [r | z | gh_n + b_hn], news n, and cand = n + z (h - n), pre = coord_in + coord_weight h, u = [pre > 1/2],
// h_t = h + u (cand - h). One pass (the bias added here, not by a pass before the product); gcc vectorises
// sigmoid and tanh through glibc's libmvec (-ffast-math).
// bias: [b_ir + b_hr | b_iz + b_hz | b_hn], input_n: b_in (zeros where gi already holds b_ih).
template <typename T>
void forward_rows(const T* __restrict gi, const T* __restrict bias, const T* __restrict input_n,
                  const T* __restrict coord, const T* __restrict h,
                  const T* __restrict coord_weight, T* __restrict gates, T* __restrict news, T* __restrict out,
                  T* __restrict prob_out, T* __restrict mask_out, int64_t rows, int64_t hidden) {
  for (int64_t b = 0; b < rows; ++b) {
    const T* gi_b = gi + b * 3 * hidden;
    T* g = gates + b * 3 * hidden;
    const int64_t row = b * hidden;
    for (int64_t j = 0; j < hidden; ++j) {
      const T r = sigmoid(gi_b[j] + g[j] + bias[j]);
      const T z = sigmoid(gi_b[hidden + j] + g[hidden + j] + bias[hidden + j]);
      const T gh_n = g[2 * hidden + j] + bias[2 * hidden + j];
      const T n = std::tanh(gi_b[2 * hidden + j] + input_n[j] + r * gh_n);
      g[j] = r;
      g[hidden + j] = z;
      g[2 * hidden + j] = gh_n;
      news[row + j] = n;
      const T hj = h[row + j];
      const T pre = coord[row + j] + coord_weight[j] * hj;
      const T u = pre > T(0.5) ? T(1) : T(0);
      // torch.clamp keeps NaN; -ffast-math's min/max would not: the select on the bits does
      prob_out[row + j] = is_nan(pre) ? pre : pre < T(0) ? T(0) : pre > T(1) ? T(1) : pre;
      mask_out[row + j] = u;
      out[row + j] = is_nan(pre) ? pre : hj + u * (n + z * (hj - n) - hj);  // a NaN gate is NaN, as in torch
    }
  }
}

// An incoming gradient (T, B, H) with its own time and batch strides and a contiguous last axis: the
// gradient of a batch-first layer's output is a transposed view, read in place rather than copied.
void check_incoming(const at::Tensor& g, const at::Tensor& like, at::IntArrayRef shape, const char* name) {
  check_shape(g, like, shape, false, name);
  TORCH_CHECK(g.size(2) == 1 || g.stride(2) == 1, kLoop, ": ", name,
              "'s last axis must be contiguous, got strides ", g.strides());
}

// Where an incoming gradient's rows of one step start, for the batch rows from `begin` on.
template <typename T>
struct Incoming {
  const T* base = nullptr;
  int64_t time = 0, rows = 0;
  Incoming() = default;
  Incoming(const at::Tensor& g, int64_t begin)
      : base(g.data_ptr<T>() + begin * g.stride(1)), time(g.stride(0)), rows(g.stride(1)) {}
  const T* at(int64_t t) const { return base ? base + t * time : nullptr; }
};

// One step back: reads carry (dL/dh_t from later steps), writes the step's gradients (d_gi, d_coord, and
// d_gh = [d_r | d_z | d_gh_n] per row) and leaves in carry the elementwise part of dL/dh_{t-1}; the caller
// adds d_gh W_hh.
// d_out's and d_prob's rows lie d_out_rows and d_prob_rows elements apart; HasProb false: d_prob is zero.
template <bool HasProb, typename T>
void backward_elementwise(const T* gh, const T* news, const T* h_prev, const T* mask, const T* prob,
                          const T* d_out_step, int64_t d_out_rows, const T* d_prob_step, int64_t d_prob_rows,
                          const T* coord_weight, T* d_gi, T* d_coord, T* d_coord_weight, T* d_gh,
                          T* carry, T* __restrict bias_sums, int64_t rows, int64_t hidden) {
  for (int64_t b = 0; b < rows; ++b) {
    const T* __restrict d_out = d_out_step + b * d_out_rows;
    const T* __restrict d_prob = HasProb ? d_prob_step + b * d_prob_rows : nullptr;
    const T* gh_b = gh + b * 3 * hidden;
    T* d_gi_b = d_gi + b * 3 * hidden;
    T* d_gh_b = d_gh + b * 3 * hidden;
    const int64_t row = b * hidden;
    for (int64_t j = 0; j < hidden; ++j) {
      const T r = gh_b[j], z = gh_b[hidden + j], gh_n = gh_b[2 * hidden + j];
      const T n = news[row + j], hp = h_prev[row + j], p = prob[row + j];
      const T dh = carry[row + j] + d_out[j];
      const T d_cand = dh * mask[row + j];
      const T d_n = (d_cand - d_cand * z) * (T(1) - n * n);
      const T d_r = d_n * gh_n * r * (T(1) - r);
      const T d_z = d_cand * (hp - n) * z * (T(1) - z);
      const T d_ghn = d_n * r;
      const T delta = (n + z * (hp - n)) - hp;
      const T inside = p > T(0) && p < T(1) ? T(1) : T(0);
      T d_c = dh * delta;
      if constexpr (HasProb) d_c += d_prob[j];
      d_c *= inside;
      d_gi_b[j] = d_r;
      d_gi_b[hidden + j] = d_z;
      d_gi_b[2 * hidden + j] = d_n;
      d_gh_b[j] = d_r;
      d_gh_b[hidden + j] = d_z;
      d_gh_b[2 * hidden + j] = d_ghn;
      d_coord[row + j] = d_c;
      d_coord_weight[row + j] += d_c * hp;
      carry[row + j] = dh - d_cand + d_cand * z + d_c * coord_weight[j];
      bias_sums[j] += d_r;
      bias_sums[hidden + j] += d_z;
      bias_sums[2 * hidden + j] += d_n;
      bias_sums[3 * hidden + j] += d_ghn;
    }
  }
}

void sarnn_gru_forward(const at::Tensor& gi, const at::Tensor& coord_in, const at::Tensor& h0, const at::Tensor& w_t,
                       const at::Tensor& bias_hh, const at::Tensor& coord_weight, at::Tensor outputs, at::Tensor probs,
                       at::Tensor masks, at::Tensor gates, at::Tensor news, const std::optional<at::Tensor>& bias_ih) {
  const auto [steps, batch, hidden] = sequence_sizes(gi);
  check_shape(coord_in, gi, {steps, batch, hidden}, true, "coord_in");
  check_shape(h0, gi, {batch, hidden}, true, "h0");
  check_shape(w_t, gi, {hidden, 3 * hidden}, false, "w_t");
  check_shape(bias_hh, gi, {3 * hidden}, true, "bias_hh");
  if (bias_ih) check_shape(*bias_ih, gi, {3 * hidden}, true, "bias_ih");
  check_shape(coord_weight, gi, {hidden}, true, "coord_weight");
  for (auto [t, name] : {std::pair{&outputs, "outputs"}, {&probs, "probs"}, {&masks, "masks"}}) {
    check_shape(*t, gi, {steps, batch, hidden}, true, name);
  }
  check_saved(gates, gi, 3 * hidden, "gates");
  check_saved(news, gi, hidden, "news");
  TORCH_CHECK(news.size(0) == gates.size(0), kLoop, ": gates and news must have the same number of rows (T or 1), got ",
              gates.size(0), " and ", news.size(0));
  // the caller's w_t is W_hh.t(), read in place as the transpose of W_hh; other strides are copied once
  const bool transposed = !w_t.is_contiguous() && w_t.t().is_contiguous();
  const at::Tensor weight = transposed ? w_t.t() : w_t.contiguous();
  const int64_t saved_step = gates.size(0) == 1 ? 0 : batch;  // rows between two steps of gates and news
  AT_DISPATCH_FLOATING_TYPES(gi.scalar_type(), "sarnn_gru_forward", [&] {
    const scalar_t* w = weight.data_ptr<scalar_t>();
    const scalar_t* c_w = coord_weight.data_ptr<scalar_t>();
    // b_ih added here rather than by a pass over gi before the loop: [b_ir + b_hr | b_iz + b_hz | b_hn], b_in
    std::vector<scalar_t> biases(4 * hidden, scalar_t(0));
    std::copy_n(bias_hh.data_ptr<scalar_t>(), 3 * hidden, biases.data());
    if (bias_ih) {
      const scalar_t* b_i = bias_ih->data_ptr<scalar_t>();
      for (int64_t j = 0; j < 2 * hidden; ++j) biases[j] += b_i[j];
      std::copy_n(b_i + 2 * hidden, hidden, biases.data() + 3 * hidden);
    }
    const scalar_t *bias = biases.data(), *input_n = bias + 3 * hidden;
    // gh = h W_hh^T: W_hh (3H, H) itself, or w_t (H, 3H), packed once for all T steps (products.h)
    const StepProduct<scalar_t> to_gates(3 * hidden, transposed ? Strided<scalar_t>{w, 1, hidden}
                                                                 : Strided<scalar_t>{w, 3 * hidden, 1}, hidden);
    over_batch_blocks(batch, rows_per_thread(batch), [&](int64_t begin, int64_t end, int64_t) {
      const int64_t rows = end - begin, offset = begin * hidden;  // of this block's first row in a (B, H) step
      const scalar_t* h = h0.data_ptr<scalar_t>() + offset;
      const scalar_t *gi_p = gi.data_ptr<scalar_t>(), *coord_p = coord_in.data_ptr<scalar_t>();
      scalar_t *gates_p = gates.data_ptr<scalar_t>(), *news_p = news.data_ptr<scalar_t>();
      scalar_t *out_p = outputs.data_ptr<scalar_t>(), *probs_p = probs.data_ptr<scalar_t>();
      scalar_t* masks_p = masks.data_ptr<scalar_t>();
      for (int64_t t = 0; t < steps; ++t) {
        const int64_t step = t * batch * hidden + offset, saved = t * saved_step * hidden + offset;
        scalar_t* gh = gates_p + 3 * saved;
        to_gates.run(rows, h, hidden, nullptr, 0, gh, 3 * hidden, Start::zero);
        forward_rows(gi_p + 3 * step, bias, input_n, coord_p + step, h, c_w, gh, news_p + saved, out_p + step,
                     probs_p + step, masks_p + step, rows, hidden);
        h = out_p + step;
      }
    });
  });
}

// Last step to first. carry ends as the gradient of h0, d_coord_weight (B, H) as per-row sums (the
// caller sums over the batch); d_gh (B, 3H) is a work buffer.
void sarnn_gru_backward(const at::Tensor& gates, const at::Tensor& news, const at::Tensor& outputs,
                        const at::Tensor& h0, const at::Tensor& masks, const at::Tensor& probs,
                        const at::Tensor& d_outputs, const std::optional<at::Tensor>& d_probs,
                        const at::Tensor& weight_hh,
                        const at::Tensor& coord_weight, at::Tensor d_gi, at::Tensor d_weight_hh, at::Tensor d_coord,
                        at::Tensor d_coord_weight, at::Tensor d_gh, at::Tensor carry, at::Tensor bias_sums,
                        const std::optional<at::Tensor>& x, at::Tensor d_weight_ih) {
  const auto [steps, batch, hidden] = sequence_sizes(d_gi);
  const int64_t dim = x ? x->size(-1) : 0;
  if (x) {
    TORCH_CHECK(x->dim() == 3 && dim > 0, kLoop, ": x must be a (T, B, d) tensor, got ", x->sizes());
    check_shape(*x, d_gi, {steps, batch, dim}, true, "x");
    check_shape(d_weight_ih, d_gi, {3 * hidden, dim}, true, "d_weight_ih");
  } else {
    TORCH_CHECK(d_weight_ih.numel() == 0, kLoop, ": d_weight_ih must be empty without x, got ", d_weight_ih.sizes());
  }
  check_shape(gates, d_gi, {steps, batch, 3 * hidden}, true, "gates");
  for (auto [t, name] : {std::pair{&news, "news"}, {&outputs, "outputs"}, {&masks, "masks"}, {&probs, "probs"},
                         {&d_coord, "d_coord"}}) {
    check_shape(*t, d_gi, {steps, batch, hidden}, true, name);
  }
  check_incoming(d_outputs, d_gi, {steps, batch, hidden}, "d_outputs");
  if (d_probs) check_incoming(*d_probs, d_gi, {steps, batch, hidden}, "d_probs");
  check_shape(h0, d_gi, {batch, hidden}, true, "h0");
  check_shape(weight_hh, d_gi, {3 * hidden, hidden}, false, "weight_hh");
  check_shape(d_weight_hh, d_gi, {3 * hidden, hidden}, true, "d_weight_hh");
  check_shape(coord_weight, d_gi, {hidden}, true, "coord_weight");
  check_shape(d_coord_weight, d_gi, {batch, hidden}, true, "d_coord_weight");
  check_shape(d_gh, d_gi, {batch, 3 * hidden}, true, "d_gh");
  check_shape(carry, d_gi, {batch, hidden}, true, "carry");
  TORCH_CHECK(bias_sums.device().is_cpu() && bias_sums.scalar_type() == at::kDouble && bias_sums.is_contiguous() &&
                  bias_sums.sizes() == at::IntArrayRef{4 * hidden},
              kLoop, ": bias_sums must be a contiguous float64 CPU (4H) tensor, got ", bias_sums.sizes());
  const at::Tensor weight = weight_hh.contiguous();  // a copy only if strided
  const int64_t chunk = rows_per_thread(batch), blocks = batch_blocks(batch, chunk);
  std::vector<double> block_sums(blocks * 4 * hidden, 0.0);
  AT_DISPATCH_FLOATING_TYPES(d_gi.scalar_type(), "sarnn_gru_backward", [&] {
    // each block's share of d_weight_hh and d_weight_ih
    std::vector<std::vector<scalar_t>> weight_sums(blocks), input_sums(blocks);
    const StepProduct<scalar_t> to_state(hidden, {weight.data_ptr<scalar_t>(), hidden, 1}, 3 * hidden);
    auto run = [&](auto has_prob) {
    over_batch_blocks(batch, chunk, [&](int64_t begin, int64_t end, int64_t part) {
      const int64_t rows = end - begin, offset = begin * hidden;  // of this block's first row in a (B, H) step
      // [d_r | d_z | d_n | d_gh_n] summed over one step's rows in the data's type, then over steps in double
      std::vector<scalar_t> running(4 * hidden, scalar_t(0));
      // allocated by the thread that fills it: in its own memory
      std::vector<scalar_t> own_weight_sums(3 * hidden * hidden, scalar_t(0)), own_input_sums(3 * hidden * dim, 0);
      const scalar_t* x_p = x ? x->data_ptr<scalar_t>() + begin * dim : nullptr;
      double* own_sums = block_sums.data() + part * 4 * hidden;
      scalar_t* own_carry = carry.data_ptr<scalar_t>() + offset;
      scalar_t* own_d_gh = d_gh.data_ptr<scalar_t>() + 3 * offset;
      scalar_t* own_d_coord_weight = d_coord_weight.data_ptr<scalar_t>() + offset;
      std::fill_n(own_carry, rows * hidden, scalar_t(0));
      std::fill_n(own_d_coord_weight, rows * hidden, scalar_t(0));
      const scalar_t *gates_p = gates.data_ptr<scalar_t>(), *news_p = news.data_ptr<scalar_t>();
      const scalar_t *out_p = outputs.data_ptr<scalar_t>(), *masks_p = masks.data_ptr<scalar_t>();
      const scalar_t *probs_p = probs.data_ptr<scalar_t>(), *c_w = coord_weight.data_ptr<scalar_t>();
      const Incoming<scalar_t> d_out(d_outputs, begin), d_prob = d_probs ? Incoming<scalar_t>(*d_probs, begin)
                                                                         : Incoming<scalar_t>();
      scalar_t* d_gi_p = d_gi.data_ptr<scalar_t>();
      scalar_t* d_coord_p = d_coord.data_ptr<scalar_t>();
      const scalar_t* first_h = h0.data_ptr<scalar_t>() + offset;
      for (int64_t t = steps - 1; t >= 0; --t) {
        const int64_t step = t * batch * hidden + offset;
        const scalar_t* h_prev = t == 0 ? first_h : out_p + step - batch * hidden;
        backward_elementwise<decltype(has_prob)::value>(
            gates_p + 3 * step, news_p + step, h_prev, masks_p + step, probs_p + step, d_out.at(t), d_out.rows,
            d_prob.at(t), d_prob.rows, c_w, d_gi_p + 3 * step, d_coord_p + step,
            own_d_coord_weight, own_d_gh, own_carry, running.data(), rows, hidden);
        for (int64_t j = 0; j < 4 * hidden; ++j) own_sums[j] += running[j];
        std::fill(running.begin(), running.end(), scalar_t(0));
        // dL/dh_{t-1} += [d_r | d_z | d_gh_n] W_hh, and W_hh's gradient += [d_r | d_z | d_gh_n]^T h_{t-1}
        to_state.run(rows, own_d_gh, 3 * hidden, nullptr, 0, own_carry, hidden, Start::add);
        add_at_b(3 * hidden, hidden, rows, own_d_gh, 3 * hidden, h_prev, hidden, own_weight_sums.data(), hidden);
        // W_ih's gradient += d_gi_t^T x_t
        if (x_p) add_at_b(3 * hidden, dim, rows, d_gi_p + 3 * step, 3 * hidden, x_p + t * batch * dim, dim,
                          own_input_sums.data(), dim);
      }
      weight_sums[part] = std::move(own_weight_sums);
      input_sums[part] = std::move(own_input_sums);
    });
    };
    d_probs ? run(std::true_type{}) : run(std::false_type{});
    // in block order: the result depends on the thread count, not on the timing
    const auto add_parts = [](at::Tensor& out, const std::vector<std::vector<scalar_t>>& parts) {
      scalar_t* total = out.data_ptr<scalar_t>();
      std::fill_n(total, out.numel(), scalar_t(0));
      for (const auto& part : parts)
        for (size_t i = 0; i < part.size(); ++i) total[i] += part[i];
    };
    add_parts(d_weight_hh, weight_sums);
    if (x) add_parts(d_weight_ih, input_sums);
  });
  // the blocks' sums added in block order: the result depends on the thread count, not on the timing
  double* total = bias_sums.data_ptr<double>();
  std::copy_n(block_sums.data(), 4 * hidden, total);
  for (int64_t part = 1; part < blocks; ++part)
    for (int64_t j = 0; j < 4 * hidden; ++j) total[j] += block_sums[part * 4 * hidden + j];
}

// ---- the streaming step -------------------------------------------------------------------------------
// weights: [W_ih (3H, d), b_ih (3H), W_hh (3H, H), b_hh (3H), (alpha/2) W_i (H, d), (alpha/2) b + 1/2 (H),
// (alpha/2) w_u (H)]; no options. Per unit: pre = (alpha/2)(W_i x + b + w_u h) + 1/2, u = [pre > 1/2],
// prob = clamp(pre, 0, 1); the GRU update (torch.nn.GRU's equations) forms its W_hh products only for updated
// units, skipped units keep h. Returns h' (B, H) and prob, u (1, B, H).
constexpr const char* kStream = "sarnn_stream";

// Three passes per row, so that the transcendental functions run over whole rows (gcc vectorises them with
// libmvec), not one unit at a time: the coordinator; the products of the updated units only; the gates and
// the update of every unit, a skipped unit's zero pre-activations discarded by the final select. Batch-1
// operator call 8.6 -> 7.5 us (lab/notes/sarnn-speed.md, 2026-11-28).
template <typename T>
void stream_rows(at::TensorList w, const T* x, const T* h, T* out, T* prob, T* mask, int64_t batch, int64_t d,
                 int64_t hidden) {
  const T *w_ih = w[0].data_ptr<T>(), *b_ih = w[1].data_ptr<T>(), *w_hh = w[2].data_ptr<T>();
  const T *b_hh = w[3].data_ptr<T>(), *c_w = w[4].data_ptr<T>(), *c_b = w[5].data_ptr<T>(), *c_h = w[6].data_ptr<T>();
  const int64_t H = hidden;
  std::vector<T> pre_activations(4 * H);
  T *a_r = pre_activations.data(), *a_z = a_r + H, *gi_n = a_z + H, *gh_n = gi_n + H;
  for (int64_t b = 0; b < batch; ++b) {
    const T *xb = x + b * d, *hb = h + b * H;
    T *ob = out + b * H, *pb = prob + b * H, *mb = mask + b * H;
    for (int64_t j = 0; j < H; ++j) {
      const T pre = c_b[j] + dot(c_w + j * d, xb, d) + c_h[j] * hb[j];
      // NaN kept, as torch.clamp does (under -ffast-math the comparisons alone may become min and max)
      pb[j] = is_nan(pre) ? pre : pre < T(0) ? T(0) : pre > T(1) ? T(1) : pre;
      mb[j] = pre > T(0.5) ? T(1) : T(0);
    }
    for (int64_t j = 0; j < H; ++j) {
      T gh[3] = {0, 0, 0};
      if (mb[j] != T(0)) {
        const T *wr = w_hh + j * H, *wz = wr + H * H, *wn = wz + H * H;
        for (int64_t c = 0; c < H; ++c) {  // three rows at once: independent sums
          gh[0] += wr[c] * hb[c];
          gh[1] += wz[c] * hb[c];
          gh[2] += wn[c] * hb[c];
        }
      }
      a_r[j] = b_ih[j] + dot(w_ih + j * d, xb, d) + gh[0] + b_hh[j];
      a_z[j] = b_ih[H + j] + dot(w_ih + (H + j) * d, xb, d) + gh[1] + b_hh[H + j];
      gi_n[j] = b_ih[2 * H + j] + dot(w_ih + (2 * H + j) * d, xb, d);
      gh_n[j] = gh[2] + b_hh[2 * H + j];
    }
    for (int64_t j = 0; j < H; ++j) {
      const T r = sigmoid(a_r[j]), z = sigmoid(a_z[j]);
      const T cand = std::tanh(gi_n[j] + r * gh_n[j]);
      const T updated = cand + z * (hb[j] - cand);
      // a NaN gate is NaN, as in torch; a skipped unit keeps h
      ob[j] = mb[j] != T(0) ? updated : is_nan(pb[j]) ? pb[j] : hb[j];
    }
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> sarnn_stream(at::TensorList weights, at::IntArrayRef options,
                                                            const at::Tensor& x, const at::Tensor& state) {
  TORCH_CHECK(options.empty(), kStream, ": takes no options, got ", options.size());
  check_weight_count(weights, 7, kStream);
  TORCH_CHECK(state.dim() == 2, kStream, ": state must be (B, H), got ", state.sizes());
  const int64_t hidden = state.size(1), d = x.dim() == 2 ? x.size(1) : 0;
  check_stream_input(x, state, {hidden}, kStream);
  const char* names[] = {"W_ih", "b_ih", "W_hh", "b_hh", "coordinator W_i", "coordinator b", "coordinator w_u"};
  const std::vector<int64_t> shapes[] = {{3 * hidden, d}, {3 * hidden}, {3 * hidden, hidden}, {3 * hidden},
                                         {hidden, d},     {hidden},     {hidden}};
  for (size_t i = 0; i < weights.size(); ++i) check_tensor(weights[i], x, shapes[i], kStream, names[i]);
  // prob and mask with the leading step of a one-step scan's aux: a view made in Python costs a microsecond
  at::Tensor out = at::empty_like(state), prob = at::empty({1, state.size(0), hidden}, state.options()),
             mask = at::empty_like(prob);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), kStream, [&] {
    stream_rows<scalar_t>(weights, x.data_ptr<scalar_t>(), state.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
                          prob.data_ptr<scalar_t>(), mask.data_ptr<scalar_t>(), x.size(0), d, hidden);
  });
  return {out, prob, mask};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ltdrnn, m) {  // a fragment: every cell's library adds to the same namespace
  m.def("sarnn_gru_forward(Tensor gi, Tensor coord_in, Tensor h0, Tensor w_t, Tensor bias_hh, Tensor coord_weight, "
        "Tensor(a!) outputs, Tensor(b!) probs, Tensor(c!) masks, Tensor(d!) gates, Tensor(e!) news, "
        "Tensor? bias_ih=None) -> ()");
  m.def("sarnn_gru_backward(Tensor gates, Tensor news, Tensor outputs, Tensor h0, Tensor masks, Tensor probs, "
        "Tensor d_outputs, Tensor? d_probs, Tensor weight_hh, Tensor coord_weight, Tensor(a!) d_gi, "
        "Tensor(b!) d_weight_hh, Tensor(c!) d_coord, Tensor(d!) d_coord_weight, Tensor(e!) d_gh, Tensor(f!) carry, "
        "Tensor(g!) bias_sums, Tensor? x, Tensor(h!) d_weight_ih) -> ()");
  m.def("sarnn_stream(Tensor[] weights, int[] options, Tensor x, Tensor state) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(ltdrnn, CPU, m) {
  m.impl("sarnn_gru_forward", &sarnn_gru_forward);
  m.impl("sarnn_gru_backward", &sarnn_gru_backward);
  m.impl("sarnn_stream", &sarnn_stream);
}
