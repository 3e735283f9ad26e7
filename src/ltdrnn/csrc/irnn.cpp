// The whole training recurrence of iRNN at K = 1 (ltdrnn.cells.irnn, _FusedIRNN), forward and backward,
// each time loop in one call: the per-step products are BLAS calls on raw pointers (common.h, gemm), the
// activation, the Euler update and its gradient one pass per step. No tensor, view or ATen operator is
// made or called inside a time loop: through ATen the products and views were 4,859 operator calls per
// 784-step sequence, 40 % of the time at batch 1. Operators: torch.ops.ltdrnn.irnn_k1_forward /
// irnn_k1_backward.
//
// Layouts (time-major, contiguous unless said otherwise):
//   c (T, B, H), forward only: on entry the input map c_t = W' x_t + b'; the forward adds the products of the
//       step in place (M y_0 dense, y_0 second^T first^T low rank: there the y_0 of the identity is added on
//       the fly and never stored).
//   h0 (B, H); first, second: M itself (H, H) and an empty second, or the low-rank M = I + first second
//       with first = V' (H, R) and second = H (R, H) (any strides: each call makes a contiguous copy of a
//       strided one before its loop, at most H * H numbers).
//   phis (T or 1, B, H): phi of every step (1 reused row when no backward follows); outputs (T, B, H).
//   zs (T or 1, B, R), low rank only: h_{t-1} second^T, the forward's inner product, kept for the gradient of
//       V' (sum_t dpre_t^T z_t); an empty tensor for a dense M.
//   grad_outputs (T, B, H), any strides (the gradient of a sum or mean arrives expanded, stride 0).
//   x (T, B, d) and weight (H, d), backward only: the input and the input map's weight W' (any strides), for
//       the gradients of W' (eta sum_t dpre_t^T x_t) and of x (eta dpre_t W').
// The backward keeps no (T, B, H) gradient: each thread adds its rows' share of every parameter gradient
// step by step, while the step's dpre is in cache (not by products over all steps after the loop, which
// re-read dpre and the outputs: measured in docs/notes/irnn-speed.md).
// Per step, with the reading's (s, r) (ltdrnn.cells.irnn.READINGS):
//   y_0 = s h_{t-1};  pre = M y_0 + c_t;  y_1 = y_0 + eta (phi(pre) - alpha y_0);  h_t = y_1 - r h_{t-1}
//
// Low rank (R = 16 at H = 128): the two factors cost 2 R / H = 1/4 of the dense product's FLOPs, forward
// and backward, and the gradients of V' and H come from each step's products with R columns instead of the
// (H, H) gradient of M. (The PyTorch loop applies the dense M: there each extra product
// is a dispatch that costs more than the FLOPs it saves.)
//
// Threads: as TARNN's loops (csrc/tarnn.cpp, "Threads"): the batch is split once into one block of rows
// per thread, and each thread runs all T steps of its rows with single-threaded BLAS (over_batch_blocks),
// so nothing is handed between threads per step. Only the parameter gradients are shared: each block
// keeps its own sums and they are added in block order (the same result for a given thread count).
#include "common.h"

#include <tuple>

