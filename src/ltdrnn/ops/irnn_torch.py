"""iRNN's ``"torch"`` and ``"cpp"`` backends: :class:`FusedIRNN`, a hand-written forward and backward over the
whole sequence, with its time loops in PyTorch (``"torch"``) or, at K = 1, compiled (``"cpp"``,
``csrc/irnn.cpp``), and :class:`IRNNLoop`, the PyTorch loop with a hand-written backward for the update gate
and per-time-step step sizes.

The cell is :mod:`ltdrnn.cells.irnn`; the dispatch and the operands are in :mod:`ltdrnn.ops.irnn`; the tests
that compare these paths with the cell's reference loop are in tests/cells/test_irnn.py.
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

from .common import ACTIVATION_BACKWARD_INTO, ACTIVATION_CODES, ACTIVATION_INTO, scalars
from .kernels import load_torch_ops
from .memory import empty_buffer


class FusedIRNN(torch.autograd.Function):
    """The iRNN recursion over a whole sequence, with a hand-written backward.

    In the variable ``y_i = g_i + h_{t-1}``: ``y_0 = s h_{t-1}``,
    ``y_{i+1} = y_i + eta_i (phi(M y_i + c_t) - alpha y_i)``, ``h_t = y_K - r h_{t-1}``, with ``(s, r)``
    the reading's pair (:class:`~ltdrnn.ops.irnn.IRNNOperands`) (the residual reading is simply ``h_t = y_K``).
    ``M`` is given dense (``first = M``, ``second`` empty) or as ``I + V' H`` (``first = V'``,
    ``second = H``). The PyTorch loop applies the dense ``M`` (one matmul per Euler step: fewer ops
    beat fewer FLOPs at these sizes) and maps the ``(H, H)`` gradient of M onto the factors; the compiled
    K = 1 loop applies the two factors, which costs no dispatch there (``csrc/irnn.cpp``).

    Inputs: ``x (T, B, d)``, ``weight (H, d)`` and ``bias (H,)`` of the input map ``c = weight x +
    bias``, ``h0 (B, H)``, ``first``, ``second``, ``eta (K,)``, ``alpha ()``, activation name, ``s``, ``r``,
    and ``compiled``: whether the K = 1 loops may run compiled (the ``"cpp"`` backend). Output ``(T, B, H)``.
    The PyTorch loop computes ``c`` for all steps first, a buffer of its own: with K = 1 each step
    accumulates ``M y`` into ``c_t`` in place (no copy), and the backward writes the gradient of ``c`` into
    the same memory. The compiled K = 1 loop forms each step's ``c_t`` in scratch
    rows, and its backward needs no ``(T, B, H)`` gradient either (it sums every parameter gradient step
    by step, :func:`_compiled_backward`). Saved, Euler step first so that every per-step slice and every
    per-Euler-step block is contiguous: the ``phi`` and ``y_i`` values, ``(K, T, B, H)``; the compiled
    K = 1 loop saves ``phi`` (with relu only its sign bits, :func:`_activation_record`), the outputs and, with
    low rank, ``h_{t-1} H^T`` ``(T, B, R)``.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, h0, first, second, eta, alpha, act: str, s: float, r: float, compiled: bool):
        steps, batch, hidden = x.shape[0], x.shape[1], weight.shape[0]
        k = eta.shape[0]
        etas, a = scalars(eta), float(alpha)
        phi = ACTIVATION_INTO[act]
        x, h = x.detach().contiguous(), h0.detach()  # the compiled loops read x's rows of each step
        keep = any(ctx.needs_input_grad)  # without a backward to come, one step's scratch is enough
        span = steps if keep else 1
        ctx.config = (etas, a, act, s, r)
        ctx.compiled = compiled and _compiled_loop_runs(x, k)
        # the big buffers come from empty_buffer (huge pages): their first writes are a large share of a step
        if ctx.compiled:  # the input map c_t is formed per step inside the loop: no (T, B, H) c
            outputs = empty_buffer((steps, batch, hidden), x)
            record = _activation_record(act, (span, batch, hidden), x)
            # low rank: h_{t-1} H^T of every step, (T, B, R), for the gradient of V'
            zs = x.new_empty(span, batch, second.shape[0]) if second.numel() else x.new_empty(0)
            torch.ops.ltdrnn.irnn_k1_forward(
                x, weight.detach(), bias.detach(), h.contiguous(), first.detach(), second.detach(), etas[0], a, s, r,
                ACTIVATION_CODES[act], record, zs, outputs,
            )  # fmt: skip
            ctx.save_for_backward(record, outputs, zs, first, second, h0, x, weight, bias)
            return outputs
        flat_x = x.view(-1, x.shape[-1])
        c = empty_buffer((steps, batch, hidden), flat_x)
        torch.addmm(bias.detach(), flat_x, weight.detach().t(), out=c.view(-1, hidden))
        ctx.scratch = c  # with K = 1 the backward writes dpre into it
        m = dense_operator(first.detach(), second.detach())
        m_t = m.t().contiguous()
        phis = empty_buffer((k, span, batch, hidden), c)
        inputs = empty_buffer((k, span, batch, hidden), c)  # y_0 of every step is filled in after the loop
        outputs = empty_buffer((steps, batch, hidden), c)
        pre, last = c.new_empty(batch, hidden), c.new_empty(batch, hidden)
        for t in range(steps):
            slot = t if keep else 0
            y = h if s == 1.0 else torch.mul(h, s, out=inputs[0, slot])
            for i in range(k):
                if k == 1:
                    pre = c[t].addmm_(y, m_t)
                else:
                    torch.addmm(c[t], y, m_t, out=pre)
                phi(pre, out=phis[i, slot])
                nxt = inputs[i + 1, slot] if i + 1 < k else (last if r == 1.0 else outputs[t])
                _euler_update(y, phis[i, slot], etas[i], a, nxt)
                y = nxt
            h = torch.sub(y, h, out=outputs[t]) if r == 1.0 else y
        if keep and s == 1.0:
            inputs[0, 0].copy_(h0)
            inputs[0, 1:].copy_(outputs[:-1])
        ctx.save_for_backward(phis, inputs, m, first, second, h0, x, weight)
        return outputs

    @staticmethod
    def backward(ctx, grad_outputs):
        if ctx.compiled:
            return _compiled_backward(ctx, grad_outputs)
        phis, inputs, m, first, second, h0, x, weight = ctx.saved_tensors
        etas, a, act, s, r = ctx.config
        k, steps, batch, hidden = phis.shape
        through_phi = ACTIVATION_BACKWARD_INTO[act]
        # [i, t]: gradient wrt pre_i, over eta_i; with K = 1 in the forward's c buffer (free by now)
        dpre = ctx.scratch.unsqueeze(0) if k == 1 else torch.empty_like(phis)
        grad_y = phis.new_empty(k, batch, hidden)  # [i]: gradient wrt y_{i+1} of the current step
        carry = torch.zeros_like(h0)  # gradient wrt h_{t-1}, in one reused buffer
        g_dot_phi, g_dot_y = phis.new_zeros(k), phis.new_zeros(k)
        for t in range(steps - 1, -1, -1):
            g = torch.add(grad_outputs[t], carry, out=grad_y[k - 1])
            for i in range(k - 1, -1, -1):
                d = through_phi(grad_y[i], phis[i, t], dpre[i, t])
                g_dot_phi[i] += torch.dot(grad_y[i].view(-1), phis[i, t].view(-1))
                g_dot_y[i] += torch.dot(grad_y[i].view(-1), inputs[i, t].view(-1))
                if i > 0:
                    torch.addmm(grad_y[i], d, m, beta=1 - etas[i] * a, alpha=etas[i], out=grad_y[i - 1])
            # gradient wrt h_{t-1}: s * (gradient wrt y_0) - r g, since y_0 = s h_{t-1}, h_t = y_K - r h_{t-1}
            decay = s * (1 - etas[0] * a)
            if k == 1:
                torch.addmm(g, d, m, beta=decay - r, alpha=s * etas[0], out=carry)
            else:
                torch.addmm(grad_y[0], d, m, beta=decay, alpha=s * etas[0], out=carry)
                if r == 1.0:
                    carry.sub_(g)
        flat_dpre, flat_inputs = dpre.view(k, -1, hidden), inputs.view(k, -1, hidden)
        grad_m = phis.new_zeros(hidden, hidden)
        for i in range(k):
            grad_m.addmm_(flat_dpre[i].t(), flat_inputs[i], alpha=etas[i])
        if second.numel() == 0:
            grad_first, grad_second = grad_m, None
        else:  # M = I + V' H
            grad_first, grad_second = grad_m @ second.detach().t(), first.detach().t() @ grad_m
        grad_x, grad_input_map = _input_gradients(ctx, flat_dpre)
        return _function_gradients(ctx, grad_x, grad_input_map, carry, grad_first, grad_second, g_dot_phi, g_dot_y)


