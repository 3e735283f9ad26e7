"""Phased LSTM (Neil, Pfeiffer & Liu 2016), the oscillating-gate baseline of SA-RNN.

Shapes follow the legend in :mod:`ltdrnn.cells.base`.

Doc: docs/cells/phased.md
Tests: tests/cells/test_phased.py, tests/cells/test_contract.py
Kernel: none (PyTorch operations only)
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..flops import LSTM_UNIT_EXTRA
from .base import State, check_positive_float, init_uniform
from .masked import MaskedCell
from .registry import register

_PAPER = (
    "Neil, Pfeiffer & Liu 2016, Phased LSTM: Accelerating Recurrent Network Training for Long or "
    "Event-based Sequences (NeurIPS)"
)
#: multiplications of the time gate per unit and step: phase / tau, 2 phase / r_on, leak * phase
TIME_GATE_FLOPS = 3


@register(
    "phased_lstm",
    family="baseline",
    paper=_PAPER,
    variants={"no_peepholes": {"peepholes": False}, "timestamps": {"time_input": True}},
)
class PhasedLSTM(MaskedCell):
    """LSTM whose memory is written only while each unit's oscillating time gate is open.

    State: ``(h, c, step)``, ``step (B,)`` int64 counts the steps taken. Output ``h_t``.
    The time ``t`` of step ``n`` is ``n`` (the step index), or, with ``time_input=True``, the last
    input feature (then the LSTM reads the other ``d - 1`` features)::

        phi_t = ((t - s) mod tau) / tau                                   per unit
        k_t   = 2 phi / r_on          if phi < r_on / 2
                2 - 2 phi / r_on      if r_on / 2 <= phi < r_on
                leak * phi            otherwise  (leak only in training mode; 0 in eval)
        i, f  = sigmoid(W_i/f [x; h] + w_ci/cf * c_{t-1} + b)   (peepholes optional)
        c~_t  = f * c_{t-1} + i * tanh(W_c [x; h] + b_c)
        o     = sigmoid(W_o [x; h] + w_co * c~_t + b_o);   h~_t = o * tanh(c~_t)
        c_t   = k c~_t + (1 - k) c_{t-1};   h_t = k h~_t + (1 - k) h_{t-1}

    Equivalent to::

        for n in range(T):
            k = time_gate(t[n]);  h_new, c_new = LSTM(x[n], h, c)
            c = k * c_new + (1 - k) * c;  h = k * h_new + (1 - k) * h

    ``aux["update_prob"]`` is ``k``; ``aux["update_mask"]`` is ``k > 0`` (a partial update counts as an
    update, as in the SA-RNN paper), so in training the leak makes every unit count as updated.

    Init: LSTM weights torch.nn ``U(-1/sqrt(H), 1/sqrt(H))``; ``tau ~ exp(U(log lo, log hi))`` with
    ``period_range = (lo, hi)``; ``s ~ U(0, tau)``; ``r_on = r_on``.

    Args:
        period_range: the range of the initial periods (in time units, i.e. steps by default).
        r_on: initial open ratio (paper: 0.05); ``learn_r_on`` makes it a trained parameter.
        leak: ``alpha`` of the closed phase in training (paper: 0.001).
        peepholes: the peephole weights of the paper's LSTM equations.
        time_input: read the time stamp from the last input feature.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        period_range: Tuple[float, float] = (1.0, 1000.0),
        r_on: float = 0.05,
        learn_r_on: bool = True,
        leak: float = 0.001,
        peepholes: bool = True,
        time_input: bool = False,
        backend: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        for name, flag in (("learn_r_on", learn_r_on), ("peepholes", peepholes), ("time_input", time_input)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name}: expected a bool, got {flag!r}")
        if time_input and input_size < 2:
            raise ValueError(
                f"input_size: with time_input=True the last feature is the time stamp, so "
                f"expected at least 2 features, got {input_size}"
            )
        low, high = self._check_range(period_range)
        self.period_range = (low, high)
        self.initial_r_on = check_positive_float("r_on", r_on)
        if self.initial_r_on > 1:
            raise ValueError(f"r_on: expected an open ratio in (0, 1], got {r_on!r}")
        if isinstance(leak, bool) or not isinstance(leak, (int, float)) or not 0 <= leak < 1:
            raise ValueError(f"leak: expected a number in [0, 1), got {leak!r}")
        self.leak = float(leak)
        self.peepholes, self.time_input, self.learn_r_on = peepholes, time_input, learn_r_on
        features = input_size - 1 if time_input else input_size
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, features, **self.factory))
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size, **self.factory))
        self.bias = nn.Parameter(torch.empty(4 * hidden_size, **self.factory))
        if peepholes:
            self.peephole = nn.Parameter(torch.empty(3, hidden_size, **self.factory))
        else:
            self.register_parameter("peephole", None)
        self.period = nn.Parameter(torch.empty(hidden_size, **self.factory))
        self.shift = nn.Parameter(torch.empty(hidden_size, **self.factory))
        self.r_on = nn.Parameter(torch.empty(hidden_size, **self.factory), requires_grad=learn_r_on)
        self.reset_parameters()

    @staticmethod
    def _check_range(period_range) -> Tuple[float, float]:
        try:
            low, high = (float(v) for v in period_range)
        except (TypeError, ValueError):
            raise ValueError(f"period_range: expected two positive numbers (low, high), got {period_range!r}") from None
        if not 0 < low <= high or not math.isfinite(high):
            raise ValueError(f"period_range: expected 0 < low <= high, got {period_range!r}")
        return low, high

    def reset_parameters(self) -> None:
        weights = [self.weight_ih, self.weight_hh, self.bias] + ([self.peephole] if self.peepholes else [])
        init_uniform(weights, 1.0 / math.sqrt(self.hidden_size))
        low, high = self.period_range
        with torch.no_grad():
            self.period.uniform_(math.log(low), math.log(high)).exp_()
            self.shift.copy_(torch.rand_like(self.shift) * self.period)
            self.r_on.fill_(self.initial_r_on)

    def init_state(self, batch_size: int, device=None, dtype=None) -> State:
        h = super().init_state(batch_size, device, dtype)
        return h, h.clone(), torch.zeros(batch_size, dtype=torch.long, device=h.device)

    def precompute(self, x: Tensor):
        """``W x_t + b`` ``(T, B, 4H)``; with ``time_input`` also the stamps ``(T, B, 1)``."""
        if self.time_input:
            return F.linear(x[..., :-1], self.weight_ih, self.bias), x[..., -1:]
        return F.linear(x, self.weight_ih, self.bias)

    def time_gate(self, t: Tensor) -> Tensor:
        """``(B, 1)`` times -> ``(B, H)`` openness ``k`` (leak only in training mode)."""
        phase = torch.remainder(t - self.shift, self.period) / self.period
        r_on = self.r_on.clamp(1e-6, 1.0)
        rising = 2 * phase / r_on
        closed = phase * (self.leak if self.training else 0.0)
        return torch.where(phase < 0.5 * r_on, rising, torch.where(phase < r_on, 2 - rising, closed))

    def step_with_aux(self, p_t, state: State):
        h, c, step = state
        if self.time_input:
            gi, t = p_t
        else:
            gi, t = p_t, step.unsqueeze(1).to(h.dtype)
        k = self.time_gate(t)
        i, f, g, o = (gi + h @ self.weight_hh.t()).chunk(4, dim=-1)
        if self.peepholes:
            i = i + self.peephole[0] * c
            f = f + self.peephole[1] * c
        c_tilde = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        if self.peepholes:
            o = o + self.peephole[2] * c_tilde
        h_tilde = torch.sigmoid(o) * torch.tanh(c_tilde)
        c_new = torch.lerp(c, c_tilde, k)
        h_new = torch.lerp(h, h_tilde, k)
        return h_new, (h_new, c_new, step + 1), {"update_mask": (k > 0).to(h.dtype), "update_prob": k}

    def open_fraction(self, steps: int) -> float:
        """Fraction of (step, unit) pairs with ``k > 0`` in eval mode over steps ``0 .. T-1``."""
        with torch.no_grad():
            t = torch.arange(steps, device=self.period.device, dtype=self.period.dtype).unsqueeze(1)
            phase = torch.remainder(t - self.shift, self.period) / self.period
            return float(((phase < self.r_on.clamp(1e-6, 1.0)) & (phase > 0)).double().mean())

    def flops_per_sequence(self, steps: int, skip_fraction: float | None = None) -> float:
        """The time gate for every unit and step, the LSTM (with peepholes and the two blends) only
        where ``k > 0``. ``skip_fraction=None``: the eval-mode schedule of index time stamps."""
        features = self.input_size - 1 if self.time_input else self.input_size
        unit = 4 * (features + self.hidden_size) + LSTM_UNIT_EXTRA + (3 if self.peepholes else 0) + 2
        updated = self.open_fraction(steps) if skip_fraction is None else 1.0 - skip_fraction
        return float(steps * self.hidden_size * (TIME_GATE_FLOPS + updated * unit))

    def extra_repr(self) -> str:
        return (
            super().extra_repr() + f", period_range={self.period_range}, r_on={self.initial_r_on:g}, "
            f"learn_r_on={self.learn_r_on}, leak={self.leak:g}, peepholes={self.peepholes}, "
            f"time_input={self.time_input}"
        )
