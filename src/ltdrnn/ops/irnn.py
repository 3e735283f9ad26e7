"""iRNN's fast paths: its operands, the whole sequence (:func:`scan`) and one streamed step (:func:`stream`).

Shapes use the legend of :mod:`ltdrnn.cells.base`. The cell, :class:`ltdrnn.cells.irnn.IRNN`, holds the
parameters, the init, the reference step (``U`` and ``P`` applied literally), the FLOPs and registration;
here are its backends (:mod:`ltdrnn.ops`):

- ``"torch"``: :class:`~ltdrnn.ops.irnn_torch.FusedIRNN`, a hand-written forward and backward over the whole
  sequence that folds ``P U`` into one operator ``M`` and ``P (W x + b)`` into one input map;
- ``"cpp"``: the same Function with its K = 1 time loops, forward and backward, one call of ``csrc/irnn.cpp``;
- ``"triton"``: each time loop one Triton launch (:mod:`ltdrnn.ops.irnn_triton`), any K, with or without the
  gate and per-time-step step sizes.

Every one reads the cell through :func:`operands`. The update gate and per-time-step step sizes run in
``"triton"`` or, in ``"torch"`` and ``"cpp"``, in :class:`~ltdrnn.ops.irnn_torch.IRNNLoop` (a PyTorch
loop with a hand-written backward) when every sequence starts at the same time step (the rows
``eta[c : c + T]`` of the call); otherwise the reference loop runs them.

Doc: docs/cells/irnn.md
Tests: tests/cells/test_irnn.py, tests/cells/test_euler.py, tests/cells/test_triton_irnn.py
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .common import final_state_at_lengths, join_moved_counter, mask_outputs, scalars, split_counter
from .irnn_torch import FusedIRNN, IRNNLoop, dense_operator
from .triton_support import autocast_weight

__all__ = ["IRNNOperands", "operands", "scan", "stream", "dense_operator"]


class IRNNOperands(NamedTuple):
    """iRNN as every fast path and the export read it, formed from the cell's parameters (differentiable).

    In the variable ``y_i = g_i + h_{t-1}`` (the increment ``g`` plus the state) one time step is::

        c_t = weight x_t + bias                                  (P (W x_t + b) with Eq. 8, else W x_t + b)
        y_0 = start h_{t-1}
        y_{i+1} = y_i + eta_i (phi(M y_i + c_t) - alpha y_i)      (i = 0 .. K-1)
        n_t = y_K - keep h_{t-1}
        h_t = n_t,  or with the gate:  u_t = sigmoid(gate_weight_h h_{t-1} + gate_weight_x x_t + gate_bias),
                                       h_t = h_{t-1} + u_t (n_t - h_{t-1})

    Attributes:
        weight: ``(H, d)``, the input map's weight ``P W`` (``W`` without ``projection``).
        bias: ``(H,)``, its bias ``P b`` (``b``).
        first: ``M = P U`` ``(H, H)`` when ``second`` is None (dense), else ``V' (H, r)`` with
            ``M = I + V' second``.
        second: None (dense ``M``) or ``H (r, H)``, the low-rank factor ``M`` shares with ``U = I + V H``.
        alpha: the leak: a float, or a ``()`` tensor when learned or with ``contractive``
            (``max(alpha, ||M||_2)``).
        eta: ``(K,)`` step sizes, or ``(max_length, K)`` with per-time-step step sizes.
        start: ``y_0 = start h_{t-1}``: 1 for the readings ``"paper"`` and ``"residual"``, 2 for ``"state"``.
        keep: ``h_t = y_K - keep h_{t-1}``: 1 for ``"paper"`` and ``"state"``, 0 for ``"residual"``.
        activation: phi, ``"relu"``, ``"tanh"`` or ``"sigmoid"`` (its code:
            :data:`~ltdrnn.ops.common.ACTIVATION_CODES`).
        gate_weight_h: ``(H, H)`` ``U_g``, or None without the gate (``gate="none"``).
        gate_weight_x: ``(H, d)`` ``W_g``, or None.
        gate_bias: ``(H,)`` ``b_g``, or None.
    """

    weight: Tensor
    bias: Tensor
    first: Tensor
    second: Tensor | None
    alpha: Tensor | float
    eta: Tensor
    start: float
    keep: float
    activation: str
    gate_weight_h: Tensor | None
    gate_weight_x: Tensor | None
    gate_bias: Tensor | None

    def operator(self) -> Tensor:
        """``M`` as an ``(H, H)`` matrix (the low-rank factors multiplied out)."""
        return dense_operator(self.first, self.first.new_empty(0) if self.second is None else self.second)


def operands(cell) -> IRNNOperands:
    """The operands of an :class:`~ltdrnn.cells.irnn.IRNN` as it stands."""
    weight, bias = cell.input_map()
    first, second = cell.recurrent_operator()
    start, keep = cell.reading_pair()
    gated = cell.gated
    return IRNNOperands(
        weight,
        bias,
        first,
        second,
        cell.alpha(),
        cell.steps.values(),
        start,
        keep,
        cell.activation,
        cell.weight_gate_h if gated else None,
        cell.weight_gate_x if gated else None,
        cell.bias_gate if gated else None,
    )


def scan(cell, x: Tensor, state, lengths: Tensor | None, backend: str):
    """The whole sequence ``x (T, B, d)`` from ``state`` in ``backend`` (``"torch"``, ``"cpp"`` or ``"triton"``,
    as :func:`ltdrnn.ops.resolve` chose it): ``-> (outputs (T, B, H), final state)``. Where the sequences start
    at different time steps with per-time-step step sizes, the cell's reference loop."""
    h, counter = split_counter(cell.per_time_step, state)
    eta = cell.sequence_step_sizes(x.shape[0], counter)
    if eta is None:
        return cell.scan_reference(x, state, lengths)
    if backend == "triton":
        outputs, final = _triton_scan(cell, x, h, eta, lengths)
        return outputs, join_moved_counter(final, counter, x, lengths)
    op = operands(cell)
    alpha = op.alpha if isinstance(op.alpha, Tensor) else x.new_tensor(op.alpha)
    if counter is None and op.gate_weight_h is None:
        second = op.first.new_empty(0) if op.second is None else op.second
        outputs = FusedIRNN.apply(
            x, op.weight, op.bias, h, op.first, second, eta, alpha, op.activation, op.start, op.keep, backend == "cpp"
        )
        return mask_outputs(outputs, lengths), final_state_at_lengths(outputs, lengths)
    c = F.linear(x, op.weight, op.bias)
    gated = op.gate_weight_h is not None
    gate_x = F.linear(x, op.gate_weight_x, op.gate_bias) if gated else x.new_empty(0)
    gate_h = op.gate_weight_h if gated else x.new_empty(0)
    outputs = IRNNLoop.apply(c, gate_x, h, op.operator(), eta, alpha, gate_h, op.activation, op.start, op.keep)
    final = final_state_at_lengths(outputs, lengths)
    return mask_outputs(outputs, lengths), join_moved_counter(final, counter, x, lengths)


