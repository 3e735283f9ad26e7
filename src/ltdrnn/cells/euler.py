"""What the two Euler-step cells, TARNN (:mod:`ltdrnn.cells.tarnn`) and iRNN (:mod:`ltdrnn.cells.irnn`),
share: the learned step sizes (:class:`EulerSteps`), and their base class :class:`EulerCell`: the step
counter in the state and the room left in per-time-step step sizes.

Both papers analyse ``z_i = z_{i-1} + eta_i F(z_{i-1})`` with a step size ``eta > 0``; a negative step
turns the ODE's damping into anti-damping, so a plain raw ``eta`` can diverge under training
(docs/cells/tarnn.md, "Step sizes"). Three parametrisations (:data:`ETA_PARAMS`):

- ``"exp"``: ``eta = exp(log_eta)``, positive by construction; Adam moves it by about its learning
  rate *relative* to ``eta``, so a small ``eta`` stays near its start;
- ``"raw"``: ``eta`` itself, as printed, unconstrained;
- ``"projected"``: ``eta`` itself, as in the authors' code, kept in ``[0, eta_max]`` (``eta_max`` 1
  unless given).

An upper bound ``eta_max`` (``"exp"``: optional; ``"projected"``: 1 by default) is kept the same way as
the projected interval: the forward reads the clamped value (so the cell is safe in any training loop)
and :func:`~ltdrnn.cells.base.apply_constraints_`, called after each optimiser step, puts the stored
parameter back into its set (projected gradient descent: a step size pushed onto a bound rests there,
where the clamp still passes its gradient).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .base import Cell, State, check_choice, check_positive_float, check_positive_int

ETA_PARAMS = ("exp", "raw", "projected")
#: the upper bound of ``eta_param="projected"`` unless ``eta_max`` is given
PROJECTED_MAX = 1.0


class EulerSteps(nn.Module):
    """The learned Euler step sizes ``eta``, per Euler step and optionally per time step.

    ``eta`` is ``(K,)``, or ``(max_length, K)`` with ``per_time_step=True`` (the iRNN paper's ``eta_k^i``,
    TARNN's authors' code);
    in that case the cell's state carries a step counter ``(B,)`` int64 so that chunked and streamed
    runs use the row of the true time step.

    ``param="exp"`` (default) learns ``log_eta`` and uses ``eta = exp(log_eta) > 0``; ``param="raw"``
    learns ``eta`` itself, as printed (it can change sign under training); ``param="projected"`` learns
    ``eta`` itself and uses ``clamp(eta, 0, maximum)``. ``maximum`` (``eta_max``; 1 for
    ``"projected"`` unless given, none for ``"exp"`` unless given, not allowed with ``"raw"``) bounds
    ``eta`` from above; :meth:`apply_constraints_` after each optimiser step keeps the stored parameter
    within the bounds. :meth:`values` gives ``eta`` in every case; :meth:`assign_` sets it.
    """

    def __init__(
        self,
        steps: int,
        init: float,
        per_time_step: bool,
        max_length: int | None,
        factory: dict,
        param: str = "exp",
        maximum: float | None = None,
    ) -> None:
        super().__init__()
        self.steps = check_positive_int("K", steps)
        self.init = check_positive_float("eta", init)
        self.param = check_choice("eta_param", param, ETA_PARAMS)
        if maximum is not None:
            maximum = check_positive_float("eta_max", maximum)
            if self.param == "raw":
                raise ValueError("eta_max: the raw step sizes are unconstrained; expected None with eta_param='raw'")
        self.maximum = PROJECTED_MAX if maximum is None and self.param == "projected" else maximum
        if self.maximum is not None and init > self.maximum:
            raise ValueError(f"eta: expected a value at most eta_max={self.maximum}, got {init!r}")
        if not isinstance(per_time_step, bool):
            raise TypeError(f"eta_per_time_step: expected a bool, got {per_time_step!r}")
        self.per_time_step = per_time_step
        if per_time_step:
            if max_length is None:
                raise ValueError(
                    "max_length: expected a positive integer when eta_per_time_step=True "
                    "(one row of step sizes per time step), got None"
                )
            self.max_length = check_positive_int("max_length", max_length)
        elif max_length is not None:
            raise ValueError(f"max_length: only used with eta_per_time_step=True; expected None, got {max_length!r}")
        else:
            self.max_length = None
        shape = (self.max_length, steps) if per_time_step else (steps,)
        name = "log_eta" if self.param == "exp" else "eta"
        self.register_parameter(name, nn.Parameter(torch.empty(shape, **factory)))
        self.reset_parameters()

    @property
    def parameter(self) -> nn.Parameter:
        """The learned tensor: ``log_eta`` or, with ``param="raw"``, ``eta``."""
        return self.log_eta if self.param == "exp" else self.eta

    def reset_parameters(self) -> None:
        nn.init.constant_(self.parameter, math.log(self.init) if self.param == "exp" else self.init)

    def values(self) -> Tensor:
        """``eta``: ``(K,)`` or ``(max_length, K)``, differentiable in the learned tensor."""
        if self.param == "exp":
            eta = self.log_eta.exp()
            return eta if self.maximum is None else eta.clamp(max=self.maximum)
        if self.param == "projected":
            return self.eta.clamp(0.0, self.maximum)
        return self.eta

    @torch.no_grad()
    def apply_constraints_(self) -> None:
        """Put the stored step sizes back within their bounds: ``[0, eta_max]`` for ``"projected"``,
        ``log_eta <= log(eta_max)`` for a bounded ``"exp"`` (a no-op otherwise; NaN stays NaN, so that a
        diverged run still shows as diverged)."""
        if self.param == "projected":
            self.eta.clamp_(0.0, self.maximum)
        elif self.maximum is not None:
            self.log_eta.clamp_(max=math.log(self.maximum))

    @torch.no_grad()
    def assign_(self, eta) -> None:
        """Set ``eta`` (a number or a tensor broadcastable to its shape); positive with ``param="exp"``."""
        eta = torch.as_tensor(eta, dtype=self.parameter.dtype, device=self.parameter.device)
        if self.param == "projected" and not bool((eta >= 0).all()):
            raise ValueError(f"eta: expected step sizes >= 0 with eta_param='projected', got {eta!r}")
        if self.maximum is not None and not bool((eta <= self.maximum).all()):
            raise ValueError(f"eta: expected step sizes at most eta_max={self.maximum}, got {eta!r}")
        if self.param == "exp":
            if not bool((eta > 0).all()):
                raise ValueError(
                    f"eta: expected positive step sizes with eta_param='exp', got {eta.min().item()!r} as the smallest"
                )
            eta = eta.log()
        self.parameter.copy_(eta.expand_as(self.parameter))

    def at(self, counter: Tensor | None) -> Tensor:
        """Step sizes of one time step: ``(K,)``, or ``(B, K)`` for the sequences' counters ``(B,)``."""
        eta = self.values()
        return eta if counter is None else eta[counter]

    def check_room(self, counter: Tensor | None, steps: int) -> None:
        """Raise unless every sequence can run ``steps`` more time steps within ``max_length``: each counter
        in ``[0, max_length - steps]``. A counter outside would index the step sizes from their end (a
        negative one, in PyTorch) or past it (in the torch, cpp and triton backends)."""
        if counter is None or counter.numel() == 0:
            return
        if steps > self.max_length:
            raise ValueError(
                f"max_length: the per-time-step step sizes cover {self.max_length} time steps, but this "
                f"call runs {steps}; build the cell with a larger max_length"
            )
        lowest, highest = (int(v) for v in torch.aminmax(counter))
        last = self.max_length - steps
        if lowest < 0 or highest > last:
            raise ValueError(
                f"state[1]: expected step counters in [0, {last}] (each counter + T within "
                f"max_length={self.max_length}; T={steps} here), got min {lowest}, max {highest}"
            )

    def extra_repr(self) -> str:
        extra = f", per_time_step=True, max_length={self.max_length}" if self.per_time_step else ""
        bound = f", maximum={self.maximum}" if self.maximum is not None else ""
        return f"K={self.steps}, init={self.init}, param={self.param!r}{bound}{extra}"


