"""The unit every export format deploys: a trained model as one streaming step with a flat state.

Shapes use the legend of :mod:`ltdrnn.cells.base`; ``o`` is the head's output size and ``S`` the
width of the packed state (every layer's state tensors, each flattened per sequence, in layer order).

    StreamingStep(x_t (B, d), state (B, S)) -> (y_t (B, o), state (B, S))

It is built from the library's own contract: for every layer ``cell.step(cell.precompute(x_t), state)``
(the reference step, which has no compiled fast path and so traces into an exported graph), then the
model's pooling and head on the top layer's output. Fed the steps of a sequence, ``y_t`` at the
sequence's last true step is what :class:`~ltdrnn.models.SequenceModel` returns for a terminal head.
A pooled head keeps its pool in the state, after the layers' parts: ``max`` the running maximum of the
top layer's outputs (starting at -inf), ``mean`` their running sum and the step count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Tuple

import torch
from torch import Tensor, nn

from ..cells.base import State


class ExportError(ValueError):
    """A model, cell option or format that the export cannot handle; the message says which and why."""


@dataclass(frozen=True)
class StatePart:
    """One tensor of one layer's state: its per-sequence shape and where it sits in the packed state."""

    layer: int
    shape: Tuple[int, ...]
    offset: int

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def state_layout(cells, pooling: str = "last") -> List[StatePart]:
    """The packed state's parts, layer by layer, in the order each cell's state tuple holds them; then
    the pool of a pooled head (layer ``len(cells)``: ``max`` one part of H, ``mean`` the sum (H) and the
    count (1))."""
    parts, offset = [], 0
    for layer, cell in enumerate(cells):
        state = cell.init_state(1)
        for tensor in (state,) if isinstance(state, Tensor) else state:
            if not tensor.is_floating_point():
                raise ExportError(
                    f"cell {cell.registry_name!r}: its state holds a {tensor.dtype} tensor "
                    "(per-time-step step sizes keep a step counter); exporting a step with an "
                    "integer state is not supported, build the cell with eta_per_time_step=False"
                )
            parts.append(StatePart(layer, tuple(tensor.shape[1:]), offset))
            offset += parts[-1].size
    hidden = cells[-1].hidden_size
    for shape in POOL_PARTS[pooling](hidden):
        parts.append(StatePart(len(cells), shape, offset))
        offset += parts[-1].size
    return parts


POOL_PARTS = {"last": lambda h: [], "max": lambda h: [(h,)], "mean": lambda h: [(h,), (1,)]}


def check_exportable(model) -> None:
    """Raise :class:`ExportError` unless ``model`` is a float-input, one-direction SequenceModel with a
    terminal head and a float state."""
    from ..models import SequenceModel

    if not isinstance(model, SequenceModel):
        raise ExportError(f"model: expected a ltdrnn SequenceModel, got {type(model).__name__}")
    if model.rnn.bidirectional:
        raise ExportError(
            "model: a bidirectional model cannot stream (its backward direction reads the "
            "whole sequence); exporting a step is not supported"
        )
    if model.tokens:
        raise ExportError(
            "model: token input (an nn.Embedding of ids) is not supported by the export; the "
            "exported step takes float input x_t"
        )
    if not model.terminal:
        raise ExportError(
            f"model.head: {model.head!r} is not supported by the export; expected a terminal "
            "head (classifier or regressor), whose output at a sequence's last step is the "
            "prediction"
        )
    if getattr(model, "pooling", "last") not in POOL_PARTS:
        raise ExportError(f"model.pooling: {model.pooling!r} is not supported by the export (last, max, mean are)")
    state_layout(model.rnn.cells)


