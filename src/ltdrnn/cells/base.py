"""The contract every ltdrnn cell fulfils.

Symbol legend (used in every docstring of the package):

    T  time steps            B  batch size          d  input size (``input_size``)
    H  hidden size           K  Euler steps         L  layers,  D  directions (1 or 2)

A cell computes one step of a recurrence, ``h_t, state_t = f(x_t, state_{t-1})``. Shapes are
time-major inside the package: sequences are ``(T, B, d)`` and outputs ``(T, B, H)``. The
:class:`~ltdrnn.layers.Recurrent` layer turns batch-first user input into this form.

State
    ``init_state(B)`` returns the cell's state: a tensor, or a tuple of tensors, each with the batch
    on its first axis (LSTM: ``(h, c)``; MIST: the history ``(B, N, H)``; most cells: ``h``). The layer stacks the
    states of its layers and directions on a new first axis, exactly as ``nn.LSTM`` does.

The three stages of a forward pass
    1. ``precompute(x)``: all work that does not depend on the state, done for every step at once
       (input projections, SRNN's beta network). ``(T, B, d) -> P`` with ``T`` leading.
    2. ``step(p_t, state) -> (h_t, state)``: the sequential part, on one time slice of ``P``.
    3. ``scan(x, state, lengths) -> (outputs, final_state)``: the whole sequence. The default is
       :meth:`scan_reference`, an obviously correct loop over ``step``. Cells with fast paths list
       the backends they offer in ``backends`` (:mod:`ltdrnn.ops`: reference, torch, cpp, triton) and
       override :meth:`scan_fast`; the attribute ``backend`` chooses one.

Extra outputs
    ``losses()`` returns named extra loss terms (TARNN's regulariser, SA-RNN's update budget), which
    the trainer weights by its configuration; ``aux`` holds named per-step tensors of the last forward
    pass (update masks, time constants), each ``(T, B, ...)``.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from ..ops import resolve
from ..ops.common import (
    autocast_dtype_for,
    from_autocast,
    holds_non_finite,
    mask_outputs,
    track_parameters,
    tracked,
    valid_steps,
)

State = Union[Tensor, Tuple[Tensor, ...]]


class GradientGrowthWarning(UserWarning):
    """A cell is trained over more steps than its gradients are known to stay finite and usable for
    (``Cell.gradient_length_limit``; the measurements are in docs/reliability.md)."""


class Cell(nn.Module):
    """Base class of every recurrent cell.

    Subclasses implement ``init_state``, ``step`` and usually ``precompute``; fast cells add the backends
    they offer to ``backends`` and implement ``scan_fast`` and, for a lean one-step path, ``stream_step``.

    Attributes:
        input_size (int): d.
        hidden_size (int): H, the width of ``h_t``.
        backends (tuple[str, ...]): the backends of ``scan`` the cell offers (:data:`ltdrnn.ops.BACKENDS`,
            and a few cells' named variants); the first is ``"reference"``.
        kernel (str | None): the name of the cell's compiled loops, ``ops/csrc/<kernel>.cpp`` (the
            ``"cpp"`` backend); None for a cell without any.
        backend (str): the backend ``scan`` uses; ``"auto"`` (the default) the fastest that runs, resolved
            per call by :func:`ltdrnn.ops.resolve`.
        aux (dict[str, Tensor]): per-step extras of the last forward pass, each ``(T, B, ...)``.
        factory (dict): ``device`` and ``dtype`` for creating parameters, as torch.nn modules take them.
    """

    backends: Tuple[str, ...] = ("reference",)
    kernel: str | None = None
    #: Longest T over which the gradients are known to stay usable (measured, docs/reliability.md);
    #: ``scan`` warns (GradientGrowthWarning) when it records gradients over more steps. None: no limit known.
    gradient_length_limit: int | None = None

    def __init__(self, input_size: int, hidden_size: int, backend: str = "auto", device=None, dtype=None) -> None:
        super().__init__()
        self.input_size = check_positive_int("input_size", input_size)
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.backend = backend
        self.aux: dict[str, Tensor] = {}
        if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise TypeError(f"dtype: expected a floating torch.dtype or None, got {dtype!r}")
        #: keyword arguments for creating parameters, as in torch.nn (``nn.Linear(..., **self.factory)``)
        self.factory = {"device": device, "dtype": dtype}

    # ---- parameters whose .data writes caches can see ---------------------------------------
    def register_parameter(self, name: str, param: nn.Parameter | None) -> None:
        """As ``nn.Module``'s, storing a :class:`~ltdrnn.ops.common.TrackedParameter`, so that the streaming
        caches follow writes through ``p.data`` too."""
        super().register_parameter(name, tracked(param))

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, nn.Module) and not isinstance(value, Cell):  # a cell tracks its own
            track_parameters(value)
        super().__setattr__(name, value)

    # ---- the backend ---------------------------------------------------------------------------
    @property
    def backend(self) -> str:
        return self._backend

    @backend.setter
    def backend(self, value: str) -> None:
        check_choice("backend", value, ("auto",) + tuple(self.backends))
        self._backend = value

    def resolved_backend(self, override: str | None = None, like: Tensor | None = None) -> str:
        """The backend a call of ``scan`` runs for tensors like ``like`` (default: the cell's parameters):
        ``override``, else ``backend``, resolved by :func:`ltdrnn.ops.resolve` (``"auto"`` the fastest that
        runs there; a backend that cannot run there the next one down, docs/architecture.md)."""
        name = self.backend if override is None else override
        return resolve(name, self._any_parameter() if like is None else like, self.backends, self.kernel)

    # ---- the contract ------------------------------------------------------------------------
    def init_state(self, batch_size: int, device=None, dtype=None) -> State:
        """Zero state for ``batch_size`` sequences. Default: ``h = 0`` of shape ``(B, H)``."""
        p = self._any_parameter()
        return torch.zeros(
            batch_size,
            self.hidden_size,
            device=device if device is not None else p.device,
            dtype=dtype if dtype is not None else p.dtype,
        )

    def precompute(self, x: Tensor) -> Any:
        """State-independent work for all steps: ``(T, B, d) -> P`` (T leading). Default: ``x``."""
        return x

    def step(self, p_t: Any, state: State) -> Tuple[Tensor, State]:
        """One step on the time slice ``p_t`` of ``precompute(x)``: ``-> (h_t (B, H), state)``."""
        raise NotImplementedError

    def __call__(self, x_t: Tensor, state: State | None = None) -> Tuple[Tensor, State]:
        """``cell(x_t, state)``: check ``x_t`` and ``state``, then run :meth:`forward`.

        The check sits here rather than in ``forward`` because ``forward`` hands a step without autograd
        straight to :meth:`stream_step`, whose compiled kernels would read a wrongly sized state past its
        end; this way the streaming hook only ever sees input that fits.
        """
        if autocast_dtype_for(x_t) is not None:
            # streaming steps have no autocast-aware path: they run in the parameters' dtype
            with torch.autocast(x_t.device.type, enabled=False):
                return self.__call__(from_autocast(x_t, self._any_parameter(required=False)), state)
        self.check_input(x_t, expected_dims=2, name="x_t")
        if state is not None:
            self.check_state(state, x_t.shape[0], x_t)
        return super().__call__(x_t, state)

    def forward(self, x_t: Tensor, state: State | None = None) -> Tuple[Tensor, State]:
        """One step from raw input, ``x_t (B, d)``: ``-> (h_t (B, H), state)``.

        Equivalent to ``scan(x_t[None], state)`` with the output's time axis removed. Without autograd
        the backend's lean step (:meth:`stream_step`) runs first, so that a streamed step skips the
        sequence machinery.
        """
        if state is None:
            state = self.init_state(x_t.shape[0], x_t.device, x_t.dtype)
        elif not torch.is_grad_enabled():
            backend = self.resolved_backend(like=x_t)
            stepped = None if backend == "reference" else self.stream_step(x_t, state, backend)
            if stepped is not None:
                return stepped
        outputs, state = self.scan(x_t.unsqueeze(0), state)
        return outputs[0], state

    def scan(
        self, x: Tensor, state: State | None = None, lengths: Tensor | None = None, backend: str | None = None
    ) -> Tuple[Tensor, State]:
        """Run the cell over a sequence.

        Args:
            x: ``(T, B, d)``.
            state: initial state (``init_state(B)`` if None).
            lengths: ``(B,)`` integer true lengths in ``[1, T]``; steps ``t >= lengths[b]`` give zero
                outputs, their inputs are never read (whatever they hold, NaN included), and the final
                state of sequence ``b`` is the state after its step ``lengths[b] - 1``.
            backend: overrides ``self.backend`` for this call.

        Returns:
            ``(outputs (T, B, H), final_state)``.

        ``x``, ``state`` and ``lengths`` are checked here, once per call, before any fused or compiled
        path runs.

        Under ``torch.autocast`` the state stays in its dtype (float32). The ``"triton"`` backend runs its
        products in the autocast dtype; every other path runs with autocast off in the parameters' dtype
        (the compiled CPU kernels have float32/64 variants only). An input in the autocast dtype is taken
        as the parameters' dtype, as autocast's own operators take it.
        """
        amp = autocast_dtype_for(x)
        if amp is not None:
            x = from_autocast(x, self._any_parameter(required=False))
            if self.resolved_backend(backend, like=x) != "triton":  # the only one that runs under autocast
                with torch.autocast(x.device.type, enabled=False):
                    return self.scan(x, state, lengths, backend)
        self.check_input(x, expected_dims=3, name="x")
        lengths = check_lengths(lengths, x.shape[1], x.shape[0], x.device)
        if state is None:
            state = self.init_state(x.shape[1], x.device, x.dtype)
        else:
            self.check_state(state, x.shape[1], x)
        self.check_room(state, x.shape[0])
        x = zero_padding(x, lengths)
        limit = self.gradient_length_limit
        if limit is not None and x.shape[0] > limit and torch.is_grad_enabled():
            warnings.warn(
                f"{type(self).__name__}: gradients over T={x.shape[0]} steps, more than the "
                f"{limit} up to which they are known to stay usable; past it they grow with T "
                "towards overflow (docs/reliability.md): clip them or train on shorter sequences",
                GradientGrowthWarning,
                stacklevel=2,
            )
        backend = self.resolved_backend(backend, like=x)
        if backend == "reference":
            return self.scan_reference(x, state, lengths)
        if x.shape[0] == 1 and not torch.is_grad_enabled() and amp is None:  # one step, as the layer streams it
            stepped = self.stream_step(x[0], state, backend)
            if stepped is not None:
                return stepped[0].unsqueeze(0), stepped[1]
        # a branch on the data cannot be traced: compiled and exported graphs keep the fast path (the
        # Triton kernels propagate NaN themselves; docs/reliability.md)
        if not torch.compiler.is_compiling() and holds_non_finite(x, state):
            return self.scan_reference(x, state, lengths)
        return self.scan_fast(x, state, lengths, backend)

    def check_room(self, state: State, steps: int) -> None:
        """Raise unless ``steps`` more time steps can run from ``state``, whose layout
        :meth:`check_state` has checked: the values of a step counter, in cells with per-time-step
        parameters (TARNN's and iRNN's ``eta_per_time_step``), for every backend; none by default."""

    def scan_reference(self, x: Tensor, state: State, lengths: Tensor | None = None) -> Tuple[Tensor, State]:
        """The reference: ``for t: h_t, state = step(precompute(x)[t], state)``."""
        return loop_scan(self, self.precompute(x), state, lengths)

    def scan_fast(self, x: Tensor, state: State, lengths: Tensor | None, backend: str) -> Tuple[Tensor, State]:
        """The whole sequence in ``backend``, one of ``backends`` other than ``"reference"``, as
        :func:`ltdrnn.ops.resolve` chose it (so it runs here); cells with fast paths override this."""
        raise NotImplementedError(f"{type(self).__name__} has no backend {backend!r}")

    def stream_step(self, x_t: Tensor, state: State, backend: str) -> Tuple[Tensor, State] | None:
        """The streaming hook, the one lean step of every cell: one step of ``backend`` (resolved, not
        ``"reference"``) without autograd, skipping the sequence machinery (a compiled streaming step,
        operands cached between calls): ``x_t (B, d)`` -> ``(h_t (B, H), state)``, or None where the
        cell has no such path for this input. :meth:`forward`, :meth:`scan` (for a one-step call) and
        ``Recurrent.step`` try it first whenever no gradient is recorded, after checking the input and
        state; by default there is none."""
        return None

    def losses(self) -> dict[str, Tensor]:
        """Named extra loss terms (unweighted) from the parameters or the last forward pass."""
        return {}

    def set_epoch(self, epoch: int) -> None:
        """Hook for schedules that follow the training epoch (SA-RNN's slope annealing)."""

    # ---- helpers for subclasses ----------------------------------------------------------------
    def check_input(self, x: Tensor, expected_dims: int, name: str = "x") -> None:
        """Raise a clear error unless ``x`` is a floating tensor of ``expected_dims`` dims, last ``d``."""
        if not isinstance(x, Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
        if x.dim() != expected_dims:
            raise ValueError(f"{name}: expected {expected_dims} dimensions, got shape {tuple(x.shape)}")
        if 0 in x.shape[:-1]:
            raise ValueError(
                f"{name}: expected at least one sequence and one time step, got an empty "
                f"tensor of shape {tuple(x.shape)}"
            )
        if x.shape[-1] != self.input_size:
            raise ValueError(
                f"{name}: expected last dimension input_size={self.input_size}, got shape {tuple(x.shape)}"
            )
        p = self._any_parameter(required=False)
        if not x.is_floating_point():
            raise TypeError(f"{name}: expected a floating-point tensor, got dtype {x.dtype}")
        if p is not None and x.dtype != p.dtype:
            raise TypeError(
                f"{name}: dtype {x.dtype} does not match the cell's parameters ({p.dtype}); "
                f"convert one of them, e.g. cell.to({x.dtype})"
            )

    def check_state(self, state: State, batch_size: int, like: Tensor, name: str = "state") -> None:
        """Raise a clear error unless ``state`` has the layout of ``init_state(batch_size)`` in the
        dtype and on the device of ``like``. The expected layout is computed once per
        ``(batch_size, dtype, device)`` and kept, so a call costs one comparison of shapes."""
        key = (batch_size, like.dtype, like.device)
        layouts = getattr(self, "_state_layouts", None)
        if layouts is None:  # (not __dict__.setdefault: torch.compile before torch 2.13 cannot trace it)
            layouts = self._state_layouts = {}
        if key not in layouts:
            layouts[key] = state_layout(self._expected_state(batch_size, like))
        if state_layout(state) != layouts[key]:
            check_state_like(state, self._expected_state(batch_size, like), name)

    def _expected_state(self, batch_size: int, like: Tensor) -> State:
        # init_state may draw random numbers (random_updates' key); checking must not consume them, or
        # a resumed run would draw differently from an uninterrupted one
        with torch.random.fork_rng(devices=[]):
            return self.init_state(batch_size, like.device, like.dtype)

    def _any_parameter(self, required: bool = True) -> Tensor | None:
        # The cell's own parameters first: walking ``parameters()`` costs ~5 us, a lot per streamed step.
        for p in self._parameters.values():
            if p is not None:
                return p
        for p in self.parameters():
            return p
        for b in self.buffers():
            return b
        if required:
            return torch.empty(0)
        return None

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, backend={self.backend!r}"


# ---- the reference loop ---------------------------------------------------------------------------
def apply_constraints_(module: nn.Module) -> None:
    """Put every constrained parameter in ``module`` back into its set: call it after each optimiser
    step (the trainer does). Each submodule that defines ``apply_constraints_()`` (e.g. the step sizes
    of TARNN and iRNN with ``eta_param="projected"``) applies its own; equivalent to::

        for m in module.modules():
            if hasattr(m, "apply_constraints_"):
                m.apply_constraints_()
    """
    for m in module.modules():
        if hasattr(m, "apply_constraints_"):
            m.apply_constraints_()


def time_slices(p: Any) -> list:
    """The per-step slices of ``p``, a ``(T, ...)`` tensor or a tuple of them (``precompute``'s output).

    The time axis is unbound once: indexing ``p[t]`` inside a loop on a tensor that needs a gradient
    makes the backward pass quadratic in T.
    """
    return list(zip(*[q.unbind(0) for q in p])) if isinstance(p, tuple) else list(p.unbind(0))


def loop_scan(cell: Cell, p: Any, state: State, lengths: Tensor | None = None) -> Tuple[Tensor, State]:
    """Run ``cell.step`` over the time slices of ``p`` (a tensor or tuple of tensors, T leading)."""
    slices = time_slices(p)
    recorder = FinalStateRecorder(lengths, len(slices))
    outputs = []
    for t, p_t in enumerate(slices):
        h, state = cell.step(p_t, state)
        outputs.append(h)
        recorder.offer(t + 1, state)
    return mask_outputs(torch.stack(outputs), lengths), recorder.final(state)


class FinalStateRecorder:
    """Keeps, for each sequence, the state after its last true step (``lengths[b]``).

    Only the distinct lengths trigger a copy, so the cost is one ``where`` per distinct length rather
    than per step; steps past a sequence's end still run (their outputs are masked to zero).
    """

    def __init__(self, lengths: Tensor | None, total_steps: int) -> None:
        self.lengths = lengths
        self.total_steps = total_steps
        self.ends = set() if lengths is None else set(int(v) for v in lengths.unique().tolist())
        self.ends.discard(total_steps)
        self.kept: State | None = None

    def offer(self, t: int, state: State) -> None:
        if t not in self.ends:
            return
        chosen = self.lengths == t
        if self.kept is None:
            self.kept = state
        self.kept = select_state(chosen, state, self.kept)

    def final(self, state: State) -> State:
        if self.lengths is None or self.kept is None:
            return state
        return select_state(self.lengths == self.total_steps, state, self.kept)


def select_state(chosen: Tensor, a: State, b: State) -> State:
    """Per-sequence choice between two states: ``a[i]`` where ``chosen[i]`` else ``b[i]``."""
    if isinstance(a, Tensor):
        mask = chosen.view(-1, *([1] * (a.dim() - 1)))
        return torch.where(mask, a, b)
    return tuple(select_state(chosen, x, y) for x, y in zip(a, b))


def zero_padding(x: Tensor, lengths: Tensor | None) -> Tensor:
    """``x (T, B, ...)`` with the steps ``t >= lengths[b]`` set to zero (``x`` itself when none are).

    Padding may hold anything (NaN marks missing values in real series); zeroing it before
    ``precompute`` keeps it out of every product, so neither outputs nor gradients see it.
    """
    if lengths is None or not bool((lengths < x.shape[0]).any()):
        return x
    return torch.where(valid_steps(x, lengths), x, 0)


def map_state(fn, state: State) -> State:
    """Apply ``fn`` to every tensor of a state."""
    if isinstance(state, Tensor):
        return fn(state)
    return tuple(map_state(fn, s) for s in state)


# ---- validation ----------------------------------------------------------------------------------
def check_lengths(lengths: Any, batch: int, steps: int, device) -> Tensor | None:
    """``lengths`` as an int64 tensor on ``device``, after checking it is ``(B,)`` integers (not bools)
    in ``[1, T]``; None stays None."""
    if lengths is None:
        return None
    if isinstance(lengths, (list, tuple)):
        try:
            lengths = torch.as_tensor(lengths)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"lengths: expected integers, got {lengths!r}") from None
    if (
        not isinstance(lengths, Tensor)
        or lengths.dim() != 1
        or lengths.shape[0] != batch
        or lengths.is_floating_point()
        or lengths.is_complex()
        or lengths.dtype == torch.bool
    ):
        raise ValueError(f"lengths: expected an integer tensor of shape ({batch},), got {describe(lengths)}")
    if len(lengths) and (int(lengths.min()) < 1 or int(lengths.max()) > steps):
        raise ValueError(
            f"lengths: expected values in [1, {steps}] (the padded length), got "
            f"min {int(lengths.min())}, max {int(lengths.max())}"
        )
    return lengths.to(device=device, dtype=torch.long)


def state_layout(state: Any) -> tuple:
    """Shapes, dtypes and devices of a state, nested like it: a cheap key for "already validated"."""
    if isinstance(state, Tensor):
        return (tuple(state.shape), state.dtype, state.device)
    if isinstance(state, (tuple, list)):
        return tuple(state_layout(part) for part in state)
    return (type(state),)


def check_state_like(given: Any, expected: State, path: str = "state") -> None:
    """Raise a ValueError/TypeError naming ``path`` unless ``given`` is laid out like ``expected``."""
    if isinstance(expected, Tensor):
        if not isinstance(given, Tensor) or given.shape != expected.shape:
            raise ValueError(f"{path}: expected a tensor of shape {tuple(expected.shape)}, got {describe(given)}")
        if given.dtype != expected.dtype:
            raise TypeError(f"{path}: expected dtype {expected.dtype}, got {given.dtype}")
        if given.device != expected.device:
            raise ValueError(
                f"{path}: expected a tensor on {expected.device} (where the input is), got one on {given.device}"
            )
        return
    if not isinstance(given, (tuple, list)) or len(given) != len(expected):
        raise ValueError(f"{path}: expected a tuple of {len(expected)} tensors, got {describe(given)}")
    for i, (g, e) in enumerate(zip(given, expected)):
        check_state_like(g, e, f"{path}[{i}]")


def describe(value: Any) -> str:
    """A short description of a value for error messages."""
    if isinstance(value, Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} items"
    text = repr(value)
    return text if len(text) <= 80 else f"a {type(value).__name__}"


def check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return value


def check_nonnegative_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name}: expected a non-negative integer, got {value!r}")
    return value


def _is_real_number(value: Any) -> bool:
    """An int or float that is finite (bools are rejected although they are ints)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def check_finite_float(name: str, value: Any) -> float:
    if not _is_real_number(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    return float(value)


def check_nonnegative_float(name: str, value: Any) -> float:
    if not _is_real_number(value) or value < 0:
        raise ValueError(f"{name}: expected a non-negative finite number, got {value!r}")
    return float(value)


def check_positive_float(name: str, value: Any) -> float:
    if not _is_real_number(value) or value <= 0:
        raise ValueError(f"{name}: expected a positive finite number, got {value!r}")
    return float(value)


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> Any:
    if value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


# ---- initialisation --------------------------------------------------------------------------------
def init_uniform(parameters, bound: float) -> None:
    """Each of ``parameters`` drawn from ``U(-bound, bound)``, in order (torch.nn's recurrent layers use
    ``bound = 1/sqrt(H)``)."""
    for p in parameters:
        nn.init.uniform_(p, -bound, bound)


ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}


def activation(name: str, parameter: str = "activation"):
    """The elementwise function called ``name`` (relu, tanh, sigmoid)."""
    return ACTIVATIONS[check_choice(parameter, name, tuple(ACTIVATIONS))]
