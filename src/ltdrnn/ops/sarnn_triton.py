"""SA-RNN's time loop with the GRU in Triton, forward and backward each in one launch (torch operators
``ltdrnn::sarnn_triton_forward`` / ``ltdrnn::sarnn_triton_backward``).

Per step (as :class:`~ltdrnn.ops.sarnn_torch.FusedSARNNGRU`, torch.nn.GRU's gate layout)::

    gh = W_hh h_{t-1} + b_hh;  r, z = sigmoid(gi_rz + gh_rz);  n = tanh(gi_n + r gh_n)
    cand = n + z (h_{t-1} - n);  pre = coord_in + w h_{t-1};  u = 1[pre > 0.5];  prob = clamp(pre, 0, 1)
    h_t = cand where u else h_{t-1}

The input projections ``gi = W_ih x + b_ih`` and ``coord_in`` are PyTorch GEMMs before the launch. Layout and
precision as every matrix kernel (:mod:`ltdrnn.ops.triton_support`): ``W_hh h_{t-1}`` reads the state
back from ``states (T + 1, B, H)`` (row 0 ``h0``). The forward keeps ``[r, z, gh_n]`` ``(T, B, 3H)`` and ``n``;
the backward implements the straight-through estimator (``du/dprob = 1``, then the clamp's derivative), writes
``dL/dgh`` ``(T, B, 3H)``, ``dL/dgi_n`` and ``dL/dcoord_in``, from which ``dL/dW_hh`` is one GEMM after the
launch, and sums ``dL/dw`` per program. Past a row's length the outputs, probabilities and masks are 0.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from .sarnn_torch import state_path_weight
from .triton_blocks import (
    kernel_state_dtype,
    launch_options,
    rows_times_matrix,
    sequence_lengths,
    sigmoid,
    tanh,
)
from .triton_support import SAVED_DTYPES, Operands, grid, lengths_operand


@triton.jit
def _forward_kernel(gi_ptr, ci_ptr, w_ptr, b_ptr, cw_ptr, len_ptr, states_ptr, probs_ptr, masks_ptr, gates_ptr,
                    news_ptr, B, T, H, HAS_LENGTHS: tl.constexpr, BB: tl.constexpr, HP: tl.constexpr,
                    BK: tl.constexpr, DOT: tl.constexpr, PREC: tl.constexpr, ACC: tl.constexpr):  # fmt: skip
    rows = tl.program_id(0).to(tl.int64) * BB + tl.arange(0, BB)  # 64-bit offsets: B * 3H can pass 2^31
    plane = tl.cast(B, tl.int64) * H  # one time step's rows
    cols = tl.arange(0, HP)
    row_mask = rows < B
    col_mask = cols < H
    mask = row_mask[:, None] & col_mask[None, :]
    block = rows[:, None] * H + cols[None, :]
    g_block = rows[:, None] * 3 * H + cols[None, :]
    b_r = tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(ACC)[None, :]
    b_z = tl.load(b_ptr + H + cols, mask=col_mask, other=0.0).to(ACC)[None, :]
    b_n = tl.load(b_ptr + 2 * H + cols, mask=col_mask, other=0.0).to(ACC)[None, :]
    cw = tl.load(cw_ptr + cols, mask=col_mask, other=0.0).to(ACC)[None, :]
    length = sequence_lengths(len_ptr, rows, row_mask, T, BB, HAS_LENGTHS)
    h = tl.load(states_ptr + block, mask=mask, other=0.0).to(ACC)
    for t in range(T):
        step = t * plane
        prev = states_ptr + step
        gh_r = rows_times_matrix(prev, H, rows, row_mask, H, w_ptr, 1, H, H, BB, HP, BK, DOT, PREC, ACC) + b_r
        gh_z = rows_times_matrix(prev, H, rows, row_mask, H, w_ptr + H * H, 1, H, H, BB, HP, BK, DOT, PREC, ACC) + b_z
        gh_n = rows_times_matrix(prev, H, rows, row_mask, H, w_ptr + 2 * H * H, 1, H, H, BB, HP, BK, DOT, PREC,
                                 ACC) + b_n  # fmt: skip
        alive = (t < length)[:, None]
        live = mask & alive  # a row's inputs past its length are never read (they may hold anything, NaN too)
        gi_t = gi_ptr + 3 * step + g_block
        r = sigmoid(tl.load(gi_t, mask=live, other=0.0).to(ACC) + gh_r)
        z = sigmoid(tl.load(gi_t + H, mask=live, other=0.0).to(ACC) + gh_z)
        n = tanh(tl.load(gi_t + 2 * H, mask=live, other=0.0).to(ACC) + r * gh_n)
        cand = n + z * (h - n)
        pre = tl.load(ci_ptr + step + block, mask=live, other=0.0).to(ACC) + cw * h
        update = pre > 0.5
        prob = tl.where(pre < 0.0, 0.0, tl.where(pre > 1.0, 1.0, pre))  # clamp that keeps NaN, as torch.clamp
        # the reference's straight-through term (prob - prob) (cand - h): exactly 0 for finite values, NaN where
        # the reference's value is NaN
        h = tl.where(alive, tl.where(update, cand, h) + (prob - prob) * (cand - h), 0.0)
        tl.store(states_ptr + step + plane + block, h, mask=mask)
        tl.store(probs_ptr + step + block, tl.where(alive, prob, 0.0), mask=mask)
        tl.store(masks_ptr + step + block, tl.where(alive & update, 1.0, 0.0), mask=mask)
        gates_t = gates_ptr + 3 * step + g_block
        tl.store(gates_t, r, mask=mask)
        tl.store(gates_t + H, z, mask=mask)
        tl.store(gates_t + 2 * H, gh_n, mask=mask)
        tl.store(news_ptr + step + block, n, mask=mask)
        tl.debug_barrier()  # the next step reads this step's state rows back


@triton.jit
def _backward_kernel(grad_ptr, gprob_ptr, states_ptr, probs_ptr, masks_ptr, gates_ptr, news_ptr, w_ptr, cw_ptr,
                     len_ptr, dgh_ptr, dn_ptr, dci_ptr, dh0_ptr, dcw_ptr, B, T, H, HAS_LENGTHS: tl.constexpr,
                     BB: tl.constexpr, HP: tl.constexpr, BK: tl.constexpr, DOT: tl.constexpr, PREC: tl.constexpr,
                     ACC: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    rows = pid.to(tl.int64) * BB + tl.arange(0, BB)  # 64-bit offsets: B * 3H can pass 2^31
    plane = tl.cast(B, tl.int64) * H  # one time step's rows
    cols = tl.arange(0, HP)
    row_mask = rows < B
    col_mask = cols < H
    mask = row_mask[:, None] & col_mask[None, :]
    block = rows[:, None] * H + cols[None, :]
    g_block = rows[:, None] * 3 * H + cols[None, :]
    cw = tl.load(cw_ptr + cols, mask=col_mask, other=0.0).to(ACC)[None, :]
    length = sequence_lengths(len_ptr, rows, row_mask, T, BB, HAS_LENGTHS)
    carry = tl.zeros((BB, HP), dtype=ACC)  # dL/dh_t through the steps after t
    cw_sum = tl.zeros((BB, HP), dtype=ACC)
    for back in range(T):
        t = T - 1 - back
        step = t * plane
        alive = (t < length)[:, None]
        dh = tl.where(alive, tl.load(grad_ptr + step + plane + block, mask=mask, other=0.0).to(ACC) + carry, 0.0)
        dprob = tl.where(alive, tl.load(gprob_ptr + step + block, mask=mask, other=0.0).to(ACC), 0.0)
        h = tl.load(states_ptr + step + block, mask=mask, other=0.0).to(ACC)
        gates_t = gates_ptr + 3 * step + g_block
        r = tl.load(gates_t, mask=mask, other=0.0).to(ACC)
        z = tl.load(gates_t + H, mask=mask, other=0.0).to(ACC)
        gh_n = tl.load(gates_t + 2 * H, mask=mask, other=0.0).to(ACC)
        n = tl.load(news_ptr + step + block, mask=mask, other=0.0).to(ACC)
        prob = tl.load(probs_ptr + step + block, mask=mask, other=0.0).to(ACC)
        u = tl.load(masks_ptr + step + block, mask=mask, other=0.0).to(ACC)
        d_cand = dh * u
        d_n = d_cand * (1.0 - z) * (1.0 - n * n)
        d_r = d_n * gh_n * r * (1.0 - r)
        d_z = d_cand * (h - n) * z * (1.0 - z)
        # straight-through: dL/du~ = dL/dprob + dL/dh (cand - h), then the clamp's derivative
        d_pre = tl.where((prob > 0.0) & (prob < 1.0) & alive, dprob + dh * (n + z * (h - n) - h), 0.0)
        cw_sum += d_pre * h
        dgh_t = dgh_ptr + 3 * step + g_block
        tl.store(dgh_t, d_r, mask=mask)
        tl.store(dgh_t + H, d_z, mask=mask)
        tl.store(dgh_t + 2 * H, d_n * r, mask=mask)
        tl.store(dn_ptr + step + block, d_n, mask=mask)
        tl.store(dci_ptr + step + block, d_pre, mask=mask)
        tl.debug_barrier()  # the products below read this step's dL/dgh rows back
        rows_t = dgh_ptr + 3 * step
        back_r = rows_times_matrix(rows_t, 3 * H, rows, row_mask, H, w_ptr, H, 1, H, BB, HP, BK, DOT, PREC, ACC)
        back_z = rows_times_matrix(rows_t + H, 3 * H, rows, row_mask, H, w_ptr + H * H, H, 1, H, BB, HP, BK, DOT,
                                   PREC, ACC)  # fmt: skip
        back_n = rows_times_matrix(rows_t + 2 * H, 3 * H, rows, row_mask, H, w_ptr + 2 * H * H, H, 1, H, BB, HP, BK,
                                   DOT, PREC, ACC)  # fmt: skip
        carry = tl.where(alive, dh - d_cand + d_cand * z + d_pre * cw + back_r + back_z + back_n, 0.0)
    tl.store(dh0_ptr + block, carry + tl.load(grad_ptr + block, mask=mask, other=0.0).to(ACC), mask=mask)
    tl.store(dcw_ptr + pid * H + cols, tl.sum(cw_sum, axis=0), mask=col_mask)


def _check_forward(gi, coord_in, h0, w_hh, b_hh, coord_weight, lengths, state_grad) -> None:
    check = Operands("ltdrnn::sarnn_triton_forward", "coord_in", coord_in, "(T, B, H)")
    steps, batch, hidden = coord_in.shape
    check.tensor("gi", gi, "(T, B, 3H)", (steps, batch, 3 * hidden))
    check.tensor("h0", h0, "(B, H)", (batch, hidden))
    check.tensor("w_hh", w_hh, "(3H, H)", (3 * hidden, hidden))
    check.tensor("b_hh", b_hh, "(3H,)", (3 * hidden,))
    check.tensor("coord_weight", coord_weight, "(H,)", (hidden,))
    check.lengths(lengths, batch, steps)
    check.choice("state_grad", state_grad, (False, True))


def _check_backward(grad, grad_probs, states, probs, masks, gates, news, w_hh, coord_weight, lengths) -> None:
    check = Operands("ltdrnn::sarnn_triton_backward", "news", news, "(T, B, H)", SAVED_DTYPES, contiguous=True)
    steps, batch, hidden = news.shape
    saved = dict(dtypes=(news.dtype,), contiguous=True)
    check.tensor("states", states, "(T + 1, B, H)", (steps + 1, batch, hidden), **saved)
    check.tensor("probs", probs, "(T, B, H)", (steps, batch, hidden), **saved)
    check.tensor("masks", masks, "(T, B, H)", (steps, batch, hidden), **saved)
    check.tensor("gates", gates, "(T, B, 3H)", (steps, batch, 3 * hidden), **saved)
    check.tensor("grad", grad, "(T + 1, B, H)", (steps + 1, batch, hidden))
    check.tensor("grad_probs", grad_probs, "(T, B, H)", (steps, batch, hidden))
    check.tensor("w_hh", w_hh, "(3H, H)", (3 * hidden, hidden))
    check.tensor("coord_weight", coord_weight, "(H,)", (hidden,))
    check.lengths(lengths, batch, steps)


@torch.library.custom_op("ltdrnn::sarnn_triton_forward", mutates_args=())
def sarnn_forward(
    gi: Tensor, coord_in: Tensor, h0: Tensor, w_hh: Tensor, b_hh: Tensor, coord_weight: Tensor,
    lengths: Optional[Tensor], state_grad: bool = True,
) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """``gi (T, B, 3H)``, ``coord_in (T, B, H)``, ``h0 (B, H)``, ``W_hh (3H, H)``, ``b_hh (3H,)``, ``w (H,)`` ->
    ``states (T + 1, B, H)`` (row 0 ``h0``), ``prob``, ``u`` ``(T, B, H)`` (0 past lengths), and the saved
    ``[r, z, gh_n]`` ``(T, B, 3H)`` and ``n`` ``(T, B, H)``; float32 (float64 for a float64 h0). ``state_grad``
    False: the backward leaves out the coordinator's term of ``dL/dh_{t-1}`` (zeros for ``w`` there, its
    only use in the backward kernel)."""
    _check_forward(gi, coord_in, h0, w_hh, b_hh, coord_weight, lengths, state_grad)
    steps, batch, hidden = coord_in.shape
    dtype = kernel_state_dtype(h0)
    states = gi.new_empty((steps + 1, batch, hidden), dtype=dtype)
    states[0] = h0
    probs, masks, news = (gi.new_empty((steps, batch, hidden), dtype=dtype) for _ in range(3))
    gates = gi.new_empty((steps, batch, 3 * hidden), dtype=dtype)
    _forward_kernel[grid(batch)](
        gi.contiguous(), coord_in.contiguous(), w_hh.contiguous(), b_hh.contiguous(), coord_weight.contiguous(),
        lengths_operand(lengths, gi), states, probs, masks, gates, news, batch, steps, hidden,
        HAS_LENGTHS=lengths is not None, **launch_options(hidden, w_hh, dtype),
    )  # fmt: skip
    return states, probs, masks, gates, news


@sarnn_forward.register_fake
def _(gi, coord_in, h0, w_hh, b_hh, coord_weight, lengths, state_grad=True):
    dtype = kernel_state_dtype(h0)
    steps, batch, hidden = coord_in.shape
    states = gi.new_empty((steps + 1, batch, hidden), dtype=dtype)
    probs, masks, news = (gi.new_empty((steps, batch, hidden), dtype=dtype) for _ in range(3))
    return states, probs, masks, gi.new_empty((steps, batch, 3 * hidden), dtype=dtype), news


@torch.library.custom_op("ltdrnn::sarnn_triton_backward", mutates_args=())
def sarnn_backward(
    grad: Tensor, grad_probs: Tensor, states: Tensor, probs: Tensor, masks: Tensor, gates: Tensor, news: Tensor,
    w_hh: Tensor, coord_weight: Tensor, lengths: Optional[Tensor],
) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """-> ``dL/dgh (T, B, 3H)``, ``dL/dgi_n``, ``dL/dcoord_in`` ``(T, B, H)``, ``dL/dh0 (B, H)`` and the shares
    of ``dL/dw`` ``(programs, H)``."""
    _check_backward(grad, grad_probs, states, probs, masks, gates, news, w_hh, coord_weight, lengths)
    steps, batch, hidden = news.shape
    dgh = torch.empty_like(gates)
    dn, dci, dh0 = torch.empty_like(news), torch.empty_like(news), news.new_empty(batch, hidden)
    dcw = news.new_empty(grid(batch)[0], hidden)
    _backward_kernel[grid(batch)](
        grad.to(news.dtype).contiguous(), grad_probs.to(news.dtype).contiguous(), states, probs, masks, gates, news,
        w_hh.contiguous(), coord_weight.contiguous(), lengths_operand(lengths, news), dgh, dn, dci, dh0, dcw, batch,
        steps, hidden, HAS_LENGTHS=lengths is not None, **launch_options(hidden, w_hh, news.dtype),
    )  # fmt: skip
    return dgh, dn, dci, dh0, dcw


@sarnn_backward.register_fake
def _(grad, grad_probs, states, probs, masks, gates, news, w_hh, coord_weight, lengths):
    dcw = news.new_empty(grid(news.shape[1])[0], news.shape[2])
    return torch.empty_like(gates), torch.empty_like(news), torch.empty_like(news), news.new_empty(news.shape[1:]), dcw


def _setup(ctx, inputs, output):
    gi, coord_in, h0, w_hh, b_hh, coord_weight, lengths, state_grad = inputs
    states, probs, masks, gates, news = output
    ctx.state_grad = state_grad
    ctx.save_for_backward(states, probs, masks, gates, news, w_hh, coord_weight, lengths)
    ctx.dtypes = (gi.dtype, coord_in.dtype, h0.dtype, w_hh.dtype, b_hh.dtype, coord_weight.dtype)


def _backward(ctx, grad_states, grad_probs, *_unused):
    states, probs, masks, gates, news, w_hh, coord_weight, lengths = ctx.saved_tensors
    if grad_probs is None:
        grad_probs = torch.zeros_like(probs)
    dgh, dn, dci, dh0, dcw = sarnn_backward(grad_states, grad_probs, states, probs, masks, gates, news, w_hh,
                                            state_path_weight(ctx, coord_weight), lengths)  # fmt: skip
    hidden = news.shape[-1]
    gi_dtype, ci_dtype, h_dtype, w_dtype, b_dtype, cw_dtype = ctx.dtypes
    d_gi = torch.cat([dgh[..., : 2 * hidden], dn], dim=-1)
    d_w = dgh.reshape(-1, 3 * hidden).t() @ states[:-1].reshape(-1, hidden)
    return (d_gi.to(gi_dtype), dci.to(ci_dtype), dh0.to(h_dtype), d_w.to(w_dtype), dgh.sum((0, 1)).to(b_dtype),
            dcw.sum(0).to(cw_dtype), None, None)  # fmt: skip


sarnn_forward.register_autograd(_backward, setup_context=_setup)


def sarnn_scan(gi: Tensor, coord_in: Tensor, h0: Tensor, w_hh: Tensor, b_hh: Tensor, coord_weight: Tensor,
               lengths: Tensor | None, state_grad: bool = True) -> Tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """The cell's entry: outputs, update probabilities and masks, each ``(T, B, H)`` (0 past each length),
    in h0's dtype."""
    states, probs, masks, _, _ = sarnn_forward(gi, coord_in, h0, w_hh, b_hh, coord_weight, lengths, state_grad)
    return states[1:].to(h0.dtype), probs.to(h0.dtype), masks.to(h0.dtype)
