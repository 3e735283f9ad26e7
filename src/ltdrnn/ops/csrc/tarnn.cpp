// TARNN's compiled kernels (ltdrnn.ops.tarnn_torch): the whole training recurrence, forward and backward,
// each time loop in one call, for K = 1 with the gate inside (tarnn_k1_*, below) and for any K with either
// gate (tarnn_euler_*, further down); and the one-call streaming step (tarnn_stream, at the end). Inside a
// time loop each product is one call of the packed products on raw pointers (products.h) and the elementwise
// work one pass per step: no tensor, view or ATen operator per step, whose dispatch (a few microseconds each) was
// most of a step at batch 1. Built and cached by ltdrnn.ops.kernels.load_torch_ops("tarnn").
//
// Layouts (time-major, contiguous unless said otherwise):
//   p (T, B, 3H), any K: each step's [c | q | r] = P + s_{t-1} [B2 + A; W2 + U; U_s]^T, with the input map
//       P = [B1 x + b_lin | W1 x + b | W_x x + b_beta] = x W_in^T + b_in. The operators take p holding P, the
//       forward adds the state product in place, and the backward overwrites it with the gradient of p (the
//       forward's values of a step are read before its gradient is written).
//   saved (T, B, 2H), K = 1: each step's [G | phi(q)], written by the forward, only read by the backward. The
//       step's [c | q | r] live in the block's scratch rows: r is needed only as beta (in betas already), so
//       the forward writes 4H numbers per row to memory instead of 5H and the backward reads 5H instead of 6H,
//       and it does not evaluate phi again.
//   x (T, B, d), W_in (3H, d) = [B1; W1; W_x], b_in (3H) = [b_lin; b; b_beta]: K = 1 only.
//   s0 (B, H); w_t (H, 3H) = [B2 + A; W2 + U; U_s]^T; state_weights (3H, H) its transpose.
//   outputs, betas (T, B, H): s_t and beta_t = sigmoid(r_t).
//   grad_outputs (T, B, H), any strides (the gradient of a mean arrives expanded, stride 0).
//   carry (B, H): in the backward the gradient of s_t, on exit that of s0.
// Per step, with phi the activation (0 relu, 1 tanh, 2 sigmoid):
//   G = phi(q) + c;  s_t = s_{t-1} + eta beta G
#include "common.h"

namespace {

using namespace ltdrnn;

void check_sequence(const at::Tensor& p, const at::Tensor& s0, int64_t act) {
  TORCH_CHECK(p.device().is_cpu() && p.dim() == 3 && p.is_contiguous(),
              "tarnn: p must be a contiguous CPU (T, B, 3H) tensor, got ", p.sizes());
  TORCH_CHECK(p.scalar_type() == at::kFloat || p.scalar_type() == at::kDouble,
              "tarnn: expected float32 or float64, got ", p.scalar_type());
  const int64_t hidden = p.size(2) / 3;
  TORCH_CHECK(p.size(2) == 3 * hidden && hidden > 0, "tarnn: p's last axis must be 3H, got ", p.size(2));
  TORCH_CHECK(s0.sizes() == at::IntArrayRef({p.size(1), hidden}) && s0.is_contiguous() &&
                  s0.scalar_type() == p.scalar_type(),
              "tarnn: s0 must be a contiguous (B, H) = (", p.size(1), ", ", hidden, ") tensor of p's dtype, got ",
              s0.sizes());
  TORCH_CHECK(act >= 0 && act <= 2, "tarnn: activation code must be 0 (relu), 1 (tanh) or 2 (sigmoid), got ",
              act);
}

void check_operand(const at::Tensor& t, at::IntArrayRef sizes, const at::Tensor& p, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.sizes() == sizes && t.is_contiguous() && t.scalar_type() == p.scalar_type(),
              "tarnn: ", name, " must be a contiguous CPU ", sizes, " tensor of p's dtype (", p.scalar_type(),
              "), got ", t.sizes(), " ", t.scalar_type(), " on ", t.device());
}

// g += one row of grad_outputs, its entries `stride` apart (0 when a mean's gradient arrives expanded).
// The common unit stride gets a loop of its own, which vectorises.
template <typename T>
inline void add_gradient_row(T* __restrict g, const T* __restrict grad, int64_t stride, int64_t n) {
  if (stride == 1) {
    for (int64_t j = 0; j < n; ++j) g[j] += grad[j];
  } else {
    for (int64_t j = 0; j < n; ++j) g[j] += grad[j * stride];
  }
}

// ---- K = 1, the gate inside (tarnn_k1_forward / _backward) ---------------------------------------------
// The forward forms each step's [c | q | r] = b_in + x_t W_in^T + s_{t-1} w_t in one product into the block's
// scratch rows (not by an addmm over a whole (T, B, 3H) buffer before the loop; measured in
// lab/notes/tarnn-speed.md, "input map and parameter gradients inside the K = 1 loops") and keeps of it only
// [G | phi] (saved) and beta. The backward reads saved and leaves it intact; each step's gradient of p lives
// only in the block's scratch rows, from which the block adds the step's share of the parameter gradients
// while they are in cache: dp^T s_{t-1} (the stacked state weights), dp^T x_t (W_in) and the column sums of
// dp (b_in), and writes the gradient of x, dp W_in, when it is wanted. Before, the gradient of p went to
// memory and one product after the loop read it again with a copy of the outputs (the same note has the cost).

constexpr const char* kK1Forward = "tarnn_k1_forward";
constexpr const char* kK1Backward = "tarnn_k1_backward";

// saved: a contiguous CPU (T, B, 2H) float tensor, s0 (B, H) of its dtype; returns H.
int64_t check_saved(const at::Tensor& saved, const at::Tensor& s0, int64_t act, const char* op) {
  check_floating(saved, op, "saved");
  TORCH_CHECK(saved.dim() == 3 && saved.is_contiguous() && saved.size(2) % 2 == 0 && saved.size(2) > 0, op,
              ": saved must be a contiguous (T, B, 2H) tensor, got ", saved.sizes());
  const int64_t hidden = saved.size(2) / 2;
  check_tensor(s0, saved, {saved.size(1), hidden}, op, "s0");
  TORCH_CHECK(act >= 0 && act <= 2, op, ": activation code must be 0 (relu), 1 (tanh) or 2 (sigmoid), got ", act);
  return hidden;
}

