"""SRNN's backends over a whole sequence: :class:`ShiftScan` (``"torch"``), :class:`KernelScan` and
:class:`PiecewiseLinearScan` (``"cpp"``, the compiled time loops of ``csrc/srnn.cpp``) and the closed form of
the relu recurrence (``"closed_form"``, :func:`shift_relu_closed_form`).

The front that picks among them is :mod:`ltdrnn.ops.srnn`; the tests that compare these paths with the
cell's reference loop are in tests/cells/test_srnn.py.
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

from .memory import empty_buffer, release, scratch_buffer


# ---- whole-sequence autograd functions ---------------------------------------------------------------
class ShiftScan(torch.autograd.Function):
    """``h_t = act(roll(h_{t-1}, 1) + beta_t)`` over all t, with a hand-written backward (pure PyTorch).

    ``forward(beta (T, B, H), h0 (B, H), relu: bool) -> h (T, B, H)``. Each step writes into one
    preallocated output in place (three small ops), so autograd records one node, not 3T.
    """

    @staticmethod
    def forward(ctx, beta: Tensor, h0: Tensor, relu: bool) -> Tensor:
        h = empty_buffer(beta.shape, beta)
        prev = h0
        for beta_t, out in zip(beta.unbind(0), h.unbind(0)):
            torch.add(prev[:, :-1], beta_t[:, 1:], out=out[:, 1:])
            torch.add(prev[:, -1:], beta_t[:, :1], out=out[:, :1])
            out.relu_() if relu else out.tanh_()
            prev = out
        ctx.relu = relu
        ctx.save_for_backward(h)
        return h

    @staticmethod
    def backward(ctx, dh: Tensor):
        (h,) = ctx.saved_tensors
        derivative = (h > 0).to(h.dtype) if ctx.relu else 1 - h * h
        gz = empty_buffer(h.shape, h).copy_(dh)  # becomes dL/dz_t = dL/dbeta_t, from the end
        for t in range(h.shape[0] - 1, -1, -1):
            if t + 1 < h.shape[0]:
                gz[t, :, :-1].add_(gz[t + 1, :, 1:])
                gz[t, :, -1:].add_(gz[t + 1, :, :1])
            gz[t].mul_(derivative[t])
        dh0 = torch.roll(gz[0], -1, dims=-1)
        return gz, dh0, None


class KernelScan(torch.autograd.Function):
    """The last layer of ``f_r``, the gate and the recurrence in one compiled loop per direction
    (``torch.ops.ltdrnn.srnn_forward`` / ``srnn_backward``).

    ``forward(features (T, B, k), W_f (H, k), b_f, x (T, B, d), W_g (H, d) | None, b_g | None,
    h0 (B, H), relu) -> h (T, B, H)`` with ``f = features W_f^T + b_f``, ``g = x W_g^T + b_g`` and
    ``h_t = act(roll(h_{t-1}, 1) + f_t * sigmoid(g_t))``. Without the gate or for features up to
    ``READOUT_IN_KERNEL_MAX_WIDTH`` wide, the kernel forms ``f`` a chunk of steps at a time for each
    thread's block of batch rows (one product per ~512 rows that stays in cache; again in the backward
    where the gate needs it), accumulates ``dL/dW_f`` and writes ``dL/dfeatures`` the same way, so neither ``f`` nor
    its gradient is a ``(T, B, H)`` array; otherwise ``f`` and ``dL/df`` are BLAS products in
    PyTorch. The gate's logits are formed in the kernel up to ``GATE_IN_KERNEL_MAX_INPUT`` inputs,
    else a BLAS product too. The kernel adds the biases and sums their gradients, fuses the gate,
    shift, add and activation and their derivatives, and reads the features and the output gradient
    with their own strides (a batch-first layer's transposed views, or the expanded gradient of a
    sum, are not copied).
    """

    @staticmethod
    def forward(ctx, features, w_f, b_f, x, w_g, b_g, h0, relu):
        steps, batch, hidden = features.shape[0], features.shape[1], w_f.shape[0]
        readout_in_kernel = w_g is None or features.shape[-1] <= READOUT_IN_KERNEL_MAX_WIDTH
        if readout_in_kernel:
            features, w_f = _as_blas_rows(features), w_f.contiguous()
            f = None
        else:
            f = _product_into(empty_buffer((steps, batch, hidden), features), features, w_f)
        inline_gate = w_g is not None and x.shape[-1] <= GATE_IN_KERNEL_MAX_INPUT
        if inline_gate:  # the kernel forms the gate's logits from x itself
            g, x, w_g = None, x.contiguous(), w_g.contiguous()
        else:
            g = None if w_g is None else _product_into(empty_buffer((steps, batch, hidden), x), x, w_g)
        b_f, h0 = b_f.contiguous(), h0.contiguous()
        b_g = None if b_g is None else b_g.contiguous()
        h = empty_buffer((steps, batch, hidden), h0)
        torch.ops.ltdrnn.srnn_forward(
            features if f is None else f,
            b_f,
            g,
            b_g,
            x if inline_gate else None,
            w_g if inline_gate else None,
            h0,
            relu,
            h,
            w_f if f is None else None,
        )
        ctx.relu, ctx.inline_gate = relu, inline_gate
        ctx.save_for_backward(features, w_f, b_f, x, w_g, b_g, f, g, h)
        return h

    @staticmethod
    def backward(ctx, dh):
        features, w_f, b_f, x, w_g, b_g, f, g, h = ctx.saved_tensors
        hidden = h.shape[-1]
        inline_gate = ctx.inline_gate
        if dh.stride(-1) not in (0, 1):
            dh = dh.contiguous()
        # df and dg never leave this call: reuse them across calls
        if f is None:
            d_features = empty_buffer(features.shape, features) if ctx.needs_input_grad[0] else None
            d_wf = torch.empty_like(w_f)
        else:
            d_features, d_wf = scratch_buffer(h.shape, h), None  # dL/df
        dg = scratch_buffer(h.shape, h) if g is not None else None
        dh0, d_bf = torch.empty_like(h[0]), torch.empty_like(b_f)
        d_bg = None if b_g is None else torch.empty_like(b_g)
        d_wg = torch.empty_like(w_g) if inline_gate else None
        d_x = torch.empty_like(x) if inline_gate and ctx.needs_input_grad[3] else None
        torch.ops.ltdrnn.srnn_backward(
            dh,
            h,
            features if f is None else f,
            b_f,
            g,
            b_g,
            x if inline_gate else None,
            w_g if inline_gate else None,
            ctx.relu,
            d_features,
            dg,
            dh0,
            d_bf,
            d_bg,
            d_wg,
            d_x,
            w_f if f is None else None,
            d_wf,
        )
        df = None if f is None else d_features
        if df is not None:
            df2 = df.view(-1, hidden)
            d_features = (df2 @ w_f).view_as(features) if ctx.needs_input_grad[0] else None
            d_wf = df2.t() @ features.reshape(-1, features.shape[-1])
        if dg is not None:
            dg2 = dg.view(-1, hidden)
            d_x = (dg2 @ w_g).view_as(x) if ctx.needs_input_grad[3] else None
            d_wg = dg2.t() @ x.reshape(-1, x.shape[-1]) if ctx.needs_input_grad[4] else None
        release(df, dg)
        d_wf = d_wf if ctx.needs_input_grad[1] else None
        return d_features, d_wf, d_bf, d_x, d_wg, d_bg, dh0, None


class PiecewiseLinearScan(torch.autograd.Function):
    r"""The ``"cpp"`` backend for a scalar input and one hidden layer of ``f_r`` (``input_size=1``,
    ``fr_layers=1``: every pixel/permuted-MNIST preset), gate on or off, relu or tanh, for scans of at
    least ``PIECEWISE_LINEAR_MIN_ROWS`` rows (``torch.ops.ltdrnn.srnn_pwl_forward`` / ``srnn_pwl_backward``).

    ``forward(x (T, B, 1), A (k, 1), a (k,), W_f (H, k), b_f (H,), W_g (H, 1) | None, b_g | None,
    h0 (B, H), relu) -> h (T, B, H)``, the same function as :class:`KernelScan` on
    ``features = relu(x A^T + a)``.

    With a scalar x, ``f_r(x) = W_f relu(A x + a) + b_f`` is piecewise linear with at most k knots
    ``x_j = -a_j / A_j`` (:func:`segment_tables`): on each of the k + 1 segments between the sorted
    knots the active units are fixed, so ``f(x) = slope[s] x + offset[s]``. The forward kernel finds
    each ``(t, b)``'s segment (the number of knots below x: ``searchsorted(knots, x)``, kept for the
    backward; torch's own starts an OpenMP team, which costs more than the search) and forms ``f``
    with one multiply-add per element
    instead of k (3 x 0.8 GFLOP of ``(T B, k) x (k, H)`` products less per training step at the
    pixel-MNIST shape). The backward kernel sums ``df = dL/df`` per segment, ``m0[s] = sum df``,
    ``m1[s] = sum df x`` (in the data's type over runs of ~256 rows, then in double; returned in
    double), from which every gradient of ``f_r`` follows
    (:func:`f_r_gradients`); it forms ``dL/dx = df . slope[s] + dL/dg . w_g`` only when x needs it.

    Ties: an x exactly at a knot (``A_j x + a_j = 0``) is put on the segment below it, where a unit
    with ``A_j < 0`` counts as active (autograd's relu'(0) = 0 counts it inactive): f is the same
    there, but that one element's contributions to ``dL/dA_j``, ``dL/da_j`` and ``dL/dx`` are one-sided.
    Learned knots meet an input exactly with probability 0; and near a knot, where ``A_j x + a_j``
    rounds to either side, the reference's rounding may decide the other way.
    """

    @staticmethod
    def forward(ctx, x, w_in, b_in, w_f, b_f, w_g, b_g, h0, relu):
        steps, batch, hidden = x.shape[0], x.shape[1], w_f.shape[0]
        x = x.reshape(steps, batch).contiguous()
        active, slope, offset, knots = segment_tables(w_in, b_in, w_f, b_f)
        segment = torch.empty((steps, batch), dtype=torch.int32)  # the kernel's searchsorted(knots, x)
        w_g = None if w_g is None else w_g.reshape(hidden).contiguous()
        b_g = None if b_g is None else b_g.contiguous()
        h0 = h0.contiguous()
        h = empty_buffer((steps, batch, hidden), h0)
        # relu's backward needs only [h > 0]: one bit per element instead of h (51 MB less to read at the
        # pixel-MNIST shape; nor does the backward keep the output alive)
        positive = torch.empty((steps, batch, (hidden + 7) // 8), dtype=torch.uint8) if relu else None
        torch.ops.ltdrnn.srnn_pwl_forward(x, knots, slope, offset, w_g, b_g, h0, relu, h, segment, positive)
        ctx.relu = relu
        derivative = positive if relu else h  # tanh' = 1 - h^2
        ctx.save_for_backward(x, segment, active, slope, offset, w_in, b_in, w_f, w_g, b_g, derivative)
        return h

    @staticmethod
    def backward(ctx, dh):
        x, segment, active, slope, offset, w_in, b_in, w_f, w_g, b_g, derivative = ctx.saved_tensors
        if dh.stride(-1) not in (0, 1):
            dh = dh.contiguous()
        sums = [torch.empty(slope.shape, dtype=torch.float64) for _ in range(2)]
        dh0 = x.new_empty(x.shape[1], slope.shape[1])
        d_bg, d_wg = (None, None) if w_g is None else (torch.empty_like(b_g), torch.empty_like(w_g))
        d_x = torch.empty_like(x) if ctx.needs_input_grad[0] else None
        torch.ops.ltdrnn.srnn_pwl_backward(
            dh,
            None if ctx.relu else derivative,
            x,
            segment,
            slope,
            offset,
            w_g,
            b_g,
            ctx.relu,
            dh0,
            *sums,
            d_bg,
            d_wg,
            d_x,
            derivative if ctx.relu else None,
        )
        d_in, d_bin, d_wf, d_bf = f_r_gradients(*sums, active, w_in, b_in, w_f)
        if d_x is not None:
            d_x = d_x.unsqueeze(-1)
        if d_wg is not None:
            d_wg = d_wg.unsqueeze(-1)
        return d_x, d_in, d_bin, d_wf, d_bf, d_wg, d_bg, dh0, None


def segment_tables(w_in: Tensor, b_in: Tensor, w_f: Tensor, b_f: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""``f_r(x) = W_f relu(A x + a) + b_f`` of a scalar x as a table of linear pieces.

    Shapes: ``A (k, 1)``, ``a (k,)``, ``W_f (H, k)``, ``b_f (H,)`` -> ``active (2, k)`` (int64),
    ``slope, offset (k + 1, H)``, ``knots (k,)`` (sorted; inputs' dtype).

    Unit j is active (``A_j x + a_j > 0``) for ``x > x_j`` if ``A_j > 0``, for ``x < x_j`` if
    ``A_j < 0``, with ``x_j = -a_j / A_j``; for ``A_j = 0`` always or never (``a_j > 0``), its knot at
    +inf. Segment s is ``(knots[s-1], knots[s]]``, what ``searchsorted(knots, x)`` returns; with
    ``rank_j`` unit j's place among the sorted knots, unit j is active on the segments
    ``active[0, j] <= s < active[1, j]``: ``[rank_j + 1, k + 1)`` (``A_j > 0``), ``[0, rank_j + 1)``
    (``A_j < 0``), ``[0, k + 1)`` or none (``A_j = 0``). On segment s::

        f(x) = slope[s] x + offset[s],  slope[s] = sum_{j active on s} A_j W_f[:, j],
                                        offset[s] = b_f + sum_{j active on s} a_j W_f[:, j]

    Each sum is a prefix sum over s of the units' entries at their first and past their last segment
    (no matrix product: at 2 threads MKL's thread team for these tiny products costs more than the
    arithmetic; measured in lab/notes/srnn-speed.md). Formed in float64 and rounded once.
    """
    slope_in, bias_in = w_in.detach().reshape(-1).double(), b_in.detach().double()
    width, dtype = slope_in.shape[0], w_in.dtype
    flat = slope_in == 0
    knots = torch.where(flat, torch.inf, -bias_in / torch.where(flat, 1.0, slope_in)).to(dtype)
    knots, order = knots.sort()
    rank = torch.empty_like(order)
    rank[order] = torch.arange(width)
    always = flat & (bias_in > 0)
    first = torch.where(slope_in > 0, rank + 1, 0)
    stop = torch.where(slope_in < 0, rank + 1, torch.where(flat & ~always, 0, width + 1))
    active = torch.stack([first, stop])
    readout = w_f.detach().double()
    slope = _sum_over_active_units(active, (readout * slope_in).t())
    offset = _sum_over_active_units(active, (readout * bias_in).t()) + b_f.detach().double()
    return active, slope.to(dtype), offset.to(dtype), knots