namespace {

using namespace ltdrnn;

// `lead` (named `name`, c in the forward and phis in the backward) fixes T, B, H and the dtype.
void check_sequence(const at::Tensor& lead, const char* name, const at::Tensor& h0, int64_t act, const char* op) {
  TORCH_CHECK(lead.device().is_cpu() && lead.dim() == 3 && lead.is_contiguous() && lead.size(0) > 0, op, ": ", name,
              " must be a contiguous CPU (T, B, H) tensor with T > 0, got ", lead.sizes());
  TORCH_CHECK(lead.scalar_type() == at::kFloat || lead.scalar_type() == at::kDouble, op,
              ": expected float32 or float64, got ", lead.scalar_type());
  TORCH_CHECK(h0.sizes() == at::IntArrayRef({lead.size(1), lead.size(2)}) && h0.is_contiguous() &&
                  h0.scalar_type() == lead.scalar_type() && h0.device().is_cpu(),
              op, ": h0 must be a contiguous (B, H) = (", lead.size(1), ", ", lead.size(2), ") CPU tensor of ", name,
              "'s dtype, got ", h0.sizes(), " ", h0.scalar_type());
  TORCH_CHECK(act >= 0 && act <= 2, op, ": activation code must be 0 (relu), 1 (tanh) or 2 (sigmoid), got ", act);
}

// A contiguous CPU (T, B, cols) tensor of lead's dtype; (1, B, cols) also when one_row_allowed.
void check_rows(const at::Tensor& t, const at::Tensor& lead, const char* lead_name, int64_t cols,
                bool one_row_allowed, const char* op, const char* name) {
  const bool rows = t.dim() == 3 && (t.size(0) == lead.size(0) || (one_row_allowed && t.size(0) == 1));
  TORCH_CHECK(rows && t.size(1) == lead.size(1) && t.size(2) == cols && t.is_contiguous() &&
                  t.scalar_type() == lead.scalar_type() && t.device().is_cpu(),
              op, ": ", name, " must be a contiguous CPU ", one_row_allowed ? "(T or 1, B, " : "(T, B, ", cols,
              ") tensor of ", lead_name, "'s dtype, got ", t.sizes(), " ", t.scalar_type());
}

// first and second (the layouts above); returns R, or 0 for a dense M.
int64_t check_operator(const at::Tensor& first, const at::Tensor& second, const at::Tensor& lead,
                       const char* lead_name, const char* op) {
  const int64_t hidden = lead.size(2);
  auto check_kind = [&](const at::Tensor& t, const char* name) {
    TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == lead.scalar_type(), op, ": ", name, " must be a CPU tensor of ",
                lead_name, "'s dtype, got ", t.scalar_type(), " on ", t.device());
  };
  check_kind(first, "first");
  check_kind(second, "second");
  if (second.numel() == 0) {
    TORCH_CHECK(first.sizes() == at::IntArrayRef({hidden, hidden}), op, ": first must be M, (H, H) = (", hidden,
                ", ", hidden, "), when second is empty, got ", first.sizes());
    return 0;
  }
  TORCH_CHECK(first.dim() == 2 && first.size(0) == hidden && first.size(1) > 0, op,
              ": first must be V', (H, R) with H = ", hidden, ", got ", first.sizes());
  const int64_t rank = first.size(1);
  TORCH_CHECK(second.sizes() == at::IntArrayRef({rank, hidden}), op, ": second must be (R, H) = (", rank, ", ",
              hidden, "), got ", second.sizes());
  return rank;
}

// Where row `begin` of step t starts in a contiguous (T or 1, B, n) tensor: a tensor of one step (kept
// when no backward follows) serves every t. The loops index their buffers by pointer, never by a view.
template <typename T>
class StepPointer {
 public:
  StepPointer() = default;
  StepPointer(const at::Tensor& all, int64_t begin)
      : first_(all.data_ptr<T>() + begin * all.size(2)), stride_(all.size(0) == 1 ? 0 : all.size(1) * all.size(2)) {}
  T* at(int64_t t) const { return first_ + t * stride_; }

 private:
  T* first_ = nullptr;
  int64_t stride_ = 0;
};

// pre += s M h for `rows` rows (as rows: pre += s h M^T). Low rank through z = h H^T, which the backward
// keeps: pre += s z V'^T; the identity's s h is added by forward_span. first and second contiguous.
template <typename T>
void add_operator(T* pre, const T* h, T* z, const T* first, const T* second, int64_t rows, int64_t hidden,
                  int64_t rank, T s) {
  if (rank == 0) {
    gemm(false, true, rows, hidden, hidden, s, h, hidden, first, hidden, T(1), pre, hidden);
    return;
  }
  gemm(false, true, rows, rank, hidden, T(1), h, hidden, second, hidden, T(0), z, rank);
  gemm(false, true, rows, hidden, rank, s, z, rank, first, rank, T(1), pre, hidden);
}

