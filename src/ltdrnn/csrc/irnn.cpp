// The whole training recurrence of iRNN at K = 1 (ltdrnn.cells.irnn, _FusedIRNN), forward and backward,
// each time loop in one call: the per-step products are BLAS calls on raw pointers (common.h, gemm), the
// activation, the Euler update and its gradient one pass per step. No tensor, view or ATen operator is
// made or called inside a time loop: through ATen the products and views were 4,859 operator calls per
// 784-step sequence, 40 % of the time at batch 1. Operators: torch.ops.ltdrnn.irnn_k1_forward /
// irnn_k1_backward.
//
// Layouts (time-major, contiguous unless said otherwise):
//   c (T, B, H): on entry the input map c_t = W' x_t + b'; the forward adds the products of the step in
//       place (M y_0 dense, y_0 second^T first^T low rank: there the y_0 of the identity is added on the fly and
//       never stored); the backward overwrites it with the gradient of the pre-activation / eta.
//   h0 (B, H); first, second: M itself (H, H) and an empty second, or the low-rank M = I + first second
//       with first = V' (H, R) and second = H (R, H) (any strides: each call makes a contiguous copy of a
//       strided one before its loop, at most H * H numbers).
//   phis (T or 1, B, H): phi of every step (1 reused row when no backward follows); outputs (T, B, H).
//   zs (T or 1, B, R), low rank only: h_{t-1} second^T, the forward's inner product, kept for the gradient of
//       V' (sum_t dpre_t^T z_t); ws (T, B, R), low rank only: dpre_t V', the backward's, kept for the
//       gradient of H (sum_t w_t^T h_{t-1}). Both are empty tensors for a dense M.
//   grad_outputs (T, B, H), any strides (the gradient of a sum or mean arrives expanded, stride 0).
// Per step, with the reading's (s, r) (ltdrnn.cells.irnn.READINGS):
//   y_0 = s h_{t-1};  pre = M y_0 + c_t;  y_1 = y_0 + eta (phi(pre) - alpha y_0);  h_t = y_1 - r h_{t-1}
//
// Low rank (R = 16 at H = 128): the two factors cost 2 R / H = 1/4 of the dense product's FLOPs, forward
// and backward, and the gradients of V' and H come from products with inner size T B over R columns
// instead of the (H, H) gradient of M. (The PyTorch loop applies the dense M: there each extra product
// is a dispatch that costs more than the FLOPs it saves.)
//
// Threads: as TARNN's loops (csrc/tarnn.cpp, "Threads"): the batch is split once into one block of rows
// per thread, and each thread runs all T steps of its rows with single-threaded BLAS (over_batch_blocks),
// so nothing is handed between threads per step. Only the sums for the gradients of eta and alpha are
// shared; each block keeps its own and they are added in block order.
#include "common.h"

#include <tuple>

