"""iRNN's time loop in Triton at K = 1, forward and backward each in one launch (torch operators
``ltdrnn::irnn_triton_forward`` / ``ltdrnn::irnn_triton_backward``).

With ``y_0 = s h_{t-1}`` (``s``, ``r``: the reading's pair, :data:`ltdrnn.cells.irnn.READINGS`)::

    pre_t = M y_0 + c_t,   phi_t = act(pre_t),   h_t = y_0 + eta (phi_t - alpha y_0) - r h_{t-1}

``c = P W x + P b`` (the input map) is one GEMM in PyTorch before the launch, and ``M`` (``P U``, dense: the
low-rank factors are multiplied out in PyTorch, whose autograd maps the gradient back onto them) is read by
the kernel. Layout and precision as every matrix kernel (:mod:`ltdrnn.cells.fused.triton_support`): one
program per block of batch rows runs all T steps; each step's ``M y_0`` reads ``h_{t-1}`` back from the
``states`` buffer ``(T + 1, B, H)`` whose row 0 is ``h0``. The forward keeps ``phi`` ``(T, B, H)``; the backward
writes ``dL/dpre`` ``(T, B, H)`` (which is ``dL/dc``), from which ``dL/dM`` is one GEMM after the launch, and
sums ``dL/deta`` and ``dL/dalpha`` per program.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from .triton_blocks import (
    ACTIVATION_CODES,
    activate,
    activation_slope,
    kernel_state_dtype,
    launch_options,
    rows_times_matrix,
    sequence_lengths,
)
from .triton_support import grid, lengths_operand


@triton.jit
def _forward_kernel(c_ptr, m_ptr, eta_ptr, alpha_ptr, len_ptr, states_ptr, phis_ptr, B, T, H,
                    S: tl.constexpr, R: tl.constexpr, HAS_LENGTHS: tl.constexpr, ACT: tl.constexpr,
                    BB: tl.constexpr, HP: tl.constexpr, BK: tl.constexpr, DOT: tl.constexpr,
                    PREC: tl.constexpr, ACC: tl.constexpr):  # fmt: skip
    rows = tl.program_id(0) * BB + tl.arange(0, BB)
    cols = tl.arange(0, HP)
    row_mask = rows < B
    mask = row_mask[:, None] & (cols < H)[None, :]
    block = rows[:, None] * H + cols[None, :]
    eta = tl.load(eta_ptr).to(ACC)
    alpha = tl.load(alpha_ptr).to(ACC)
    length = sequence_lengths(len_ptr, rows, row_mask, T, BB, HAS_LENGTHS)
    h = tl.load(states_ptr + block, mask=mask, other=0.0).to(ACC)
    for t in range(T):
        step = tl.cast(t, tl.int64) * B * H
        mh = rows_times_matrix(states_ptr + step, H, rows, row_mask, H, m_ptr, 1, H, H, BB, HP, BK, DOT, PREC, ACC)
        pre = S * mh + tl.load(c_ptr + step + block, mask=mask, other=0.0).to(ACC)
        phi = activate(pre, ACT)
        y0 = S * h
        h = tl.where((t < length)[:, None], y0 + eta * (phi - alpha * y0) - R * h, 0.0)
        tl.store(phis_ptr + step + block, phi, mask=mask)
        tl.store(states_ptr + step + B * H + block, h, mask=mask)
        tl.debug_barrier()  # the next step reads this step's state rows back


@triton.jit
def _backward_kernel(grad_ptr, states_ptr, phis_ptr, m_ptr, eta_ptr, alpha_ptr, len_ptr, dpre_ptr, dh0_ptr,
                     sums_ptr, B, T, H, S: tl.constexpr, R: tl.constexpr, HAS_LENGTHS: tl.constexpr,
                     ACT: tl.constexpr, BB: tl.constexpr, HP: tl.constexpr, BK: tl.constexpr, DOT: tl.constexpr,
                     PREC: tl.constexpr, ACC: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    rows = pid * BB + tl.arange(0, BB)
    cols = tl.arange(0, HP)
    row_mask = rows < B
    mask = row_mask[:, None] & (cols < H)[None, :]
    block = rows[:, None] * H + cols[None, :]
    eta = tl.load(eta_ptr).to(ACC)
    alpha = tl.load(alpha_ptr).to(ACC)
    length = sequence_lengths(len_ptr, rows, row_mask, T, BB, HAS_LENGTHS)
    carry = tl.zeros((BB, HP), dtype=ACC)  # dL/dh_t through the steps after t
    eta_sum = tl.zeros((BB, HP), dtype=ACC)
    alpha_sum = tl.zeros((BB, HP), dtype=ACC)
    for back in range(T):
        t = T - 1 - back
        step = tl.cast(t, tl.int64) * B * H
        alive = (t < length)[:, None]
        g = tl.where(alive, tl.load(grad_ptr + step + B * H + block, mask=mask, other=0.0).to(ACC) + carry, 0.0)
        phi = tl.load(phis_ptr + step + block, mask=mask, other=0.0).to(ACC)
        y0 = S * tl.load(states_ptr + step + block, mask=mask, other=0.0).to(ACC)
        dpre = tl.where(alive, eta * g * activation_slope(phi, ACT), 0.0)
        eta_sum += tl.where(alive, g * (phi - alpha * y0), 0.0)
        alpha_sum += tl.where(alive, g * y0, 0.0)
        tl.store(dpre_ptr + step + block, dpre, mask=mask)
        tl.debug_barrier()  # the product below reads this step's dpre rows back
        md = rows_times_matrix(dpre_ptr + step, H, rows, row_mask, H, m_ptr, H, 1, H, BB, HP, BK, DOT, PREC, ACC)
        carry = tl.where(alive, S * (g * (1.0 - eta * alpha) + md) - R * g, 0.0)
    dh0 = carry + tl.load(grad_ptr + block, mask=mask, other=0.0).to(ACC)
    tl.store(dh0_ptr + block, dh0, mask=mask)
    tl.store(sums_ptr + 2 * pid, tl.sum(tl.sum(eta_sum, axis=1), axis=0))
    tl.store(sums_ptr + 2 * pid + 1, -eta * tl.sum(tl.sum(alpha_sum, axis=1), axis=0))


@torch.library.custom_op("ltdrnn::irnn_triton_forward", mutates_args=())
def irnn_forward(
    c: Tensor, h0: Tensor, m: Tensor, eta: Tensor, alpha: Tensor, lengths: Optional[Tensor], activation: int,
    s: float, r: float,
) -> Tuple[Tensor, Tensor]:  # fmt: skip
    """``c (T, B, H)``, ``h0 (B, H)``, ``M (H, H)``, ``eta (1,)``, ``alpha (1,)`` -> ``states (T + 1, B, H)``
    (row 0 ``h0``, then ``h_t``, 0 past lengths) and ``phi (T, B, H)``, in float32 (float64 for float64 h0)."""
    steps, batch, hidden = c.shape
    dtype = kernel_state_dtype(h0)
    states = c.new_empty((steps + 1, batch, hidden), dtype=dtype)
    states[0] = h0
    phis = c.new_empty((steps, batch, hidden), dtype=dtype)
    _forward_kernel[grid(batch)](
        c.contiguous(), m.contiguous(), eta.to(dtype).contiguous(), alpha.to(dtype).reshape(1),
        lengths_operand(lengths, c), states, phis, batch, steps, hidden, S=s, R=r,
        HAS_LENGTHS=lengths is not None, ACT=activation, **launch_options(hidden, m, dtype),
    )  # fmt: skip
    return states, phis


@irnn_forward.register_fake
def _(c, h0, m, eta, alpha, lengths, activation, s, r):
    dtype = kernel_state_dtype(h0)
    return c.new_empty((c.shape[0] + 1, *c.shape[1:]), dtype=dtype), c.new_empty(c.shape, dtype=dtype)


@torch.library.custom_op("ltdrnn::irnn_triton_backward", mutates_args=())
def irnn_backward(
    grad: Tensor, states: Tensor, phis: Tensor, m: Tensor, eta: Tensor, alpha: Tensor, lengths: Optional[Tensor],
    activation: int, s: float, r: float,
) -> Tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """``dL/dstates (T + 1, B, H)`` -> ``dL/dpre (T, B, H)``, ``dL/dh0 (B, H)`` and ``[dL/deta, dL/dalpha]``."""
    steps, batch, hidden = phis.shape
    dpre, dh0 = torch.empty_like(phis), phis.new_empty(batch, hidden)
    sums = phis.new_empty(grid(batch)[0], 2)
    _backward_kernel[grid(batch)](
        grad.to(phis.dtype).contiguous(), states, phis, m.contiguous(), eta.to(phis.dtype).contiguous(),
        alpha.to(phis.dtype).reshape(1), lengths_operand(lengths, phis), dpre, dh0, sums, batch, steps, hidden,
        S=s, R=r, HAS_LENGTHS=lengths is not None, ACT=activation, **launch_options(hidden, m, phis.dtype),
    )  # fmt: skip
    return dpre, dh0, sums.sum(0)


@irnn_backward.register_fake
def _(grad, states, phis, m, eta, alpha, lengths, activation, s, r):
    return torch.empty_like(phis), phis.new_empty(phis.shape[1:]), phis.new_empty(2)


def _setup(ctx, inputs, output):
    c, h0, m, eta, alpha, lengths, activation, s, r = inputs
    states, phis = output
    ctx.save_for_backward(states, phis, m, eta, alpha, lengths)
    ctx.options = (activation, s, r)
    ctx.dtypes = (c.dtype, h0.dtype, m.dtype, eta.dtype, alpha.dtype)


def _backward(ctx, grad_states, _grad_phis):
    states, phis, m, eta, alpha, lengths = ctx.saved_tensors
    activation, s, r = ctx.options
    dpre, dh0, sums = irnn_backward(grad_states, states, phis, m, eta, alpha, lengths, activation, s, r)
    hidden = phis.shape[-1]
    # pre = M (s h_{t-1}) + c: dL/dM = s sum_t dpre_t^T h_{t-1}, one product over all steps and rows
    dm = s * (dpre.reshape(-1, hidden).t() @ states[:-1].reshape(-1, hidden))
    c_dtype, h_dtype, m_dtype, eta_dtype, alpha_dtype = ctx.dtypes
    grad_alpha = sums[1].to(alpha_dtype).reshape(alpha.shape)
    return (dpre.to(c_dtype), dh0.to(h_dtype), dm.to(m_dtype), sums[:1].to(eta_dtype), grad_alpha,
            None, None, None, None)  # fmt: skip


irnn_forward.register_autograd(_backward, setup_context=_setup)


def irnn_scan(c: Tensor, h0: Tensor, m: Tensor, eta: Tensor, alpha: Tensor, lengths: Tensor | None, activation: str,
              s: float, r: float) -> Tensor:  # fmt: skip
    """The cell's entry at K = 1: outputs ``(T, B, H)`` in h0's dtype (0 past each length)."""
    states, _ = irnn_forward(c, h0, m, eta, alpha, lengths, ACTIVATION_CODES[activation], s, r)
    return states[1:].to(h0.dtype)
