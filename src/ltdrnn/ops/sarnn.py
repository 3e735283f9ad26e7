"""SA-RNN's fast paths with the GRU: its operands, the whole sequence (:func:`scan`) and one streamed step
(:func:`stream`).

Shapes use the legend of :mod:`ltdrnn.cells.base`. The cell, :class:`ltdrnn.cells.sarnn.SARNN`, holds the
parameters, the init, the slope's schedule, the reference step, the budget loss, the FLOPs and registration;
here are its backends (:mod:`ltdrnn.ops`), all with the GRU (the LSTM runs the reference loop):

- ``"torch"``: :class:`~ltdrnn.ops.sarnn_torch.FusedSARNNGRU`, a hand-written forward and backward over the
  whole sequence (one ``addmm`` per step, the straight-through estimator without autograd's bookkeeping);
- ``"cpp"``: the same Function with each time loop, forward and backward, one call of ``csrc/sarnn.cpp``;
- ``"sparse"``: inference that forms the candidate only for the units some sequence updates
  (:func:`~ltdrnn.ops.sarnn_torch.sparse_sarnn_gru`); under autograd ``"cpp"``, since the straight-through
  gradient needs every unit's candidate;
- ``"triton"``: each time loop one Triton launch (:mod:`ltdrnn.ops.sarnn_triton`).

Every one reads the cell through :func:`operands` (the scan's coordinator input through the cell's
``coordinator_input``, the same ops); each records ``aux["update_mask"]`` and ``aux["update_prob"]``.

Doc: docs/cells/sarnn.md
Tests: tests/cells/test_sarnn.py, tests/cells/test_triton_sarnn.py, tests/test_kernels.py
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import kernels
from .common import final_state_at_lengths, holds_non_finite, mask_outputs
from .kernels import StreamOperands
from .sarnn_torch import FusedSARNNGRU, sparse_sarnn_gru
from .triton_support import autocast_weight


class SARNNOperands(NamedTuple):
    """SA-RNN as every fast path and the export read it, formed from the cell's parameters and its current
    slope ``alpha`` (differentiable).

    One time step with the GRU (torch.nn.GRU's equations and gate layout ``r, z, n``)::

        gi = weight_ih x_t + bias_ih;  gh = weight_hh h_{t-1} + bias_hh
        r, z = sigmoid(gi_rz + gh_rz);  n = tanh(gi_n + r gh_n);  h~ = (1 - z) n + z h_{t-1}
        pre = coord_weight_x x_t + coord_bias + coord_weight_h * h_{t-1}    (the hard sigmoid, rearranged)
        u~ = clamp(pre, 0, 1);  u = 1[pre > 1/2]
        h_t = h~ where u else h_{t-1}

    With the LSTM (gates ``i, f, g, o``) the same ``u`` selects both ``h`` and ``c``.

    Attributes:
        weight_ih: ``(G H, d)``, ``G = 3`` (GRU) or 4 (LSTM).
        bias_ih: ``(G H,)``.
        weight_hh: ``(G H, H)``.
        bias_hh: ``(G H,)``.
        coord_weight_x: ``(H, d)``, ``(alpha / 2) W_i``: the coordinator's input weight scaled by the half slope.
        coord_bias: ``(H,)``, ``(alpha / 2) b + 1/2``.
        coord_weight_h: ``(H,)``, ``(alpha / 2) w_u``, the diagonal recurrent weight of the coordinator.
        recurrence: ``"gru"`` or ``"lstm"``.
        state_grad: whether the straight-through gradient flows from the coordinator into ``h_{t-1}``
            (``coordinator_state_grad``; the forward is the same either way).
    """

    weight_ih: Tensor
    bias_ih: Tensor
    weight_hh: Tensor
    bias_hh: Tensor
    coord_weight_x: Tensor
    coord_bias: Tensor
    coord_weight_h: Tensor
    recurrence: str
    state_grad: bool


def operands(cell) -> SARNNOperands:
    """The operands of a :class:`~ltdrnn.cells.sarnn.SARNN` as it stands (the slope it has now)."""
    half = 0.5 * cell.slope
    return SARNNOperands(
        cell.weight_ih,
        cell.bias_ih,
        cell.weight_hh,
        cell.bias_hh,
        cell.coord_weight_ih * half,
        cell.coord_bias * half + 0.5,
        cell.scaled_coord_weight(),
        cell.recurrence,
        cell.coordinator_state_grad,
    )


def scan(cell, x: Tensor, state: Tensor, lengths: Tensor | None, backend: str) -> Tuple[Tensor, Tensor]:
    """The whole sequence ``x (T, B, d)`` from ``state (B, H)`` in ``backend`` (``"torch"``, ``"cpp"``,
    ``"sparse"`` or ``"triton"``, as :func:`ltdrnn.ops.resolve` chose it), the GRU only: ``-> (outputs
    (T, B, H), final state)``; records ``aux["update_mask"]`` and ``aux["update_prob"]``."""
    if backend == "triton":
        return _triton_scan(cell, x, state, lengths)
    coord_in = cell.coordinator_input(x)
    coord_weight = cell.scaled_coord_weight()
    needs_grad = torch.is_grad_enabled() and (
        x.requires_grad or state.requires_grad or any(p.requires_grad for p in cell.parameters())
    )
    # the sparse loop keeps a skipped unit's h as is, so a NaN gate (from NaN weights) would vanish there
    if backend == "sparse" and not needs_grad and not holds_non_finite(coord_in, cell.coord_weight_hh):
        with torch.no_grad():
            outputs, probs, masks = sparse_sarnn_gru(
                F.linear(x, cell.weight_ih, cell.bias_ih), coord_in, state, cell.weight_hh, cell.bias_hh, coord_weight
            )
    else:  # the loop adds b_ih itself (FusedSARNNGRU)
        outputs, probs, masks = FusedSARNNGRU.apply(
            x,
            cell.weight_ih,
            coord_in,
            state,
            cell.weight_hh,
            cell.bias_hh,
            coord_weight,
            cell.bias_ih,
            cell.coordinator_state_grad,
            backend in ("cpp", "sparse"),
        )
    cell.record_aux({"update_mask": masks, "update_prob": probs}, lengths)
    return mask_outputs(outputs, lengths), final_state_at_lengths(outputs, lengths)


def _triton_scan(cell, x: Tensor, state: Tensor, lengths: Tensor | None) -> Tuple[Tensor, Tensor]:
    """The GRU time loop in one Triton launch per direction, the input projections one GEMM each before it."""
    from .sarnn_triton import sarnn_scan

    gi, coord_in = cell.precompute(x)
    weight_hh = autocast_weight(cell.weight_hh, x.device.type)
    outputs, probs, masks = sarnn_scan(
        gi,
        coord_in,
        state,
        weight_hh,
        cell.bias_hh,
        cell.scaled_coord_weight(),
        lengths,
        cell.coordinator_state_grad,
    )
    cell.record_aux({"update_mask": masks.detach(), "update_prob": probs}, lengths)
    return outputs, final_state_at_lengths(outputs, lengths)


def stream(cell, x_t: Tensor, h, backend: str) -> Tuple[Tensor, Tensor] | None:
    """One step without autograd, ``x_t (B, d)`` from ``h (B, H)``: ``-> (h_t, h_t)``, recording ``aux``.

    ``backend`` as :func:`ltdrnn.ops.resolve` chose it. With ``"cpp"`` or ``"sparse"`` at batch up to
    :data:`~ltdrnn.ops.kernels.STREAM_MAX_BATCH`, one call of ``torch.ops.ltdrnn.sarnn_stream`` (which forms
    the ``W_hh`` products only for the units it updates), on operands cached until a parameter or the slope
    changes (``cell.stream_cache``). None otherwise (``"torch"``, ``"triton"``, a larger batch, NaN or an
    infinity in ``x_t`` or ``h``): the general path runs."""
    if backend == "cpp":
        # as resolve() chose it: the operators are loaded, so the step skips stream_in_kernel's own check
        cached = _cached_operands(cell)
        if not kernels.can_stream_in_kernel(x_t, h, cached.dtype, cell.input_size, (cell.hidden_size,)):
            return None
        outputs = kernels.run_stream_kernel("sarnn", cached, x_t, h)
    elif backend == "sparse":  # a variant resolve() returns as named: the operators may not be loaded
        outputs = kernels.stream_in_kernel(
            "sarnn", lambda: _cached_operands(cell), x_t, h, cell.input_size, (cell.hidden_size,)
        )
    else:
        return None
    if outputs is None:
        return None
    out, prob, mask = outputs
    # what record_aux(..., lengths=None) keeps (the operator gives prob and mask as (1, B, H)); set through
    # __dict__ because nn.Module's __setattr__ costs microseconds, a large share of a step
    vars(cell).update(aux={"update_mask": mask, "update_prob": prob}, _valid=None)
    return out, out


def _cached_operands(cell) -> StreamOperands:
    return cell.stream_cache.get(cell.own_parameters(), lambda: stream_operands(cell), cell.slope)


def stream_operands(cell) -> StreamOperands:
    """The compiled streaming step's weights (``torch.ops.ltdrnn.sarnn_stream``): the GRU's and the coordinator's
    scaled as :func:`operands` (and the cell's ``precompute``) scale them (same ops, same values)."""
    op = operands(cell)
    return StreamOperands(
        (op.weight_ih, op.bias_ih, op.weight_hh, op.bias_hh, op.coord_weight_x, op.coord_bias, op.coord_weight_h)
    )