def _input_gradients(ctx, flat_dpre: Tensor) -> Tuple[Tensor | None, Tuple[Tensor, Tensor]]:
    """The gradients of x (None unless wanted) and of the input map's weight and bias from those of the
    pre-activations, ``flat_dpre (K, T*B, H)`` (over eta)."""
    *_, x, weight = ctx.saved_tensors
    etas = ctx.config[0]
    k = flat_dpre.shape[0]
    # gradient of c = sum_i eta_i dpre_i; with K = 1 the factor eta_0 goes onto the small results
    if k == 1:
        grad_c, scale = flat_dpre[0], etas[0]
    else:
        grad_c, scale = torch.mul(flat_dpre[0], etas[0]), 1.0
        for i in range(1, k):
            grad_c.add_(flat_dpre[i], alpha=etas[i])
    grad_x = (grad_c @ weight.detach()).mul_(scale).view(x.shape) if ctx.needs_input_grad[0] else None
    return grad_x, ((grad_c.t() @ x.view(-1, x.shape[-1])).mul_(scale), grad_c.sum(0).mul_(scale))


def _function_gradients(
    ctx,
    grad_x: Tensor | None,
    grad_input_map: Tuple[Tensor, Tensor],
    carry: Tensor,
    grad_first: Tensor,
    grad_second: Tensor | None,
    g_dot_phi: Tensor,
    g_dot_y: Tensor,
) -> tuple:
    """The Function's gradients, in the order of its inputs, given those of x, of the input map's weight
    and bias, of h0 (``carry``), of ``M``'s ``first`` and ``second`` and the sums ``<g, phi>``, ``<g, y>``
    per Euler step (which make those of eta and alpha)."""
    etas, a = ctx.config[:2]
    eta = torch.tensor(etas, dtype=g_dot_phi.dtype, device=g_dot_phi.device)
    grad_eta = g_dot_phi - a * g_dot_y
    grad_alpha = -(eta * g_dot_y).sum()
    return (grad_x, *grad_input_map, carry, grad_first, grad_second, grad_eta, grad_alpha, None, None, None, None)