// x (T, B, d) and the input map's weight W_in (3H, d), contiguous CPU tensors of saved's dtype with its T and B;
// returns d.
int64_t check_input_map(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& saved, int64_t hidden,
                        const char* op) {
  TORCH_CHECK(x.dim() == 3, op, ": x must be a (T, B, d) tensor, got ", x.sizes());
  check_tensor(x, saved, {saved.size(0), saved.size(1), x.size(2)}, op, "x");
  check_tensor(weight, saved, {3 * hidden, x.size(2)}, op, "weight");
  return x.size(2);
}

// One row of one step from its [c | q | r]: beta = sigmoid(r), phi = phi(q), G = phi + c, s_t = s_{t-1} + eta
// beta G. Every pointer a restrict parameter, so that gcc vectorises the loop.
template <int Act, typename T>
void forward_row(const T* __restrict c, const T* __restrict q, const T* __restrict r, const T* __restrict s,
                 T* __restrict out, T* __restrict beta, T* __restrict big_g, T* __restrict phi_out, int64_t hidden,
                 T eta) {
  for (int64_t j = 0; j < hidden; ++j) {
    const T b = sigmoid(r[j]);
    const T phi = activate<Act>(q[j]);
    const T g = phi + c[j];
    beta[j] = b;
    phi_out[j] = phi;
    big_g[j] = g;
    out[j] = s[j] + eta * b * g;
  }
}

// Runs the forward over all T steps: writes saved, outputs and betas; none is read first. One block of batch
// rows per thread, as the any-K loop below ("Threads").
void tarnn_k1_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, at::Tensor saved,
                      const at::Tensor& s0, const at::Tensor& w_t, double eta, int64_t act, at::Tensor outputs,
                      at::Tensor betas) {
  const int64_t hidden = check_saved(saved, s0, act, kK1Forward);
  const int64_t steps = saved.size(0), batch = saved.size(1), width = 3 * hidden;
  check_tensor(outputs, saved, {steps, batch, hidden}, kK1Forward, "outputs");
  check_tensor(betas, saved, {steps, batch, hidden}, kK1Forward, "betas");
  const int64_t dim = check_input_map(x, weight, saved, hidden, kK1Forward);
  check_tensor(bias, saved, {width}, kK1Forward, "bias");
  check_tensor(w_t, saved, {hidden, width}, kK1Forward, "w_t");
  AT_DISPATCH_FLOATING_TYPES(saved.scalar_type(), kK1Forward, [&] {
    using T = scalar_t;
    // p_t = b_in + s_{t-1} w_t + x_t W_in^T: one product of the state and the input together (products.h)
    const StepProduct<T> step(width, {w_t.data_ptr<T>(), width, 1}, hidden, {weight.data_ptr<T>(), 1, dim}, dim);
    const auto e = static_cast<T>(eta);
    with_activation(act, [&](auto kind) {
      over_batch_blocks(batch, rows_per_thread(batch), [&](int64_t begin, int64_t end, int64_t) {
        const int64_t rows = end - begin;
        std::vector<T> pt(rows * width);  // the step's [c | q | r], in cache
        const T *x_data = x.data_ptr<T>(), *b_in = bias.data_ptr<T>();
        const T* s = s0.data_ptr<T>() + begin * hidden;
        T *saved_data = saved.data_ptr<T>(), *out_data = outputs.data_ptr<T>(), *beta_data = betas.data_ptr<T>();
        for (int64_t t = 0; t < steps; ++t) {
          const int64_t row = t * batch + begin;
          T *out = out_data + row * hidden, *beta = beta_data + row * hidden, *keep = saved_data + row * 2 * hidden;
          step.run(rows, s, hidden, x_data + row * dim, dim, pt.data(), width, Start::bias, b_in);
          for (int64_t b = 0; b < rows; ++b) {
            const T* c = pt.data() + b * width;
            T* kept = keep + b * 2 * hidden;
            forward_row<decltype(kind)::value, T>(c, c + hidden, c + 2 * hidden, s + b * hidden, out + b * hidden,
                                                  beta + b * hidden, kept, kept + hidden, hidden, e);
          }
          s = out;
        }
      });
    });
  });
}

// One row of one step, with g its gradient of s_t: with dG = eta beta g, the gradient of p_t, [dc | dq | dr] =
// [dG | dG phi'(q) | eta g G beta (1 - beta)], goes into dc, dq, dr and is added to the column sums (the
// block's gradient of b_in). Returns sum(g beta G), the row's part of d eta. Every pointer restrict and a
// parameter: gcc vectorised this loop only so (with restrict pointers derived inside the caller it ran scalar).
template <int Act, typename T>
T backward_row(const T* __restrict big_g, const T* __restrict phi, const T* __restrict beta, const T* __restrict g,
               T* __restrict dc, T* __restrict dq, T* __restrict dr, T* __restrict c_sums, T* __restrict q_sums,
               T* __restrict r_sums, int64_t hidden, T eta) {
  T sum = T(0);
  for (int64_t j = 0; j < hidden; ++j) {
    const T bj = beta[j];
    const T d_g = eta * bj * g[j];
    const T d_q = d_g * activation_slope<Act>(phi[j]);
    const T d_r = eta * g[j] * big_g[j] * bj * (T(1) - bj);
    sum += g[j] * bj * big_g[j];
    dc[j] = d_g;
    dq[j] = d_q;
    dr[j] = d_r;
    c_sums[j] += d_g;
    q_sums[j] += d_q;
    r_sums[j] += d_r;
  }
  return sum;
}

// Over `rows` rows of one step: carry becomes g = grad_out + carry, then backward_row: the gradient of p_t
// into dp (rows x 3H), its column sums into bias_sums (3H). Returns these rows' part of d eta.
template <int Act, typename T>
double backward_rows(const T* kept, T* dp, const T* beta, const T* grad_out, const int64_t* grad_strides, T* carry,
                     T* bias_sums, int64_t rows, int64_t hidden, T eta) {
  double total = 0.0;
  for (int64_t b = 0; b < rows; ++b) {
    const T* big_g = kept + b * 2 * hidden;
    T* dc = dp + b * 3 * hidden;
    T* g = carry + b * hidden;
    add_gradient_row(g, grad_out + b * grad_strides[0], grad_strides[1], hidden);
    total += static_cast<double>(backward_row<Act, T>(big_g, big_g + hidden, beta + b * hidden, g, dc, dc + hidden,
                                                      dc + 2 * hidden, bias_sums, bias_sums + hidden,
                                                      bias_sums + 2 * hidden, hidden, eta));
  }
  return total;
}