class EulerCell(Cell):
    """Base of the Euler-step cells. A subclass sets ``self.steps`` (:class:`EulerSteps`) in its
    constructor.

    State ``h (B, H)``, or with per-time-step step sizes ``(h, counter)``, counter ``(B,)`` int64, the
    number of time steps taken so far.
    """

    @property
    def per_time_step(self) -> bool:
        # read per streamed step: the submodule straight from its dict, not through nn.Module.__getattr__
        return self._modules["steps"].per_time_step

    def init_state(self, batch_size: int, device=None, dtype=None) -> State:
        h = super().init_state(batch_size, device, dtype)
        if not self.per_time_step:
            return h
        return h, torch.zeros(batch_size, dtype=torch.long, device=h.device)

    def check_room(self, state: State, steps: int) -> None:
        if not isinstance(state, Tensor):  # (h, counter): only per-time-step step sizes have a limit
            self.steps.check_room(state[1], steps)

    def own_parameters(self) -> tuple:
        """The tensors the cached streaming operands derive from."""
        return (*self._parameters.values(), *self._modules["steps"]._parameters.values())

    def sequence_step_sizes(self, steps: int, counter: Tensor | None) -> Tensor | None:
        """The step sizes of a ``steps``-long sequence for a fused path: ``(K,)`` shared, or ``(T, K)``,
        the rows ``eta[c : c + T]`` of its time steps when every sequence starts at the same step ``c``;
        None when they start at different steps (the reference loop then reads each one's row)."""
        eta = self.steps.values()
        if counter is None:
            return eta
        start = int(counter[0])
        if not bool((counter == start).all()):
            return None
        return eta[start : start + steps]
