// The whole training recurrence of TARNN at K = 1 with the gate inside (ltdrnn.cells.tarnn,
// _FusedTARNN), forward and backward, each time loop in one call: the per-step product goes to ATen's
// BLAS (at::addmm), the elementwise work to at::parallel_for over the batch. Built and cached by
// ltdrnn.kernels.load_torch_ops; the operators are torch.ops.ltdrnn.tarnn_k1_forward / _backward.
//
// Layouts (time-major, contiguous unless said otherwise):
//   p (T, B, 3H): on entry the input map [c | q | r] = [B1 x + b_lin | W1 x + b | W_x x + b_beta];
//       the forward adds s_{t-1} [B2 + A; W2 + U; U_s]^T in place; the backward overwrites it with the
//       gradient of p (the forward's values of a step are read before its gradient is written).
//   s0 (B, H); w_t (H, 3H) = [B2 + A; W2 + U; U_s]^T; state_weights (3H, H) its transpose.
//   outputs, betas (T, B, H): s_t and beta_t = sigmoid(r_t).
//   grad_outputs (T, B, H), any strides (the gradient of a mean arrives expanded, stride 0).
// Per step, with phi the activation (0 relu, 1 tanh, 2 sigmoid):
//   G = phi(q) + c;  s_t = s_{t-1} + eta beta G
#include "common.h"

namespace {

using namespace ltdrnn;

void check_sequence(const at::Tensor& p, const at::Tensor& s0, int64_t act) {
  TORCH_CHECK(p.device().is_cpu() && p.dim() == 3 && p.is_contiguous(),
              "tarnn_loop: p must be a contiguous CPU (T, B, 3H) tensor, got ", p.sizes());
  TORCH_CHECK(p.scalar_type() == at::kFloat || p.scalar_type() == at::kDouble,
              "tarnn_loop: expected float32 or float64, got ", p.scalar_type());
  const int64_t hidden = p.size(2) / 3;
  TORCH_CHECK(p.size(2) == 3 * hidden && hidden > 0, "tarnn_loop: p's last axis must be 3H, got ", p.size(2));
  TORCH_CHECK(s0.sizes() == at::IntArrayRef({p.size(1), hidden}) && s0.is_contiguous() &&
                  s0.scalar_type() == p.scalar_type(),
              "tarnn_loop: s0 must be a contiguous (B, H) = (", p.size(1), ", ", hidden, ") tensor of p's dtype, got ",
              s0.sizes());
  TORCH_CHECK(act >= 0 && act <= 2, "tarnn_loop: activation code must be 0 (relu), 1 (tanh) or 2 (sigmoid), got ",
              act);
}

void check_like(const at::Tensor& t, const at::Tensor& p, const char* name) {
  TORCH_CHECK(t.sizes() == at::IntArrayRef({p.size(0), p.size(1), p.size(2) / 3}) && t.is_contiguous() &&
                  t.scalar_type() == p.scalar_type(),
              "tarnn_loop: ", name, " must be a contiguous (T, B, H) tensor of p's dtype, got ", t.sizes());
}

template <int Act, typename T>
void forward_elementwise(T* pt, const T* s, T* out, T* beta_out, int64_t batch, int64_t hidden, T eta) {
  at::parallel_for(0, batch, rows_per_task(hidden), [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const T* c = pt + b * 3 * hidden;
      const T* q = c + hidden;
      const T* r = q + hidden;
      const T* s_b = s + b * hidden;
      T* out_b = out + b * hidden;
      T* beta_b = beta_out + b * hidden;
      for (int64_t j = 0; j < hidden; ++j) {
        const T beta = sigmoid(r[j]);
        beta_b[j] = beta;
        out_b[j] = s_b[j] + eta * beta * (activate<Act>(q[j]) + c[j]);
      }
    }
  });
}

// g = grad_out + carry; with dG = eta beta g: [dc | dq | dr] = [dG | dG phi'(q) | eta g G beta (1 - beta)]
// written over [c | q | r]; returns sum(g beta G), the step's part of d eta.
template <int Act, typename T>
double backward_elementwise(T* pt, const T* beta, const T* grad_out, const int64_t* grad_strides, const T* carry,
                            T* g, int64_t batch, int64_t hidden, T eta) {
  std::vector<double> row_sums(batch, 0.0);
  at::parallel_for(0, batch, rows_per_task(hidden), [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      T* c = pt + b * 3 * hidden;
      T* q = c + hidden;
      T* r = q + hidden;
      const T* beta_b = beta + b * hidden;
      const T* grad_b = grad_out + b * grad_strides[0];
      const T* carry_b = carry + b * hidden;
      T* g_b = g + b * hidden;
      T sum = T(0);
      for (int64_t j = 0; j < hidden; ++j) {
        const T gj = grad_b[j * grad_strides[1]] + carry_b[j];
        const T phi = activate<Act>(q[j]);
        const T big_g = phi + c[j];
        const T bj = beta_b[j];
        const T d_g = eta * bj * gj;
        g_b[j] = gj;
        sum += gj * bj * big_g;
        c[j] = d_g;
        q[j] = d_g * activation_slope<Act>(phi);
        r[j] = eta * gj * big_g * bj * (T(1) - bj);
      }
      row_sums[b] = static_cast<double>(sum);
    }
  });
  double total = 0.0;
  for (double v : row_sums) total += v;
  return total;
}