// One block's share of the parameter gradients, summed over its rows and all steps: the stacked state
// weights (3H, H), W_in (3H, d) and b_in (3H), consecutive in one stretch of memory.
template <typename T>
struct K1Sums {
  T *state, *weight, *bias;
};

// The backward's inputs as raw pointers; grad_x is null when x needs no gradient.
template <typename T>
struct K1Backward {
  const T *saved, *betas, *grad_outputs, *outputs, *s0, *x, *weight, *state_weights;
  T *carry, *grad_x;
  int64_t steps, batch, hidden, dim, grad_step, grad_strides[2];
};

// The step's share of the parameter gradients from its dp (rows x 3H) while it is in cache: state += dp^T
// s_{t-1}, weight += dp^T x_t; and, when wanted, grad_x_t = dp W_in.
template <typename T>
void add_step_gradients(const K1Backward<T>& in, const K1Sums<T>& sums, const T* dp, const T* prev, int64_t row,
                        int64_t rows) {
  const int64_t three_h = 3 * in.hidden, dim = in.dim;
  const T* x_t = in.x + row * dim;
  add_at_b(three_h, in.hidden, rows, dp, three_h, prev, in.hidden, sums.state, in.hidden);
  add_at_b(three_h, dim, rows, dp, three_h, x_t, dim, sums.weight, dim);
  if (in.grad_x) gemm(false, false, rows, dim, three_h, T(1), dp, three_h, in.weight, dim, T(0), in.grad_x + row * dim, dim);
}

// One block's rows over all T steps, last to first; returns its part of d eta.
template <int Act, typename T>
double backward_block(const K1Backward<T>& in, const K1Sums<T>& sums, const StepProduct<T>& to_state, int64_t begin,
                      int64_t rows, T eta) {
  const int64_t hidden = in.hidden, batch = in.batch;
  std::vector<T> dp(rows * 3 * hidden);  // the step's gradient of p; allocated by the thread that uses it
  T* carry = in.carry + begin * hidden;
  std::fill_n(carry, rows * hidden, T(0));
  const T* grad_base = in.grad_outputs + begin * in.grad_strides[0];
  double eta_part = 0.0;
  for (int64_t t = in.steps - 1; t >= 0; --t) {
    const int64_t row = t * batch + begin;
    const T* prev = t == 0 ? in.s0 + begin * hidden : in.outputs + (row - batch) * hidden;  // s_{t-1}
    eta_part += backward_rows<Act, T>(in.saved + row * 2 * hidden, dp.data(), in.betas + row * hidden,
                                      grad_base + t * in.grad_step, in.grad_strides, carry, sums.bias, rows,
                                      hidden, eta);
    to_state.run(rows, dp.data(), 3 * hidden, nullptr, 0, carry, hidden, Start::add);  // d s_{t-1} = g + dp [..]
    add_step_gradients(in, sums, dp.data(), prev, row, rows);
  }
  return eta_part;
}

// out[i] = sum over blocks, in block order, of parts[block * per_block + offset + i], i < out.numel():
// deterministic for a given thread count.
template <typename T>
void add_blocks(at::Tensor& out, const at::Tensor& parts, int64_t offset) {
  T* total = out.data_ptr<T>();
  const T* part = parts.data_ptr<T>() + offset;
  std::copy_n(part, out.numel(), total);
  for (int64_t block = 1; block < parts.size(0); ++block) {
    part += parts.size(1);
    for (int64_t i = 0; i < out.numel(); ++i) total[i] += part[i];
  }
}