// Forward, one step over n = rows * H entries: phi = phi(pre (+ y_0 for low rank)), h_t from h_{t-1}.
template <int Act, bool LowRank, typename T>
void forward_span(const T* __restrict pre, const T* __restrict h, T* __restrict phi_out, T* __restrict out,
                  int64_t n, T eta, T alpha, T s, T r) {
  for (int64_t i = 0; i < n; ++i) {
    const T y = s * h[i];
    const T phi = activate<Act>(LowRank ? pre[i] + y : pre[i]);
    phi_out[i] = phi;
    out[i] = y + eta * (phi - alpha * y) - r * h[i];
  }
}

// pre = W' x_t + b' for `rows` rows (W' (H, d) and b' contiguous): the input map of one step, formed in a
// block's scratch rows instead of a (T, B, H) buffer before the loop (whose bias copy and product wrote
// and re-read 51 MB at pixel-MNIST shape; measured in docs/notes/irnn-speed.md).
template <typename T>
void input_map(T* pre, const T* x, const T* weight, const T* bias, int64_t rows, int64_t hidden, int64_t dim) {
  for (int64_t b = 0; b < rows; ++b) std::copy_n(bias, hidden, pre + b * hidden);
  gemm(false, true, rows, hidden, dim, T(1), x, dim, weight, dim, T(1), pre, hidden);
}

// x (T, B, d) contiguous and the input map's weight (H, d) (any strides), T, B, H and the dtype those of
// `lead` (named `lead_name`); returns d.
int64_t check_input(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& lead, const char* lead_name,
                    const char* op) {
  TORCH_CHECK(x.dim() == 3 && x.size(0) == lead.size(0) && x.size(1) == lead.size(1) && x.size(2) > 0, op,
              ": x must be a (T, B, d) = (", lead.size(0), ", ", lead.size(1), ", d) tensor, got ", x.sizes());
  check_rows(x, lead, lead_name, x.size(2), false, op, "x");
  check_tensor(weight, lead, {lead.size(2), x.size(2)}, op, "weight", false);
  return x.size(2);
}

void irnn_k1_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& h0,
                     const at::Tensor& first, const at::Tensor& second, double eta, double alpha, double s, double r,
                     int64_t act, at::Tensor phis, at::Tensor zs, at::Tensor outputs) {
  constexpr const char* op = "irnn_k1_forward";
  check_sequence(outputs, "outputs", h0, act, op);
  const int64_t rank = check_operator(first, second, outputs, "outputs", op);
  check_rows(phis, outputs, "outputs", outputs.size(2), true, op, "phis");
  if (rank > 0) check_rows(zs, outputs, "outputs", rank, true, op, "zs");
  const int64_t dim = check_input(x, weight, outputs, "outputs", op);
  check_tensor(bias, outputs, {outputs.size(2)}, op, "bias", false);
  const int64_t steps = outputs.size(0), batch = outputs.size(1), hidden = outputs.size(2);
  // a copy only if strided
  const at::Tensor first_c = first.contiguous(), second_c = second.contiguous();
  const at::Tensor weight_c = weight.contiguous(), bias_c = bias.contiguous();
  AT_DISPATCH_FLOATING_TYPES(outputs.scalar_type(), op, [&] {
    const auto e = static_cast<scalar_t>(eta), a = static_cast<scalar_t>(alpha);
    const auto sv = static_cast<scalar_t>(s), rv = static_cast<scalar_t>(r);
    const scalar_t *m_first = first_c.data_ptr<scalar_t>(), *m_second = second_c.data_ptr<scalar_t>();
    const scalar_t *input_weight = weight_c.data_ptr<scalar_t>(), *input_bias = bias_c.data_ptr<scalar_t>();
    with_activation(act, [&](auto kind) {
      constexpr int Act = decltype(kind)::value;
      over_batch_blocks(batch, rows_per_thread(batch), [&](int64_t begin, int64_t end, int64_t) {
        const int64_t rows = end - begin;
        std::vector<scalar_t> pre(rows * hidden);  // this step's pre-activations
        const StepPointer<scalar_t> x_rows(x, begin), phi_rows(phis, begin), outs(outputs, begin);
        const StepPointer<scalar_t> z_rows = rank > 0 ? StepPointer<scalar_t>(zs, begin) : StepPointer<scalar_t>();
        const scalar_t* first_h = h0.data_ptr<scalar_t>() + begin * hidden;
        for (int64_t t = 0; t < steps && rows > 0; ++t) {
          const scalar_t* h = t == 0 ? first_h : outs.at(t - 1);
          input_map(pre.data(), x_rows.at(t), input_weight, input_bias, rows, hidden, dim);
          add_operator(pre.data(), h, z_rows.at(t), m_first, m_second, rows, hidden, rank, sv);
          if (rank > 0) {
            forward_span<Act, true>(pre.data(), h, phi_rows.at(t), outs.at(t), rows * hidden, e, a, sv, rv);
          } else {
            forward_span<Act, false>(pre.data(), h, phi_rows.at(t), outs.at(t), rows * hidden, e, a, sv, rv);
          }
        }
      });
    });
  });
}

