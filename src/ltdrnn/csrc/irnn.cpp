// The whole training recurrence of iRNN at K = 1 (ltdrnn.cells.irnn, _FusedIRNN), forward and backward,
// each time loop in one call: the per-step product goes to ATen's BLAS (at::addmm), the activation to
// ATen's vectorised kernels, the Euler update and its gradient to at::parallel_for over the batch.
// Operators: torch.ops.ltdrnn.irnn_k1_forward / irnn_k1_backward.
//
// Layouts (time-major, contiguous):
//   c (T, B, H): on entry the input map c_t = W' x_t + b'; the forward adds M y_0 in place (the
//       pre-activation); the backward overwrites it with the gradient of the pre-activation / eta.
//   h0 (B, H); m_t (H, H) = M^T (the forward), m (H, H) = M (the backward);
//   phis (T or 1, B, H): phi of every step (1 reused row when no backward follows); outputs (T, B, H).
// Per step, with the reading's (s, r) (ltdrnn.cells.irnn.READINGS):
//   y_0 = s h_{t-1};  pre = M y_0 + c_t;  y_1 = y_0 + eta (phi(pre) - alpha y_0);  h_t = y_1 - r h_{t-1}
#include "common.h"

#include <tuple>

namespace {

using namespace ltdrnn;

void check_sequence(const at::Tensor& c, const at::Tensor& h0, int64_t act) {
  TORCH_CHECK(c.device().is_cpu() && c.dim() == 3 && c.is_contiguous() && c.size(0) > 0,
              "irnn_k1: c must be a contiguous CPU (T, B, H) tensor with T > 0, got ", c.sizes());
  TORCH_CHECK(c.scalar_type() == at::kFloat || c.scalar_type() == at::kDouble,
              "irnn_k1: expected float32 or float64, got ", c.scalar_type());
  TORCH_CHECK(h0.sizes() == at::IntArrayRef({c.size(1), c.size(2)}) && h0.is_contiguous() &&
                  h0.scalar_type() == c.scalar_type() && h0.device().is_cpu(),
              "irnn_k1: h0 must be a contiguous (B, H) = (", c.size(1), ", ", c.size(2),
              ") CPU tensor of c's dtype, got ", h0.sizes(), " ", h0.scalar_type());
  TORCH_CHECK(act >= 0 && act <= 2, "irnn_k1: activation code must be 0 (relu), 1 (tanh) or 2 (sigmoid), got ",
              act);
}

void check_like(const at::Tensor& t, const at::Tensor& c, bool one_row_allowed, const char* name) {
  const bool rows = t.dim() == 3 && (t.size(0) == c.size(0) || (one_row_allowed && t.size(0) == 1));
  TORCH_CHECK(rows && t.size(1) == c.size(1) && t.size(2) == c.size(2) && t.is_contiguous() &&
                  t.scalar_type() == c.scalar_type() && t.device().is_cpu(),
              "irnn_k1: ", name, " must be a contiguous CPU ", one_row_allowed ? "(T or 1, B, H)" : "(T, B, H)",
              " tensor of c's dtype, got ", t.sizes());
}

void check_square(const at::Tensor& m, const at::Tensor& c, const char* name) {
  TORCH_CHECK(m.sizes() == at::IntArrayRef({c.size(2), c.size(2)}) && m.scalar_type() == c.scalar_type() &&
                  m.device().is_cpu(),
              "irnn_k1: ", name, " must be a CPU (H, H) = (", c.size(2), ", ", c.size(2), ") tensor, got ",
              m.sizes());
}

void activate_into(const at::Tensor& pre, at::Tensor out, int64_t act) {
  if (act == 0) {
    at::clamp_min_out(out, pre, 0);
  } else if (act == 1) {
    at::tanh_out(out, pre);
  } else {
    at::sigmoid_out(out, pre);
  }
}

void irnn_k1_forward(at::Tensor c, const at::Tensor& h0, const at::Tensor& m_t, double eta, double alpha, double s,
                     double r, int64_t act, at::Tensor phis, at::Tensor outputs) {
  check_sequence(c, h0, act);
  check_square(m_t, c, "m_t");
  check_like(phis, c, true, "phis");
  check_like(outputs, c, false, "outputs");
  const int64_t steps = c.size(0), batch = c.size(1), hidden = c.size(2);
  AT_DISPATCH_FLOATING_TYPES(c.scalar_type(), "irnn_k1_forward", [&] {
    const auto e = static_cast<scalar_t>(eta), a = static_cast<scalar_t>(alpha);
    const auto sv = static_cast<scalar_t>(s), rv = static_cast<scalar_t>(r);
    at::Tensor y0 = at::empty_like(h0), h = h0;
    for (int64_t t = 0; t < steps; ++t) {
      at::mul_out(y0, h, s);
      at::Tensor pre = c.select(0, t), phi = phis.select(0, phis.size(0) == 1 ? 0 : t), out = outputs.select(0, t);
      pre.addmm_(y0, m_t);
      activate_into(pre, phi, act);
      const scalar_t* phi_p = phi.data_ptr<scalar_t>();
      const scalar_t* h_p = h.data_ptr<scalar_t>();
      scalar_t* out_p = out.data_ptr<scalar_t>();
      at::parallel_for(0, batch * hidden, kElementsPerTask, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const scalar_t y = sv * h_p[i];
          out_p[i] = y + e * (phi_p[i] - a * y) - rv * h_p[i];
        }
      });
      h = out;
    }
  });
}