// Runs the backward over all T steps, last to first: carry becomes the gradient of s0, grad_x (unless an
// empty tensor) that of x, grad_state_weights, grad_weight and grad_bias those of the stacked state weights
// and of the input map (none is read first). saved, the forward's [G | phi], is left as it is. Returns the
// gradient of eta. Blocks of rows as the forward; their sums are added in block order.
double tarnn_k1_backward(const at::Tensor& saved, const at::Tensor& betas, const at::Tensor& grad_outputs,
                         const at::Tensor& outputs, const at::Tensor& s0, const at::Tensor& x,
                         const at::Tensor& weight, const at::Tensor& state_weights, double eta, int64_t act,
                         at::Tensor carry, at::Tensor grad_x, at::Tensor grad_state_weights, at::Tensor grad_weight,
                         at::Tensor grad_bias) {
  const int64_t hidden = check_saved(saved, s0, act, kK1Backward);
  const int64_t steps = saved.size(0), batch = saved.size(1);
  check_tensor(betas, saved, {steps, batch, hidden}, kK1Backward, "betas");
  check_tensor(outputs, saved, {steps, batch, hidden}, kK1Backward, "outputs");
  const int64_t dim = check_input_map(x, weight, saved, hidden, kK1Backward);
  TORCH_CHECK(grad_outputs.device().is_cpu() && grad_outputs.sizes() == betas.sizes() &&
                  grad_outputs.scalar_type() == saved.scalar_type(),
              kK1Backward, ": grad_outputs must be a CPU (T, B, H) tensor of saved's dtype, got ", grad_outputs.sizes());
  check_tensor(state_weights, saved, {3 * hidden, hidden}, kK1Backward, "state_weights");
  check_tensor(carry, saved, s0.sizes(), kK1Backward, "carry");
  const bool input_gradient = !(grad_x.dim() == 1 && grad_x.numel() == 0);
  if (input_gradient) check_tensor(grad_x, saved, x.sizes(), kK1Backward, "grad_x");
  check_tensor(grad_state_weights, saved, state_weights.sizes(), kK1Backward, "grad_state_weights");
  check_tensor(grad_weight, saved, weight.sizes(), kK1Backward, "grad_weight");
  check_tensor(grad_bias, saved, {3 * hidden}, kK1Backward, "grad_bias");
  const int64_t chunk = rows_per_thread(batch), blocks = batch_blocks(batch, chunk);
  const int64_t state_size = 3 * hidden * hidden, weight_size = 3 * hidden * dim;
  // each block's sums a whole number of cache lines apart (16 entries): two blocks never write into one
  const int64_t per_block = (state_size + weight_size + 3 * hidden + 15) / 16 * 16;
  at::Tensor parts = at::zeros({blocks, per_block}, saved.options());
  std::vector<double> eta_parts(blocks, 0.0);
  AT_DISPATCH_FLOATING_TYPES(saved.scalar_type(), kK1Backward, [&] {
    using T = scalar_t;
    const K1Backward<T> in{saved.data_ptr<T>(),
                           betas.data_ptr<T>(),
                           grad_outputs.data_ptr<T>(),
                           outputs.data_ptr<T>(),
                           s0.data_ptr<T>(),
                           x.data_ptr<T>(),
                           weight.data_ptr<T>(),
                           state_weights.data_ptr<T>(),
                           carry.data_ptr<T>(),
                           input_gradient ? grad_x.data_ptr<T>() : nullptr,
                           steps,
                           batch,
                           hidden,
                           dim,
                           grad_outputs.stride(0),
                           {grad_outputs.stride(1), grad_outputs.stride(2)}};
    const StepProduct<T> to_state(hidden, {in.state_weights, hidden, 1}, 3 * hidden);
    with_activation(act, [&](auto kind) {
      over_batch_blocks(batch, chunk, [&](int64_t begin, int64_t end, int64_t part) {
        T* block = parts.data_ptr<T>() + part * per_block;
        const K1Sums<T> sums{block, block + state_size, block + state_size + weight_size};
        eta_parts[part] = backward_block<decltype(kind)::value, T>(in, sums, to_state, begin, end - begin,
                                                                   static_cast<T>(eta));
      });
    });
    add_blocks<T>(grad_state_weights, parts, 0);
    add_blocks<T>(grad_weight, parts, state_size);
    add_blocks<T>(grad_bias, parts, state_size + weight_size);
  });
  double grad_eta = 0.0;
  for (double part : eta_parts) grad_eta += part;
  return grad_eta;
}

// ---- any K >= 1, the gate inside or outside (tarnn_euler_forward / _backward) ------------------------
// Layouts as above, plus:
//   u_t (H, H) = U^T (forward), u (H, H) = U (backward); etas: the K step sizes of every time step, or
//       per time step (T, K) flattened (T * K values; eta_per_time_step); k: K; coupled: A's upper-right
//       (H/2, H/2) block of +I (H even); inside: the gate.
//   phis (T, K, B, H): phi of every Euler step, written by the forward for the backward, or an empty
//       tensor (no autograd: nothing is saved).
// Per step, in the increment delta = z - s_{m-1} (delta_0 = 0), with [c | q | r] = P_m + s_{m-1} w_t:
//   beta = sigmoid(r);  G_i = phi(q + delta_i U^T) + c + A delta_i
//   delta_{i+1} = delta_i + eta_i beta G_i  ("inside", s_m = s_{m-1} + delta_K)
//   delta_{i+1} = delta_i + eta_i G_i       ("outside", s_m = s_{m-1} + beta delta_K)
// with (A d)_j = -d_j, plus d_{j+H/2} for j < H/2 when coupled. The backward recomputes the deltas and
// G from the saved phi, c and beta (elementwise: no matmul is repeated).
//
// Threads: the rows of the batch are independent through the whole recurrence, so each loop splits the
// batch into one block of rows per thread (torch's intra-op thread count) once, and each thread runs all
// T steps on its rows with single-threaded BLAS (over_batch_blocks). At K = 5 a step has 5 products and
// 5 elementwise passes forward, 6 and 6 backward: splitting each of them over the threads would be ~20
// thread hand-offs per step, and on a shared machine every one waits for the slowest thread. Only the
// gradients of U and eta are shared; each block keeps its own and they are added at the end, in block
// order (the result does not depend on the timing, only on the thread count).

// Returns whether the step sizes are per time step (T * K of them) rather than shared (K).
bool check_euler(const at::Tensor& p, at::ArrayRef<double> etas, int64_t k, bool coupled) {
  TORCH_CHECK(k >= 1, "tarnn: k must be >= 1, got ", k);
  const int64_t n = static_cast<int64_t>(etas.size());
  TORCH_CHECK(n == k || n == p.size(0) * k, "tarnn: etas must hold K = ", k, " or T * K = ", p.size(0) * k,
              " step sizes, got ", n);
  TORCH_CHECK(!coupled || (p.size(2) / 3) % 2 == 0, "tarnn: the coupled A needs an even H, got ",
              p.size(2) / 3);
  return n != k;
}

// Calls body(std::bool_constant<inside>{}).
template <typename Body>
void with_gate(bool inside, Body body) {
  if (inside) return body(std::true_type{});
  return body(std::false_type{});
}

// Calls body(std::bool_constant<first>{}, std::bool_constant<last>{}): the first and last Euler steps
// differ (delta_0 = 0; the last writes s_m), and each inner loop is compiled without a branch on them.
template <typename Body>
void with_ends(bool first, bool last, Body body) {
  if (first && last) return body(std::true_type{}, std::true_type{});
  if (first) return body(std::true_type{}, std::false_type{});
  if (last) return body(std::false_type{}, std::true_type{});
  return body(std::false_type{}, std::false_type{});
}

// The inner loops below are written to vectorise: no branch but on template arguments, restrict
// pointers. The coupled A's extra term (+ d_{j+H/2} for j < H/2, Extra) is a loop over the first half
// of a row, the rest a loop without it; in place, the first half reads only entries of the second.