// How a row of grad_outputs is laid out: unit stride (as autograd usually hands it over), stride 0 (the
// gradient of a sum or mean arrives expanded) or any other stride. A template argument, so that the first
// two read a plain array or one number and the row loop vectorises (a run-time stride made it scalar).
enum class GradRow { unit, broadcast, strided };

template <typename Body>
void with_grad_row(int64_t stride, Body body) {
  if (stride == 1) return body(std::integral_constant<GradRow, GradRow::unit>{});
  if (stride == 0) return body(std::integral_constant<GradRow, GradRow::broadcast>{});
  return body(std::integral_constant<GradRow, GradRow::strided>{});
}

template <GradRow Layout, typename T>
inline T grad_entry(const T* row, int64_t j, int64_t stride) {
  if constexpr (Layout == GradRow::unit) return row[j];
  if constexpr (Layout == GradRow::broadcast) return row[0];
  return row[j * stride];
}

// One block's share of the parameter gradients, summed over its rows and all steps while each step's rows
// are in cache (before the factors eta and s): sum_t d_t^T z_t (low rank, for V') or d_t^T h_{t-1} (dense,
// for M); sum_t w_t^T h_{t-1} (low rank, for H); sum_t d_t^T x_t and the column sums of d_t (the input
// map's weight and bias); and the sums <g, phi>, <g, y_0> for eta and alpha.
template <typename T>
struct BlockSums {
  BlockSums(int64_t first_size, int64_t second_size, int64_t hidden, int64_t dim)
      : first(first_size), second(second_size), weight(hidden * dim), bias(hidden) {}
  std::vector<T> first, second, weight, bias;
  double dot_phi = 0.0, dot_y = 0.0;
};

// Backward, one step over `rows` rows: g = grad_out + carry; d (over c_t) = g phi'(pre); carry becomes
// keep g, plus s eta d, the identity's part of d M, for low rank. Adds <g, phi>, <g, y_0> and the column
// sums of d to the block's sums.
template <int Act, bool LowRank, GradRow Layout, typename T>
void backward_rows(T* __restrict d, const T* __restrict phi, const T* __restrict prev, const T* grad_out,
                   const int64_t* grad_strides, T* __restrict carry, int64_t rows, int64_t hidden, T s, T keep,
                   T s_eta, BlockSums<T>& sums) {
  T* __restrict bias = sums.bias.data();
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t row = b * hidden;
    const T* grad_b = grad_out + b * grad_strides[0];
    T sum_phi = 0, sum_y = 0;
    for (int64_t j = 0; j < hidden; ++j) {
      const T gj = grad_entry<Layout>(grad_b, j, grad_strides[1]) + carry[row + j];
      const T phi_j = phi[row + j];
      sum_phi += gj * phi_j;
      sum_y += gj * s * prev[row + j];
      const T dj = gj * activation_slope<Act>(phi_j);
      d[row + j] = dj;
      bias[j] += dj;
      carry[row + j] = LowRank ? keep * gj + s_eta * dj : keep * gj;
    }
    sums.dot_phi += static_cast<double>(sum_phi);
    sums.dot_y += static_cast<double>(sum_y);
  }
}

