"""MIST's time loop in Triton, forward and backward each in one launch (torch operators
``ltdrnn::mist_triton_forward`` / ``ltdrnn::mist_triton_backward``).

Per step (as :class:`ltdrnn.ops.mist_torch.MISTScan`)::

    a = softmax(W_ah h_{t-1} + P_a);  r = sigmoid(W_rh h_{t-1} + P_r)
    h_t = tanh(W_mix (r * sum_i a_i h_{t-2^i}) + P_s)

``P`` (the three input parts) is one GEMM in PyTorch before the launch. The history stays in global memory: the
kernel's ``states`` buffer ``(N + T, B, H)`` holds the initial history (rows ``0..N-1``, ``N = 2^(n_d-1)``) and
then every ``h_t`` (row ``N + t``); a step reads its delayed states ``h_{t-2^i}`` from those rows (a ring buffer
of N states per row on chip would need ``N H`` registers per batch row: 64 KB at the paper's N = 128, H = 128).
Layout and precision as every matrix kernel (:mod:`ltdrnn.ops.triton_support`); the second product of a
step reads ``r * mix`` back from its saved buffer. The backward accumulates ``dL/dh`` for every row in one
``(N + T, B, H)`` buffer (from outside, from the delayed reads of later steps and from the products), writes the
gradients of the gate logits ``(T, B, n_d + H)`` and of the tanh argument ``(T, B, H)``, from which the weight
gradients are one GEMM each after the launch.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from .triton_blocks import (
    kernel_state_dtype,
    launch_options,
    rows_times_matrix,
    sequence_lengths,
    sigmoid,
    tanh,
)
from .triton_support import SAVED_DTYPES, Operands, grid, hidden_block, lengths_operand


@triton.jit
def _column(values, columns, i):
    """Column ``i`` of a ``(BB, NDP)`` block, ``(BB,)``."""
    return tl.sum(tl.where(columns[None, :] == i, values, 0.0), axis=1)


@triton.jit
def _forward_kernel(p_ptr, whh_ptr, wmix_ptr, len_ptr, states_ptr, gates_ptr, rm_ptr, B, T, H, N,
                    ND: tl.constexpr, NDP: tl.constexpr, HAS_LENGTHS: tl.constexpr, BB: tl.constexpr,
                    HP: tl.constexpr, BK: tl.constexpr, DOT: tl.constexpr, PREC: tl.constexpr,
                    ACC: tl.constexpr):  # fmt: skip
    rows = tl.program_id(0).to(tl.int64) * BB + tl.arange(0, BB)  # 64-bit offsets: B * H can pass 2^31
    cols = tl.arange(0, HP)
    mixes = tl.arange(0, NDP)
    row_mask = rows < B
    mask = row_mask[:, None] & (cols < H)[None, :]
    mix_mask = row_mask[:, None] & (mixes < ND)[None, :]
    width = ND + 2 * H  # a row of P
    gate_width = ND + H  # a row of the saved gates [a | r]
    block = rows[:, None] * H + cols[None, :]
    length = sequence_lengths(len_ptr, rows, row_mask, T, BB, HAS_LENGTHS)
    for t in range(T):
        step = tl.cast(t, tl.int64) * B
        prev = states_ptr + (tl.cast(N + t - 1, tl.int64) * B) * H
        p_t = p_ptr + step * width + rows[:, None] * width
        alive = (t < length)[:, None]  # a row's inputs past its length are never read (they may hold NaN)
        live = mask & alive
        logits = rows_times_matrix(prev, H, rows, row_mask, H, whh_ptr, 1, H, ND, BB, NDP, BK, DOT, PREC, ACC)
        logits += tl.load(p_t + mixes[None, :], mask=mix_mask & alive, other=0.0).to(ACC)
        logits = tl.where((mixes < ND)[None, :], logits, float("-inf"))
        a = tl.exp(logits - tl.max(logits, axis=1)[:, None])
        a = a / tl.sum(a, axis=1)[:, None]
        r = rows_times_matrix(prev, H, rows, row_mask, H, whh_ptr + ND * H, 1, H, H, BB, HP, BK, DOT, PREC, ACC)
        r = sigmoid(r + tl.load(p_t + ND + cols[None, :], mask=live, other=0.0).to(ACC))
        mixed = tl.zeros((BB, HP), dtype=ACC)
        for i in tl.static_range(ND):
            delayed = states_ptr + (tl.cast(N + t - (1 << i), tl.int64) * B) * H + block
            mixed += _column(a, mixes, i)[:, None] * tl.load(delayed, mask=mask, other=0.0).to(ACC)
        rm_t = rm_ptr + step * H
        tl.store(rm_t + block, r * mixed, mask=mask)
        gates_t = gates_ptr + step * gate_width + rows[:, None] * gate_width
        tl.store(gates_t + mixes[None, :], a, mask=mix_mask)
        tl.store(gates_t + ND + cols[None, :], r, mask=mask)
        tl.debug_barrier()  # the product below reads r * mix back
        pre = rows_times_matrix(rm_t, H, rows, row_mask, H, wmix_ptr, 1, H, H, BB, HP, BK, DOT, PREC, ACC)
        h = tanh(pre + tl.load(p_t + ND + H + cols[None, :], mask=live, other=0.0).to(ACC))
        h = tl.where(alive, h, 0.0)
        tl.store(states_ptr + (tl.cast(N + t, tl.int64) * B) * H + block, h, mask=mask)
        tl.debug_barrier()  # the next step reads this step's state rows back


@triton.jit
def _backward_kernel(grad_ptr, states_ptr, gates_ptr, rm_ptr, whh_ptr, wmix_ptr, len_ptr, dgates_ptr, ds_ptr, B, T,
                     H, N, ND: tl.constexpr, NDP: tl.constexpr, HAS_LENGTHS: tl.constexpr, BB: tl.constexpr,
                     HP: tl.constexpr, BK: tl.constexpr, DOT: tl.constexpr, PREC: tl.constexpr,
                     ACC: tl.constexpr):  # fmt: skip
    rows = tl.program_id(0).to(tl.int64) * BB + tl.arange(0, BB)  # 64-bit offsets: B * H can pass 2^31
    cols = tl.arange(0, HP)
    mixes = tl.arange(0, NDP)
    row_mask = rows < B
    mask = row_mask[:, None] & (cols < H)[None, :]
    mix_mask = row_mask[:, None] & (mixes < ND)[None, :]
    gate_width = ND + H
    block = rows[:, None] * H + cols[None, :]
    length = sequence_lengths(len_ptr, rows, row_mask, T, BB, HAS_LENGTHS)
    for back in range(T):
        t = T - 1 - back
        step = tl.cast(t, tl.int64) * B
        alive = (t < length)[:, None]
        row = (tl.cast(N + t, tl.int64) * B) * H + block
        h = tl.load(states_ptr + row, mask=mask, other=0.0).to(ACC)
        d_pre = tl.where(alive, tl.load(grad_ptr + row, mask=mask, other=0.0).to(ACC) * (1.0 - h * h), 0.0)
        ds_t = ds_ptr + step * H
        tl.store(ds_t + block, d_pre, mask=mask)
        tl.debug_barrier()  # the product below reads d_pre back
        d_rm = rows_times_matrix(ds_t, H, rows, row_mask, H, wmix_ptr, H, 1, H, BB, HP, BK, DOT, PREC, ACC)
        gates_t = gates_ptr + step * gate_width + rows[:, None] * gate_width
        a = tl.load(gates_t + mixes[None, :], mask=mix_mask, other=0.0).to(ACC)
        r = tl.load(gates_t + ND + cols[None, :], mask=mask, other=0.0).to(ACC)
        rm = tl.load(rm_ptr + step * H + block, mask=mask, other=0.0).to(ACC)
        d_mixed = tl.where(alive, d_rm * r, 0.0)
        d_a = tl.zeros((BB, NDP), dtype=ACC)
        for i in tl.static_range(ND):
            delayed = (tl.cast(N + t - (1 << i), tl.int64) * B) * H + block
            d_a_i = tl.sum(d_mixed * tl.load(states_ptr + delayed, mask=mask, other=0.0).to(ACC), axis=1)
            d_a += tl.where(mixes[None, :] == i, d_a_i[:, None], 0.0)
            grad_in = tl.load(grad_ptr + delayed, mask=mask, other=0.0).to(ACC)
            tl.store(grad_ptr + delayed, grad_in + _column(a, mixes, i)[:, None] * d_mixed, mask=mask)
        d_logits = a * (d_a - tl.sum(a * d_a, axis=1)[:, None])
        dgates_t = dgates_ptr + step * gate_width + rows[:, None] * gate_width
        tl.store(dgates_t + mixes[None, :], tl.where(alive, d_logits, 0.0), mask=mix_mask)
        tl.store(dgates_t + ND + cols[None, :], tl.where(alive, d_rm * rm * (1.0 - r), 0.0), mask=mask)
        tl.debug_barrier()  # the product below reads the gate gradients back; the delayed rows are updated
        d_prev = rows_times_matrix(dgates_ptr + step * gate_width, gate_width, rows, row_mask, gate_width, whh_ptr, H,
                                   1, H, BB, HP, BK, DOT, PREC, ACC)  # fmt: skip
        prev = grad_ptr + (tl.cast(N + t - 1, tl.int64) * B) * H + block
        tl.store(prev, tl.load(prev, mask=mask, other=0.0).to(ACC) + d_prev, mask=mask)
        tl.debug_barrier()  # the step before reads its row of dL/dh


def _check_weights(check: Operands, history: str, past: int, hidden: int, w_hh: Tensor, w_mix: Tensor) -> int:
    """``W_hh (n_d + H, H)`` with ``1 <= n_d <= 20`` delays (as the cell allows) and ``W_mix (H, H)``; the
    ``past`` rows of the operand ``history`` must hold the longest delay, ``2^(n_d-1)`` steps; returns ``n_d``."""
    delays = w_hh.shape[0] - hidden if w_hh.dim() == 2 else 0
    if not 1 <= delays <= 20:
        raise ValueError(
            f"{check.op}: w_hh must be (n_d + H, H) with 1 <= n_d <= 20 delays and H = {hidden}, "
            f"got shape {tuple(w_hh.shape)}"
        )
    check.tensor("w_hh", w_hh, "(n_d + H, H)", (delays + hidden, hidden))
    check.tensor("w_mix", w_mix, "(H, H)", (hidden, hidden))
    if past < 1 << (delays - 1):
        raise ValueError(
            f"{check.op}: {history} must hold N >= 2^(n_d-1) = {1 << (delays - 1)} past states for n_d = {delays} "
            f"delays, got N = {past}"
        )
    return delays


def _check_forward(p, history0, w_hh, w_mix, lengths) -> None:
    check = Operands("ltdrnn::mist_triton_forward", "p", p, "(T, B, n_d + 2H)")
    steps, batch = p.shape[:2]
    check.tensor("history0", history0, "(B, N, H)", (batch, None, None))
    past, hidden = history0.shape[1:]
    delays = _check_weights(check, "history0", past, hidden, w_hh, w_mix)
    check.tensor("p", p, "(T, B, n_d + 2H)", (steps, batch, delays + 2 * hidden))
    check.lengths(lengths, batch, steps)


def _check_backward(grad, states, gates, reset_mixed, w_hh, w_mix, lengths) -> None:
    check = Operands("ltdrnn::mist_triton_backward", "reset_mixed", reset_mixed, "(T, B, H)", SAVED_DTYPES, True)
    steps, batch, hidden = reset_mixed.shape
    saved = dict(dtypes=(reset_mixed.dtype,), contiguous=True)
    check.tensor("states", states, "(N + T, B, H)", (None, batch, hidden), **saved)
    past = states.shape[0] - steps
    delays = _check_weights(check, "states", past, hidden, w_hh, w_mix)
    check.tensor("gates", gates, "(T, B, n_d + H)", (steps, batch, delays + hidden), **saved)
    check.tensor("grad", grad, "(N + T, B, H)", (past + steps, batch, hidden))
    check.lengths(lengths, batch, steps)


@torch.library.custom_op("ltdrnn::mist_triton_forward", mutates_args=())
def mist_forward(
    p: Tensor, history0: Tensor, w_hh: Tensor, w_mix: Tensor, lengths: Optional[Tensor]
) -> Tuple[Tensor, Tensor, Tensor]:
    """``P (T, B, n_d + 2H)``, ``history0 (B, N, H)``, ``W_hh (n_d + H, H)``, ``W_mix (H, H)`` -> ``states
    (N + T, B, H)`` (the history, then ``h_t``, 0 past lengths) and the saved ``[a | r]`` ``(T, B, n_d + H)`` and
    ``r * mix`` ``(T, B, H)``, in float32 (float64 for a float64 history)."""
    _check_forward(p, history0, w_hh, w_mix, lengths)
    steps, batch = p.shape[:2]
    past, hidden = history0.shape[1], history0.shape[2]
    delays = w_hh.shape[0] - hidden
    dtype = kernel_state_dtype(history0)
    states = p.new_empty((past + steps, batch, hidden), dtype=dtype)
    states[:past] = history0.transpose(0, 1)
    gates = p.new_empty((steps, batch, delays + hidden), dtype=dtype)
    reset_mixed = p.new_empty((steps, batch, hidden), dtype=dtype)
    _forward_kernel[grid(batch)](
        p.contiguous(), w_hh.contiguous(), w_mix.contiguous(), lengths_operand(lengths, p), states, gates,
        reset_mixed, batch, steps, hidden, past, HAS_LENGTHS=lengths is not None,
        ND=delays, NDP=hidden_block(delays), **launch_options(hidden, w_hh, dtype),
    )  # fmt: skip
    return states, gates, reset_mixed


@mist_forward.register_fake
def _(p, history0, w_hh, w_mix, lengths):
    steps, batch = p.shape[:2]
    past, hidden = history0.shape[1], history0.shape[2]
    dtype = kernel_state_dtype(history0)
    states = p.new_empty((past + steps, batch, hidden), dtype=dtype)
    gates = p.new_empty((steps, batch, w_hh.shape[0]), dtype=dtype)
    return states, gates, p.new_empty((steps, batch, hidden), dtype=dtype)


@torch.library.custom_op("ltdrnn::mist_triton_backward", mutates_args=())
def mist_backward(
    grad: Tensor, states: Tensor, gates: Tensor, reset_mixed: Tensor, w_hh: Tensor, w_mix: Tensor,
    lengths: Optional[Tensor],
) -> Tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """``dL/dstates (N + T, B, H)`` -> ``dL/dh`` of every row ``(N + T, B, H)`` (rows ``0..N-1``: the initial
    history's), the gradients of the gate logits ``(T, B, n_d + H)`` and of the tanh argument ``(T, B, H)``."""
    _check_backward(grad, states, gates, reset_mixed, w_hh, w_mix, lengths)
    steps, batch, hidden = reset_mixed.shape
    past = states.shape[0] - steps
    delays = w_hh.shape[0] - hidden
    total = grad.to(states.dtype).contiguous().clone()  # accumulated in place by the kernel
    d_gates, d_s = torch.empty_like(gates), torch.empty_like(reset_mixed)
    _backward_kernel[grid(batch)](
        total, states, gates, reset_mixed, w_hh.contiguous(), w_mix.contiguous(), lengths_operand(lengths, states),
        d_gates, d_s, batch, steps, hidden, past, HAS_LENGTHS=lengths is not None,
        ND=delays, NDP=hidden_block(delays), **launch_options(hidden, w_hh, states.dtype),
    )  # fmt: skip
    return total, d_gates, d_s


@mist_backward.register_fake
def _(grad, states, gates, reset_mixed, w_hh, w_mix, lengths):
    return torch.empty_like(states), torch.empty_like(gates), torch.empty_like(reset_mixed)


def _setup(ctx, inputs, output):
    p, history0, w_hh, w_mix, lengths = inputs
    states, gates, reset_mixed = output
    ctx.save_for_backward(states, gates, reset_mixed, w_hh, w_mix, lengths)
    ctx.dtypes = (p.dtype, history0.dtype, w_hh.dtype, w_mix.dtype)


def _backward(ctx, grad_states, *_unused):
    states, gates, reset_mixed, w_hh, w_mix, lengths = ctx.saved_tensors
    total, d_gates, d_s = mist_backward(grad_states, states, gates, reset_mixed, w_hh, w_mix, lengths)
    steps, batch, hidden = reset_mixed.shape
    past = states.shape[0] - steps
    p_dtype, h_dtype, whh_dtype, wmix_dtype = ctx.dtypes
    d_w_hh = d_gates.reshape(-1, gates.shape[-1]).t() @ states[past - 1 : -1].reshape(-1, hidden)
    d_w_mix = d_s.reshape(-1, hidden).t() @ reset_mixed.reshape(-1, hidden)
    d_p = torch.cat([d_gates, d_s], dim=-1)
    d_history0 = total[:past].transpose(0, 1)
    return d_p.to(p_dtype), d_history0.to(h_dtype), d_w_hh.to(whh_dtype), d_w_mix.to(wmix_dtype), None


mist_forward.register_autograd(_backward, setup_context=_setup)


def mist_scan(p: Tensor, history0: Tensor, w_hh: Tensor, w_mix: Tensor, lengths: Tensor | None) -> Tensor:
    """The cell's entry: ``states (N + T, B, H)`` in the history's dtype (the initial history, then each
    ``h_t``, 0 past each length), from which the cell reads its outputs and final history."""
    states, _, _ = mist_forward(p, history0, w_hh, w_mix, lengths)
    return states.to(history0.dtype)
