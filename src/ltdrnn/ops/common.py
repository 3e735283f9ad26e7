"""What every fast path shares: the activations' codes, activations written into buffers, a cache of
parameter-derived operands, the final state at each sequence's length, parameters as Python floats, the
GRU step, and the cells under ``torch.autocast``.

Shapes use the legend of :mod:`ltdrnn.cells.base` (time-major ``(T, B, H)``). The compiled kernels live
in :mod:`ltdrnn.ops.kernels`, work buffers and the malloc tuning in :mod:`ltdrnn.ops.memory`.
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor, nn

# ---- helpers of the fused loops (hand-written forward and backward over a sequence) ------------------
#: The activations' numbers in every fast path: ``csrc/common.h`` (``with_activation``) and the Triton
#: kernels' ``ACT`` argument (``triton_blocks.activate``) read these codes.
ACTIVATION_CODES = {"relu": 0, "tanh": 1, "sigmoid": 2}
ACTIVATION_INTO = {
    # phi(x, out=buffer), for the fused loops
    "relu": lambda x, out: torch.clamp_min(x, 0, out=out),
    "tanh": lambda x, out: torch.tanh(x, out=out),
    "sigmoid": lambda x, out: torch.sigmoid(x, out=out),
}
ACTIVATION_BACKWARD_INTO = {
    # gradient through phi from phi's output, written into ``out``: the backward needs only that output
    "relu": lambda grad, y, out: torch.ops.aten.threshold_backward.grad_input(grad, y, 0, grad_input=out),
    "tanh": lambda grad, y, out: torch.ops.aten.tanh_backward.grad_input(grad, y, grad_input=out),
    "sigmoid": lambda grad, y, out: torch.ops.aten.sigmoid_backward.grad_input(grad, y, grad_input=out),
}


_TENSOR_DATA = torch._C.TensorBase.data


class TrackedParameter(nn.Parameter):
    """A parameter that counts the uses of its ``.data`` alias in ``data_edits``.

    A write through ``p.data`` (``p.data.copy_(w)``, ``p.data[i] = v``, ``p.data = t``) bypasses
    autograd's version counter, so a cache of values derived from ``p`` could not see it; the alias can
    only be had through this property, so counting its uses can. Reads count too: a cache then recomputes
    once more than it needed to, never once less. Every parameter a cell registers is one of these
    (:meth:`ltdrnn.cells.base.Cell.register_parameter`); it behaves as ``nn.Parameter`` in every other way.
    """

    data_edits = 0

    @property
    def data(self) -> Tensor:
        self.data_edits += 1
        return _TENSOR_DATA.__get__(self)

    @data.setter
    def data(self, value: Tensor) -> None:
        self.data_edits += 1
        _TENSOR_DATA.__set__(self, value)


def tracked(param):
    """``param`` as a :class:`TrackedParameter` sharing its storage (None and subclasses stay as they are)."""
    if type(param) is not nn.Parameter:
        return param
    return TrackedParameter(param.detach(), param.requires_grad)


def track_parameters(module: nn.Module) -> None:
    """Every plain parameter of ``module`` and its submodules becomes a :class:`TrackedParameter`; called
    as a module is attached to a cell, before any optimiser can hold the old objects."""
    for sub in module.modules():
        for name, param in sub._parameters.items():
            sub._parameters[name] = tracked(param)


class ParameterCache:
    """Values derived from some parameters, recomputed only when one of them changes.

    The key is every given tensor's data pointer and version counter, and the number of optimiser steps
    taken in this process: in-place updates (``with torch.no_grad(): p.add_(...)``, ``load_state_dict``,
    optimisers with or without ``foreach``), new tensors (``p.data = t``, ``module.to(...)``,
    ``load_state_dict(..., assign=True)``) and fused optimisers (``torch.optim.Adam(..., fused=True)``,
    which write the parameters without bumping their version counters) all invalidate it. The cache
    holds the storages its value came from, so a replaced tensor's address cannot come back for another
    one and be taken for it (``p.data = t`` twice in a row often gets the first address back).

    A write through the alias ``p.data`` (``p.data.copy_(w)``, ``p.data[i] = v``) bumps no version
    counter (the alias has one of its own), so the tensors must be :class:`TrackedParameter`, whose
    ``data_edits`` count the uses of that alias: every parameter a cell registers is one
    (docs/reliability.md, "Streaming follows parameter changes").
    """

    def __init__(self) -> None:
        self.key, self.value, self.storages = None, None, []
        _count_optimiser_steps()

    def get(self, tensors, compute, extra=None):
        """The cached ``compute()``, recomputed when a tensor or the hashable ``extra`` changes."""
        key = (
            _OPTIMISER_STEPS[0],
            tuple([(p.data_ptr(), p._version, getattr(p, "data_edits", 0)) for p in tensors]),
            extra,
        )
        if key != self.key:
            self.key, self.value = key, compute()
            self.storages = [p.untyped_storage() for p in tensors]
        return self.value


#: Optimiser steps taken in this process (``[count]``), counted by a global post-step hook of
#: ``torch.optim`` registered when the first :class:`ParameterCache` is made.
_OPTIMISER_STEPS = [0]
_COUNTING: list = []


def _count_optimiser_steps() -> None:
    """Registers, once, the hook that counts every ``torch.optim.Optimizer.step`` of the process."""
    if not _COUNTING:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        def count(optimizer, args, kwargs) -> None:
            _OPTIMISER_STEPS[0] += 1

        _COUNTING.append(register_optimizer_step_post_hook(count))


def final_state_at_lengths(outputs: Tensor, lengths: Tensor | None) -> Tensor:
    """The state after each sequence's last true step, from the unmasked outputs ``(T, B, H)``."""
    if lengths is None:
        return outputs[-1]
    index = (lengths.to(outputs.device) - 1).view(1, -1, 1).expand(1, -1, outputs.shape[-1])
    return outputs.gather(0, index)[0]


