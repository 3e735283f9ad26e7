"""SRNN's time loop in Triton: ``h_t = act(roll(h_{t-1}, 1) + beta_t)`` over all t, forward and backward
each in one launch (torch operators ``ltdrnn::srnn_triton_forward`` / ``ltdrnn::srnn_triton_backward``).

SRNN's recurrence has no matrix: in the co-rotating frame ``g_t[i] = h_t[(i + t + 1) mod H]`` the shift
disappears and every ``(b, i)`` lane runs ``g_t = act(g_{t-1} + beta_t[(i + t + 1) mod H])`` on its own.
So a program owns a block of lanes of the flattened ``(B, H)`` state (no barrier, no product) and reads and
writes each step's element ``(i + t + 1) mod H``; neighbouring lanes touch neighbouring addresses, which
keeps the accesses coalesced. The backward runs the same frame in reverse:
``dz_t = act'(h_t) (dL/dh_t + dz_{t+1})`` at the same element, and ``dL/dh0[i]`` is lane i's last ``dz``.

``beta`` (f_r and the gate) is PyTorch's, with its autograd, before the launch. Steps at or past a row's
length write 0 and pass no gradient; the cell takes the final state at each length from the outputs.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from .triton_blocks import (
    activate,
    activation_slope,
    compute_type,
    kernel_state_dtype,
)
from .triton_support import SAVED_DTYPES, Operands, lengths_operand

#: Lanes (elements of the flattened (B, H) state) per program.
LANES = 256


@triton.jit
def _forward_kernel(beta_ptr, h0_ptr, len_ptr, out_ptr, B, T, H, HAS_LENGTHS: tl.constexpr, ACT: tl.constexpr,
                    LANES: tl.constexpr, COMPUTE: tl.constexpr):  # fmt: skip
    lane = tl.program_id(0).to(tl.int64) * LANES + tl.arange(0, LANES)  # 64-bit offsets: B * H can pass 2^31
    valid = lane < tl.cast(B, tl.int64) * H
    row = lane // H
    unit = (lane % H).to(tl.int32)  # the rotation (unit + t + 1) % H stays in 32 bits
    g = tl.load(h0_ptr + lane, mask=valid, other=0.0).to(COMPUTE)
    if HAS_LENGTHS:
        length = tl.load(len_ptr + row, mask=valid, other=0)
    else:
        length = T
    for t in range(T):
        offset = (t * tl.cast(B, tl.int64) + row) * H + (unit + t + 1) % H
        g = activate(g + tl.load(beta_ptr + offset, mask=valid, other=0.0).to(COMPUTE), ACT)
        out = tl.where(t < length, g, 0.0)
        tl.store(out_ptr + offset, out.to(out_ptr.dtype.element_ty), mask=valid)


@triton.jit
def _backward_kernel(grad_ptr, out_ptr, len_ptr, dbeta_ptr, dh0_ptr, B, T, H, HAS_LENGTHS: tl.constexpr,
                     ACT: tl.constexpr, LANES: tl.constexpr, COMPUTE: tl.constexpr):  # fmt: skip
    lane = tl.program_id(0).to(tl.int64) * LANES + tl.arange(0, LANES)  # 64-bit offsets: B * H can pass 2^31
    valid = lane < tl.cast(B, tl.int64) * H
    row = lane // H
    unit = (lane % H).to(tl.int32)  # the rotation (unit + t + 1) % H stays in 32 bits
    if HAS_LENGTHS:
        length = tl.load(len_ptr + row, mask=valid, other=0)
    else:
        length = T
    carry = tl.zeros((LANES,), dtype=COMPUTE)
    for step in range(T):
        t = T - 1 - step
        offset = (t * tl.cast(B, tl.int64) + row) * H + (unit + t + 1) % H
        h = tl.load(out_ptr + offset, mask=valid, other=0.0).to(COMPUTE)
        grad = tl.load(grad_ptr + offset, mask=valid, other=0.0).to(COMPUTE)
        dz = tl.where(t < length, (grad + carry) * activation_slope(h, ACT), 0.0)
        tl.store(dbeta_ptr + offset, dz.to(dbeta_ptr.dtype.element_ty), mask=valid)
        carry = dz
    tl.store(dh0_ptr + lane, carry.to(dh0_ptr.dtype.element_ty), mask=valid)


def _launch_grid(batch: int, hidden: int) -> tuple:
    return (triton.cdiv(batch * hidden, LANES),)


@torch.library.custom_op("ltdrnn::srnn_triton_forward", mutates_args=())
def srnn_forward(beta: Tensor, h0: Tensor, lengths: Optional[Tensor], activation: int) -> Tensor:
    """``beta (T, B, H)`` (any float dtype), ``h0 (B, H)`` -> ``h (T, B, H)``, 0 past lengths, in float32
    (float64 for a float64 h0)."""
    check = Operands("ltdrnn::srnn_triton_forward", "beta", beta, "(T, B, H)")
    steps, batch, hidden = beta.shape
    check.tensor("h0", h0, "(B, H)", (batch, hidden))
    check.lengths(lengths, batch, steps)
    check.activation(activation)
    beta, h0 = beta.contiguous(), h0.contiguous()
    out = torch.empty(beta.shape, dtype=kernel_state_dtype(h0), device=beta.device)
    _forward_kernel[_launch_grid(batch, hidden)](
        beta, h0, lengths_operand(lengths, beta), out, batch, steps, hidden,
        HAS_LENGTHS=lengths is not None, ACT=activation, LANES=LANES, COMPUTE=compute_type(h0.dtype),
    )  # fmt: skip
    return out


@srnn_forward.register_fake
def _(beta, h0, lengths, activation):
    return beta.new_empty(beta.shape, dtype=kernel_state_dtype(h0))


@torch.library.custom_op("ltdrnn::srnn_triton_backward", mutates_args=())
def srnn_backward(grad: Tensor, out: Tensor, lengths: Optional[Tensor], activation: int) -> Tuple[Tensor, Tensor]:
    """``dL/dh (T, B, H)`` and the forward's ``h`` -> ``(dL/dbeta (T, B, H), dL/dh0 (B, H))``, in h's dtype."""
    check = Operands("ltdrnn::srnn_triton_backward", "out", out, "(T, B, H)", SAVED_DTYPES, contiguous=True)
    steps, batch, hidden = out.shape
    check.tensor("grad", grad, "(T, B, H)", (steps, batch, hidden))
    check.lengths(lengths, batch, steps)
    check.activation(activation)
    grad = grad.to(out.dtype).contiguous()
    dbeta, dh0 = torch.empty_like(out), out.new_empty(batch, hidden)
    _backward_kernel[_launch_grid(batch, hidden)](
        grad, out, lengths_operand(lengths, out), dbeta, dh0, batch, steps, hidden,
        HAS_LENGTHS=lengths is not None, ACT=activation, LANES=LANES, COMPUTE=compute_type(out.dtype),
    )  # fmt: skip
    return dbeta, dh0


@srnn_backward.register_fake
def _(grad, out, lengths, activation):
    return torch.empty_like(out), out.new_empty(out.shape[1:])


def _setup(ctx, inputs, output):
    beta, h0, lengths, activation = inputs
    ctx.save_for_backward(output, lengths)
    ctx.activation, ctx.dtypes = activation, (beta.dtype, h0.dtype)


def _backward(ctx, grad):
    out, lengths = ctx.saved_tensors
    dbeta, dh0 = srnn_backward(grad, out, lengths, ctx.activation)
    return dbeta.to(ctx.dtypes[0]), dh0.to(ctx.dtypes[1]), None, None


srnn_forward.register_autograd(_backward, setup_context=_setup)


def srnn_scan(beta: Tensor, h0: Tensor, lengths: Tensor | None, activation: str) -> Tensor:
    """The cell's entry: outputs ``(T, B, H)`` (0 past each length) in h0's dtype."""
    return srnn_forward(beta, h0, lengths, 0 if activation == "relu" else 1).to(h0.dtype)