def _sum_over_active_units(active: Tensor, values: Tensor) -> Tensor:
    """``out[s] = sum_{j: active[0, j] <= s < active[1, j]} values[j]``: ``active (2, k)``, ``values (k, H)``
    -> ``(k + 1, H)``, a prefix sum of each unit's value added at its first segment and taken off past its last."""
    steps = torch.zeros(values.shape[0] + 2, values.shape[1], dtype=values.dtype)
    steps.index_add_(0, active[0], values).index_add_(0, active[1], -values)
    return steps.cumsum(0)[:-1]


def f_r_gradients(
    m0: Tensor, m1: Tensor, active: Tensor, w_in: Tensor, b_in: Tensor, w_f: Tensor
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""The gradients of ``f_r``'s parameters from the per-segment sums of ``df = dL/df``.

    Shapes: ``m0, m1 (k + 1, H)`` float64 (``m0[s] = sum_{(t,b) in s} df``, ``m1[s] = sum df x``),
    ``active (2, k)`` (:func:`segment_tables`), ``A (k, 1)``, ``a (k,)``, ``W_f (H, k)`` ->
    ``dA, da, dW_f, db_f``. Each element's f is ``sum_j W_f[:, j] (A_j x + a_j)`` over its active units
    plus ``b_f``, so with ``P0[:, j] = sum_{s: j active} m0[s]`` and ``P1`` likewise from ``m1``
    (differences of prefix sums over s, since each unit is active on one run of segments)::

        dW_f[:, j] = A_j P1[:, j] + a_j P0[:, j],   db_f = sum_s m0[s]
        dA_j = W_f[:, j] . P1[:, j],                da_j = W_f[:, j] . P0[:, j]
    """
    p0, p1 = (_sum_over_active_segments(active, sums) for sums in (m0, m1))
    slope_in, bias_in, readout = w_in.detach().reshape(-1).double(), b_in.detach().double(), w_f.detach().double()
    d_wf = p1 * slope_in + p0 * bias_in
    d_in = (p1 * readout).sum(0).view_as(w_in)
    d_bin = (p0 * readout).sum(0)
    return d_in.to(w_in.dtype), d_bin.to(b_in.dtype), d_wf.to(w_f.dtype), m0.sum(0).to(w_f.dtype)


def _sum_over_active_segments(active: Tensor, sums: Tensor) -> Tensor:
    """``out[:, j] = sum_{active[0, j] <= s < active[1, j]} sums[s]``: ``active (2, k)``, ``sums (k + 1, H)``
    -> ``(H, k)``, as a difference of prefix sums."""
    prefix = torch.cat([sums.new_zeros(1, sums.shape[1]), sums.cumsum(0)])
    # index_select, not prefix[active]: advanced indexing starts an OpenMP team (lab/notes/srnn-speed.md)
    return (prefix.index_select(0, active[1]) - prefix.index_select(0, active[0])).t()


#: Fewest rows (T B) for which a scan with ``input_size=1``, ``fr_layers=1`` reads f_r from its table of
#: linear pieces (:class:`PiecewiseLinearScan`). Building the tables and assembling the gradients are ~30
#: small PyTorch ops per call, which the k multiply-adds saved per element repay from ~800 rows (measured
#: against KernelScan: lab/notes/srnn-speed.md, "The fast paths in detail").
PIECEWISE_LINEAR_MIN_ROWS = 1024

#: Widest f_r features (k) for which, with the gate, the kernel forms f_r's last layer ``f_t`` itself.
#: The backward forms ``f_t`` again for the gate's derivative: one more product of H k multiply-adds
#: per row, where a BLAS-filled ``(T, B, H)`` array of f costs passes over memory instead. At k = 32
#: (the default width) the two cost about the same time, the kernel's saves two ``(T, B, H)``
#: arrays; wider, the extra product costs more. Without the gate, ``f_t`` is formed once: always here.
READOUT_IN_KERNEL_MAX_WIDTH = 32

#: Largest input size d for which the kernel forms the gate's logits ``W_g x_t`` itself (d
#: multiply-adds per element) instead of reading them from a (T, B, H) array filled by BLAS.
GATE_IN_KERNEL_MAX_INPUT = 4


def _product_into(out: Tensor, inputs: Tensor, weight: Tensor) -> Tensor:
    """``out = inputs weight^T`` (no bias) for ``inputs (T, B, k)``, written into ``out (T, B, H)``."""
    torch.mm(inputs.reshape(-1, inputs.shape[-1]), weight.t(), out=out.view(-1, out.shape[-1]))
    return out


def _as_blas_rows(features: Tensor) -> Tensor:
    """``features (T, B, k)`` as the kernel reads them: each step's rows a BLAS operand (last axis
    contiguous, rows apart by at least their width). Time-major or batch-first views pass as they are."""
    width = features.shape[-1]
    if (width <= 1 or features.stride(-1) == 1) and (features.shape[1] <= 1 or features.stride(1) >= width):
        return features
    return features.contiguous()


# ---- closed form (relu) -------------------------------------------------------------------------------
def shift_relu_closed_form(beta: Tensor, h0: Tensor) -> Tensor:
    """All ``h_t = relu(roll(h_{t-1}, 1) + beta_t)`` without a time loop: ``(T, B, H) -> (T, B, H)``.

    In the co-rotating frame ``g_t = roll(h_t, -(t+1))`` (step t counts from 0) the shift disappears:
    ``g_t = relu(g_{t-1} + c_t)`` with ``c_t = roll(beta_t, -(t+1))`` and ``g_{-1} = h0``, which
    :func:`relu_accumulate` solves with one cumsum and one cummin.
    """
    steps, hidden = beta.shape[0], beta.shape[-1]
    shift = torch.arange(1, steps + 1, device=beta.device).view(-1, 1, 1)
    position = torch.arange(hidden, device=beta.device).view(1, 1, -1)
    into_frame = ((position + shift) % hidden).expand_as(beta)  # c_t[i] = beta_t[i + t + 1]
    out_of_frame = ((position - shift) % hidden).expand_as(beta)  # h_t[i] = g_t[i - t - 1]
    g = relu_accumulate(beta.gather(-1, into_frame), h0)
    return g.gather(-1, out_of_frame)


def relu_accumulate(c: Tensor, g0: Tensor) -> Tensor:
    """Solve ``g_t = max(0, g_{t-1} + c_t)`` for all t at once.

    Shapes: ``c (T, B, H)``, ``g0 (B, H)`` (any sign) -> ``g (T, B, H)``.

    With ``S_t = c_1 + ... + c_t`` the solution is ``g_t = S_t - min(-g_0, min_{j<=t} S_j)``
    (Lindley's recursion). ``S`` is accumulated in float64: in float32 the difference of two large
    partial sums loses the small values the recurrence would have kept.

    Equivalent to::

        g = g0
        for t in range(T):
            g = torch.relu(g + c[t]); out[t] = g
    """
    wide = torch.float64 if c.dtype in (torch.float32, torch.float16, torch.bfloat16) else c.dtype
    # time on the last (contiguous) axis: cumsum and cummin are several times faster there
    s = c.to(wide).permute(1, 2, 0).cumsum(-1)
    floor = torch.minimum(s.cummin(-1).values, -g0.to(wide).unsqueeze(-1))
    return (s - floor).permute(2, 0, 1).to(c.dtype)