// Last step to first: c becomes dL/dpre (without the factor eta), carry dL/dh0. Returns (sum_t <g_t, phi_t>, sum_t <g_t, y_0,t>), the parts of the gradients of eta and alpha.
std::tuple<double, double> irnn_k1_backward(at::Tensor c, const at::Tensor& phis, const at::Tensor& outputs,
                                            const at::Tensor& h0, const at::Tensor& grad_outputs, const at::Tensor& m,
                                            double eta, double alpha, double s, double r, int64_t act,
                                            at::Tensor carry) {
  check_sequence(c, h0, act);
  check_square(m, c, "m");
  check_like(phis, c, false, "phis");
  check_like(outputs, c, false, "outputs");
  check_like(grad_outputs, c, false, "grad_outputs");
  TORCH_CHECK(carry.sizes() == h0.sizes() && carry.is_contiguous() && carry.scalar_type() == c.scalar_type(),
              "irnn_k1: carry must be a contiguous (B, H) tensor of c's dtype, got ", carry.sizes());
  const int64_t steps = c.size(0), batch = c.size(1), hidden = c.size(2);
  double dot_phi = 0.0, dot_y = 0.0;
  AT_DISPATCH_FLOATING_TYPES(c.scalar_type(), "irnn_k1_backward", [&] {
    const auto sv = static_cast<scalar_t>(s);
    const auto keep = static_cast<scalar_t>(s * (1.0 - eta * alpha) - r);  // d h_t / d h_{t-1} outside M
    carry.zero_();
    std::vector<double> row_phi(batch), row_y(batch);
    for (int64_t t = steps - 1; t >= 0; --t) {
      const scalar_t* phi_p = phis.select(0, t).data_ptr<scalar_t>();
      const scalar_t* prev_p = (t == 0 ? h0 : outputs.select(0, t - 1)).data_ptr<scalar_t>();
      const scalar_t* grad_p = grad_outputs.select(0, t).data_ptr<scalar_t>();
      scalar_t* d_p = c.select(0, t).data_ptr<scalar_t>();
      scalar_t* carry_p = carry.data_ptr<scalar_t>();
      with_activation(act, [&](auto kind) {
        at::parallel_for(0, batch, rows_per_task(hidden), [&](int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end; ++b) {
            scalar_t sum_phi = 0, sum_y = 0;
            for (int64_t j = b * hidden; j < (b + 1) * hidden; ++j) {
              const scalar_t gj = grad_p[j] + carry_p[j];
              sum_phi += gj * phi_p[j];
              sum_y += gj * sv * prev_p[j];
              d_p[j] = gj * activation_slope<decltype(kind)::value>(phi_p[j]);
              carry_p[j] = keep * gj;
            }
            row_phi[b] = static_cast<double>(sum_phi);
            row_y[b] = static_cast<double>(sum_y);
          }
        });
      });
      for (int64_t b = 0; b < batch; ++b) {
        dot_phi += row_phi[b];
        dot_y += row_y[b];
      }
      carry.addmm_(c.select(0, t), m, 1, s * eta);  // + s eta (d phi . g) M
    }
  });
  return {dot_phi, dot_y};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ltdrnn, m) {  // a fragment: every cell's library adds to the same namespace
  m.def("irnn_k1_forward(Tensor(a!) c, Tensor h0, Tensor m_t, float eta, float alpha, float s, float r, int act, "
        "Tensor(b!) phis, Tensor(c!) outputs) -> ()");
  m.def("irnn_k1_backward(Tensor(a!) c, Tensor phis, Tensor outputs, Tensor h0, Tensor grad_outputs, Tensor m, "
        "float eta, float alpha, float s, float r, int act, Tensor(b!) carry) -> (float, float)");
}

TORCH_LIBRARY_IMPL(ltdrnn, CPU, m) {
  m.impl("irnn_k1_forward", &irnn_k1_forward);
  m.impl("irnn_k1_backward", &irnn_k1_backward);
}
