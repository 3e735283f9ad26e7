"""SA-RNN's ``"torch"``, ``"cpp"`` and ``"sparse"`` backends with the GRU: :class:`FusedSARNNGRU`, a hand-written
forward and backward over the whole sequence, with its time loops in PyTorch (``"torch"``) or compiled
(``"cpp"``, ``csrc/sarnn.cpp``), and :func:`sparse_sarnn_gru`, inference that skips the candidate of units no
sequence updates (``"sparse"``).

The cell is :mod:`ltdrnn.cells.sarnn`; the dispatch and the operands are in :mod:`ltdrnn.ops.sarnn`; the tests
that compare these paths with the cell's reference loop are in tests/cells/test_sarnn.py.
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

from .common import binary, gru_candidate, gru_gates
from .kernels import load_torch_ops


class FusedSARNNGRU(torch.autograd.Function):
    """SA-RNN (GRU) over a whole sequence with a hand-written backward through time.

    Forward ``(x (T,B,d), weight_ih (3H,d), coord_in (T,B,H), h0 (B,H), weight_hh, bias_hh,
    scaled_coord_weight (H,), bias_ih (3H,) or None, state_grad, compiled) -> (outputs, probs, masks)``, each
    ``(T, B, H)``;
    ``compiled`` False keeps the time loops in PyTorch (the ``"torch"`` backend); ``state_grad`` False leaves
    out the coordinator's term ``dL/du~ * (alpha/2) w_u`` of ``dL/dh_{t-1}``
    (``SARNN(coordinator_state_grad=False)``, the default). The
    input map ``gi = W_ih x`` is formed here, one product before the loop; the loop adds ``b_ih`` (the compiled
    loop as it goes, its gradient summed in the backward loop: one pass over ``gi`` and three over the
    gradients less), and the compiled backward loop also sums ``W_ih``'s gradient ``sum_t d_gi_t^T x_t`` while
    each step's ``d_gi`` is in cache. See :class:`~ltdrnn.ops.sarnn.SARNNOperands` for ``coord_in``; ``masks`` is
    float 0/1.
    The PyTorch loop runs the same ops as the reference step; the backward implements the straight-through
    estimator without autograd's per-op bookkeeping. Per-step intermediates stay in small per-step tensors
    (reused warm by the allocator); sequence-sized tensors are allocated once and written in place, never
    stacked.

    On CPU in float32/64, both time loops run in one call each of the ATen operators of
    ``csrc/sarnn.cpp`` when it builds here (:func:`_compiled_loop_runs`): no Python per step.
    Without a C++ compiler, or with ``LTDRNN_NO_KERNELS=1``, the PyTorch loops below run.
    """

    @staticmethod
    def forward(
        ctx, x, weight_ih, coord_in, h0, weight_hh, bias_hh, coord_weight, bias_ih=None, state_grad=True, compiled=True
    ):
        # an unused output's gradient arrives as None, not as a (T, B, H) tensor of zeros to fill and read
        ctx.set_materialize_grads(False)
        ctx.state_grad = state_grad
        gi = torch.nn.functional.linear(x, weight_ih)
        ctx.compiled = compiled and _compiled_loop_runs(gi)
        ctx.bias_ih = bias_ih is not None
        if ctx.compiled:
            return _compiled_forward(ctx, (x, weight_ih), gi, coord_in, h0, weight_hh, bias_hh, coord_weight, bias_ih)
        if bias_ih is not None:
            gi = gi + bias_ih
        hidden = coord_in.shape[-1]
        weight_t = weight_hh.t()
        outputs, pres, masks = (torch.empty_like(coord_in) for _ in range(3))
        keep = any(ctx.needs_input_grad)  # nothing to save for inference
        h = h0
        saved = []
        for gi_t, c_t, out_t, pre_t, mask_t in zip(
            gi.unbind(0), coord_in.unbind(0), outputs.unbind(0), pres.unbind(0), masks.unbind(0)
        ):
            gh = torch.addmm(bias_hh, h, weight_t)
            # in place: gh_rz is not needed again, so gh ends up holding (r, z, gh_n)
            rz = gh[:, : 2 * hidden].add_(gi_t[:, : 2 * hidden]).sigmoid_()
            n = torch.tanh(torch.addcmul(gi_t[:, 2 * hidden :], rz[:, :hidden], gh[:, 2 * hidden :]))
            cand = torch.lerp(n, h, rz[:, hidden:])
            # clamp(pre) > 0.5 exactly when pre > 0.5, so the clamp waits until after the loop
            u = torch.gt(torch.addcmul(c_t, coord_weight, h, out=pre_t), 0.5, out=mask_t)
            h = torch.lerp(h, cand, u, out=out_t)
            # a NaN gate is NaN, as in the reference and the compiled loop (NaN > 1/2 is False: the lerp kept h)
            h = torch.where(pre_t.isnan(), pre_t, h, out=out_t)
            if keep:
                saved.append((gh, n))
        ctx.saved = saved
        ctx.save_for_backward(x, weight_ih, h0, weight_hh, coord_weight, outputs, masks, pres)
        ctx.mark_non_differentiable(masks)
        return outputs, torch.clamp(pres, 0.0, 1.0), masks

    @staticmethod
    def backward(ctx, d_outputs, d_probs, _d_masks):
        if d_outputs is None:  # only the probabilities were used
            d_outputs = torch.zeros_like(ctx.saved_tensors[5])
        if ctx.compiled:
            return _compiled_backward(ctx, d_outputs, d_probs)
        x, weight_ih, h0, weight_hh, coord_weight, outputs, masks, pres = ctx.saved_tensors
        carry_weight = state_path_weight(ctx, coord_weight)
        if d_probs is None:
            d_probs = torch.zeros_like(outputs)
        saved, ctx.saved = ctx.saved, None
        steps, batch, hidden = outputs.shape
        aten = torch.ops.aten
        weight_rz, weight_n = weight_hh[: 2 * hidden], weight_hh[2 * hidden :]
        d_gi = outputs.new_empty(steps, batch, 3 * hidden)
        d_gh_n, d_coord = torch.empty_like(outputs), torch.empty_like(outputs)
        d_coord_weight = torch.zeros_like(h0)
        carry = torch.zeros_like(h0)
        previous = [h0] + list(outputs.unbind(0))[:-1]
        per_step = zip(
            saved,
            previous,
            masks.unbind(0),
            pres.unbind(0),
            d_outputs.unbind(0),
            d_probs.unbind(0),
            d_gi.unbind(0),
            d_gh_n.unbind(0),
            d_coord.unbind(0),
        )
        for (gh, n), hp, u, pre, d_out, d_prob, d_gi_t, d_gh_n_t, d_coord_t in reversed(list(per_step)):
            r, z = gh[:, :hidden], gh[:, hidden : 2 * hidden]
            dh = carry + d_out
            d_cand = dh * u
            d_n = aten.tanh_backward(
                torch.addcmul(d_cand, d_cand, z, value=-1.0), n, grad_input=d_gi_t[:, 2 * hidden :]
            )
            aten.sigmoid_backward(d_n * gh[:, 2 * hidden :], r, grad_input=d_gi_t[:, :hidden])
            aten.sigmoid_backward(d_cand * (hp - n), z, grad_input=d_gi_t[:, hidden : 2 * hidden])
            torch.mul(d_n, r, out=d_gh_n_t)
            # straight-through (d u / d u~ = 1), then the clamp of the hard sigmoid; the candidate
            # is recomputed exactly as in forward rather than kept for every step
            delta = torch.lerp(n, hp, z).sub_(hp)
            aten.hardtanh_backward(torch.addcmul(d_prob, dh, delta), pre, 0.0, 1.0, grad_input=d_coord_t)
            d_coord_weight.addcmul_(d_coord_t, hp)
            carry = torch.addcmul(dh - d_cand, d_cand, z).addcmul_(d_coord_t, carry_weight)
            carry.addmm_(d_gi_t[:, : 2 * hidden], weight_rz).addmm_(d_gh_n_t, weight_n)
        d_rz = d_gi[..., : 2 * hidden]
        d_weight_hh = torch.cat([weight_gradient(d_rz, outputs, h0), weight_gradient(d_gh_n, outputs, h0)])
        d_bias_hh = torch.cat([d_rz.sum((0, 1)), d_gh_n.sum((0, 1))])
        d_bias_ih = d_gi.sum((0, 1)) if ctx.bias_ih else None
        d_weight_ih = d_gi.reshape(-1, d_gi.shape[-1]).t() @ x.reshape(-1, x.shape[-1])
        d_x = d_gi @ weight_ih if ctx.needs_input_grad[0] else None
        return d_x, d_weight_ih, d_coord, carry, d_weight_hh, d_bias_hh, d_coord_weight.sum(0), d_bias_ih, None, None


def state_path_weight(ctx, coord_weight: Tensor) -> Tensor:
    """The weight of the coordinator's term in ``dL/dh_{t-1}``: ``(alpha/2) w_u``, or zeros when the
    coordinator's read of the state is cut (``ctx.state_grad`` False). It is the only use of ``w_u`` in
    every backward loop (PyTorch, compiled and Triton), so zeros cut that path and nothing else."""
    return coord_weight if ctx.state_grad else torch.zeros_like(coord_weight)


# ---- the whole time loop in compiled code (csrc/sarnn.cpp) ----------------------------------------
def _compiled_loop_runs(gi: Tensor) -> bool:
    """Whether both time loops run in ``csrc/sarnn.cpp``: CPU, float32/64, and the operators build."""
    return gi.device.type == "cpu" and gi.dtype in (torch.float32, torch.float64) and load_torch_ops("sarnn")


def _compiled_forward(ctx, input_map, gi, coord_in, h0, weight_hh, bias_hh, coord_weight, bias_ih):
    """The forward time loop in one call; keeps each step's gates and candidate ``n`` for the backward
    (one reused row of each when no gradient is needed). The loop writes the clamped probabilities
    itself, and the backward reads them: ``0 < pre < 1`` exactly when ``0 < clamp(pre, 0, 1) < 1``."""
    steps, batch, hidden = coord_in.shape
    rows = steps if any(ctx.needs_input_grad) else 1
    gi, coord_in, h0 = gi.detach().contiguous(), coord_in.detach().contiguous(), h0.detach().contiguous()
    outputs, probs, masks = (torch.empty_like(coord_in) for _ in range(3))
    gates, news = gi.new_empty(rows, batch, 3 * hidden), gi.new_empty(rows, batch, hidden)
    torch.ops.ltdrnn.sarnn_gru_forward(
        gi, coord_in, h0, weight_hh.detach().t(), bias_hh.detach().contiguous(),
        coord_weight.detach().contiguous(), outputs, probs, masks, gates, news,
        None if bias_ih is None else bias_ih.detach().contiguous(),
    )  # fmt: skip
    ctx.save_for_backward(*input_map, h0, weight_hh, coord_weight, outputs, masks, probs, gates, news)
    ctx.mark_non_differentiable(masks)
    return outputs, probs, masks


def _compiled_backward(ctx, d_outputs: Tensor, d_probs: Tensor | None) -> tuple:
    """The backward time loop in one call, the gradients of W_hh, W_ih and both biases summed inside it. The incoming
    gradients are read with their own time and batch strides (a batch-first layer's gradient is a
    transposed view); ``d_probs`` None is zero."""
    x, weight_ih, h0, weight_hh, coord_weight, outputs, masks, probs, gates, news = ctx.saved_tensors
    x = x.detach().contiguous()
    steps, batch, hidden = outputs.shape
    d_gi, d_coord = outputs.new_empty(steps, batch, 3 * hidden), torch.empty_like(outputs)
    d_weight_ih = weight_ih.new_empty(weight_ih.shape)  # contiguous
    d_weight_hh = weight_hh.new_empty(weight_hh.shape)  # contiguous, whatever the parameter's strides
    d_coord_weight, carry = torch.empty_like(h0), torch.empty_like(h0)
    bias_sums = torch.empty(4 * hidden, dtype=torch.float64)  # [d_r | d_z | d_n | d_gh_n] over time and batch
    torch.ops.ltdrnn.sarnn_gru_backward(
        gates, news, outputs, h0, masks, probs, _unit_last_stride(d_outputs), _unit_last_stride(d_probs),
        weight_hh.detach(), state_path_weight(ctx, coord_weight.detach()).contiguous(), d_gi, d_weight_hh, d_coord,
        d_coord_weight,
        outputs.new_empty(batch, 3 * hidden), carry, bias_sums, x, d_weight_ih,
    )  # fmt: skip
    sums = bias_sums.to(outputs.dtype)
    d_bias_hh = torch.cat([sums[: 2 * hidden], sums[3 * hidden :]])
    d_bias_ih = sums[: 3 * hidden] if ctx.bias_ih else None
    d_x = d_gi @ weight_ih.detach() if ctx.needs_input_grad[0] else None
    return d_x, d_weight_ih, d_coord, carry, d_weight_hh, d_bias_hh, d_coord_weight.sum(0), d_bias_ih, None, None


def _unit_last_stride(gradient: Tensor | None) -> Tensor | None:
    """``gradient`` as it is when its last axis is contiguous (what the compiled loop reads in place), else
    a contiguous copy (e.g. the broadcast gradient of a sum)."""
    if gradient is None or gradient.shape[-1] == 1 or gradient.stride(-1) == 1:
        return gradient
    return gradient.contiguous()


def weight_gradient(d_pre: Tensor, outputs: Tensor, h0: Tensor) -> Tensor:
    """``sum_t d_pre[t]^T h_{t-1}`` for pre-activations ``W h_{t-1}``, with ``h_{t-1}`` read from
    ``outputs`` shifted by one step (no copy of the sequence)."""
    hidden = outputs.shape[-1]
    first = d_pre[0].t() @ h0
    if outputs.shape[0] == 1:
        return first
    rest = d_pre[1:].reshape(-1, d_pre.shape[-1]).t() @ outputs[:-1].reshape(-1, hidden)
    return first + rest


def sparse_sarnn_gru(
    gi: Tensor,
    coord_in: Tensor,
    h0: Tensor,
    weight_hh: Tensor,
    bias_hh: Tensor,
    coord_weight: Tensor,
    dense_above: float = 0.3,
) -> Tuple[Tensor, Tensor, Tensor]:
    """Inference that computes the GRU candidate only for units updated by at least one sequence.

    Per step, with ``k`` such units, the recurrent matmul is ``(B, H) x (H, 3k)`` on the gathered rows
    of ``W_hh`` instead of ``(B, H) x (H, 3H)``; a step where no unit updates does no GRU work at all.
    Gathering the rows costs about as much as using them once, so steps with more than
    ``dense_above * H`` active units run the dense step instead. (The union over the batch is what
    one matmul can skip; with ``B = 1`` it is exactly the skipped units.)
    Returns ``(outputs, probs, masks)`` like :class:`FusedSARNNGRU`.
    """
    hidden = coord_in.shape[-1]
    gate_offsets = torch.arange(3, device=coord_in.device).unsqueeze(1) * hidden
    h = h0
    hs, probs, masks = [], [], []
    for gi_t, c_t in zip(gi.unbind(0), coord_in.unbind(0)):
        prob = torch.clamp(torch.addcmul(c_t, coord_weight, h), 0.0, 1.0)
        u = binary(prob, 0.5)
        active = u.amax(0).nonzero().squeeze(1)
        if active.numel() > dense_above * hidden:
            h = torch.lerp(h, gru_candidate(gi_t, h, h, weight_hh, bias_hh), u)
        elif active.numel():
            rows = (gate_offsets + active).reshape(-1)  # r, z, n rows of the active units
            gh = torch.addmm(bias_hh.index_select(0, rows), h, weight_hh.index_select(0, rows).t())
            h_active = h.index_select(1, active)
            rz, n, _ = gru_gates(gi_t.index_select(1, rows), gh, active.numel())
            cand = torch.lerp(n, h_active, rz[:, active.numel() :])
            h = h.index_copy(1, active, torch.lerp(h_active, cand, u.index_select(1, active)))
        hs.append(h)
        probs.append(prob)
        masks.append(u)
    return torch.stack(hs), torch.stack(probs), torch.stack(masks)