// carry += s eta d M for `rows` rows. Low rank through w = d V': carry += s eta w H; the identity's part is in
// backward_rows. first and second contiguous.
template <typename T>
void add_operator_gradient(T* carry, const T* d, T* w, const T* first, const T* second, int64_t rows,
                           int64_t hidden, int64_t rank, T s_eta) {
  if (rank == 0) {
    gemm(false, false, rows, hidden, hidden, s_eta, d, hidden, first, hidden, T(1), carry, hidden);
    return;
  }
  gemm(false, false, rows, rank, hidden, T(1), d, hidden, first, rank, T(0), w, rank);
  gemm(false, false, rows, hidden, rank, s_eta, w, rank, second, hidden, T(1), carry, hidden);
}

// The step's share of the gradients of M's factors: low rank first += d^T z, second += w^T h_{t-1}; dense
// first += d^T h_{t-1} (y_0 = s h_{t-1}: the factor s is applied with eta at the end).
template <typename T>
void add_operator_factor_sums(BlockSums<T>& sums, const T* d, const T* w, const T* z, const T* prev, int64_t rows,
                              int64_t hidden, int64_t rank) {
  if (rank == 0) {
    gemm(true, false, hidden, hidden, rows, T(1), d, hidden, prev, hidden, T(1), sums.first.data(), hidden);
    return;
  }
  gemm(true, false, hidden, rank, rows, T(1), d, hidden, z, rank, T(1), sums.first.data(), rank);
  gemm(true, false, rank, hidden, rows, T(1), w, rank, prev, hidden, T(1), sums.second.data(), hidden);
}

// The step's share of the input map's weight gradient (weight += d^T x_t) and, when wanted, the gradient of
// x_t itself: eta d W (W the input map's (H, d) weight, contiguous).
template <typename T>
void add_input_gradients(BlockSums<T>& sums, T* grad_x, const T* d, const T* x, const T* weight, int64_t rows,
                         int64_t hidden, int64_t dim, T eta) {
  gemm(true, false, hidden, dim, rows, T(1), d, hidden, x, dim, T(1), sums.weight.data(), dim);
  if (grad_x) gemm(false, false, rows, dim, hidden, eta, d, hidden, weight, dim, T(0), grad_x, dim);
}

// out = factor * (sum over blocks, in block order) of one of their sums: deterministic for a thread count.
template <typename T>
void add_blocks(at::Tensor& out, const std::vector<BlockSums<T>>& parts, std::vector<T> BlockSums<T>::*member,
                double factor) {
  T* total = out.data_ptr<T>();
  std::fill_n(total, out.numel(), T(0));
  for (const auto& part : parts) {
    const std::vector<T>& values = part.*member;
    for (size_t i = 0; i < values.size(); ++i) total[i] += values[i];
  }
  const auto scale = static_cast<T>(factor);
  for (int64_t i = 0; i < out.numel(); ++i) total[i] *= scale;
}

// The gradients the backward writes: of h0 (carry, (B, H)), of x ((T, B, d), or an empty tensor when it is
// not wanted), of first and second (their shapes; second empty for a dense M) and of the input map's weight
// (H, d) and bias (H).
void check_gradient_outputs(const at::Tensor& phis, const at::Tensor& h0, const at::Tensor& x, const at::Tensor& first,
                            const at::Tensor& second, const at::Tensor& weight, const at::Tensor& carry,
                            const at::Tensor& grad_x, const at::Tensor& grad_first, const at::Tensor& grad_second,
                            const at::Tensor& grad_weight, const at::Tensor& grad_bias, const char* op) {
  check_tensor(carry, phis, h0.sizes(), op, "carry");
  if (!(grad_x.dim() == 1 && grad_x.numel() == 0)) check_tensor(grad_x, phis, x.sizes(), op, "grad_x");
  check_tensor(grad_first, phis, first.sizes(), op, "grad_first");
  check_tensor(grad_second, phis, second.sizes(), op, "grad_second");
  check_tensor(grad_weight, phis, weight.sizes(), op, "grad_weight");
  check_tensor(grad_bias, phis, {phis.size(2)}, op, "grad_bias");
}