// Runs the forward over all T steps: p gets the step's pre-activations in place, outputs and betas
// are written.
void tarnn_k1_forward(at::Tensor p, const at::Tensor& s0, const at::Tensor& w_t, double eta, int64_t act,
                      at::Tensor outputs, at::Tensor betas) {
  check_sequence(p, s0, act);
  check_like(outputs, p, "outputs");
  check_like(betas, p, "betas");
  const int64_t steps = p.size(0), batch = p.size(1), hidden = p.size(2) / 3;
  TORCH_CHECK(w_t.sizes() == at::IntArrayRef({hidden, 3 * hidden}) && w_t.scalar_type() == p.scalar_type(),
              "tarnn_loop: w_t must be (H, 3H) = (", hidden, ", ", 3 * hidden, "), got ", w_t.sizes());
  AT_DISPATCH_FLOATING_TYPES(p.scalar_type(), "tarnn_k1_forward", [&] {
    with_activation(act, [&](auto kind) {
      at::Tensor s = s0;
      for (int64_t t = 0; t < steps; ++t) {
        at::Tensor pt = p.select(0, t);
        pt.addmm_(s, w_t);
        at::Tensor out = outputs.select(0, t);
        forward_elementwise<decltype(kind)::value, scalar_t>(
            pt.data_ptr<scalar_t>(), s.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
            betas.select(0, t).data_ptr<scalar_t>(), batch, hidden, static_cast<scalar_t>(eta));
        s = out;
      }
    });
  });
}

// Runs the backward over all T steps, last to first: p (the forward's pre-activations) becomes the
// gradient of p, carry the gradient of s0; g is a (B, H) work buffer. Returns the gradient of eta.
double tarnn_k1_backward(at::Tensor p, const at::Tensor& betas, const at::Tensor& grad_outputs,
                         const at::Tensor& state_weights, double eta, int64_t act, at::Tensor carry, at::Tensor g) {
  check_sequence(p, carry, act);
  check_like(betas, p, "betas");
  const int64_t steps = p.size(0), batch = p.size(1), hidden = p.size(2) / 3;
  TORCH_CHECK(grad_outputs.sizes() == betas.sizes() && grad_outputs.scalar_type() == p.scalar_type(),
              "tarnn_loop: grad_outputs must be (T, B, H) of p's dtype, got ", grad_outputs.sizes());
  TORCH_CHECK(state_weights.sizes() == at::IntArrayRef({3 * hidden, hidden}) &&
                  state_weights.scalar_type() == p.scalar_type(),
              "tarnn_loop: state_weights must be (3H, H) = (", 3 * hidden, ", ", hidden, "), got ",
              state_weights.sizes());
  TORCH_CHECK(g.sizes() == carry.sizes() && g.is_contiguous() && g.scalar_type() == p.scalar_type(),
              "tarnn_loop: g must be a contiguous (B, H) work buffer");
  const int64_t grad_strides[2] = {grad_outputs.stride(1), grad_outputs.stride(2)};
  double grad_eta = 0.0;
  AT_DISPATCH_FLOATING_TYPES(p.scalar_type(), "tarnn_k1_backward", [&] {
    with_activation(act, [&](auto kind) {
      carry.zero_();
      const scalar_t* grad_base = grad_outputs.data_ptr<scalar_t>();
      for (int64_t t = steps - 1; t >= 0; --t) {
        at::Tensor pt = p.select(0, t);
        grad_eta += backward_elementwise<decltype(kind)::value, scalar_t>(
            pt.data_ptr<scalar_t>(), betas.select(0, t).data_ptr<scalar_t>(),
            grad_base + t * grad_outputs.stride(0), grad_strides, carry.data_ptr<scalar_t>(),
            g.data_ptr<scalar_t>(), batch, hidden, static_cast<scalar_t>(eta));
        at::addmm_out(carry, g, pt, state_weights);  // d s_{t-1} = g + dp_t [B2 + A; W2 + U; U_s]
      }
    });
  });
  return grad_eta;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ltdrnn, m) {  // a fragment: later libraries may add to the namespace
  m.def("tarnn_k1_forward(Tensor(a!) p, Tensor s0, Tensor w_t, float eta, int act, Tensor(b!) outputs, "
        "Tensor(c!) betas) -> ()");
  m.def("tarnn_k1_backward(Tensor(a!) p, Tensor betas, Tensor grad_outputs, Tensor state_weights, float eta, "
        "int act, Tensor(b!) carry, Tensor(c!) g) -> float");
}

TORCH_LIBRARY_IMPL(ltdrnn, CPU, m) {
  m.impl("tarnn_k1_forward", &tarnn_k1_forward);
  m.impl("tarnn_k1_backward", &tarnn_k1_backward);
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