// Forward, Euler step over n entries of a row: phi = phi(q + qu) (qu = delta U^T, absent at the first
// step), G = phi + c - d (+ extra), then d += eta (beta) G, or, at the last step, out = s_m.
template <int Act, bool Inside, bool First, bool Last, bool Extra, typename T>
inline void forward_span(const T* __restrict q, const T* __restrict qu, const T* __restrict c, T* __restrict d,
                         const T* __restrict extra, const T* __restrict beta, T* __restrict phi_out,
                         const T* __restrict s, T* __restrict out, int64_t n, T eta) {
  for (int64_t j = 0; j < n; ++j) {
    const T phi = activate<Act>(First ? q[j] : q[j] + qu[j]);
    phi_out[j] = phi;
    const T old = First ? T(0) : d[j];
    T big_g = phi + c[j] - old;
    if constexpr (Extra) big_g += extra[j];
    const T step = Inside ? eta * beta[j] * big_g : eta * big_g;
    if constexpr (Last) {
      out[j] = Inside ? s[j] + old + step : s[j] + beta[j] * (old + step);
    } else {
      d[j] = old + step;
    }
  }
}

// Euler step i of one time step over `rows` rows. qu (rows x H) = delta_i U^T (not read at i = 0);
// beta is computed at i = 0 and read after; delta becomes delta_{i+1}, or, at the last step, out
// becomes s_m. phi goes to phi_out (rows x H: saved, or a scratch block). pt has rows of 3H.
template <int Act, bool Inside, bool First, bool Last, typename T>
void euler_forward_rows(const T* pt, const T* qu, T* delta, const T* s, T* beta, T* phi_out, T* out, int64_t rows,
                        int64_t hidden, T eta, bool coupled) {
  const int64_t half = coupled ? hidden / 2 : 0;
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t row = b * hidden;
    const T* c = pt + b * 3 * hidden;
    const T* q = c + hidden;
    T* beta_b = beta + row;
    if constexpr (First) {
      const T* r = q + hidden;
      for (int64_t j = 0; j < hidden; ++j) beta_b[j] = sigmoid(r[j]);
    }
    T* d = delta + row;
    const T* qu_b = qu + row;
    const T* s_b = s + row;
    T* out_b = out + row;
    T* phi_b = phi_out + row;
    if (half > 0 && !First) {
      forward_span<Act, Inside, First, Last, true, T>(q, qu_b, c, d, d + half, beta_b, phi_b, s_b, out_b, half, eta);
    }
    const int64_t j0 = First ? 0 : half;
    forward_span<Act, Inside, First, Last, false, T>(q + j0, qu_b + j0, c + j0, d + j0, nullptr, beta_b + j0,
                                                     phi_b + j0, s_b + j0, out_b + j0, hidden - j0, eta);
  }
}

// The forward over all T steps: p gets each step's [c | q | r] in place; outputs, betas and (when not
// empty) phis are written.
void tarnn_euler_forward(at::Tensor p, const at::Tensor& s0, const at::Tensor& w_t, const at::Tensor& u_t,
                         at::ArrayRef<double> etas, int64_t k, int64_t act, bool coupled, bool inside,
                         at::Tensor outputs, at::Tensor betas, at::Tensor phis) {
  check_sequence(p, s0, act);
  const bool per_step = check_euler(p, etas, k, coupled);
  const int64_t steps = p.size(0), batch = p.size(1), hidden = p.size(2) / 3;
  TORCH_CHECK(s0.device().is_cpu(), "tarnn: s0 must be on the CPU, got ", s0.device());
  check_operand(w_t, {hidden, 3 * hidden}, p, "w_t");
  check_operand(u_t, {hidden, hidden}, p, "u_t");
  check_operand(outputs, {steps, batch, hidden}, p, "outputs");
  check_operand(betas, {steps, batch, hidden}, p, "betas");
  const bool store = phis.numel() > 0;
  if (store) check_operand(phis, {steps, k, batch, hidden}, p, "phis");
  AT_DISPATCH_FLOATING_TYPES(p.scalar_type(), "tarnn_euler_forward", [&] {
    // the weights of the step's products, packed once for all T steps (products.h)
    const StepProduct<scalar_t> to_p(3 * hidden, {w_t.data_ptr<scalar_t>(), 3 * hidden, 1}, hidden);
    const StepProduct<scalar_t> to_qu(hidden, {u_t.data_ptr<scalar_t>(), hidden, 1}, hidden);
    with_activation(act, [&](auto kind) {
      with_gate(inside, [&](auto gate) {
        over_batch_blocks(batch, rows_per_thread(batch), [&](int64_t begin, int64_t end, int64_t) {
          const int64_t rows = end - begin, own = rows * hidden;
          // this block's work buffers: qu = delta U^T, delta, and phi when it is not saved
          std::vector<scalar_t> work((store ? 2 : 3) * own);
          scalar_t *qu = work.data(), *delta = qu + own, *phi_scratch = delta + own;
          const scalar_t* s = s0.data_ptr<scalar_t>() + begin * hidden;
          scalar_t *p_data = p.data_ptr<scalar_t>(), *out_data = outputs.data_ptr<scalar_t>();
          scalar_t *beta_data = betas.data_ptr<scalar_t>(), *phi_data = store ? phis.data_ptr<scalar_t>() : nullptr;
          for (int64_t t = 0; t < steps; ++t) {
            const int64_t row = t * batch + begin;
            scalar_t *pt = p_data + row * 3 * hidden, *out = out_data + row * hidden, *beta = beta_data + row * hidden;
            to_p.run(rows, s, hidden, nullptr, 0, pt, 3 * hidden, Start::add);  // + s_{t-1} w_t
            const double* eta_t = etas.data() + (per_step ? t * k : 0);
            for (int64_t i = 0; i < k; ++i) {
              if (i > 0) to_qu.run(rows, delta, hidden, nullptr, 0, qu, hidden, Start::zero);
              scalar_t* phi_out = store ? phi_data + ((t * k + i) * batch + begin) * hidden : phi_scratch;
              with_ends(i == 0, i == k - 1, [&](auto first, auto last) {
                euler_forward_rows<decltype(kind)::value, decltype(gate)::value, decltype(first)::value,
                                   decltype(last)::value, scalar_t>(pt, qu, delta, s, beta, phi_out, out, rows, hidden,
                                                                    static_cast<scalar_t>(eta_t[i]), coupled);
              });
            }
            s = out;
          }
        });
      });
    });
  });
}

