"""SRNN's fast paths: its operands, the whole sequence (:func:`scan`) and one streamed step (:func:`stream`).

Shapes use the legend of :mod:`ltdrnn.cells.base`. The cell, :class:`ltdrnn.cells.srnn.SRNNCell`, holds the
parameters, the init, the input network ``beta`` (``precompute``) and the reference step; here are its
backends (:mod:`ltdrnn.ops`):

- ``"torch"``: :class:`~ltdrnn.ops.srnn_torch.ShiftScan`, the recurrence over the whole sequence with a
  hand-written backward, after ``beta`` for every step at once;
- ``"cpp"``: :class:`~ltdrnn.ops.srnn_torch.KernelScan` (f_r's last layer, the gate and the recurrence in one
  call of ``csrc/srnn.cpp`` per direction) or, for a scalar input and one hidden layer of f_r from
  :data:`~ltdrnn.ops.srnn_torch.PIECEWISE_LINEAR_MIN_ROWS` rows on,
  :class:`~ltdrnn.ops.srnn_torch.PiecewiseLinearScan` (f_r read from the table of its linear pieces);
- ``"closed_form"`` (relu only): :func:`~ltdrnn.ops.srnn_torch.shift_relu_closed_form`, one cumsum and one
  cummin, no time loop;
- ``"triton"``: the recurrence in one Triton launch per direction (:mod:`ltdrnn.ops.srnn_triton`).

Every one reads the cell through :func:`operands` or its ``precompute``.

Doc: docs/cells/srnn.md
Tests: tests/cells/test_srnn.py, tests/cells/test_triton_srnn.py
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import kernels
from .common import final_state_at_lengths, mask_outputs
from .kernels import STREAM_MAX_BATCH, StreamOperands
from .srnn_torch import PIECEWISE_LINEAR_MIN_ROWS, KernelScan, PiecewiseLinearScan, ShiftScan, shift_relu_closed_form


class SRNNOperands(NamedTuple):
    """SRNN as every fast path and the export read it: the cell's parameters themselves (differentiable).

    One time step::

        f = relu(A_1 x_t + a_1);  ...;  f = relu(A_L f + a_L)          (the hidden layers of f_r; none: f = x_t)
        beta_t = (W_f f + b_f) * sigmoid(W_g x_t + b_g)                 (without the gate: W_f f + b_f)
        h_t = act(roll(h_{t-1}, shift) + beta_t)                        roll(h, 1)[i] = h[i - 1 mod H]

    Attributes:
        hidden: f_r's hidden layers in order, ``(weight, bias)`` pairs: ``(k, d), (k,)`` then ``(k, k), (k,)``
            (k the cell's ``hyper_size``); empty with ``fr_layers=0``.
        out_weight: ``(H, k)`` (``(H, d)`` without hidden layers), ``W_f``, f_r's last (affine) layer.
        out_bias: ``(H,)``, ``b_f``.
        gate_weight: ``(H, d)``, ``W_g``, or None without the gate.
        gate_bias: ``(H,)``, ``b_g``, or None without the gate.
        relu: act is relu (True) or tanh (False).
        shift: the positions the state rolls by each step, 1 (the paper's fixed permutation ``W_p``).
    """

    hidden: Tuple[Tuple[Tensor, Tensor], ...]
    out_weight: Tensor
    out_bias: Tensor
    gate_weight: Tensor | None
    gate_bias: Tensor | None
    relu: bool
    shift: int


def operands(cell) -> SRNNOperands:
    """The operands of an :class:`~ltdrnn.cells.srnn.SRNNCell` as it stands."""
    gate = cell.gate_layer
    return SRNNOperands(
        tuple((layer.weight, layer.bias) for layer in cell.fr_hidden),
        cell.fr_out.weight,
        cell.fr_out.bias,
        None if gate is None else gate.weight,
        None if gate is None else gate.bias,
        cell.activation == "relu",
        1,
    )


def scan(cell, x: Tensor, state: Tensor, lengths: Tensor | None, backend: str) -> Tuple[Tensor, Tensor]:
    """The whole sequence ``x (T, B, d)`` from ``state (B, H)`` in ``backend`` (``"torch"``, ``"cpp"``,
    ``"closed_form"`` or ``"triton"``, as :func:`ltdrnn.ops.resolve` chose it): ``-> (outputs (T, B, H),
    final state (B, H))``."""
    if backend == "triton":
        from .srnn_triton import srnn_scan

        outputs = srnn_scan(cell.precompute(x), state, lengths, cell.activation)
        return outputs, final_state_at_lengths(outputs, lengths)
    op = operands(cell)
    if backend == "closed_form":
        outputs = shift_relu_closed_form(cell.precompute(x), state)
    elif backend == "cpp":
        outputs = _compiled_scan(op, x, state)
    else:
        outputs = ShiftScan.apply(cell.precompute(x), state, op.relu)
    return mask_outputs(outputs, lengths), final_state_at_lengths(outputs, lengths)


def _compiled_scan(op: SRNNOperands, x: Tensor, state: Tensor) -> Tensor:
    """``"cpp"``: f_r's hidden layers in PyTorch, the rest in the compiled loop; for a scalar input and one
    hidden layer, from ``PIECEWISE_LINEAR_MIN_ROWS`` rows on, all of f_r from the table of its linear pieces."""
    if x.shape[-1] == 1 and len(op.hidden) == 1 and x.shape[0] * x.shape[1] >= PIECEWISE_LINEAR_MIN_ROWS:
        ((w_in, b_in),) = op.hidden
        return PiecewiseLinearScan.apply(
            x, w_in, b_in, op.out_weight, op.out_bias, op.gate_weight, op.gate_bias, state, op.relu
        )
    features = x
    for weight, bias in op.hidden:
        features = torch.relu(F.linear(features, weight, bias))
    return KernelScan.apply(features, op.out_weight, op.out_bias, x, op.gate_weight, op.gate_bias, state, op.relu)


def stream(cell, x_t: Tensor, h: Tensor, backend: str) -> Tuple[Tensor, Tensor]:
    """One step without autograd, ``x_t (B, d)`` from ``h (B, H)``: ``-> (h_t, h_t)``.

    ``backend`` as :func:`ltdrnn.ops.resolve` chose it. With ``"cpp"`` at batch up to
    :data:`~ltdrnn.ops.kernels.STREAM_MAX_BATCH`, one call of ``torch.ops.ltdrnn.srnn_stream`` on weights
    cached until a parameter changes (``cell.stream_cache``); otherwise, and where the compiled step declines
    (NaN or an infinity in ``x_t`` or ``h``), the reference step ``step(precompute(x_t), h)``, which for one
    step costs less than any backend's sequence machinery."""
    if backend == "cpp" and x_t.shape[0] <= STREAM_MAX_BATCH:
        weights = cell.stream_cache.get(cell.own_parameters(), lambda: stream_operands(cell))
        if kernels.can_stream_in_kernel(x_t, h, weights.dtype, cell.input_size, (cell.hidden_size,)):
            stepped = kernels.run_stream_kernel("srnn", weights, x_t, h)
            if stepped is not None:
                return stepped[0], stepped[0]
    return cell.step(cell.precompute(x_t), h)


def stream_operands(cell) -> StreamOperands:
    """The compiled streaming step's weights (f_r's layers, then the gate's) and options (the number of
    hidden layers, relu) for ``torch.ops.ltdrnn.srnn_stream``."""
    op = operands(cell)
    layers = [*op.hidden, (op.out_weight, op.out_bias)]
    if op.gate_weight is not None:
        layers.append((op.gate_weight, op.gate_bias))
    return StreamOperands([t for layer in layers for t in layer], (len(op.hidden), op.relu))
