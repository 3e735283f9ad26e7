"""``Recurrent.step`` at batch 1 on a CUDA device, replayed from a captured CUDA graph.

One streamed step of a small recurrent layer is a few dozen tiny kernels; on a GPU each launch costs more than
its arithmetic, so the step is launch-bound. :class:`GraphedStep` captures the whole step (every layer's cell)
once into a CUDA graph and replays it: one launch per step. The input and state are copied into the graph's
static buffers, the graph is replayed, and the outputs are copied out (a later step does not change a tensor
an earlier one returned).

When (:func:`graphs_apply`): the layer's ``cuda_graph_steps`` is True (the default), the input is on a CUDA
device with batch 1, autograd is off, autocast is off, and between-layer dropout is inactive. A graph is
captured again when the input's or state's layout changes or when any parameter is moved or changed in place
(the key holds each parameter's address and version counter, so an optimiser step or ``load_state_dict``
between steps is seen, as the cells' own operand caches see it). If capture fails, that layer streams eagerly
from then on, with one warning, and the device's random numbers keep working (:func:`release_generator`).
``LTDRNN_NO_CUDA_GRAPHS=1`` turns the path off.
"""

from __future__ import annotations

import os
import warnings
import weakref
from typing import Callable, List, Tuple

import torch
from torch import Tensor

from .cells.base import State, map_state, state_layout
from .ops.common import autocast_dtype

#: layer -> (key, GraphedStep); outside the layer, so that copying or pickling a layer never meets a graph
_GRAPHS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def graphs_apply(layer, x: Tensor) -> bool:
    """Whether ``layer.step`` on ``x (B, d)`` replays a CUDA graph (see the module docstring)."""
    return (
        x.device.type == "cuda"
        and x.shape[0] == 1
        and getattr(layer, "cuda_graph_steps", False)
        and not getattr(layer, "_graph_failed", False)
        and not torch.is_grad_enabled()
        and autocast_dtype("cuda") is None
        and (layer.dropout == 0 or not layer.training)
        and os.environ.get("LTDRNN_NO_CUDA_GRAPHS", "") in ("", "0")
    )


def graph_key(layer, x: Tensor, parts: List[State]) -> tuple:
    """What a captured graph depends on: the input's and states' layouts, and every parameter's address,
    version counter and uses of its ``.data`` alias (:class:`~ltdrnn.ops.common.TrackedParameter`)."""
    parameters = tuple((p.data_ptr(), p._version, getattr(p, "data_edits", 0)) for p in layer.parameters())
    return (tuple(x.shape), x.dtype, x.device, state_layout(parts), parameters, layer.training)


class GraphedStep:
    """One captured step: ``run(x, parts) -> (y, final_state)`` as the eager ``step(x, parts)`` returns them."""

    def __init__(self, step: Callable[[Tensor, List[State]], Tuple[Tensor, State]], x: Tensor, parts: List[State]):
        self.x = x.clone()
        self.parts = [map_state(torch.clone, part) for part in parts]
        side = torch.cuda.Stream(device=x.device)
        side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(side):  # warm-up off the capture: first-use work (caches, kernels) happens here
            for _ in range(2):
                step(self.x, self.parts)
        torch.cuda.current_stream(x.device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.y, self.state = step(self.x, self.parts)

    def run(self, x: Tensor, parts: List[State]) -> Tuple[Tensor, State]:
        self.x.copy_(x)
        for static, given in zip(self.parts, parts):
            map_pairs(lambda a, b: a.copy_(b), static, given)
        self.graph.replay()
        return self.y.clone(), map_state(torch.clone, self.state)


def map_pairs(fn, a: State, b: State) -> None:
    """``fn(x, y)`` for each pair of tensors of two states laid out alike."""
    if isinstance(a, Tensor):
        fn(a, b)
        return
    for x, y in zip(a, b):
        map_pairs(fn, x, y)


def graphed_step(layer, step, x: Tensor, parts: List[State]) -> Tuple[Tensor, State] | None:
    """``step(x, parts)`` through the layer's captured graph (captured now if missing or stale), or None when
    capture fails (the layer then streams eagerly)."""
    key = graph_key(layer, x, parts)
    cached = _GRAPHS.get(layer)
    if cached is None or cached[0] != key:
        try:
            cached = (key, GraphedStep(step, x, parts))
        except Exception as error:  # a cell whose step cannot be captured: stream eagerly
            layer.__dict__["_graph_failed"] = True
            _GRAPHS.pop(layer, None)
            release_generator(x.device)
            warnings.warn(
                f"Recurrent.step: CUDA graph capture failed ({type(error).__name__}: {error}); streaming eagerly",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
        _GRAPHS[layer] = cached
    return cached[1].run(x, parts)


def release_generator(device: torch.device) -> None:
    """After a capture that failed part-way: PyTorch clears the device generator's capture mark only in a
    successful ``capture_end``, and while it stays set every random op on the device fails ("Offset increment
    outside graph capture"). The generator gets a fresh state with the same seed and offset."""
    generator = torch.cuda.default_generators[torch.cuda.current_device() if device.index is None else device.index]
    saved = generator.get_state()
    generator.graphsafe_set_state(torch.Generator(device=device).graphsafe_get_state())
    generator.set_state(saved)