def scalars(values: Tensor) -> list:
    """Python floats of a small parameter, for the fused loops (no graph, no per-step tensor ops)."""
    return [float(v) for v in values.detach().reshape(-1).tolist()]


# ---- sequences: lengths, masks and the non-finite check (the reference loop and every fast path) --------
def mask_outputs(outputs: Tensor, lengths: Tensor | None) -> Tensor:
    """Zero the outputs ``(T, B, ...)`` at steps ``t >= lengths[b]`` (like a PackedSequence round trip)."""
    if lengths is None:
        return outputs
    # ``where``, not a product: a NaN or Inf computed past a sequence's end must not survive as NaN*0
    return torch.where(valid_steps(outputs, lengths), outputs, 0)


def holds_non_finite(x: Tensor, state) -> bool:
    """Whether ``x`` or a floating tensor of ``state`` holds NaN or an infinity.

    Fast paths reorder the reference's sums (``(P W) x`` for ``P (W x)``, stacked weights, closed
    forms) and compiled code is built with ``-ffast-math``: on finite values they agree to rounding,
    but an infinity can meet another in one order and not in the other. :meth:`~ltdrnn.cells.base.Cell.scan` gives such
    input to the reference, so every path returns its NaN and Inf exactly (one pass over the input).
    While a CUDA graph is captured (:mod:`ltdrnn.graphs`) the answer is False: the graphed step keeps the
    fast path, as compiled graphs do.
    """
    if x.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return False  # a CUDA graph cannot branch on data (reading it back ends the capture): the fast path
    tensors = (x, *state) if isinstance(state, tuple) else (x, state)
    return not all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point())


def step_mask(steps: int, lengths: Tensor, device) -> Tensor:
    """``(T, B)`` bool, True at steps ``t < lengths[b]``."""
    return torch.arange(steps, device=device).unsqueeze(1) < lengths.to(device).unsqueeze(0)


def valid_steps(x: Tensor, lengths: Tensor) -> Tensor:
    """Boolean mask broadcastable to ``x (T, B, ...)``: True at steps ``t < lengths[b]``."""
    valid = step_mask(x.shape[0], lengths, x.device)
    return valid.view(*valid.shape, *([1] * (x.dim() - 2)))


# ---- the step counter of per-time-step step sizes (TARNN, iRNN) ---------------------------------------
def split_counter(cell_per_time_step: bool, state) -> Tuple[Tensor, Tensor | None]:
    """``state -> (h, counter)``; the counter is None unless step sizes are per time step."""
    if cell_per_time_step:
        return state[0], state[1]
    return state, None