// Backward, recomputation of Euler step i over n entries of a row: G = phi + c - d (+ extra) into
// big_g, next = d + eta (beta) G (d = 0 at the first step).
template <bool Inside, bool First, bool Extra, typename T>
inline void recompute_span(const T* __restrict phi, const T* __restrict c, const T* __restrict d,
                           const T* __restrict extra, const T* __restrict beta, T* __restrict big_g,
                           T* __restrict next, int64_t n, T eta) {
  for (int64_t j = 0; j < n; ++j) {
    const T old = First ? T(0) : d[j];
    T v = phi[j] + c[j] - old;
    if constexpr (Extra) v += extra[j];
    big_g[j] = v;
    next[j] = Inside ? old + eta * beta[j] * v : old + eta * v;
  }
}

// Backward, first pass of a step over `rows` rows: from the saved phi (K blocks `block` apart), c and
// beta, each Euler step's G_i into gs[i] and delta_{i+1} into deltas[i] (blocks of rows x H); carry
// becomes g = grad_out + carry; the gradient of delta_K goes into gd, d beta's start into d_beta.
template <bool Inside, typename T>
void euler_recompute_rows(const T* pt, const T* phis, int64_t block, const T* beta, const T* grad_out,
                          const int64_t* grad_strides, T* carry, T* gs, T* deltas, T* gd, T* d_beta, int64_t rows,
                          int64_t hidden, at::ArrayRef<double> etas, bool coupled) {
  const int64_t half = coupled ? hidden / 2 : 0, k = etas.size(), own = rows * hidden;
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t row = b * hidden;
    const T* c = pt + b * 3 * hidden;
    const T* beta_b = beta + row;
    for (int64_t i = 0; i < k; ++i) {
      const T* phi = phis + i * block + row;
      T* big_g = gs + i * own + row;
      T* next = deltas + i * own + row;
      const T eta = static_cast<T>(etas[i]);
      if (i == 0) {
        recompute_span<Inside, true, false, T>(phi, c, nullptr, nullptr, beta_b, big_g, next, hidden, eta);
        continue;
      }
      const T* d = deltas + (i - 1) * own + row;
      if (half > 0) recompute_span<Inside, false, true, T>(phi, c, d, d + half, beta_b, big_g, next, half, eta);
      recompute_span<Inside, false, false, T>(phi + half, c + half, d + half, nullptr, beta_b + half, big_g + half,
                                              next + half, hidden - half, eta);
    }
    T* g = carry + row;
    add_gradient_row(g, grad_out + b * grad_strides[0], grad_strides[1], hidden);
    const T* delta_k = deltas + (k - 1) * own + row;
    T* gd_b = gd + row;
    T* d_beta_b = d_beta + row;
    for (int64_t j = 0; j < hidden; ++j) {
      gd_b[j] = Inside ? g[j] : beta_b[j] * g[j];
      d_beta_b[j] = Inside ? T(0) : g[j] * delta_k[j];
    }
  }
}

// Backward through Euler step i over `rows` rows: gd is the gradient of delta_{i+1}. Adds [dG | dG phi'
// | .] to the rows of p (assigns at the last Euler step, i = K - 1: First), and to d beta; at i > 0
// writes d arg into darg and gd_next = gd + A^T dG (the caller adds d arg U); at i = 0 (Last) writes
// d r. Returns d eta_i over these rows.
template <int Act, bool Inside, bool First, bool Last, typename T>
double euler_backward_rows(T* pt, const T* phi, const T* big_g, const T* beta, const T* gd, T* d_beta, T* darg_out,
                           T* gd_next, int64_t rows, int64_t hidden, T eta, bool coupled) {
  const int64_t half = coupled ? hidden / 2 : 0;
  double total = 0.0;
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t row = b * hidden;
    T* __restrict dc = pt + b * 3 * hidden;
    T* __restrict dq = dc + hidden;
    T* __restrict dr = dq + hidden;
    const T* __restrict beta_b = beta + row;
    const T* __restrict gd_b = gd + row;
    const T* __restrict phi_b = phi + row;
    const T* __restrict g_b = big_g + row;
    T* __restrict d_beta_b = d_beta + row;
    T* __restrict darg_b = darg_out + row;
    T* __restrict next_b = gd_next + row;
    T sum = T(0);
    for (int64_t j = 0; j < hidden; ++j) {
      const T d_g = (Inside ? eta * beta_b[j] : eta) * gd_b[j];
      const T d_arg = d_g * activation_slope<Act>(phi_b[j]);
      const T through = gd_b[j] * g_b[j];
      sum += Inside ? through * beta_b[j] : through;
      dc[j] = First ? d_g : dc[j] + d_g;
      dq[j] = First ? d_arg : dq[j] + d_arg;
      if constexpr (Inside) d_beta_b[j] += eta * through;
      if constexpr (Last) {
        dr[j] = d_beta_b[j] * beta_b[j] * (T(1) - beta_b[j]);
      } else {
        darg_b[j] = d_arg;
        next_b[j] = gd_b[j] - d_g;
      }
    }
    if constexpr (!Last) {  // A^T dG: + dG_{j-H/2} for j >= H/2 when coupled
      for (int64_t j = half; j < hidden && half > 0; ++j) {
        next_b[j] += (Inside ? eta * beta_b[j - half] : eta) * gd_b[j - half];
      }
    }
    total += static_cast<double>(sum);
  }
  return total;
}

