"""What every fast path shares: the activations' codes, activations written into buffers, a cache of
parameter-derived operands, the final state at each sequence's length, parameters as Python floats, and
the cells under ``torch.autocast``.

Shapes use the legend of :mod:`ltdrnn.cells.base` (time-major ``(T, B, H)``). The compiled kernels live
in :mod:`ltdrnn.ops.kernels`, work buffers and the malloc tuning in :mod:`ltdrnn.ops.memory`.
"""

from __future__ import annotations

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