def join_counter(h: Tensor, counter: Tensor | None):
    return h if counter is None else (h, counter)


def join_moved_counter(final: Tensor, counter: Tensor | None, x: Tensor, lengths: Tensor | None):
    """A sequence call's final state: with per-time-step step sizes, joined by each sequence's counter moved
    past the call's ``x (T, B, d)`` (by its length where ``lengths`` are given)."""
    if counter is None:
        return final
    return join_counter(final, counter + (x.shape[0] if lengths is None else lengths))


# ---- the GRU step and binary decisions (SA-RNN's fast paths; the masked cells' reference steps) ----------
def binary(x: Tensor, threshold: float) -> Tensor:
    """``1[x > threshold]`` as a float tensor of 0s and 1s.

    Written with ``out=`` a float buffer: on CPU, producing a bool tensor (and converting it, or
    selecting with ``torch.where``) costs 10-50 times more than an arithmetic op of the same size.
    """
    return torch.gt(x, threshold, out=torch.empty_like(x))


def gru_gates(gi: Tensor, gh: Tensor, hidden: int) -> Tuple[Tensor, Tensor, Tensor]:
    """GRU gates in torch's layout: ``gi = W_ih x + b_ih``, ``gh = W_hh h + b_hh`` (each ``(B, 3H)``)
    -> ``(rz (B, 2H), n (B, H), gh_n (B, H))`` with ``rz = sigmoid(gi_rz + gh_rz)`` and
    ``n = tanh(gi_n + r * gh_n)``; the candidate is ``lerp(n, h, z) = (1 - z) n + z h``."""
    rz = torch.sigmoid(gi[..., : 2 * hidden] + gh[..., : 2 * hidden])
    gh_n = gh[..., 2 * hidden :]
    n = torch.tanh(torch.addcmul(gi[..., 2 * hidden :], rz[..., :hidden], gh_n))
    return rz, n, gh_n


def gru_candidate(gi: Tensor, read: Tensor, carried: Tensor, weight_hh: Tensor, bias_hh: Tensor) -> Tensor:
    """The GRU step ``(1 - z) n + z h`` whose gates read ``read`` and whose carry is ``carried``
    (the same tensor for a plain GRU; VC-RNN reads a masked state)."""
    gh = torch.addmm(bias_hh, read, weight_hh.t())
    rz, n, _ = gru_gates(gi, gh, carried.shape[-1])
    return torch.lerp(n, carried, rz[..., carried.shape[-1] :])


# ---- mixed precision: torch.autocast around the cells --------------------------------------------
#: one C call that says whether autocast is on for any device: the common "no" costs no more (torch >= 2.1)
_ANY_AUTOCAST = getattr(torch._C, "_is_any_autocast_enabled", None)


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype of ``torch.autocast`` when it is on for ``device_type``, else None."""
    if _ANY_AUTOCAST is not None and not _ANY_AUTOCAST():
        return None
    try:
        if not torch.is_autocast_enabled(device_type):
            return None
        return torch.get_autocast_dtype(device_type)
    except TypeError:  # torch < 2.4: no device argument
        if device_type == "cpu":
            return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None
        return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None


def autocast_dtype_for(x) -> torch.dtype | None:
    """:func:`autocast_dtype` for the device of the tensor ``x`` (None for anything else); per streamed step
    it costs one C call while autocast is off."""
    if _ANY_AUTOCAST is not None and not _ANY_AUTOCAST():
        return None
    return autocast_dtype(x.device.type) if isinstance(x, Tensor) else None


def from_autocast(x: Tensor, parameter: Tensor | None) -> Tensor:
    """``x`` in the parameters' dtype when autocast made it (it is in the autocast dtype and the parameters
    are not): what autocast's own operators do with such an input. Anything else unchanged."""
    amp = autocast_dtype_for(x)
    if amp is None or parameter is None or x.dtype != amp or parameter.dtype == amp:
        return x
    return x.to(parameter.dtype) if x.is_floating_point() and parameter.is_floating_point() else x