// The backward over all T steps, last to first: p (the forward's [c | q | r]) becomes the gradient of
// p, carry the gradient of s0, grad_u the gradient of U (added to: zero it first). Returns the
// gradients of the step sizes, in the layout of etas.
std::vector<double> tarnn_euler_backward(at::Tensor p, const at::Tensor& phis, const at::Tensor& betas,
                                         const at::Tensor& grad_outputs, const at::Tensor& state_weights,
                                         const at::Tensor& u, at::ArrayRef<double> etas, int64_t k, int64_t act,
                                         bool coupled, bool inside, at::Tensor carry, at::Tensor grad_u) {
  check_sequence(p, carry, act);
  const bool per_step = check_euler(p, etas, k, coupled);
  const int64_t steps = p.size(0), batch = p.size(1), hidden = p.size(2) / 3;
  const int64_t n_etas = static_cast<int64_t>(etas.size());
  TORCH_CHECK(carry.device().is_cpu(), "tarnn: carry must be on the CPU, got ", carry.device());
  check_operand(phis, {steps, k, batch, hidden}, p, "phis");
  check_operand(betas, {steps, batch, hidden}, p, "betas");
  TORCH_CHECK(grad_outputs.device().is_cpu() && grad_outputs.sizes() == betas.sizes() &&
                  grad_outputs.scalar_type() == p.scalar_type(),
              "tarnn: grad_outputs must be a CPU (T, B, H) tensor of p's dtype, got ", grad_outputs.sizes());
  check_operand(state_weights, {3 * hidden, hidden}, p, "state_weights");
  check_operand(u, {hidden, hidden}, p, "u");
  check_operand(grad_u, {hidden, hidden}, p, "grad_u");
  const int64_t grad_step = grad_outputs.stride(0);
  const int64_t grad_strides[2] = {grad_outputs.stride(1), grad_outputs.stride(2)};
  const int64_t chunk = rows_per_thread(batch), blocks = std::max<int64_t>(1, (batch + chunk - 1) / chunk);
  // each block of rows adds its part of the gradients of U and eta here; summed in block order after
  at::Tensor u_parts = at::zeros({blocks, hidden, hidden}, p.options());
  std::vector<double> eta_parts(blocks * n_etas, 0.0), grad_eta(n_etas, 0.0);
  AT_DISPATCH_FLOATING_TYPES(p.scalar_type(), "tarnn_euler_backward", [&] {
    const StepProduct<scalar_t> to_state(hidden, {state_weights.data_ptr<scalar_t>(), hidden, 1}, 3 * hidden);
    const StepProduct<scalar_t> through_u(hidden, {u.data_ptr<scalar_t>(), hidden, 1}, hidden);
    with_activation(act, [&](auto kind) {
      with_gate(inside, [&](auto gate) {
        constexpr bool kInside = decltype(gate)::value;
        const int64_t block = batch * hidden;
        over_batch_blocks(batch, chunk, [&](int64_t begin, int64_t end, int64_t part) {
          const int64_t rows = end - begin, own = rows * hidden;
          // this block's work buffers: G_i and delta_{i+1} (K blocks each), d arg_i (i = 1..K-1; one unused
          // block at K = 1), d beta, and the gradients of delta_{i+1} and delta_i
          const int64_t arg_blocks = std::max<int64_t>(k - 1, 1);
          std::vector<scalar_t> work((2 * k + arg_blocks + 3) * own);
          scalar_t *gs = work.data(), *deltas = gs + k * own, *dargs = deltas + k * own;
          scalar_t *d_beta = dargs + arg_blocks * own, *gd_a = d_beta + own, *gd_b = gd_a + own;
          scalar_t* own_carry = carry.data_ptr<scalar_t>() + begin * hidden;
          scalar_t* own_u = u_parts.data_ptr<scalar_t>() + part * hidden * hidden;
          std::fill(own_carry, own_carry + own, scalar_t(0));
          double* own_etas = eta_parts.data() + part * n_etas;
          const scalar_t* grad_base = grad_outputs.data_ptr<scalar_t>() + begin * grad_strides[0];
          scalar_t* p_data = p.data_ptr<scalar_t>();
          const scalar_t *phi_data = phis.data_ptr<scalar_t>(), *beta_data = betas.data_ptr<scalar_t>();
          for (int64_t t = steps - 1; t >= 0; --t) {
            scalar_t* pt = p_data + (t * batch + begin) * 3 * hidden;
            const scalar_t* phi_t = phi_data + t * k * block + begin * hidden;
            const scalar_t* beta = beta_data + t * block + begin * hidden;
            const int64_t offset = per_step ? t * k : 0;
            const at::ArrayRef<double> eta_t = etas.slice(offset, k);
            double* own_eta = own_etas + offset;
            // own_carry becomes g, the gradient of s_t
            euler_recompute_rows<kInside, scalar_t>(pt, phi_t, block, beta, grad_base + t * grad_step, grad_strides,
                                                    own_carry, gs, deltas, gd_a, d_beta, rows, hidden, eta_t, coupled);
            scalar_t *gd = gd_a, *gd_next = gd_b;
            for (int64_t i = k - 1; i >= 0; --i) {
              scalar_t* darg = dargs + std::max<int64_t>(i - 1, 0) * own;  // not written at i = 0
              with_ends(i == k - 1, i == 0, [&](auto first, auto last) {
                own_eta[i] += euler_backward_rows<decltype(kind)::value, kInside, decltype(first)::value,
                                                  decltype(last)::value, scalar_t>(
                    pt, phi_t + i * block, gs + i * own, beta, gd, d_beta, darg, gd_next, rows, hidden,
                    static_cast<scalar_t>(eta_t[i]), coupled);
              });
              if (i > 0) {
                // the gradient of delta_i: + d arg_i U
                through_u.run(rows, darg, hidden, nullptr, 0, gd_next, hidden, Start::add);
                std::swap(gd, gd_next);
              }
            }
            if (k > 1) {  // d U += sum_i d arg_i^T delta_i, i = 1..K-1, in one product
              add_at_b(hidden, hidden, (k - 1) * rows, dargs, hidden, deltas, hidden, own_u, hidden);
            }
            // d s_{t-1} = g + dp_t [B2 + A; W2 + U; U_s]
            to_state.run(rows, pt, 3 * hidden, nullptr, 0, own_carry, hidden, Start::add);
          }
        });
      });
    });
  });
  for (int64_t part = 0; part < blocks; ++part) {
    for (int64_t i = 0; i < n_etas; ++i) grad_eta[i] += eta_parts[part * n_etas + i];
  }
  if (k > 1) grad_u.add_(blocks == 1 ? u_parts.select(0, 0) : u_parts.sum(0));
  return grad_eta;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ltdrnn, m) {  // a fragment: later libraries may add to the namespace
  m.def("tarnn_k1_forward(Tensor x, Tensor weight, Tensor bias, Tensor(a!) saved, Tensor s0, Tensor w_t, float eta, "
        "int act, Tensor(b!) outputs, Tensor(c!) betas) -> ()");
  m.def("tarnn_k1_backward(Tensor saved, Tensor betas, Tensor grad_outputs, Tensor outputs, Tensor s0, Tensor x, "
        "Tensor weight, Tensor state_weights, float eta, int act, Tensor(a!) carry, Tensor(b!) grad_x, "
        "Tensor(c!) grad_state_weights, Tensor(d!) grad_weight, Tensor(e!) grad_bias) -> float");
  m.def("tarnn_euler_forward(Tensor(a!) p, Tensor s0, Tensor w_t, Tensor u_t, float[] etas, int k, int act, "
        "bool coupled, bool inside, Tensor(b!) outputs, Tensor(c!) betas, Tensor(d!) phis) -> ()");
  m.def("tarnn_euler_backward(Tensor(a!) p, Tensor phis, Tensor betas, Tensor grad_outputs, Tensor state_weights, "
        "Tensor u, float[] etas, int k, int act, bool coupled, bool inside, Tensor(b!) carry, Tensor(c!) grad_u) "
        "-> float[]");
}