def _triton_scan(cell, x: Tensor, h: Tensor, eta: Tensor, lengths: Tensor | None) -> Tuple[Tensor, Tensor]:
    """The sequence in one Triton launch per direction, ``eta`` ``(K,)`` or this call's rows ``(T, K)``: the input map
    (and the gate's) is one GEMM here, ``M`` is formed dense (its gradient reaches the low-rank factors through
    autograd). The operators are formed in the parameters' dtype even under autocast; only the products take
    it."""
    from .irnn_triton import irnn_scan

    device = x.device.type
    with torch.autocast(device, enabled=False):
        op = operands(cell)
        m = op.operator()
    m = autocast_weight(m, device)
    alpha = op.alpha if isinstance(op.alpha, Tensor) else x.new_tensor(op.alpha)
    c = F.linear(x, op.weight, op.bias)
    if op.gate_weight_h is not None:
        a, ug = F.linear(x, op.gate_weight_x, op.gate_bias), autocast_weight(op.gate_weight_h, device)
    else:
        a, ug = c.new_empty(0), m.new_empty(0)
    outputs = irnn_scan(c, a, h, m, ug, eta, alpha, lengths, op.activation, op.start, op.keep)
    return outputs, final_state_at_lengths(outputs, lengths)


def stream(cell, x_t: Tensor, h, backend: str) -> Tuple[Tensor, Tensor] | None:
    """One step without autograd, ``x_t (B, d)`` from ``h (B, H)``: ``-> (h_t, h_t)``, in a few PyTorch ops on
    matrices cached until a parameter changes (``cell.stream_cache``), the gate included; every backend
    streams so (the compiled loops have no streaming step). None with per-time-step step sizes (the
    counter picks the row: the sequence path handles it). NaN propagates; an infinity may come out NaN where
    the reference's order of sums gives an infinity (docs/reliability.md, known limits)."""
    if cell.per_time_step or not isinstance(h, Tensor):
        return None
    weight_t, bias, m_t, gate_t, etas, alpha, start, keep = cell.stream_cache.get(
        cell.own_parameters(), lambda: _stream_operands(cell)
    )
    phi = cell.phi
    c = torch.addmm(bias, x_t, weight_t)
    if gate_t is not None:
        c, a = c.chunk(2, dim=-1)
    y = h if start == 1.0 else h * start
    for eta in etas:
        drive = phi(torch.addmm(c, y, m_t))
        y = torch.add(y, drive.sub_(y, alpha=alpha), alpha=eta)
    y = y.sub_(h) if keep == 1.0 else y
    if gate_t is not None:
        u = torch.sigmoid(torch.addmm(a, h, gate_t))
        y = torch.addcmul(h, u, y - h)
    return y, y


def _stream_operands(cell) -> tuple:
    """What a streamed step reads, formed once per parameter change: the input map transposed (with the gate's
    beside it, for one product), ``M`` and ``U_g`` transposed, the step sizes and alpha as numbers and the
    reading's pair."""
    op = operands(cell)
    weight, bias, gate_t = op.weight, op.bias, None
    if op.gate_weight_h is not None:
        weight, bias = torch.cat([weight, op.gate_weight_x]), torch.cat([bias, op.gate_bias])
        gate_t = op.gate_weight_h.t().contiguous()
    m_t = op.operator().t().contiguous()
    return weight.t().contiguous(), bias, m_t, gate_t, scalars(op.eta), float(op.alpha), op.start, op.keep