// Last step to first: carry becomes dL/dh0, grad_x (when not empty) dL/dx, and grad_first, grad_second,
// grad_weight, grad_bias the gradients of M's factors and of the input map (each block sums its rows' share
// step by step; the blocks' sums are added in block order). dpre is never stored: each step's lives in a
// block's scratch rows. Returns (sum_t <g_t, phi_t>, sum_t <g_t, y_0,t>), the parts of the gradients of eta
// and alpha.
std::tuple<double, double> irnn_k1_backward(const at::Tensor& phis, const at::Tensor& outputs, const at::Tensor& h0,
                                            const at::Tensor& grad_outputs, const at::Tensor& x, const at::Tensor& zs,
                                            const at::Tensor& first, const at::Tensor& second,
                                            const at::Tensor& weight, double eta, double alpha, double s, double r,
                                            int64_t act, at::Tensor carry, at::Tensor grad_x, at::Tensor grad_first,
                                            at::Tensor grad_second, at::Tensor grad_weight, at::Tensor grad_bias) {
  constexpr const char* op = "irnn_k1_backward";
  check_sequence(phis, "phis", h0, act, op);
  const int64_t rank = check_operator(first, second, phis, "phis", op);
  const int64_t steps = phis.size(0), batch = phis.size(1), hidden = phis.size(2);
  check_rows(outputs, phis, "phis", hidden, false, op, "outputs");
  if (rank > 0) check_rows(zs, phis, "phis", rank, false, op, "zs");
  const int64_t dim = check_input(x, weight, phis, "phis", op);
  TORCH_CHECK(grad_outputs.device().is_cpu() && grad_outputs.sizes() == phis.sizes() &&
                  grad_outputs.scalar_type() == phis.scalar_type(),
              op, ": grad_outputs must be a CPU (T, B, H) tensor of phis' dtype, got ", grad_outputs.sizes());
  check_gradient_outputs(phis, h0, x, first, second, weight, carry, grad_x, grad_first, grad_second, grad_weight,
                         grad_bias, op);
  const bool input_gradient = grad_x.numel() > 0;
  const int64_t grad_strides[2] = {grad_outputs.stride(1), grad_outputs.stride(2)}, grad_step = grad_outputs.stride(0);
  const int64_t chunk = rows_per_thread(batch), blocks = std::max<int64_t>(1, (batch + chunk - 1) / chunk);
  // a copy only if strided
  const at::Tensor first_c = first.contiguous(), second_c = second.contiguous(), weight_c = weight.contiguous();
  double dot_phi = 0.0, dot_y = 0.0;
  AT_DISPATCH_FLOATING_TYPES(phis.scalar_type(), op, [&] {
    const auto sv = static_cast<scalar_t>(s), e = static_cast<scalar_t>(eta);
    const auto keep = static_cast<scalar_t>(s * (1.0 - eta * alpha) - r);  // d h_t / d h_{t-1} outside M
    const auto s_eta = static_cast<scalar_t>(s * eta);
    const scalar_t *m_first = first_c.data_ptr<scalar_t>(), *m_second = second_c.data_ptr<scalar_t>();
    const scalar_t* input_weight = weight_c.data_ptr<scalar_t>();
    std::vector<BlockSums<scalar_t>> parts;
    for (int64_t part = 0; part < blocks; ++part) parts.emplace_back(0, 0, 0, 0);
    with_activation(act, [&](auto kind) {
      constexpr int Act = decltype(kind)::value;
      with_grad_row(grad_strides[1], [&](auto layout) {
        constexpr GradRow Layout = decltype(layout)::value;
        over_batch_blocks(batch, chunk, [&](int64_t begin, int64_t end, int64_t part) {
          const int64_t rows = end - begin;
          // allocated by the thread that fills it: each block's sums and scratch in its own memory
          BlockSums<scalar_t> sums(first.numel(), second.numel(), hidden, dim);
          std::vector<scalar_t> d(rows * hidden), w(rows * rank);  // this step's dpre and dpre V'
          scalar_t* own_carry = carry.data_ptr<scalar_t>() + begin * hidden;
          std::fill_n(own_carry, rows * hidden, scalar_t(0));
          const scalar_t* grad_base = grad_outputs.data_ptr<scalar_t>() + begin * grad_strides[0];
          const StepPointer<scalar_t> phi_rows(phis, begin), outs(outputs, begin), x_rows(x, begin);
          const StepPointer<scalar_t> z_rows = rank > 0 ? StepPointer<scalar_t>(zs, begin) : StepPointer<scalar_t>();
          const StepPointer<scalar_t> grad_x_rows =
              input_gradient ? StepPointer<scalar_t>(grad_x, begin) : StepPointer<scalar_t>();
          const scalar_t* first_h = h0.data_ptr<scalar_t>() + begin * hidden;
          for (int64_t t = steps - 1; t >= 0 && rows > 0; --t) {
            const scalar_t* prev = t == 0 ? first_h : outs.at(t - 1);
            const scalar_t* grad_t = grad_base + t * grad_step;
            if (rank > 0) {
              backward_rows<Act, true, Layout>(d.data(), phi_rows.at(t), prev, grad_t, grad_strides, own_carry, rows,
                                               hidden, sv, keep, s_eta, sums);
            } else {
              backward_rows<Act, false, Layout>(d.data(), phi_rows.at(t), prev, grad_t, grad_strides, own_carry,
                                                rows, hidden, sv, keep, s_eta, sums);
            }
            add_operator_gradient(own_carry, d.data(), w.data(), m_first, m_second, rows, hidden, rank, s_eta);
            add_operator_factor_sums(sums, d.data(), w.data(), z_rows.at(t), prev, rows, hidden, rank);
            add_input_gradients(sums, grad_x_rows.at(t), d.data(), x_rows.at(t), input_weight, rows, hidden, dim, e);
          }
          parts[part] = std::move(sums);
        });
      });
    });
    // gradient of M (dense) or V' and H: s eta times the sums (y_0 = s h_{t-1}); of the input map: eta
    add_blocks(grad_first, parts, &BlockSums<scalar_t>::first, s * eta);
    add_blocks(grad_second, parts, &BlockSums<scalar_t>::second, s * eta);
    add_blocks(grad_weight, parts, &BlockSums<scalar_t>::weight, eta);
    add_blocks(grad_bias, parts, &BlockSums<scalar_t>::bias, eta);
    for (const auto& part : parts) {
      dot_phi += part.dot_phi;
      dot_y += part.dot_y;
    }
  });
  return {dot_phi, dot_y};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ltdrnn, m) {  // a fragment: every cell's library adds to the same namespace
  m.def("irnn_k1_forward(Tensor x, Tensor weight, Tensor bias, Tensor h0, Tensor first, Tensor second, float eta, "
        "float alpha, float s, float r, int act, Tensor(a!) phis, Tensor(b!) zs, Tensor(c!) outputs) -> ()");
  m.def("irnn_k1_backward(Tensor phis, Tensor outputs, Tensor h0, Tensor grad_outputs, Tensor x, Tensor zs, "
        "Tensor first, Tensor second, Tensor weight, float eta, float alpha, float s, float r, int act, "
        "Tensor(a!) carry, Tensor(b!) grad_x, Tensor(c!) grad_first, Tensor(d!) grad_second, Tensor(e!) grad_weight, "
        "Tensor(f!) grad_bias) -> (float, float)");
}

TORCH_LIBRARY_IMPL(ltdrnn, CPU, m) {
  m.impl("irnn_k1_forward", &irnn_k1_forward);
  m.impl("irnn_k1_backward", &irnn_k1_backward);
}
