"""``Recurrent``: any registered cell as a drop-in for ``nn.LSTM``.

Shapes use the legend of :mod:`ltdrnn.cells.base`. With ``batch_first=True`` (the default) the input
is ``(B, T, d)`` and the output ``(B, T, D*H)``; the final state stacks the ``L*D`` layer/direction
states on a new first axis, ordered like ``nn.LSTM`` (layer 0 forward, layer 0 backward, layer 1 ...).
"""

from __future__ import annotations

from typing import Any, Callable, List, Sequence, Tuple, Type, Union

import torch
from torch import Tensor, nn
from torch.nn.modules import module as _module_globals
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .cells.base import (
    Cell,
    State,
    check_lengths,
    check_positive_int,
    check_state_like,
    describe,
    map_state,
    state_layout,
)
from .cells.registry import build
from .graphs import graphed_step, graphs_apply
from .ops.common import autocast_dtype_for, from_autocast

CellSpec = Union[str, Type[Cell], Callable[..., Cell]]


class Recurrent(nn.Module):
    """A stack of recurrent layers built from one cell type.

    Args:
        cell: a registry name (``"tarnn"``), a Cell subclass, or a factory
            ``(input_size, hidden_size, **options) -> Cell``.
        input_size: d.
        hidden_size: H of every layer.
        num_layers: L, layers stacked on each other's outputs.
        dropout: dropout probability on the outputs of every layer but the last (training only).
        bidirectional: add a second direction per layer that reads each sequence backwards
            (within its true length).
        batch_first: input and output are ``(B, T, ...)`` when True, ``(T, B, ...)`` when False.
        **cell_options: passed to every cell's constructor (e.g. ``K=5``, ``backend="reference"``).

    ``forward(input, state=None, lengths=None) -> (output, final_state)``:
        input: ``(B, T, d)`` / ``(T, B, d)``, unbatched ``(T, d)``, or a PackedSequence.
        state: the stacked initial state (as returned), or None for zeros.
        lengths: ``(B,)`` true lengths of padded input (not with a PackedSequence).
        output: ``(B, T, D*H)`` (zero past each sequence's length), or a PackedSequence if the input was.
        final_state: each tensor ``(L*D, B, ...)``, taken at each sequence's true length.

    ``step(x_t, state=None) -> (y_t, state)`` runs one time step for streaming (unidirectional only);
    calling it T times equals one ``forward`` over the T steps.

    Examples::

        >>> import torch
        >>> from ltdrnn import Recurrent
        >>> _ = torch.manual_seed(0)
        >>> rnn = Recurrent("srnn", input_size=10, hidden_size=20, num_layers=2)
        >>> x = torch.randn(3, 5, 10)                       # (B, T, d): batch first by default
        >>> output, h_n = rnn(x)
        >>> output.shape, h_n.shape
        (torch.Size([3, 5, 20]), torch.Size([2, 3, 20]))
        >>> output, h_n = rnn(x, lengths=torch.tensor([5, 2, 4]))   # padded batch
        >>> bool(output[1, 2:].eq(0).all())                # zero past each sequence's length
        True
        >>> state = None                                    # streaming: T steps equal one forward
        >>> for t in range(5):
        ...     y, state = rnn.step(x[:, t], state)
        >>> torch.allclose(y, rnn(x)[0][:, -1], atol=1e-6)
        True
    """

    def __init__(
        self,
        cell: CellSpec,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        bidirectional: bool = False,
        batch_first: bool = True,
        **cell_options: Any,
    ) -> None:
        super().__init__()
        self.input_size = check_positive_int("input_size", input_size)
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.num_layers = check_positive_int("num_layers", num_layers)
        if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0 <= dropout < 1:
            raise ValueError(f"dropout: expected a probability in [0, 1), got {dropout!r}")
        if not isinstance(bidirectional, bool):
            raise TypeError(f"bidirectional: expected a bool, got {bidirectional!r}")
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        if not isinstance(batch_first, bool):
            raise TypeError(f"batch_first: expected a bool, got {batch_first!r}")
        self.batch_first = batch_first
        self.num_directions = 2 if bidirectional else 1
        factory = _cell_factory(cell)
        self.cells = nn.ModuleList(
            factory(input_size if layer == 0 else hidden_size * self.num_directions, hidden_size, **cell_options)
            for layer in range(num_layers)
            for _ in range(self.num_directions)
        )
        self.cell_name = cell if isinstance(cell, str) else type(self.cells[0]).__name__
        self.between_layers = nn.Dropout(self.dropout)
        #: ``step`` at batch 1 on a CUDA device replays a captured CUDA graph (ltdrnn.graphs)
        self.cuda_graph_steps = True

    # ---- public API ------------------------------------------------------------------------------
    def forward(self, input: Union[Tensor, PackedSequence], state: State | None = None, lengths: Tensor | None = None):
        packed = isinstance(input, PackedSequence)
        if packed:
            if lengths is not None:
                raise ValueError("lengths: must be None when the input is a PackedSequence (the lengths are inside it)")
            x, lengths = pad_packed_sequence(input, batch_first=False)
            x = self._from_autocast(x)
            unbatched = False
        else:
            x, unbatched = self._time_major(self._from_autocast(input))
        batch, steps = x.shape[1], x.shape[0]
        lengths = check_lengths(lengths, batch, steps, x.device)
        states = self._split_state(state, batch, x, unbatched)

        finals: List[State] = []
        for layer in range(self.num_layers):
            if layer > 0:
                x = self.between_layers(x)
            outs = []
            for direction in range(self.num_directions):
                index = layer * self.num_directions + direction
                out, final = self._run_direction(self.cells[index], x, states[index], lengths, reverse=direction == 1)
                outs.append(out)
                finals.append(final)
            x = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)

        final_state = _stack_states(finals)
        if packed:
            return pack_padded_sequence(x, lengths.cpu(), enforce_sorted=False), final_state
        if unbatched:
            return x.squeeze(1), map_state(lambda s: s.squeeze(1), final_state)
        return (x.transpose(0, 1) if self.batch_first else x), final_state

    def step(self, x_t: Tensor, state: State | None = None) -> Tuple[Tensor, State]:
        """One streaming step: ``x_t (B, d)`` or ``(d,)`` -> ``(y_t (B, H), state)``.

        Equivalent to ``forward`` over a one-step sequence, but calls each cell directly and checks
        the state's layout in full only when it changes: the per-call cost matters at batch 1. At batch 1 on a
        CUDA device, without autograd, the step replays a captured CUDA graph (:mod:`ltdrnn.graphs`; set
        ``cuda_graph_steps = False`` to stream eagerly).
        """
        if self.bidirectional:
            raise ValueError(
                "step: a bidirectional layer cannot stream (its backward direction needs "
                "the whole sequence); use forward"
            )
        if not isinstance(x_t, Tensor) or x_t.dim() not in (1, 2):
            raise ValueError(
                f"x_t: expected a tensor of shape (B, {self.input_size}) or ({self.input_size},), got {describe(x_t)}"
            )
        if x_t.shape[-1] != self.input_size:
            self._check_features(x_t, "x_t")
        lean = self._lean_step(x_t, state)
        if lean is not None:
            return lean
        x_t = self._from_autocast(x_t)
        unbatched = x_t.dim() == 1
        x = x_t.unsqueeze(0) if unbatched else x_t
        parts = self._step_state(state, x, unbatched)
        stepped = graphed_step(self, self._step_cells, x, parts) if graphs_apply(self, x) else None
        x, final_state = stepped if stepped is not None else self._step_cells(x, parts)
        if unbatched:
            return x.squeeze(0), map_state(lambda s: s.squeeze(1), final_state)
        return x, final_state

    def _lean_step(self, x: Tensor, state: State | None) -> Tuple[Tensor, State] | None:
        """``step`` by each cell's :meth:`~ltdrnn.cells.base.Cell.stream_step`, skipping the checks and
        dispatch of a cell call, where nothing can differ from the full path: a batched CPU input and a
        state of the layout last checked, no autograd, autocast, dropout or hooks; None otherwise.

        At batch 1 the full path's per-call work (checking the input and state once per cell and again in
        ``scan``, ``nn.Module`` dispatch) costs more than a compiled step itself. A cell whose streaming
        step declines the input (non-finite values, a backend without one) takes the full path alone.
        """
        if (
            state is None
            or torch.is_grad_enabled()
            or x.dim() != 2
            or not x.is_cpu
            or (self.training and self.dropout > 0)
            or autocast_dtype_for(x) is not None
            or self._hooked()
        ):
            return None
        if (state_layout(state), x.shape[0], x.dtype, x.device) != self.__dict__.get("_checked_layout"):
            return None
        finals = []
        for cell, part in zip(self._cell_list(), _unstacked(state)):
            cell.check_room(part, 1)
            backend = cell.resolved_backend(like=x)
            stepped = None if backend == "reference" else cell.stream_step(x, part, backend)
            x, final = stepped if stepped is not None else cell(x, part)
            finals.append(final)
        return x, _stack_states(finals) if len(finals) > 1 else _stacked_alone(finals[0], x)

    def _hooked(self) -> bool:
        """Whether a forward hook would see a cell call (the lean step makes none)."""
        if _global_forward_hooks_set():
            return True
        return any(c._forward_hooks or c._forward_pre_hooks for c in self._cell_list())

    def _cell_list(self):
        # the ModuleList's own dict: iterating ``self.cells`` costs two attribute lookups through nn.Module
        return self._modules["cells"]._modules.values()

    def _step_cells(self, x: Tensor, parts: List[State]) -> Tuple[Tensor, State]:
        """One step of every cell, layer on layer: ``x (B, d)``, the per-cell states -> ``(y, stacked state)``."""
        finals = []
        for index, cell in enumerate(self.cells):
            if index > 0:
                x = self.between_layers(x)
            x, final = cell(x, parts[index])
            finals.append(final)
        return x, _stack_states(finals)

    def _step_state(self, state: State | None, x: Tensor, unbatched: bool) -> List[State]:
        """The per-cell states for ``step``; input and state are checked in full once per layout."""
        if state is None:
            self._check_features(x, "x_t")
            return [c.init_state(x.shape[0], x.device, x.dtype) for c in self.cells]
        if unbatched:
            state = map_state(lambda s: s.unsqueeze(1), state)
        layout = (state_layout(state), x.shape[0], x.dtype, x.device)
        if layout != self.__dict__.get("_checked_layout"):
            self._check_features(x, "x_t")
            parts = self._split_state(state, x.shape[0], x, unbatched=False)
            self.__dict__["_checked_layout"] = layout
            return parts
        return _unstacked(state)

    def _apply(self, fn, *args, **kwargs):
        # .to(), .double(), ... may change the dtype the streamed input must have: check it again.
        self.__dict__.pop("_checked_layout", None)
        return super()._apply(fn, *args, **kwargs)

    def init_state(self, batch_size: int, device=None, dtype=None) -> State:
        """The stacked zero state for ``batch_size`` sequences (each tensor ``(L*D, B, ...)``)."""
        return _stack_states([c.init_state(batch_size, device, dtype) for c in self.cells])

    def losses(self) -> dict[str, Tensor]:
        """Every cell's named extra loss terms, summed over layers and directions."""
        total: dict[str, Tensor] = {}
        for cell in self.cells:
            for name, value in cell.losses().items():
                total[name] = total[name] + value if name in total else value
        return total

    @property
    def aux(self) -> List[dict]:
        """Per layer and direction (nn.LSTM order), the cell's ``aux`` of the last forward pass."""
        return [cell.aux for cell in self.cells]

    def set_epoch(self, epoch: int) -> None:
        for cell in self.cells:
            cell.set_epoch(epoch)

    def extra_repr(self) -> str:
        return (
            f"{self.cell_name!r}, {self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
            f"dropout={self.dropout}, bidirectional={self.bidirectional}, batch_first={self.batch_first}"
        )

    # ---- internals -------------------------------------------------------------------------------
    def _run_direction(
        self, cell: Cell, x: Tensor, state: State, lengths: Tensor | None, reverse: bool
    ) -> Tuple[Tensor, State]:
        if not reverse:
            return cell.scan(x, state, lengths)
        order = _reversal_index(x.shape[0], x.shape[1], lengths, x.device)
        out, final = cell.scan(_gather_time(x, order), state, lengths)
        return _gather_time(out, order), final

    def _from_autocast(self, x: Any) -> Any:
        """Under torch.autocast, an input in the autocast dtype is taken as the parameters' dtype (the state
        stays in it): :func:`~ltdrnn.cells.base.from_autocast`."""
        return from_autocast(x, self.cells[0]._any_parameter(required=False)) if isinstance(x, Tensor) else x

    def _time_major(self, input: Tensor) -> Tuple[Tensor, bool]:
        if not isinstance(input, Tensor):
            raise TypeError(f"input: expected a Tensor or PackedSequence, got {type(input).__name__}")
        if input.dim() == 2:
            x = input.unsqueeze(1)
            unbatched = True
        elif input.dim() == 3:
            x = input.transpose(0, 1) if self.batch_first else input
            unbatched = False
        else:
            layout = "(B, T, d)" if self.batch_first else "(T, B, d)"
            raise ValueError(
                f"input: expected {layout} or unbatched (T, d) with d={self.input_size}, got shape {tuple(input.shape)}"
            )
        self._check_features(input, "input")
        if 0 in x.shape[:2]:
            raise ValueError(
                f"input: expected at least one sequence and one time step, got an empty "
                f"input of shape {tuple(input.shape)}"
            )
        return x, unbatched

    def _check_features(self, x: Tensor, name: str) -> None:
        if x.shape[-1] != self.input_size:
            raise ValueError(
                f"{name}: expected last dimension input_size={self.input_size}, got shape {tuple(x.shape)}"
            )
        if not x.is_floating_point():
            raise TypeError(f"{name}: expected a floating-point tensor, got dtype {x.dtype}")
        parameter = self.cells[0]._any_parameter(required=False)
        if parameter is not None and x.dtype != parameter.dtype:
            raise TypeError(
                f"{name}: dtype {x.dtype} does not match the layer's parameters "
                f"({parameter.dtype}); convert one of them, e.g. layer.to({x.dtype})"
            )

    def _split_state(self, state: State | None, batch: int, x: Tensor, unbatched: bool) -> List[State]:
        count = len(self.cells)
        if state is None:
            return [c.init_state(batch, x.device, x.dtype) for c in self.cells]
        if unbatched:
            state = map_state(lambda s: s.unsqueeze(1), state)
        expected = _stack_states([c.init_state(batch, x.device, x.dtype) for c in self.cells])
        check_state_like(state, expected)
        if isinstance(state, Tensor):
            return list(state.unbind(0))
        return [tuple(part[i] for part in state) for i in range(count)]