# ---- the whole time loop in compiled code (csrc/irnn.cpp) -----------------------------------------
def _compiled_loop_runs(x: Tensor, k: int) -> bool:
    """Whether both time loops run in ``csrc/irnn.cpp``: K = 1 (any reading, U dense or low rank), on
    CPU in float32/64, and the operators build here. Anything else runs the PyTorch loop."""
    return k == 1 and x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and load_torch_ops("irnn")


def _activation_record(act: str, shape: Tuple[int, int, int], like: Tensor) -> Tensor:
    """What the compiled forward keeps of phi for its backward: phi itself, ``shape``, for tanh and sigmoid;
    for relu only its sign bits, ``(T, B, ceil(H / 8))`` uint8 (relu's slope is 0 or 1, and the backward
    forms ``<g, phi>`` from the gradient sums, ``csrc/irnn.cpp``): 1/32 of phi's bytes in float32."""
    if act == "relu":
        return like.new_empty(*shape[:2], -(-shape[2] // 8), dtype=torch.uint8)
    return empty_buffer(shape, like)


def _compiled_backward(ctx, grad_outputs: Tensor) -> tuple:
    """The backward time loop in one call, which also forms every parameter gradient: each thread's block
    of rows adds its share of each step's products while that step's rows are in cache (no pass over
    ``(T, B, H)`` buffers after the loop, and the work splits over the threads), and the gradient of x
    when it is wanted. Low rank: the gradients of the factors come from ``(B, R)`` products per step,
    never from an ``(H, H)`` one."""
    record, outputs, zs, first, second, h0, x, weight, bias = ctx.saved_tensors
    etas, a, act, s, r = ctx.config
    first, second, weight, bias = first.detach(), second.detach(), weight.detach(), bias.detach()
    carry = torch.empty_like(h0)
    grad_x = torch.empty_like(x) if ctx.needs_input_grad[0] else x.new_empty(0)
    grad_first, grad_second = first.new_empty(first.shape), second.new_empty(second.shape)
    grad_weight, grad_bias = weight.new_empty(weight.shape), weight.new_empty(weight.shape[0])
    dot_phi, dot_y = torch.ops.ltdrnn.irnn_k1_backward(
        record, outputs, h0.detach().contiguous(), grad_outputs, x, zs, first, second, weight, bias, etas[0], a, s,
        r, ACTIVATION_CODES[act], carry, grad_x, grad_first, grad_second, grad_weight, grad_bias,
    )  # fmt: skip
    return _function_gradients(
        ctx,
        grad_x if ctx.needs_input_grad[0] else None,
        (grad_weight, grad_bias),
        carry,
        grad_first,
        grad_second if second.numel() else None,
        outputs.new_tensor([dot_phi]),
        outputs.new_tensor([dot_y]),
    )


def dense_operator(first: Tensor, second: Tensor) -> Tensor:
    """``M`` as an ``(H, H)`` matrix: ``first`` itself, or ``I + first @ second`` for low rank."""
    if second.numel() == 0:
        return first
    return torch.eye(first.shape[0], dtype=first.dtype, device=first.device).addmm_(first, second)


def _euler_update(y: Tensor, phi: Tensor, eta: float, alpha: float, out: Tensor) -> None:
    """``out = y + eta (phi - alpha y)`` in one op when ``alpha = 1`` (a lerp), two otherwise."""
    if alpha == 1.0:
        torch.lerp(y, phi, eta, out=out)
    else:
        torch.mul(y, 1 - eta * alpha, out=out)
        out.add_(phi, alpha=eta)


class IRNNLoop(torch.autograd.Function):
    """The iRNN recursion with the options :class:`FusedIRNN` has no compiled loop for, per-time-step
    step sizes and the update gate, as a PyTorch loop with a hand-written backward (a few operators per
    Euler step instead of the reference loop's autograd graph).

    Per step, in ``y_i = g_i + h_{t-1}`` with the reading's ``(s, r)``::

        y_0 = s h_{t-1};  y_{i+1} = y_i + eta_{t,i} (phi(M y_i + c_t) - alpha y_i);  n_t = y_K - r h_{t-1}
        h_t = n_t,  or with the gate:  u_t = sigmoid(U_g h_{t-1} + a_t),  h_t = h_{t-1} + u_t (n_t - h_{t-1})

    Inputs: ``c (T, B, H)`` the input map ``P (W x + b)`` and ``a (T, B, H)`` the gate's ``W_g x + b_g``
    (both formed outside, so autograd maps their gradients onto the weights), ``h0 (B, H)``, the dense
    ``M (H, H)``, ``eta`` ``(K,)`` or ``(T, K)``, ``alpha ()``, ``U_g (H, H)`` (empty and ``a`` empty
    without the gate), activation name, ``s``, ``r``. Output ``(T, B, H)``. Saved: ``phi`` and ``y_i``
    ``(K, T, B, H)``, and with the gate ``u`` and ``n`` ``(T, B, H)``.
    """

    @staticmethod
    def forward(ctx, c, a, h0, m, eta, alpha, gate_weight, act: str, s: float, r: float):
        steps, batch, hidden = c.shape
        k = eta.shape[-1]
        etas = torch.as_tensor(eta.detach(), dtype=torch.float64).reshape(-1, k).tolist()
        gated, al = gate_weight.numel() > 0, float(alpha)
        phi_into = ACTIVATION_INTO[act]
        c, a, h = c.detach(), a.detach(), h0.detach()
        m_t, g_t = m.detach().t().contiguous(), gate_weight.detach().t().contiguous()
        phis, ys = (c.new_empty(k, steps, batch, hidden) for _ in range(2))
        us, news = (c.new_empty(steps, batch, hidden) if gated else c.new_empty(0) for _ in range(2))
        outputs = c.new_empty(steps, batch, hidden)
        for t in range(steps):
            eta_t = etas[t if len(etas) > 1 else 0]
            y = h if s == 1.0 else torch.mul(h, s)
            for i in range(k):
                ys[i, t] = y
                phi = phi_into(torch.addmm(c[t], y, m_t), out=phis[i, t])
                y = y + eta_t[i] * (phi - al * y)
            new = y - h if r == 1.0 else y
            if gated:
                u = torch.sigmoid(torch.addmm(a[t], h, g_t), out=us[t])
                news[t] = new
                torch.addcmul(h, u, new - h, out=outputs[t])
            else:
                outputs[t] = new
            h = outputs[t]
        ctx.config = (etas, al, act, s, r, gated)
        ctx.eta_shape = eta.shape
        ctx.save_for_backward(phis, ys, us, news, outputs, h0, m, gate_weight)
        return outputs

    @staticmethod
    def backward(ctx, grad_outputs):
        phis, ys, us, news, outputs, h0, m, gate_weight = ctx.saved_tensors
        etas, al, act, s, r, gated = ctx.config
        k, steps, batch, hidden = phis.shape
        through_phi = ACTIVATION_BACKWARD_INTO[act]
        m, gate_weight = m.detach(), gate_weight.detach()
        dpre = torch.empty_like(phis)  # [i, t]: gradient of M y_i + c_t
        grad_a = torch.empty_like(us) if gated else None
        grad_eta = phis.new_zeros(len(etas), k)
        grad_alpha = phis.new_zeros(())
        carry = torch.zeros_like(h0)
        inputs = torch.cat([h0.detach().unsqueeze(0), outputs[:-1]])
        for t in range(steps - 1, -1, -1):
            eta_t, row = etas[t if len(etas) > 1 else 0], t if len(etas) > 1 else 0
            g = grad_outputs[t] + carry
            h = inputs[t]
            if gated:  # h_t = h + u (n - h)
                u = us[t]
                grad_new = g * u
                torch.mul(g * (news[t] - h), u * (1 - u), out=grad_a[t])
                carry = g - grad_new + grad_a[t] @ gate_weight
            else:
                grad_new, carry = g, torch.zeros_like(g)
            grad_y = grad_new
            for i in range(k - 1, -1, -1):
                y = ys[i, t]
                grad_eta[row, i] += torch.dot(grad_y.reshape(-1), (phis[i, t] - al * y).reshape(-1))
                grad_alpha -= eta_t[i] * torch.dot(grad_y.reshape(-1), y.reshape(-1))
                d = through_phi(grad_y * eta_t[i], phis[i, t], dpre[i, t])
                grad_y = grad_y * (1 - eta_t[i] * al) + d @ m
            carry = carry + s * grad_y - (r * grad_new if r != 0.0 else 0)
        flat = dpre.reshape(k, -1, hidden)
        grad_m = sum(flat[i].t() @ ys[i].reshape(-1, hidden) for i in range(k))
        grad_c = dpre.sum(0)
        grad_gate = grad_a.reshape(-1, hidden).t() @ inputs.reshape(-1, hidden) if gated else None
        grad_eta = grad_eta.view(ctx.eta_shape)
        return grad_c, grad_a, carry, grad_m, grad_eta, grad_alpha, grad_gate, None, None, None
