"""iRNN's time loop in Triton, any K, forward and backward each in one launch (torch operators
``ltdrnn::irnn_triton_forward`` / ``ltdrnn::irnn_triton_backward``).

With ``y_0 = s h_{t-1}`` (``s``, ``r``: the reading's pair, :class:`~ltdrnn.ops.irnn.IRNNOperands`)::

    pre_k = M y_k + c_t,   phi_k = act(pre_k),   y_{k+1} = y_k + eta_k (phi_k - alpha y_k)   (k < K)
    h_t = y_K - r h_{t-1}

With the authors' gate (``gate="outside"``) the step's result is ``h_{t-1} + u_t (h_t - h_{t-1})``, ``u_t =
sigmoid(U_g h_{t-1} + a_t)``, ``a = W_g x + b_g`` one GEMM before the launch; ``eta`` is shared ``(K,)`` or one
row per time step ``(T, K)`` (the call's rows).

``c = P W x + P b`` (the input map) is one GEMM in PyTorch before the launch, and ``M`` (``P U``, dense: the
low-rank factors are multiplied out in PyTorch, whose autograd maps the gradient back onto them) is read by
the kernel. Layout and precision as every matrix kernel (:mod:`ltdrnn.ops.triton_support`): one
program per block of batch rows runs all T steps; ``M y_0`` reads ``h_{t-1}`` back from the ``states`` buffer
``(T + 1, B, H)`` whose row 0 is ``h0``, ``M y_k`` (k >= 1) reads ``y_k`` back from scratch rows. The forward
keeps ``phi`` ``(T, B, K*H)`` only; the backward forms ``y_1 .. y_{K-1}`` again from it (elementwise, and
written out for ``dL/dM``), writes ``dL/dpre`` ``(T, B, K*H)`` (their sum over k is ``dL/dc``) and the gate's
``dL/da``, from which ``dL/dM`` and ``dL/dU_g`` are one GEMM each after the launch, and each step's and
program's share of ``dL/deta`` and ``dL/dalpha``.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from .common import ACTIVATION_CODES
from .triton_blocks import (
    activate,
    activation_slope,
    kernel_state_dtype,
    launch_options,
    rows_times_matrix,
    sequence_lengths,
    sigmoid,
    step_size,
)
from .triton_support import SAVED_DTYPES, Operands, grid, lengths_operand

FORWARD, BACKWARD = "ltdrnn::irnn_triton_forward", "ltdrnn::irnn_triton_backward"


@triton.jit
def _forward_kernel(c_ptr, a_ptr, m_ptr, ug_ptr, eta_ptr, alpha_ptr, len_ptr, states_ptr, phis_ptr, us_ptr, y_ptr, B,
                    T, H, K, S: tl.constexpr, R: tl.constexpr, HAS_LENGTHS: tl.constexpr, ACT: tl.constexpr,
                    GATED: tl.constexpr, PER_STEP: tl.constexpr, BB: tl.constexpr, HP: tl.constexpr,
                    BK: tl.constexpr, DOT: tl.constexpr, PREC: tl.constexpr, ACC: tl.constexpr):  # fmt: skip
    rows = tl.program_id(0).to(tl.int64) * BB + tl.arange(0, BB)  # 64-bit offsets: B * H can pass 2^31
    plane = tl.cast(B, tl.int64) * H  # one time step's rows
    cols = tl.arange(0, HP)
    row_mask = rows < B
    mask = row_mask[:, None] & (cols < H)[None, :]
    block = rows[:, None] * H + cols[None, :]
    phi_block = rows[:, None] * K * H + cols[None, :]  # a row of phis holds its K Euler steps side by side
    alpha = tl.load(alpha_ptr).to(ACC)
    length = sequence_lengths(len_ptr, rows, row_mask, T, BB, HAS_LENGTHS)
    h = tl.load(states_ptr + block, mask=mask, other=0.0).to(ACC)
    for t in range(T):
        step = t * plane
        alive = (t < length)[:, None]
        live = mask & alive  # a row's inputs past its length are never read (they may hold anything, NaN too)
        c = tl.load(c_ptr + step + block, mask=live, other=0.0).to(ACC)
        y = S * h
        for k in range(K):
            if k > 0:  # M y_k reads y_k back from the scratch rows
                tl.store(y_ptr + block, y, mask=mask)
                tl.debug_barrier()
                my = rows_times_matrix(y_ptr, H, rows, row_mask, H, m_ptr, 1, H, H, BB, HP, BK, DOT, PREC, ACC)
                tl.debug_barrier()  # the scratch rows are written again by the next Euler step
            else:  # y_0 = S h_{t-1}: the state rows the step before wrote
                my = S * rows_times_matrix(states_ptr + step, H, rows, row_mask, H, m_ptr, 1, H, H, BB, HP, BK, DOT,
                                           PREC, ACC)  # fmt: skip
            phi = activate(my + c, ACT)
            tl.store(phis_ptr + step * K + phi_block + k * H, phi, mask=mask)
            y += step_size(eta_ptr, t, k, K, PER_STEP, ACC) * (phi - alpha * y)
        new = y - R * h
        if GATED:  # the authors' gate after the Euler steps: h + u (new - h), u = sigmoid(U_g h + a_t)
            gh = rows_times_matrix(states_ptr + step, H, rows, row_mask, H, ug_ptr, 1, H, H, BB, HP, BK, DOT, PREC,
                                   ACC)  # fmt: skip
            u = sigmoid(gh + tl.load(a_ptr + step + block, mask=live, other=0.0).to(ACC))
            new = h + u * (new - h)
            tl.store(us_ptr + step + block, u, mask=mask)
        h = tl.where(alive, new, 0.0)
        tl.store(states_ptr + step + plane + block, h, mask=mask)
        tl.debug_barrier()  # the next step reads this step's state rows back


@triton.jit
def _backward_kernel(grad_ptr, states_ptr, phis_ptr, us_ptr, m_ptr, ug_ptr, eta_ptr, alpha_ptr, len_ptr, dpre_ptr,
                     da_ptr, ys_ptr, dh0_ptr, eta_sums_ptr, alpha_sums_ptr, B, T, H, K, S: tl.constexpr,
                     R: tl.constexpr, HAS_LENGTHS: tl.constexpr, ACT: tl.constexpr, GATED: tl.constexpr,
                     PER_STEP: tl.constexpr, BB: tl.constexpr, HP: tl.constexpr, BK: tl.constexpr, DOT: tl.constexpr,
                     PREC: tl.constexpr, ACC: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    rows = pid.to(tl.int64) * BB + tl.arange(0, BB)  # 64-bit offsets: B * H can pass 2^31
    plane = tl.cast(B, tl.int64) * H  # one time step's rows
    cols = tl.arange(0, HP)
    row_mask = rows < B
    mask = row_mask[:, None] & (cols < H)[None, :]
    block = rows[:, None] * H + cols[None, :]
    phi_block = rows[:, None] * K * H + cols[None, :]
    y_block = rows[:, None] * (K - 1) * H + cols[None, :]  # y_1 .. y_{K-1} side by side
    alpha = tl.load(alpha_ptr).to(ACC)
    length = sequence_lengths(len_ptr, rows, row_mask, T, BB, HAS_LENGTHS)
    carry = tl.zeros((BB, HP), dtype=ACC)  # dL/dh_t through the steps after t
    alpha_sum = tl.zeros((BB, HP), dtype=ACC)
    for back in range(T):
        t = T - 1 - back
        step = t * plane
        alive = (t < length)[:, None]
        g = tl.where(alive, tl.load(grad_ptr + step + plane + block, mask=mask, other=0.0).to(ACC) + carry, 0.0)
        h = tl.load(states_ptr + step + block, mask=mask, other=0.0).to(ACC)
        y0 = S * h
        y = y0  # the Euler steps again from the saved phi: y_1 .. y_{K-1} into ys, y_K here
        for k in range(K):
            if k > 0:
                tl.store(ys_ptr + step * (K - 1) + y_block + (k - 1) * H, y, mask=mask)
            phi = tl.load(phis_ptr + step * K + phi_block + k * H, mask=mask, other=0.0).to(ACC)
            y += step_size(eta_ptr, t, k, K, PER_STEP, ACC) * (phi - alpha * y)
        past = tl.zeros((BB, HP), dtype=ACC)  # dL/dh_{t-1} outside the Euler steps' own terms
        if GATED:
            u = tl.load(us_ptr + step + block, mask=mask, other=0.0).to(ACC)
            da = tl.where(alive, g * (y - R * h - h) * u * (1.0 - u), 0.0)
            tl.store(da_ptr + step + block, da, mask=mask)
            past = g * (1.0 - u)
            g = g * u  # dL/d(the Euler steps' result)
        tl.debug_barrier()  # y_k, written above, is read back below
        gy = g  # dL/dy_{k+1}
        for back_k in range(K):
            k = K - 1 - back_k
            if k > 0:
                yk = tl.load(ys_ptr + step * (K - 1) + y_block + (k - 1) * H, mask=mask, other=0.0).to(ACC)
            else:
                yk = y0
            phi = tl.load(phis_ptr + step * K + phi_block + k * H, mask=mask, other=0.0).to(ACC)
            eta = step_size(eta_ptr, t, k, K, PER_STEP, ACC)
            share = tl.where(alive, gy * (phi - alpha * yk), 0.0)
            tl.store(eta_sums_ptr + (tl.cast(t, tl.int64) * programs + pid) * K + k, tl.sum(tl.sum(share, axis=1), 0))
            alpha_sum += tl.where(alive, eta * gy * yk, 0.0)
            dpre_k = dpre_ptr + step * K + k * H
            tl.store(dpre_k + phi_block, tl.where(alive, eta * gy * activation_slope(phi, ACT), 0.0), mask=mask)
            tl.debug_barrier()  # the product below reads this Euler step's dpre (and da) rows back
            md = rows_times_matrix(dpre_k, K * H, rows, row_mask, H, m_ptr, H, 1, H, BB, HP, BK, DOT, PREC, ACC)
            gy = gy * (1.0 - eta * alpha) + md
        if GATED:
            past += rows_times_matrix(da_ptr + step, H, rows, row_mask, H, ug_ptr, H, 1, H, BB, HP, BK, DOT, PREC,
                                      ACC)  # fmt: skip
        carry = tl.where(alive, past + S * gy - R * g, 0.0)
    dh0 = carry + tl.load(grad_ptr + block, mask=mask, other=0.0).to(ACC)
    tl.store(dh0_ptr + block, dh0, mask=mask)
    tl.store(alpha_sums_ptr + pid, -tl.sum(tl.sum(alpha_sum, axis=1), axis=0))


def _check_gated(check: Operands, name: str, t: Tensor, gated: bool, shape: tuple, **kind) -> None:
    """``t`` (the gate's ``a`` or ``u``) of ``shape`` with the gate, empty without it (``ug`` decides)."""
    if gated:
        check.tensor(name, t, "(T, B, H)", shape, **kind)
    elif t.numel():
        raise ValueError(f"{check.op}: {name} must be empty without the gate (ug is empty), got shape {tuple(t.shape)}")


def _check_shared(check: Operands, steps: int, batch: int, hidden: int, m, ug, eta, alpha, lengths, activation, s,
                  r) -> None:  # fmt: skip
    """The operands forward and backward share: M, the gate's U_g, the step sizes, alpha, lengths and the codes."""
    check.tensor("m", m, "(H, H)", (hidden, hidden))
    if ug.numel():
        check.tensor("ug", ug, "(H, H)", (hidden, hidden))
    check.step_sizes(eta, steps)
    if alpha.numel() != 1 or alpha.dim() > 1:
        raise ValueError(f"{check.op}: alpha must be a () or (1,) tensor, got shape {tuple(alpha.shape)}")
    check.kind("alpha", alpha)
    check.lengths(lengths, batch, steps)
    check.activation(activation)
    check.finite("s", s)
    check.finite("r", r)


def _check_forward(c, a, h0, m, ug, eta, alpha, lengths, activation, s, r) -> None:
    check = Operands(FORWARD, "c", c, "(T, B, H)")
    steps, batch, hidden = c.shape
    _check_gated(check, "a", a, ug.numel() > 0, c.shape)
    check.tensor("h0", h0, "(B, H)", (batch, hidden))
    _check_shared(check, steps, batch, hidden, m, ug, eta, alpha, lengths, activation, s, r)


def _check_backward(grad, states, phis, us, m, ug, eta, alpha, lengths, activation, s, r) -> None:
    check = Operands(BACKWARD, "phis", phis, "(T, B, K*H)", SAVED_DTYPES, contiguous=True)
    steps, batch, width = phis.shape
    saved = dict(dtypes=(phis.dtype,), contiguous=True)
    check.tensor("states", states, "(T + 1, B, H)", (steps + 1, batch, None), **saved)
    hidden = states.shape[2]
    _check_shared(check, steps, batch, hidden, m, ug, eta, alpha, lengths, activation, s, r)
    check.tensor("phis", phis, "(T, B, K*H)", (steps, batch, eta.shape[-1] * hidden), **saved)
    _check_gated(check, "us", us, ug.numel() > 0, (steps, batch, hidden), **saved)
    check.tensor("grad", grad, "(T + 1, B, H)", (steps + 1, batch, hidden))


@torch.library.custom_op("ltdrnn::irnn_triton_forward", mutates_args=())
def irnn_forward(
    c: Tensor, a: Tensor, h0: Tensor, m: Tensor, ug: Tensor, eta: Tensor, alpha: Tensor, lengths: Optional[Tensor],
    activation: int, s: float, r: float,
) -> Tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """``c (T, B, H)``, the gate's ``a (T, B, H)`` (empty without the gate), ``h0 (B, H)``, ``M (H, H)``, ``U_g
    (H, H)`` (empty without the gate), ``eta (K,)`` shared or ``(T, K)`` per time step, ``alpha (1,)`` ->
    ``states (T + 1, B, H)`` (row 0 ``h0``, then ``h_t``, 0 past lengths), ``phi (T, B, K*H)`` (each row's K Euler
    steps side by side) and the gate's ``u`` ``(T, B, H)`` (empty without it), in float32 (float64 for float64
    h0)."""
    _check_forward(c, a, h0, m, ug, eta, alpha, lengths, activation, s, r)
    steps, batch, hidden = c.shape
    k = eta.shape[-1]
    dtype = kernel_state_dtype(h0)
    gated = ug.numel() > 0
    states = c.new_empty((steps + 1, batch, hidden), dtype=dtype)
    states[0] = h0
    phis = c.new_empty((steps, batch, k * hidden), dtype=dtype)
    us = c.new_empty((steps, batch, hidden) if gated else (0,), dtype=dtype)
    scratch = c.new_empty((batch, hidden) if k > 1 else (1,), dtype=dtype)  # y_k for the product M y_k
    _forward_kernel[grid(batch)](
        c.contiguous(), a.contiguous() if gated else c, m.contiguous(), ug.contiguous() if gated else m,
        eta.to(dtype).contiguous(), alpha.to(dtype).reshape(1), lengths_operand(lengths, c), states, phis,
        us if gated else phis, scratch, batch, steps, hidden, k, S=s, R=r, HAS_LENGTHS=lengths is not None,
        ACT=activation, GATED=gated, PER_STEP=eta.dim() == 2, **launch_options(hidden, m, dtype),
    )  # fmt: skip
    return states, phis, us


@irnn_forward.register_fake
def _(c, a, h0, m, ug, eta, alpha, lengths, activation, s, r):
    dtype = kernel_state_dtype(h0)
    us = c.new_empty(c.shape if ug.numel() > 0 else (0,), dtype=dtype)
    phis = c.new_empty((*c.shape[:2], eta.shape[-1] * c.shape[2]), dtype=dtype)
    return c.new_empty((c.shape[0] + 1, *c.shape[1:]), dtype=dtype), phis, us


@torch.library.custom_op("ltdrnn::irnn_triton_backward", mutates_args=())
def irnn_backward(
    grad: Tensor, states: Tensor, phis: Tensor, us: Tensor, m: Tensor, ug: Tensor, eta: Tensor, alpha: Tensor,
    lengths: Optional[Tensor], activation: int, s: float, r: float,
) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """``dL/dstates (T + 1, B, H)`` -> ``dL/dpre (T, B, K*H)``, the gate's ``dL/da (T, B, H)`` (empty without it),
    ``dL/dh0 (B, H)``, the shares of ``dL/deta`` ``(T, programs, K)`` and of ``dL/dalpha`` ``(programs,)``, and
    ``y_1 .. y_{K-1}`` ``(T, B, (K-1)*H)`` (formed again from phi, for ``dL/dM``)."""
    _check_backward(grad, states, phis, us, m, ug, eta, alpha, lengths, activation, s, r)
    steps, batch, hidden = states.shape[0] - 1, states.shape[1], states.shape[2]
    k = eta.shape[-1]
    gated, programs = ug.numel() > 0, grid(batch)[0]
    dpre, dh0 = torch.empty_like(phis), phis.new_empty(batch, hidden)
    da = phis.new_empty((steps, batch, hidden) if gated else (0,))
    ys = phis.new_empty((steps, batch, (k - 1) * hidden))
    eta_sums, alpha_sums = phis.new_empty((steps, programs, k)), phis.new_empty(programs)
    _backward_kernel[grid(batch)](
        grad.to(phis.dtype).contiguous(), states, phis, us if gated else phis, m.contiguous(),
        ug.contiguous() if gated else m, eta.to(phis.dtype).contiguous(), alpha.to(phis.dtype).reshape(1),
        lengths_operand(lengths, phis), dpre, da if gated else dpre, ys if k > 1 else dpre, dh0, eta_sums,
        alpha_sums, batch, steps, hidden, k, S=s, R=r, HAS_LENGTHS=lengths is not None, ACT=activation, GATED=gated,
        PER_STEP=eta.dim() == 2, **launch_options(hidden, m, phis.dtype),
    )  # fmt: skip
    return dpre, da, dh0, eta_sums, alpha_sums, ys


@irnn_backward.register_fake
def _(grad, states, phis, us, m, ug, eta, alpha, lengths, activation, s, r):
    steps, batch, hidden = states.shape[0] - 1, states.shape[1], states.shape[2]
    programs, k = grid(batch)[0], eta.shape[-1]
    da = phis.new_empty((steps, batch, hidden) if ug.numel() > 0 else (0,))
    ys = phis.new_empty((steps, batch, (k - 1) * hidden))
    eta_sums = phis.new_empty((steps, programs, k))
    return torch.empty_like(phis), da, phis.new_empty(batch, hidden), eta_sums, phis.new_empty(programs), ys


def _setup(ctx, inputs, output):
    c, a, h0, m, ug, eta, alpha, lengths, activation, s, r = inputs
    states, phis, us = output
    ctx.save_for_backward(states, phis, us, m, ug, eta, alpha, lengths)
    ctx.options = (activation, s, r)
    ctx.dtypes = (c.dtype, a.dtype, h0.dtype, m.dtype, ug.dtype, eta.dtype, alpha.dtype)


def _backward(ctx, grad_states, _grad_phis, _grad_us):
    states, phis, us, m, ug, eta, alpha, lengths = ctx.saved_tensors
    activation, s, r = ctx.options
    dpre, da, dh0, eta_sums, alpha_sums, ys = irnn_backward(grad_states, states, phis, us, m, ug, eta, alpha,
                                                            lengths, activation, s, r)  # fmt: skip
    hidden, k = states.shape[-1], eta.shape[-1]
    previous = states[:-1].reshape(-1, hidden)
    dpre = dpre.view(-1, k, hidden)  # (T B, K, H)
    # pre_k = M y_k + c, y_0 = s h_{t-1}: dL/dM = s sum dpre_0^T h_{t-1} + sum_{k>0} dpre_k^T y_k, one product each
    # over all steps and rows; U_g alike
    dm = s * (dpre[:, 0].t() @ previous)
    if k > 1:
        dm += dpre[:, 1:].reshape(-1, hidden).t() @ ys.view(-1, hidden)
    c_dtype, a_dtype, h_dtype, m_dtype, ug_dtype, eta_dtype, alpha_dtype = ctx.dtypes
    gated = ug.numel() > 0
    dug = (da.reshape(-1, hidden).t() @ previous).to(ug_dtype) if gated else None
    d_eta = eta_sums.sum(1) if eta.dim() == 2 else eta_sums.sum((0, 1))  # (T, K) or (K,)
    grad_alpha = alpha_sums.sum().to(alpha_dtype).reshape(alpha.shape)
    dc = (dpre.sum(1) if k > 1 else dpre[:, 0]).reshape(states[1:].shape)  # c joins every Euler step
    return (dc.to(c_dtype), da.to(a_dtype) if gated else None, dh0.to(h_dtype), dm.to(m_dtype), dug,
            d_eta.to(eta_dtype), grad_alpha, None, None, None, None)  # fmt: skip


irnn_forward.register_autograd(_backward, setup_context=_setup)


def irnn_scan(c: Tensor, a: Tensor, h0: Tensor, m: Tensor, ug: Tensor, eta: Tensor, alpha: Tensor,
              lengths: Tensor | None, activation: str, s: float, r: float) -> Tensor:  # fmt: skip
    """The cell's entry: outputs ``(T, B, H)`` in h0's dtype (0 past each length); ``a`` and ``ug`` empty without
    the gate, ``eta`` ``(K,)`` or this call's rows ``(T, K)``."""
    states, _, _ = irnn_forward(c, a, h0, m, ug, eta, alpha, lengths, ACTIVATION_CODES[activation], s, r)
    return states[1:].to(h0.dtype)
