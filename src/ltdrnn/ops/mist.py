"""MIST's fast paths: its operands, the whole sequence (:func:`scan`) and one streamed step (:func:`stream`).

Shapes use the legend of :mod:`ltdrnn.cells.base`. The cell, :class:`ltdrnn.cells.mist.MISTCell`, holds the
parameters, the init, the input projection (``precompute``), the step's maths (``update``) and the reference
step; here are its backends (:mod:`ltdrnn.ops`):

- ``"list"``: an autograd-recorded loop over the cell's ``update`` that reads the delayed states from a list
  of past states (no history tensor formed per step);
- ``"torch"``: :class:`~ltdrnn.ops.mist_torch.MISTScan`, a hand-written forward and backward over the whole
  sequence in PyTorch loops;
- ``"cpp"``: the same Function with each time loop, forward and backward, one call of ``csrc/mist.cpp``;
- ``"triton"``: each time loop one Triton launch (:mod:`ltdrnn.ops.mist_triton`), the input projection one
  GEMM before it.

Every one reads the cell through :func:`operands`.

Doc: docs/cells/mist.md
Tests: tests/cells/test_mist.py, tests/cells/test_triton_mist.py
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import kernels
from .common import mask_outputs
from .kernels import STREAM_MAX_BATCH, StreamOperands
from .mist_torch import MISTScan
from .triton_support import autocast_weight


class MISTOperands(NamedTuple):
    """MIST as every fast path and the export read it: the cell's parameters themselves (differentiable).

    With ``n_d`` delays ``2^i`` (``i = 0..n_d-1``) and the history ``h_{t-1}, ..., h_{t-N}``, one step::

        [a; r] = weight_hh h_{t-1} + weight_ih[:n_d + H] x_t + bias[:n_d + H]
        h_t = tanh(weight_mix (sigmoid(r) * sum_i softmax(a)_i h_{t-delays[i]}) + weight_ih[n_d + H:] x_t
                   + bias[n_d + H:])

    Attributes:
        weight_ih: ``(n_d + 2H, d)``, ``[W_ax; W_rx; W_x]``: the input's parts of the mixing logits, the reset
            gate and the tanh argument.
        bias: ``(n_d + 2H,)``, ``[b_a; b_r; b]``.
        weight_hh: ``(n_d + H, H)``, ``[W_ah; W_rh]``: the previous state's parts of the mixing logits and the
            reset gate.
        weight_mix: ``(H, H)``, ``W_h``, applied to the reset mix of delayed states.
        delays: ``(1, 2, 4, ..., 2^(n_d-1))``, how far back each mixed state lies (``n_d = len(delays)``).
        history_size: N, ``2^(n_d-1)``, the states the history holds (``(B, N, H)``, oldest first:
            ``history[:, -k] = h_{t-k}``).
    """

    weight_ih: Tensor
    bias: Tensor
    weight_hh: Tensor
    weight_mix: Tensor
    delays: Tuple[int, ...]
    history_size: int


def operands(cell) -> MISTOperands:
    """The operands of a :class:`~ltdrnn.cells.mist.MISTCell` as it stands."""
    return MISTOperands(cell.weight_ih, cell.bias, cell.weight_hh, cell.weight_mix, cell.delays, cell.history_size)


def scan(cell, x: Tensor, history: Tensor, lengths: Tensor | None, backend: str) -> Tuple[Tensor, Tensor]:
    """The whole sequence ``x (T, B, d)`` from ``history (B, N, H)`` in ``backend`` (``"list"``, ``"torch"``,
    ``"cpp"`` or ``"triton"``, as :func:`ltdrnn.ops.resolve` chose it): ``-> (outputs (T, B, H), final history
    (B, N, H))``."""
    op = operands(cell)
    if backend == "triton":
        states = _triton_states(op, x, history, lengths)
        return states[op.history_size :], final_history(states, lengths, op.history_size)
    if backend == "list":
        states = _list_states(cell, op, x, history)
    else:
        outputs, final, states = MISTScan.apply(
            x, history, op.weight_ih, op.bias, op.weight_hh, op.weight_mix, op.delays, backend == "cpp"
        )
        if lengths is None:  # the separate views keep the backward free of full-size zero fills
            return outputs, final
    return mask_outputs(states[op.history_size :], lengths), final_history(states, lengths, op.history_size)


def _list_states(cell, op: MISTOperands, x: Tensor, history0: Tensor) -> Tensor:
    """``"list"``: the states ``(N + T, B, H)`` (the initial history, then each ``h_t``) from an
    autograd-recorded loop that reads the delayed states from a growing list."""
    split = len(op.delays) + op.weight_mix.shape[0]
    # two separate input projections: slicing one per step would cost a zero-filled gradient each
    gates_in = F.linear(x, op.weight_ih[:split], op.bias[:split])
    state_in = F.linear(x, op.weight_ih[split:], op.bias[split:])
    history = list(history0.unbind(1))
    for g_t, s_t in zip(gates_in.unbind(0), state_in.unbind(0)):
        history.append(cell.update(g_t, s_t, history[-1], torch.stack([history[-k] for k in op.delays], 1)))
    return torch.stack(history)


def _triton_states(op: MISTOperands, x: Tensor, history: Tensor, lengths: Tensor | None) -> Tensor:
    """``"triton"``: the states ``(N + T, B, H)`` from one Triton launch per direction, the input projections
    one GEMM before it."""
    from .mist_triton import mist_scan

    device = x.device.type
    p = F.linear(x, op.weight_ih, op.bias)
    w_hh, w_mix = autocast_weight(op.weight_hh, device), autocast_weight(op.weight_mix, device)
    return mist_scan(p, history, w_hh, w_mix, lengths)


def final_history(states: Tensor, lengths: Tensor | None, history_size: int) -> Tensor:
    """The last N states of each sequence, ``(B, N, H)``, from ``states (N + T, B, H)``."""
    n = history_size
    if lengths is None:
        return states[-n:].transpose(0, 1)
    # sequence b ends after step lengths[b] - 1, i.e. at row N + lengths[b] - 1 of states
    rows = lengths.to(states.device).view(1, -1) + torch.arange(n, device=states.device).view(-1, 1)
    index = rows.unsqueeze(-1).expand(n, states.shape[1], states.shape[2])
    return states.gather(0, index).transpose(0, 1)


def stream(cell, x_t: Tensor, history: Tensor, backend: str) -> Tuple[Tensor, Tensor]:
    """One step without autograd, ``x_t (B, d)`` from ``history (B, N, H)``: ``-> (h_t, new history)``.

    ``backend`` as :func:`ltdrnn.ops.resolve` chose it. With ``"cpp"`` at batch up to
    :data:`~ltdrnn.ops.kernels.STREAM_MAX_BATCH`, one call of ``torch.ops.ltdrnn.mist_stream`` on weights cached
    until a parameter changes (``cell.stream_cache``); otherwise, and where the compiled step declines (NaN or
    an infinity in what it reads), the reference step ``step(precompute(x_t), history)``, which for one step
    costs less than any backend's sequence machinery."""
    if backend == "cpp" and x_t.shape[0] <= STREAM_MAX_BATCH:
        weights = cell.stream_cache.get(cell.own_parameters(), lambda: stream_operands(cell))
        tail = (cell.history_size, cell.hidden_size)
        if kernels.can_stream_in_kernel(x_t, history, weights.dtype, cell.input_size, tail):
            stepped = kernels.run_stream_kernel("mist", weights, x_t, history)
            if stepped is not None:
                return stepped[0], stepped[1]
    return cell.step(cell.precompute(x_t), history)


def stream_operands(cell) -> StreamOperands:
    """The compiled streaming step's weights for ``torch.ops.ltdrnn.mist_stream`` (no options: ``weight_hh``'s
    rows give the number of delays)."""
    op = operands(cell)
    return StreamOperands((op.weight_ih, op.bias, op.weight_hh, op.weight_mix))