TORCH_LIBRARY_IMPL(ltdrnn, CPU, m) {
  m.impl("tarnn_k1_forward", &tarnn_k1_forward);
  m.impl("tarnn_k1_backward", &tarnn_k1_backward);
  m.impl("tarnn_euler_forward", &tarnn_euler_forward);
  m.impl("tarnn_euler_backward", &tarnn_euler_backward);
}

// ---- the streaming step -------------------------------------------------------------------------------
// weights: [W_in (3H, d), b_in (3H), W_state (3H, H) = [B2 + A; W2 + U; U_s], U (H, H), eta (K)];
// options: [activation, coupled A, gate inside]. Per row: [c, q, r] = b_in + W_in x + W_state s;
// beta = sigmoid(r); delta_0 = 0; G_k = phi(q + U delta_k) + c + A delta_k (A = -I, plus the coupling);
// delta_{k+1} = delta_k + eta_k beta G_k (inside) or + eta_k G_k (outside);
// s' = s + delta_K (inside) or s + beta delta_K (outside). Returns (s', beta).
namespace {

constexpr const char* kStream = "tarnn_stream";

template <int Act, typename T>
void stream_rows(at::TensorList w, bool coupled, bool inside, const T* x, const T* s, T* out, T* beta, int64_t batch,
                 int64_t d, int64_t hidden, int64_t steps) {
  const T *w_in = w[0].data_ptr<T>(), *b_in = w[1].data_ptr<T>(), *w_state = w[2].data_ptr<T>();
  const T *u = w[3].data_ptr<T>(), *eta = w[4].data_ptr<T>();
  const int64_t H = hidden;
  std::vector<T> work(6 * H);
  T *qa = work.data(), *delta = qa + 3 * H, *arg = qa + 4 * H, *g = qa + 5 * H;
  for (int64_t b = 0; b < batch; ++b) {
    const T *xb = x + b * d, *sb = s + b * H;
    T *ob = out + b * H, *be = beta + b * H;
    std::copy(b_in, b_in + 3 * H, qa);
    add_matvec(qa, w_in, xb, 3 * H, d);
    add_matvec(qa, w_state, sb, 3 * H, H);
    const T *c = qa, *q = qa + H, *r = qa + 2 * H;
    for (int64_t j = 0; j < H; ++j) {
      be[j] = sigmoid(r[j]);
      delta[j] = 0;
    }
    for (int64_t k = 0; k < steps; ++k) {
      std::copy(q, q + H, arg);
      if (k) add_matvec(arg, u, delta, H, H);
      for (int64_t j = 0; j < H; ++j) g[j] = activate<Act>(arg[j]) + c[j] - delta[j];
      if (coupled)
        for (int64_t j = 0; j < H / 2; ++j) g[j] += delta[j + H / 2];
      const T e = eta[k];
      if (inside) {
        for (int64_t j = 0; j < H; ++j) delta[j] += e * be[j] * g[j];
      } else {
        for (int64_t j = 0; j < H; ++j) delta[j] += e * g[j];
      }
    }
    if (inside) {
      for (int64_t j = 0; j < H; ++j) ob[j] = sb[j] + delta[j];
    } else {
      for (int64_t j = 0; j < H; ++j) ob[j] = sb[j] + be[j] * delta[j];
    }
  }
}

std::tuple<at::Tensor, at::Tensor> tarnn_stream(at::TensorList weights, at::IntArrayRef options, const at::Tensor& x,
                                                const at::Tensor& state) {
  const int64_t act = option(options, 3, 0, kStream), coupled = options[1], inside = options[2];
  TORCH_CHECK(act >= 0 && act <= 2, kStream, ": activation code must be 0 (relu), 1 (tanh) or 2 (sigmoid), got ", act);
  check_weight_count(weights, 5, kStream);
  TORCH_CHECK(state.dim() == 2, kStream, ": state must be (B, H), got ", state.sizes());
  const int64_t hidden = state.size(1), d = x.dim() == 2 ? x.size(1) : 0;
  check_stream_input(x, state, {hidden}, kStream);
  TORCH_CHECK(weights[4].dim() == 1 && weights[4].size(0) > 0, kStream, ": eta must be (K) with K > 0, got ",
              weights[4].sizes());
  const char* names[] = {"W_in", "b_in", "W_state", "U", "eta"};
  const std::vector<int64_t> shapes[] = {{3 * hidden, d}, {3 * hidden}, {3 * hidden, hidden}, {hidden, hidden},
                                         {weights[4].size(0)}};
  for (size_t i = 0; i < weights.size(); ++i) check_tensor(weights[i], x, shapes[i], kStream, names[i]);
  at::Tensor out = at::empty_like(state), beta = at::empty_like(state);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), kStream, [&] {
    with_activation(act, [&](auto kind) {
      stream_rows<decltype(kind)::value, scalar_t>(weights, coupled != 0, inside != 0, x.data_ptr<scalar_t>(),
                                                   state.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
                                                   beta.data_ptr<scalar_t>(), x.size(0), d, hidden, shapes[4][0]);
    });
  });
  return {out, beta};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ltdrnn, m) {
  m.def("tarnn_stream(Tensor[] weights, int[] options, Tensor x, Tensor state) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(ltdrnn, CPU, m) {
  m.impl("tarnn_stream", &tarnn_stream);
}
