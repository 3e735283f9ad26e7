"""TARNN's fast paths: its operands, the whole sequence (:func:`scan`) and one streamed step (:func:`stream`).

Shapes use the legend of :mod:`ltdrnn.cells.base`. The cell, :class:`ltdrnn.cells.tarnn.TARNN`, holds the
parameters, the init, the reference step (the equations as they stand), the losses and the FLOPs; here are
its backends (:mod:`ltdrnn.ops`):

- ``"torch"``: :class:`~ltdrnn.ops.tarnn_torch.FusedTARNN`, a hand-written forward and backward over the whole
  sequence with one matmul of the state per time step plus one per further Euler step;
- ``"cpp"``: the same Function with each time loop, forward and backward, one call of ``csrc/tarnn.cpp``;
- ``"triton"``: each time loop one Triton launch (:mod:`ltdrnn.ops.tarnn_triton`).

Every one reads the cell through :func:`operands`. Per-time-step step sizes run in ``"cpp"`` and
``"triton"`` when every sequence starts at the same time step (the rows ``eta[c : c + T]`` of the call);
otherwise, and in ``"torch"``, the reference loop runs them. The authors' doubly damped gate-outside body
(``A = -2I``) runs in ``"triton"`` and in the reference loop.

Doc: docs/cells/tarnn.md
Tests: tests/cells/test_tarnn.py, tests/cells/test_euler.py, tests/cells/test_triton_tarnn.py
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import kernels
from .common import (
    ACTIVATION_CODES,
    final_state_at_lengths,
    holds_non_finite,
    join_moved_counter,
    mask_outputs,
    scalars,
    split_counter,
)
from .kernels import STREAM_MAX_BATCH, StreamOperands
from .tarnn_torch import EulerChain, FusedTARNN
from .triton_support import autocast_weight


class TARNNOperands(NamedTuple):
    """TARNN as every fast path and the export read it, formed from the cell's parameters (differentiable).

    In the increment ``delta = z - s_{m-1}`` one time step is::

        [c, q, r] = weight x_m + bias + state_weights s_{m-1}     (c = A s + B u + b_lin, q = U s + W u + b)
        beta = sigmoid(r);  delta_0 = 0
        G_k = phi(q + U delta_k) + c + A delta_k;  delta_{k+1} = delta_k + eta_k beta G_k   (gate inside)
        s_m = s_{m-1} + delta_K                    (gate outside: no beta in the update, s_m += beta delta_K)

    Attributes:
        weight: ``(3H, d)`` ``[B1; W1; W_x]``, the input map.
        bias: ``(3H,)`` ``[b_lin; b; b_beta]``.
        state_weights: ``(3H, H)`` ``[B2 + A; W2 + U; U_s]`` (``B2 - I + A`` with ``damping``): everything the
            state meets in a time step's first Euler step (``z_0 = s``), for one matmul.
        weight_U: ``(H, H)``, ``U``, for each further Euler step.
        eta: ``(K,)`` step sizes, or ``(max_length, K)`` with per-time-step step sizes.
        activation: phi, ``"relu"``, ``"tanh"`` or ``"sigmoid"`` (its code:
            :data:`~ltdrnn.ops.common.ACTIVATION_CODES`).
        coupled: whether ``A`` has the coupled block (``+I`` on the upper right ``(H/2, H/2)``).
        a_diagonal: ``A``'s diagonal: -1, or -2 for the authors' doubly damped gate-outside body.
        gate_inside: whether beta scales each Euler step (True) or mixes after them (False).
        weight_B2: ``(H, H)``, ``B2`` alone, for the export, which keeps ``A z`` and the damping apart.
        damping: the authors' code reading's extra ``-s_{m-1}`` in ``G`` (folded into ``state_weights``).
    """

    weight: Tensor
    bias: Tensor
    state_weights: Tensor
    weight_U: Tensor
    eta: Tensor
    activation: str
    coupled: bool
    a_diagonal: float
    gate_inside: bool
    weight_B2: Tensor
    damping: bool


def operands(cell) -> TARNNOperands:
    """The operands of a :class:`~ltdrnn.cells.tarnn.TARNN` as it stands."""
    weight, bias = cell.input_weights()
    return TARNNOperands(
        weight,
        bias,
        cell.state_weights(),
        cell.weight_U,
        cell.steps.values(),
        cell.activation,
        cell.A_kind == "coupled",
        -2.0 if cell.double_damping else -1.0,
        cell.gate == "inside",
        cell.weight_B2,
        cell.damping,
    )


def scan(cell, x: Tensor, state, lengths: Tensor | None, backend: str):
    """The whole sequence ``x (T, B, d)`` from ``state`` in ``backend`` (``"torch"``, ``"cpp"`` or ``"triton"``,
    as :func:`ltdrnn.ops.resolve` chose it): ``-> (outputs (T, B, H), final state)``; records the cell's
    ``aux["beta"]``. Where the backend has no form of the call (see the module's docstring), the cell's
    reference loop."""
    s, counter = split_counter(cell.per_time_step, state)
    if backend == "triton":
        eta = cell.sequence_step_sizes(x.shape[0], counter)
        if eta is not None:
            outputs, final = _triton_scan(cell, x, s, eta, lengths)
            return outputs, join_moved_counter(final, counter, x, lengths)
    compiled = backend == "cpp"
    eta = cell.sequence_step_sizes(x.shape[0], counter) if compiled or counter is None else None
    if eta is None or cell.double_damping:
        return cell.scan_reference(x, state, lengths)
    op = operands(cell)
    outputs, betas = FusedTARNN.apply(
        x,
        op.weight,
        op.bias,
        s,
        op.state_weights,
        op.weight_U,
        eta,
        op.activation,
        "coupled" if op.coupled else "identity",
        "inside" if op.gate_inside else "outside",
        compiled,
    )
    cell.aux["beta"] = mask_outputs(betas, lengths)
    final = final_state_at_lengths(outputs, lengths)
    return mask_outputs(outputs, lengths), join_moved_counter(final, counter, x, lengths)


def _triton_scan(cell, x: Tensor, s: Tensor, eta: Tensor, lengths: Tensor | None) -> Tuple[Tensor, Tensor]:
    """The whole sequence in one Triton launch per direction, the input map one GEMM before it, ``eta`` ``(K,)``
    or this call's rows ``(T, K)``; records ``aux["beta"]``."""
    from .tarnn_triton import tarnn_scan

    device = x.device.type
    op = operands(cell)
    outputs, betas = tarnn_scan(
        F.linear(x, op.weight, op.bias),
        s,
        autocast_weight(op.state_weights, device),
        autocast_weight(op.weight_U, device),
        eta,
        lengths,
        op.activation,
        op.coupled,
        op.a_diagonal,
        op.gate_inside,
    )
    cell.aux["beta"] = betas.detach()
    return outputs, final_state_at_lengths(outputs, lengths)


def stream(cell, x_t: Tensor, s, backend: str) -> Tuple[Tensor, Tensor] | None:
    """One step without autograd, ``x_t (B, d)`` from ``s (B, H)``: ``-> (s_m, s_m)``, recording ``aux["beta"]``.

    ``backend`` as :func:`ltdrnn.ops.resolve` chose it. With ``"cpp"`` (its operators loaded) at batch up to
    :data:`~ltdrnn.ops.kernels.STREAM_MAX_BATCH`, one call of ``torch.ops.ltdrnn.tarnn_stream``; otherwise a few
    PyTorch ops on matrices cached until a parameter changes (``cell.stream_cache``). None where the cell's
    general path must run: per-time-step step sizes (the counter picks the row), the doubly damped body (the
    compiled step knows ``A = -I`` only), and NaN or an infinity in ``x_t`` or ``s`` at a batch the compiled
    step covers."""
    if cell.per_time_step or cell.double_damping or not isinstance(s, Tensor):
        return None
    cached = cell.stream_cache.get(cell.own_parameters(), lambda: _stream_operands(cell))
    stepped = None
    # "cpp" as resolve() chose it: the operators are loaded, so the step skips stream_in_kernel's own check
    if backend == "cpp" and kernels.can_stream_in_kernel(
        x_t, s, cached[-1].dtype, cell.input_size, (cell.hidden_size,)
    ):
        stepped = kernels.run_stream_kernel("tarnn", cached[-1], x_t, s)
    if stepped is not None:
        out, beta = stepped
    elif x_t.shape[0] <= STREAM_MAX_BATCH and holds_non_finite(x_t, s):
        return None  # the kernel declined it (or is unavailable): the general path is exact
    else:
        out, beta = _torch_step(cell, cached, x_t, s)
    cell.aux["beta"] = beta[None]
    return out, out


def _torch_step(cell, cached: tuple, x_t: Tensor, s: Tensor) -> Tuple[Tensor, Tensor]:
    """``(s_m, beta)`` of one step without autograd in a few PyTorch ops."""
    weight_t, bias, state_t, chains, _ = cached
    batch = x_t.shape[0]
    if batch not in chains:
        chains[batch] = EulerChain(
            cell.K,
            batch,
            cell.hidden_size,
            scalars(cell.steps.values()),
            cell.activation,
            cell.A_kind,
            cell.gate,
            cell.weight_U,
            s,
        )
    out, beta = torch.empty_like(s), torch.empty_like(s)
    p_t = torch.addmm(bias, x_t, weight_t)
    chains[batch].run(p_t, s, state_t, out, beta, None, None, in_place=True)
    return out, beta


def stream_operands(cell) -> StreamOperands:
    """The compiled streaming step's weights and options (``torch.ops.ltdrnn.tarnn_stream``)."""
    return _kernel_operands(operands(cell))


def _kernel_operands(op: TARNNOperands) -> StreamOperands:
    return StreamOperands(
        (op.weight, op.bias, op.state_weights, op.weight_U, op.eta),
        (ACTIVATION_CODES[op.activation], op.coupled, op.gate_inside),
    )


def _stream_operands(cell) -> tuple:
    """What a streamed step reads, formed once per parameter change: the transposed input map and state
    weights, the Euler chains per batch size (filled as batches come) and the compiled step's operands."""
    op = operands(cell)
    return op.weight.t().contiguous(), op.bias, op.state_weights.t().contiguous(), {}, _kernel_operands(op)