def _cell_factory(cell: CellSpec) -> Callable[..., Cell]:
    if isinstance(cell, str):
        return lambda input_size, hidden_size, **options: build(cell, input_size, hidden_size, **options)
    if isinstance(cell, Cell):
        raise TypeError(
            "cell: expected a registry name, a Cell subclass or a factory, got a Cell instance "
            "(a layer builds one cell per layer and direction)"
        )
    if callable(cell):
        return cell
    raise TypeError(f"cell: expected a registry name, a Cell subclass or a factory, got {cell!r}")


def _stack_states(states: Sequence[State]) -> State:
    first = states[0]
    if isinstance(first, Tensor):
        return torch.stack(list(states))
    return tuple(torch.stack([s[i] for s in states]) for i in range(len(first)))


def _stacked_alone(state: State, output: Tensor) -> State:
    """``_stack_states([state])`` of a one-layer stack without copying: the state's own tensors as views,
    except those sharing memory with the output (a caller may edit its output in place). A copy of
    MIST's history is the largest cost of a streamed step."""

    def stacked(s: Tensor) -> Tensor:
        if s is output or s.untyped_storage().data_ptr() == output.untyped_storage().data_ptr():
            return torch.stack([s])
        return s.unsqueeze(0)

    return stacked(state) if isinstance(state, Tensor) else tuple(stacked(s) for s in state)


def _unstacked(state: State) -> List[State]:
    """The per-cell states of a stacked state already checked (``(L*D, B, ...)`` tensors)."""
    if isinstance(state, Tensor):
        return list(state.unbind(0))
    return list(zip(*[part.unbind(0) for part in state]))


def _global_forward_hooks_set() -> bool:
    return bool(_module_globals._global_forward_hooks or _module_globals._global_forward_pre_hooks)


def _reversal_index(steps: int, batch: int, lengths: Tensor | None, device) -> Tensor:
    """``(T, B)`` time index that reverses each sequence within its length and keeps padding in place."""
    t = torch.arange(steps, device=device).unsqueeze(1).expand(steps, batch)
    if lengths is None:
        return steps - 1 - t
    reversed_t = lengths.unsqueeze(0) - 1 - t
    return torch.where(reversed_t >= 0, reversed_t, t)


def _gather_time(x: Tensor, order: Tensor) -> Tensor:
    return x.gather(0, order.view(*order.shape, *([1] * (x.dim() - 2))).expand_as(x))
