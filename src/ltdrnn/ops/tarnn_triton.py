"""TARNN's ``"triton"`` backend: its time loop in Triton, any K, either gate, either A, every activation:
forward and backward each in one launch (torch operators ``ltdrnn::tarnn_triton_forward`` /
``ltdrnn::tarnn_triton_backward``).

In the increment ``delta = z - s_{m-1}`` (as :class:`ltdrnn.ops.tarnn_torch.FusedTARNN`)::

    [c, q, r] = P_m + s_{m-1} SW^T      SW = [B2 + A; W2 + U; U_s] (3H, H),  P = the input map (one GEMM)
    beta = sigmoid(r);  delta_0 = 0
    arg_k = q + U delta_k;  G_k = phi(arg_k) + c + A delta_k   (A: -I or coupled; -2I for the doubly damped body)
    delta_{k+1} = delta_k + eta_k beta G_k    ("inside"; "outside": without beta)
    s_m = s_{m-1} + delta_K                   ("outside": s_{m-1} + beta delta_K)

Layout and precision as every matrix kernel (:mod:`ltdrnn.ops.triton_support`). The state product
reads ``s_{m-1}`` back from ``states (T + 1, B, H)`` (row 0 ``s0``); each further Euler step's ``U delta_k``
and the coupled A's shifted half read ``delta_k`` back from the saved increments. The forward saves ``c``
``(T, B, H)``, every ``arg_k`` and ``delta_{k+1}`` ``(T, K, B, H)`` and beta (also the cell's ``aux``). The
backward walks the Euler steps in reverse, writes ``dL/dP`` ``(T, B, 3H)`` and every ``dL/darg_k``, from which
``dL/dSW`` and ``dL/dU`` are one GEMM each after the launch, and writes each step's and program's share of
``dL/deta_k``.
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

FORWARD, BACKWARD = "ltdrnn::tarnn_triton_forward", "ltdrnn::tarnn_triton_backward"


@triton.jit
def _a_times(delta_ptr, delta, rows, cols, row_mask, H, COUPLED: tl.constexpr, A_DIAG: tl.constexpr):
    """``A delta`` for the fixed A: ``A_DIAG delta`` (-1, or -2 for the authors' doubly damped gate-outside
    body), plus ``delta[i + H/2]`` on the first half when coupled (read from ``delta_ptr``, where the same rows
    of delta were stored)."""
    out = A_DIAG * delta
    if COUPLED:
        half = H // 2
        upper = row_mask[:, None] & (cols < half)[None, :]
        out += tl.load(delta_ptr + rows[:, None] * H + cols[None, :] + half, mask=upper, other=0.0)
    return out


@triton.jit
def _a_transposed_times(dg_ptr, dg, rows, cols, row_mask, H, COUPLED: tl.constexpr, A_DIAG: tl.constexpr):
    """``A^T dg``: ``A_DIAG dg``, plus ``dg[j - H/2]`` on the second half when coupled (read from ``dg_ptr``)."""
    out = A_DIAG * dg
    if COUPLED:
        half = H // 2
        lower = row_mask[:, None] & ((cols >= half) & (cols < H))[None, :]
        out += tl.load(dg_ptr + rows[:, None] * H + cols[None, :] - half, mask=lower, other=0.0)
    return out


@triton.jit
def _forward_kernel(p_ptr, sw_ptr, u_ptr, eta_ptr, len_ptr, states_ptr, betas_ptr, cs_ptr, args_ptr, deltas_ptr,
                    B, T, H, K, HAS_LENGTHS: tl.constexpr, ACT: tl.constexpr, COUPLED: tl.constexpr,
                    A_DIAG: tl.constexpr, INSIDE: tl.constexpr, PER_STEP: tl.constexpr, BB: tl.constexpr,
                    HP: tl.constexpr, BK: tl.constexpr, DOT: tl.constexpr, PREC: tl.constexpr,
                    ACC: tl.constexpr):  # fmt: skip
    rows = tl.program_id(0).to(tl.int64) * BB + tl.arange(0, BB)  # 64-bit offsets: B * 3H can pass 2^31
    plane = tl.cast(B, tl.int64) * H  # one time step's rows
    cols = tl.arange(0, HP)
    row_mask = rows < B
    mask = row_mask[:, None] & (cols < H)[None, :]
    block = rows[:, None] * H + cols[None, :]
    p_block = rows[:, None] * 3 * H + cols[None, :]
    length = sequence_lengths(len_ptr, rows, row_mask, T, BB, HAS_LENGTHS)
    s = tl.load(states_ptr + block, mask=mask, other=0.0).to(ACC)
    for t in range(T):
        step = t * plane
        prev = states_ptr + step
        c = rows_times_matrix(prev, H, rows, row_mask, H, sw_ptr, 1, H, H, BB, HP, BK, DOT, PREC, ACC)
        q = rows_times_matrix(prev, H, rows, row_mask, H, sw_ptr + H * H, 1, H, H, BB, HP, BK, DOT, PREC, ACC)
        r = rows_times_matrix(prev, H, rows, row_mask, H, sw_ptr + 2 * H * H, 1, H, H, BB, HP, BK, DOT, PREC, ACC)
        alive = (t < length)[:, None]
        live = mask & alive  # a row's inputs past its length are never read (they may hold anything, NaN too)
        p_t = p_ptr + 3 * step + p_block
        c += tl.load(p_t, mask=live, other=0.0).to(ACC)
        q += tl.load(p_t + H, mask=live, other=0.0).to(ACC)
        beta = sigmoid(r + tl.load(p_t + 2 * H, mask=live, other=0.0).to(ACC))
        delta = tl.zeros((BB, HP), dtype=ACC)
        for k in range(K):
            euler = (t * K + k) * plane  # offset of row (t, k) of args and deltas
            if k > 0:
                last = deltas_ptr + euler - plane  # delta_k, stored by the step before
                arg = q + rows_times_matrix(last, H, rows, row_mask, H, u_ptr, 1, H, H, BB, HP, BK, DOT, PREC, ACC)
                g = activate(arg, ACT) + c + _a_times(last, delta, rows, cols, row_mask, H, COUPLED, A_DIAG)
            else:
                arg = q
                g = activate(arg, ACT) + c
            eta = step_size(eta_ptr, t, k, K, PER_STEP, ACC)
            if INSIDE:
                delta += eta * beta * g
            else:
                delta += eta * g
            tl.store(args_ptr + euler + block, arg, mask=mask)
            tl.store(deltas_ptr + euler + block, delta, mask=mask)
            tl.debug_barrier()  # the next Euler step reads delta back
        if INSIDE:
            s_new = s + delta
        else:
            s_new = s + beta * delta
        s = tl.where(alive, s_new, 0.0)
        tl.store(states_ptr + step + plane + block, s, mask=mask)
        tl.store(betas_ptr + step + block, tl.where(alive, beta, 0.0), mask=mask)
        tl.store(cs_ptr + step + block, c, mask=mask)
        tl.debug_barrier()  # the next step reads this step's state rows back


@triton.jit
def _backward_kernel(grad_ptr, states_ptr, betas_ptr, cs_ptr, args_ptr, deltas_ptr, sw_ptr, u_ptr, eta_ptr, len_ptr,
                     dp_ptr, dargs_ptr, dg_ptr, ds0_ptr, eta_sums_ptr, B, T, H, K, HAS_LENGTHS: tl.constexpr,
                     ACT: tl.constexpr, COUPLED: tl.constexpr, A_DIAG: tl.constexpr, INSIDE: tl.constexpr,
                     PER_STEP: tl.constexpr, BB: tl.constexpr, HP: tl.constexpr, BK: tl.constexpr,
                     DOT: tl.constexpr, PREC: tl.constexpr, ACC: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    rows = pid.to(tl.int64) * BB + tl.arange(0, BB)  # 64-bit offsets: B * 3H can pass 2^31
    plane = tl.cast(B, tl.int64) * H  # one time step's rows
    cols = tl.arange(0, HP)
    row_mask = rows < B
    mask = row_mask[:, None] & (cols < H)[None, :]
    block = rows[:, None] * H + cols[None, :]
    p_block = rows[:, None] * 3 * H + cols[None, :]
    length = sequence_lengths(len_ptr, rows, row_mask, T, BB, HAS_LENGTHS)
    carry = tl.zeros((BB, HP), dtype=ACC)  # dL/ds_m through the steps after m
    for back in range(T):
        t = T - 1 - back
        step = t * plane
        alive = (t < length)[:, None]
        gs = tl.where(alive, tl.load(grad_ptr + step + plane + block, mask=mask, other=0.0).to(ACC) + carry, 0.0)
        beta = tl.load(betas_ptr + step + block, mask=mask, other=0.0).to(ACC)
        c = tl.load(cs_ptr + step + block, mask=mask, other=0.0).to(ACC)
        last_delta = deltas_ptr + (t * K + K - 1) * plane
        if INSIDE:
            dd = gs  # dL/ddelta_K
            dbeta = tl.zeros((BB, HP), dtype=ACC)
        else:
            dd = gs * beta
            dbeta = gs * tl.load(last_delta + block, mask=mask, other=0.0).to(ACC)
        dc = tl.zeros((BB, HP), dtype=ACC)
        dq = tl.zeros((BB, HP), dtype=ACC)
        for back_k in range(K):
            k = K - 1 - back_k
            euler = (t * K + k) * plane
            phi = activate(tl.load(args_ptr + euler + block, mask=mask, other=0.0).to(ACC), ACT)
            if k > 0:
                last = deltas_ptr + euler - plane
                delta = tl.load(last + block, mask=mask, other=0.0).to(ACC)
                g = phi + c + _a_times(last, delta, rows, cols, row_mask, H, COUPLED, A_DIAG)
            else:
                g = phi + c
            eta = step_size(eta_ptr, t, k, K, PER_STEP, ACC)
            if INSIDE:
                dg = dd * eta * beta
                dbeta += dd * eta * g
                share = dd * beta * g
            else:
                dg = dd * eta
                share = dd * g
            tl.store(
                eta_sums_ptr + (tl.cast(t, tl.int64) * programs + pid) * K + k, tl.sum(tl.sum(share, axis=1), axis=0)
            )
            darg = tl.where(alive, dg * activation_slope(phi, ACT), 0.0)
            dc += dg
            dq += darg
            if k > 0:
                tl.store(dargs_ptr + euler + block, darg, mask=mask)
                tl.store(dg_ptr + block, dg, mask=mask)
                tl.debug_barrier()  # the product and A^T read darg and dg back
                ud = rows_times_matrix(
                    dargs_ptr + euler, H, rows, row_mask, H, u_ptr, H, 1, H, BB, HP, BK, DOT, PREC, ACC
                )
                dd += ud + _a_transposed_times(dg_ptr, dg, rows, cols, row_mask, H, COUPLED, A_DIAG)
                tl.debug_barrier()  # dg is written again by the next Euler step
        dp_t = dp_ptr + 3 * step + p_block
        tl.store(dp_t, tl.where(alive, dc, 0.0), mask=mask)
        tl.store(dp_t + H, dq, mask=mask)
        tl.store(dp_t + 2 * H, tl.where(alive, dbeta * beta * (1.0 - beta), 0.0), mask=mask)
        tl.debug_barrier()  # the products below read this step's dP rows back
        dp_rows = dp_ptr + 3 * step
        back_c = rows_times_matrix(dp_rows, 3 * H, rows, row_mask, H, sw_ptr, H, 1, H, BB, HP, BK, DOT, PREC, ACC)
        back_q = rows_times_matrix(dp_rows + H, 3 * H, rows, row_mask, H, sw_ptr + H * H, H, 1, H, BB, HP, BK, DOT,
                                   PREC, ACC)  # fmt: skip
        back_r = rows_times_matrix(dp_rows + 2 * H, 3 * H, rows, row_mask, H, sw_ptr + 2 * H * H, H, 1, H, BB, HP, BK,
                                   DOT, PREC, ACC)  # fmt: skip
        carry = tl.where(alive, gs + back_c + back_q + back_r, 0.0)
    ds0 = carry + tl.load(grad_ptr + block, mask=mask, other=0.0).to(ACC)
    tl.store(ds0_ptr + block, ds0, mask=mask)


def _check_shared(check: Operands, steps: int, batch: int, hidden: int, k: int | None, sw, u, eta, lengths, activation,
                  coupled, a_diag, inside) -> None:  # fmt: skip
    """The operands forward and backward share: the weights, the step sizes, lengths and the codes."""
    check.tensor("sw", sw, "(3H, H)", (3 * hidden, hidden))
    check.tensor("u", u, "(H, H)", (hidden, hidden))
    check.step_sizes(eta, steps, k)
    check.lengths(lengths, batch, steps)
    check.activation(activation)
    check.choice("coupled", coupled, (False, True))
    if coupled and hidden % 2:
        raise ValueError(
            f"{check.op}: coupled must be False with an odd H (it pairs unit i with i + H/2), got H = {hidden}"
        )
    check.choice("a_diag", a_diag, (-1.0, -2.0), "-1.0 (A = -I) or -2.0 (the doubly damped body)")
    check.choice("inside", inside, (False, True))


def _check_forward(p, s0, sw, u, eta, lengths, activation, coupled, a_diag, inside) -> None:
    check = Operands(FORWARD, "p", p, "(T, B, 3H)")
    steps, batch, three_h = p.shape
    if three_h % 3:
        raise ValueError(f"{FORWARD}: p must be a (T, B, 3H) tensor, got shape {tuple(p.shape)} ({three_h} not 3H)")
    hidden = three_h // 3
    check.tensor("s0", s0, "(B, H)", (batch, hidden))
    _check_shared(check, steps, batch, hidden, None, sw, u, eta, lengths, activation, coupled, a_diag, inside)


def _check_backward(grad, states, betas, cs, args, deltas, sw, u, eta, lengths, activation, coupled, a_diag,
                    inside) -> None:  # fmt: skip
    check = Operands(BACKWARD, "args", args, "(T, K, B, H)", SAVED_DTYPES, contiguous=True)
    steps, k, batch, hidden = args.shape
    saved = dict(dtypes=(args.dtype,), contiguous=True)
    check.tensor("states", states, "(T + 1, B, H)", (steps + 1, batch, hidden), **saved)
    check.tensor("betas", betas, "(T, B, H)", (steps, batch, hidden), **saved)
    check.tensor("cs", cs, "(T, B, H)", (steps, batch, hidden), **saved)
    check.tensor("deltas", deltas, "(T, K, B, H)", (steps, k, batch, hidden), **saved)
    check.tensor("grad", grad, "(T + 1, B, H)", (steps + 1, batch, hidden))
    _check_shared(check, steps, batch, hidden, k, sw, u, eta, lengths, activation, coupled, a_diag, inside)


def _euler_shape(p: Tensor, k: int) -> tuple:
    return (p.shape[0], k, p.shape[1], p.shape[2] // 3)


@torch.library.custom_op("ltdrnn::tarnn_triton_forward", mutates_args=())
def tarnn_forward(
    p: Tensor, s0: Tensor, sw: Tensor, u: Tensor, eta: Tensor, lengths: Optional[Tensor], activation: int,
    coupled: bool, a_diag: float, inside: bool,
) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """``P (T, B, 3H)``, ``s0 (B, H)``, ``SW (3H, H)``, ``U (H, H)``, ``eta (K,)`` shared or ``(T, K)`` per time
    step -> ``states (T + 1, B, H)`` (row 0
    ``s0``, 0 past lengths), ``beta (T, B, H)`` and the saved ``c (T, B, H)``, ``arg``, ``delta`` ``(T, K, B, H)``,
    in float32 (float64 for a float64 s0)."""
    _check_forward(p, s0, sw, u, eta, lengths, activation, coupled, a_diag, inside)
    steps, batch, three_h = p.shape
    hidden, k = three_h // 3, eta.shape[-1]
    dtype = kernel_state_dtype(s0)
    states = p.new_empty((steps + 1, batch, hidden), dtype=dtype)
    states[0] = s0
    betas, cs = (p.new_empty((steps, batch, hidden), dtype=dtype) for _ in range(2))
    args, deltas = (p.new_empty(_euler_shape(p, k), dtype=dtype) for _ in range(2))
    _forward_kernel[grid(batch)](
        p.contiguous(), sw.contiguous(), u.contiguous(), eta.to(dtype).contiguous(), lengths_operand(lengths, p),
        states, betas, cs, args, deltas, batch, steps, hidden, k, HAS_LENGTHS=lengths is not None, ACT=activation,
        COUPLED=coupled, A_DIAG=a_diag, INSIDE=inside, PER_STEP=eta.dim() == 2,
        **launch_options(hidden, sw, dtype),
    )  # fmt: skip
    return states, betas, cs, args, deltas


@tarnn_forward.register_fake
def _(p, s0, sw, u, eta, lengths, activation, coupled, a_diag, inside):
    dtype = kernel_state_dtype(s0)
    steps, batch, three_h = p.shape
    states = p.new_empty((steps + 1, batch, three_h // 3), dtype=dtype)
    betas, cs = (p.new_empty((steps, batch, three_h // 3), dtype=dtype) for _ in range(2))
    args, deltas = (p.new_empty(_euler_shape(p, eta.shape[-1]), dtype=dtype) for _ in range(2))
    return states, betas, cs, args, deltas


@torch.library.custom_op("ltdrnn::tarnn_triton_backward", mutates_args=())
def tarnn_backward(
    grad: Tensor, states: Tensor, betas: Tensor, cs: Tensor, args: Tensor, deltas: Tensor, sw: Tensor, u: Tensor,
    eta: Tensor, lengths: Optional[Tensor], activation: int, coupled: bool, a_diag: float, inside: bool,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """``dL/dstates (T + 1, B, H)`` -> ``dL/dP (T, B, 3H)``, ``dL/ds0 (B, H)``, ``dL/darg (T, K, B, H)`` (for
    k >= 1) and the shares of ``dL/deta`` ``(T, programs, K)``."""
    _check_backward(grad, states, betas, cs, args, deltas, sw, u, eta, lengths, activation, coupled, a_diag, inside)
    steps, k, batch, hidden = args.shape
    dp = args.new_empty((steps, batch, 3 * hidden))
    dargs, ds0, dg = torch.zeros_like(args), args.new_empty(batch, hidden), args.new_empty(batch, hidden)
    eta_sums = args.new_empty((steps, grid(batch)[0], k))
    _backward_kernel[grid(batch)](
        grad.to(args.dtype).contiguous(), states, betas, cs, args, deltas, sw.contiguous(), u.contiguous(),
        eta.to(args.dtype).contiguous(), lengths_operand(lengths, args), dp, dargs, dg, ds0, eta_sums, batch, steps,
        hidden, k, HAS_LENGTHS=lengths is not None, ACT=activation, COUPLED=coupled, A_DIAG=a_diag, INSIDE=inside,
        PER_STEP=eta.dim() == 2, **launch_options(hidden, sw, args.dtype),
    )  # fmt: skip
    return dp, ds0, dargs, eta_sums


@tarnn_backward.register_fake
def _(grad, states, betas, cs, args, deltas, sw, u, eta, lengths, activation, coupled, a_diag, inside):
    steps, k, batch, hidden = args.shape
    dp = args.new_empty((steps, batch, 3 * hidden))
    return dp, args.new_empty(batch, hidden), torch.empty_like(args), args.new_empty((steps, grid(batch)[0], k))


def _setup(ctx, inputs, output):
    p, s0, sw, u, eta, lengths, activation, coupled, a_diag, inside = inputs
    states, betas, cs, args, deltas = output
    ctx.save_for_backward(states, betas, cs, args, deltas, sw, u, eta, lengths)
    ctx.options = (activation, coupled, a_diag, inside)
    ctx.dtypes = (p.dtype, s0.dtype, sw.dtype, u.dtype, eta.dtype)


def _backward(ctx, grad_states, *_unused):
    states, betas, cs, args, deltas, sw, u, eta, lengths = ctx.saved_tensors
    dp, ds0, dargs, eta_sums = tarnn_backward(grad_states, states, betas, cs, args, deltas, sw, u, eta, lengths,
                                              *ctx.options)  # fmt: skip
    steps, k, batch, hidden = args.shape
    p_dtype, s_dtype, sw_dtype, u_dtype, eta_dtype = ctx.dtypes
    dsw = dp.reshape(-1, 3 * hidden).t() @ states[:-1].reshape(-1, hidden)
    du = None
    if k > 1:  # arg_k = q + U delta_k for k >= 1: dL/dU = sum dL/darg_k^T delta_k, one product
        du = (dargs[:, 1:].reshape(-1, hidden).t() @ deltas[:, :-1].reshape(-1, hidden)).to(u_dtype)
    d_eta = (eta_sums.sum(1) if eta.dim() == 2 else eta_sums.sum((0, 1))).to(eta_dtype)  # (T, K) or (K,)
    return dp.to(p_dtype), ds0.to(s_dtype), dsw.to(sw_dtype), du, d_eta, None, None, None, None, None


tarnn_forward.register_autograd(_backward, setup_context=_setup)


def tarnn_scan(p: Tensor, s0: Tensor, sw: Tensor, u: Tensor, eta: Tensor, lengths: Tensor | None, activation: str,
               coupled: bool, a_diag: float, inside: bool) -> Tuple[Tensor, Tensor]:  # fmt: skip
    """The cell's entry: outputs ``(T, B, H)`` in s0's dtype (0 past each length) and beta ``(T, B, H)``."""
    code = ACTIVATION_CODES[activation]
    states, betas, *_ = tarnn_forward(p, s0, sw, u, eta, lengths, code, coupled, a_diag, inside)
    return states[1:].to(s0.dtype), betas.to(s0.dtype)