namespace {

using namespace ltdrnn;

void check_sequence(const at::Tensor& c, const at::Tensor& h0, int64_t act, const char* op) {
  TORCH_CHECK(c.device().is_cpu() && c.dim() == 3 && c.is_contiguous() && c.size(0) > 0, op,
              ": c must be a contiguous CPU (T, B, H) tensor with T > 0, got ", c.sizes());
  TORCH_CHECK(c.scalar_type() == at::kFloat || c.scalar_type() == at::kDouble, op,
              ": expected float32 or float64, got ", c.scalar_type());
  TORCH_CHECK(h0.sizes() == at::IntArrayRef({c.size(1), c.size(2)}) && h0.is_contiguous() &&
                  h0.scalar_type() == c.scalar_type() && h0.device().is_cpu(),
              op, ": h0 must be a contiguous (B, H) = (", c.size(1), ", ", c.size(2),
              ") CPU tensor of c's dtype, got ", h0.sizes(), " ", h0.scalar_type());
  TORCH_CHECK(act >= 0 && act <= 2, op, ": activation code must be 0 (relu), 1 (tanh) or 2 (sigmoid), got ", act);
}

// A contiguous CPU (T, B, cols) tensor of c's dtype; (1, B, cols) also when one_row_allowed.
void check_rows(const at::Tensor& t, const at::Tensor& c, int64_t cols, bool one_row_allowed, const char* op,
                const char* name) {
  const bool rows = t.dim() == 3 && (t.size(0) == c.size(0) || (one_row_allowed && t.size(0) == 1));
  TORCH_CHECK(rows && t.size(1) == c.size(1) && t.size(2) == cols && t.is_contiguous() &&
                  t.scalar_type() == c.scalar_type() && t.device().is_cpu(),
              op, ": ", name, " must be a contiguous CPU ", one_row_allowed ? "(T or 1, B, " : "(T, B, ", cols,
              ") tensor of c's dtype, got ", t.sizes());
}

// first and second (the layouts above); returns R, or 0 for a dense M.
int64_t check_operator(const at::Tensor& first, const at::Tensor& second, const at::Tensor& c, const char* op) {
  const int64_t hidden = c.size(2);
  auto check_kind = [&](const at::Tensor& t, const char* name) {
    TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == c.scalar_type(), op, ": ", name,
                " must be a CPU tensor of c's dtype, got ", t.scalar_type(), " on ", t.device());
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

void irnn_k1_forward(at::Tensor c, const at::Tensor& h0, const at::Tensor& first, const at::Tensor& second,
                     double eta, double alpha, double s, double r, int64_t act, at::Tensor phis, at::Tensor zs,
                     at::Tensor outputs) {
  constexpr const char* op = "irnn_k1_forward";
  check_sequence(c, h0, act, op);
  const int64_t rank = check_operator(first, second, c, op);
  check_rows(phis, c, c.size(2), true, op, "phis");
  if (rank > 0) check_rows(zs, c, rank, true, op, "zs");
  check_rows(outputs, c, c.size(2), false, op, "outputs");
  const int64_t steps = c.size(0), batch = c.size(1), hidden = c.size(2);
  const at::Tensor first_c = first.contiguous(), second_c = second.contiguous();  // a copy only if strided
  AT_DISPATCH_FLOATING_TYPES(c.scalar_type(), op, [&] {
    const auto e = static_cast<scalar_t>(eta), a = static_cast<scalar_t>(alpha);
    const auto sv = static_cast<scalar_t>(s), rv = static_cast<scalar_t>(r);
    const scalar_t *m_first = first_c.data_ptr<scalar_t>(), *m_second = second_c.data_ptr<scalar_t>();
    with_activation(act, [&](auto kind) {
      constexpr int Act = decltype(kind)::value;
      over_batch_blocks(batch, rows_per_thread(batch), [&](int64_t begin, int64_t end, int64_t) {
        const int64_t rows = end - begin;
        const StepPointer<scalar_t> pres(c, begin), phi_rows(phis, begin), outs(outputs, begin);
        const StepPointer<scalar_t> z_rows = rank > 0 ? StepPointer<scalar_t>(zs, begin) : StepPointer<scalar_t>();
        const scalar_t* first_h = h0.data_ptr<scalar_t>() + begin * hidden;
        for (int64_t t = 0; t < steps; ++t) {
          const scalar_t* h = t == 0 ? first_h : outs.at(t - 1);
          scalar_t* pre = pres.at(t);
          add_operator(pre, h, z_rows.at(t), m_first, m_second, rows, hidden, rank, sv);
          if (rank > 0) {
            forward_span<Act, true>(pre, h, phi_rows.at(t), outs.at(t), rows * hidden, e, a, sv, rv);
          } else {
            forward_span<Act, false>(pre, h, phi_rows.at(t), outs.at(t), rows * hidden, e, a, sv, rv);
          }
        }
      });
    });
  });
}

// Backward, one step over `rows` rows: g = grad_out + carry; d (over c_t) = g phi'(pre); carry becomes
// keep g, plus s eta d, the identity's part of d M, for low rank. Adds <g, phi> and <g, y_0> to sums.
template <int Act, bool LowRank, typename T>
void backward_rows(T* d, const T* phi, const T* prev, const T* grad_out, const int64_t* grad_strides, T* carry,
                   int64_t rows, int64_t hidden, T s, T keep, T s_eta, double* sums) {
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t row = b * hidden;
    const T* grad_b = grad_out + b * grad_strides[0];
    T sum_phi = 0, sum_y = 0;
    for (int64_t j = 0; j < hidden; ++j) {
      const T gj = grad_b[j * grad_strides[1]] + carry[row + j];
      const T phi_j = phi[row + j];
      sum_phi += gj * phi_j;
      sum_y += gj * s * prev[row + j];
      const T dj = gj * activation_slope<Act>(phi_j);
      d[row + j] = dj;
      carry[row + j] = LowRank ? keep * gj + s_eta * dj : keep * gj;
    }
    sums[0] += static_cast<double>(sum_phi);
    sums[1] += static_cast<double>(sum_y);
  }
}

// carry += s eta d M for `rows` rows. Low rank through w = d V', which the backward keeps for the gradient
// of H: carry += s eta w H; the identity's part is in backward_rows. first and second contiguous.
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

// Last step to first: c becomes dL/dpre (without the factor eta), carry dL/dh0, ws (low rank) each step's
// dpre_t V'. Returns (sum_t <g_t, phi_t>, sum_t <g_t, y_0,t>), the parts of the gradients of eta and alpha.
std::tuple<double, double> irnn_k1_backward(at::Tensor c, const at::Tensor& phis, const at::Tensor& outputs,
                                            const at::Tensor& h0, const at::Tensor& grad_outputs,
                                            const at::Tensor& first, const at::Tensor& second, double eta,
                                            double alpha, double s, double r, int64_t act, at::Tensor carry,
                                            at::Tensor ws) {
  constexpr const char* op = "irnn_k1_backward";
  check_sequence(c, h0, act, op);
  const int64_t rank = check_operator(first, second, c, op);
  const int64_t steps = c.size(0), batch = c.size(1), hidden = c.size(2);
  check_rows(phis, c, hidden, false, op, "phis");
  check_rows(outputs, c, hidden, false, op, "outputs");
  if (rank > 0) check_rows(ws, c, rank, false, op, "ws");
  TORCH_CHECK(grad_outputs.device().is_cpu() && grad_outputs.sizes() == c.sizes() &&
                  grad_outputs.scalar_type() == c.scalar_type(),
              op, ": grad_outputs must be a CPU (T, B, H) tensor of c's dtype, got ", grad_outputs.sizes());
  TORCH_CHECK(carry.sizes() == h0.sizes() && carry.is_contiguous() && carry.scalar_type() == c.scalar_type() &&
                  carry.device().is_cpu(),
              op, ": carry must be a contiguous CPU (B, H) tensor of c's dtype, got ", carry.sizes());
  const int64_t grad_strides[2] = {grad_outputs.stride(1), grad_outputs.stride(2)}, grad_step = grad_outputs.stride(0);
  const int64_t chunk = rows_per_thread(batch), blocks = std::max<int64_t>(1, (batch + chunk - 1) / chunk);
  std::vector<double> parts(2 * blocks, 0.0);  // each block's two sums, added in block order below
  const at::Tensor first_c = first.contiguous(), second_c = second.contiguous();  // a copy only if strided
  AT_DISPATCH_FLOATING_TYPES(c.scalar_type(), op, [&] {
    const auto sv = static_cast<scalar_t>(s);
    const auto keep = static_cast<scalar_t>(s * (1.0 - eta * alpha) - r);  // d h_t / d h_{t-1} outside M
    const auto s_eta = static_cast<scalar_t>(s * eta);
    const scalar_t *m_first = first_c.data_ptr<scalar_t>(), *m_second = second_c.data_ptr<scalar_t>();
    with_activation(act, [&](auto kind) {
      constexpr int Act = decltype(kind)::value;
      over_batch_blocks(batch, chunk, [&](int64_t begin, int64_t end, int64_t part) {
        const int64_t rows = end - begin;
        scalar_t* own_carry = carry.data_ptr<scalar_t>() + begin * hidden;
        std::fill_n(own_carry, rows * hidden, scalar_t(0));
        double sums[2] = {0.0, 0.0};  // this block's, kept off the shared vector while the loop runs
        const scalar_t* grad_base = grad_outputs.data_ptr<scalar_t>() + begin * grad_strides[0];
        const StepPointer<scalar_t> d_rows(c, begin), phi_rows(phis, begin), outs(outputs, begin);
        const StepPointer<scalar_t> w_rows = rank > 0 ? StepPointer<scalar_t>(ws, begin) : StepPointer<scalar_t>();
        const scalar_t* first_h = h0.data_ptr<scalar_t>() + begin * hidden;
        for (int64_t t = steps - 1; t >= 0; --t) {
          scalar_t* d = d_rows.at(t);
          const scalar_t* prev = t == 0 ? first_h : outs.at(t - 1);
          const scalar_t* grad_t = grad_base + t * grad_step;
          if (rank > 0) {
            backward_rows<Act, true>(d, phi_rows.at(t), prev, grad_t, grad_strides, own_carry, rows, hidden, sv, keep,
                                     s_eta, sums);
          } else {
            backward_rows<Act, false>(d, phi_rows.at(t), prev, grad_t, grad_strides, own_carry, rows, hidden, sv,
                                      keep, s_eta, sums);
          }
          add_operator_gradient(own_carry, d, w_rows.at(t), m_first, m_second, rows, hidden, rank, s_eta);
        }
        parts[2 * part] = sums[0];
        parts[2 * part + 1] = sums[1];
      });
    });
  });
  double dot_phi = 0.0, dot_y = 0.0;
  for (int64_t part = 0; part < blocks; ++part) {
    dot_phi += parts[2 * part];
    dot_y += parts[2 * part + 1];
  }
  return {dot_phi, dot_y};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ltdrnn, m) {  // a fragment: every cell's library adds to the same namespace
  m.def("irnn_k1_forward(Tensor(a!) c, Tensor h0, Tensor first, Tensor second, float eta, float alpha, float s, "
        "float r, int act, Tensor(b!) phis, Tensor(c!) zs, Tensor(d!) outputs) -> ()");
  m.def("irnn_k1_backward(Tensor(a!) c, Tensor phis, Tensor outputs, Tensor h0, Tensor grad_outputs, Tensor first, "
        "Tensor second, float eta, float alpha, float s, float r, int act, Tensor(b!) carry, Tensor(c!) ws) -> "
        "(float, float)");
}

TORCH_LIBRARY_IMPL(ltdrnn, CPU, m) {
  m.impl("irnn_k1_forward", &irnn_k1_forward);
  m.impl("irnn_k1_backward", &irnn_k1_backward);
}