class StreamingStep(nn.Module):
    """One step of a trained :class:`~ltdrnn.models.SequenceModel`, with its state packed flat.

    ``forward(x_t (B, d), state (B, S)) -> (y_t (B, o), state (B, S))``; ``init_state(B)`` packs the
    cells' own initial states (zeros for most; SkipRNN starts its update probability at 1). Equivalent to::

        for each layer l:  x_t, s_l = cell_l.step(cell_l.precompute(x_t[None])[0], s_l)
        y_t = head(x_t)

    The model is put in eval mode (no dropout) and is shared, not copied.
    """

    def __init__(self, model) -> None:
        super().__init__()
        check_exportable(model)
        self.model = model.eval()
        self.cells = list(model.rnn.cells)
        self.pooling = getattr(model, "pooling", "last")
        self.parts = state_layout(self.cells, self.pooling)
        self.tuple_states = [not isinstance(cell.init_state(1), Tensor) for cell in self.cells]
        self.tuple_states.append(True)  # the pool's parts, a tuple (empty without pooling)
        self.state_size = sum(p.size for p in self.parts)
        self.input_size = model.embed.in_features if model.embed is not None else model.rnn.input_size
        self.output_size = model.output.out_features

    def init_state(self, batch_size: int = 1) -> Tensor:
        """``(B, S)``: every cell's ``init_state(B)``, then the pool (max: -inf; mean: zeros), packed."""
        p = self.model.output.weight
        pool = tuple(
            torch.full(
                (batch_size, *part.shape), -math.inf if self.pooling == "max" else 0.0, device=p.device, dtype=p.dtype
            )
            for part in self.parts
            if part.layer == len(self.cells)
        )
        return self.pack([cell.init_state(batch_size, p.device, p.dtype) for cell in self.cells] + [pool])

    def forward(self, x_t: Tensor, state: Tensor) -> Tuple[Tensor, Tensor]:
        states = self.unpack(state)
        x = self.model.embed(x_t) if self.model.embed is not None else x_t
        new_states = []
        for cell, cell_state in zip(self.cells, states):
            p = cell.precompute(x.unsqueeze(0))
            p_t = tuple(q[0] for q in p) if isinstance(p, tuple) else p[0]
            x, cell_state = cell.step(p_t, cell_state)
            new_states.append(cell_state)
        pool = states[-1]
        if self.pooling == "max":
            pool = (torch.maximum(pool[0], x),)
            x = pool[0]
        elif self.pooling == "mean":
            pool = (pool[0] + x, pool[1] + 1)
            x = pool[0] / pool[1]
        return self.model.output(x), self.pack(new_states + [pool])

    def unpack(self, state: Tensor) -> List[State]:
        """``(B, S)`` -> one state (tensor or tuple) per layer, shaped as the cells take them."""
        batch = state.shape[0]
        per_layer: List[list] = [[] for _ in self.tuple_states]
        for part in self.parts:
            piece = state[:, part.offset : part.offset + part.size].reshape(batch, *part.shape)
            per_layer[part.layer].append(piece)
        return [tuple(pieces) if is_tuple else pieces[0] for is_tuple, pieces in zip(self.tuple_states, per_layer)]

    def pack(self, states: List[State]) -> Tensor:
        """One state per layer -> ``(B, S)``."""
        flat = []
        for state in states:
            for tensor in (state,) if isinstance(state, Tensor) else state:
                flat.append(tensor.reshape(tensor.shape[0], -1))
        return torch.cat(flat, dim=1)

    @torch.no_grad()
    def run(self, x: Tensor, lengths: Tensor | None = None) -> Tensor:
        """The head's output at each sequence's last true step: ``x (B, T, d) -> (B, o)``.

        Steps past a sequence's end still run (they cannot change earlier outputs); the output kept
        for sequence ``b`` is the one after its step ``lengths[b] - 1``.
        """
        return run_sequences(lambda x_t, s: self(x_t, s), self.init_state(x.shape[0]), x, lengths)


def run_sequences(step, state, x, lengths=None):
    """Drive any step function ``(x_t, state) -> (y_t, state)`` over ``x (B, T, d)``; return the
    outputs at each sequence's last true step ``(B, o)``. Works on tensors and numpy arrays alike."""
    steps = x.shape[1]
    last = [steps - 1] * x.shape[0] if lengths is None else [int(n) - 1 for n in lengths]
    kept = None
    for t in range(steps):
        y, state = step(x[:, t], state)
        if kept is None:
            kept = y * 0
        for b, end in enumerate(last):
            if end == t:
                kept[b] = y[b]
    return kept
