"""Clockwork RNN (Koutnik, Greff, Gomez & Schmidhuber 2014), a fixed-schedule baseline of SA-RNN.

Shapes follow the legend in :mod:`ltdrnn.cells.base`.

Doc: docs/cells/clockwork.md
Tests: tests/cells/test_clockwork.py, tests/cells/test_contract.py
Kernel: none (PyTorch operations only)
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import State, activation, check_positive_int
from .masked import MaskedCell
from .registry import register

_PAPER = "Koutnik, Greff, Gomez & Schmidhuber 2014, A Clockwork RNN (ICML)"


@register("clockwork", family="baseline", paper=_PAPER, test_options={"num_modules": 3})
class ClockworkRNN(MaskedCell):
    """Elman RNN whose units form modules that tick at their own periods.

    The ``H`` units are split into ``g = num_modules`` contiguous modules (sizes as equal as possible,
    the first ones one unit larger when ``H`` is not divisible), module ``i`` with period ``T_i``
    (default ``2**i``: 1, 2, 4, ...). State: ``(h, step)`` with ``step (B,)`` int64, the number of
    steps taken (0 at the start, so every module ticks on the first step). Output ``h_t``::

        active_j = (step mod T_{module(j)}) == 0                       per unit j
        h~_t     = tanh(W_I x_t + b + (W_H * M) h_{t-1})
        h_t      = where(active, h~_t, h_{t-1})

    ``M`` is block upper triangular: module ``i`` reads modules ``j >= i`` (those with equal or longer
    periods), so slow modules feed fast ones and not the reverse. ``W_H`` is stored full; the masked
    entries are multiplied by zero and get zero gradient.

    Equivalent to::

        for t in range(T):
            for i, module in enumerate(modules):
                if t % periods[i] == 0:
                    h[module] = tanh(W_I[module] @ x[t] + b[module] + W_H[module, later] @ h[later])

    Init (Koutnik et al.): every weight and bias ``N(0, 0.1^2)``.

    Args:
        num_modules: g (default 10: with exponential periods 10 modules skip 80 % of unit updates,
            the Skip % the SA-RNN paper reports for its CW-RNN at H = 50).
        periods: the g periods, non-decreasing positive integers (default ``2**i``).
        nonlinearity: ``"tanh"`` (paper) or ``"relu"``.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_modules: int = 10,
        periods: Sequence[int] | None = None,
        nonlinearity: str = "tanh",
        backend: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        self.num_modules = check_positive_int("num_modules", num_modules)
        if num_modules > hidden_size:
            raise ValueError(f"num_modules: expected at most hidden_size={hidden_size} modules, got {num_modules}")
        self.periods = self._check_periods(periods, num_modules)
        self.nonlinearity = nonlinearity
        self.phi = activation(nonlinearity, "nonlinearity")
        self.module_sizes = [
            hidden_size // num_modules + (1 if i < hidden_size % num_modules else 0) for i in range(num_modules)
        ]
        module_of_unit = torch.repeat_interleave(torch.arange(num_modules), torch.tensor(self.module_sizes))
        self.register_buffer(
            "unit_periods", torch.tensor(self.periods)[module_of_unit].to(device=device), persistent=False
        )
        reads = module_of_unit.unsqueeze(1) <= module_of_unit.unsqueeze(0)  # row module <= column module
        self.register_buffer("recurrent_mask", reads.to(**self.factory), persistent=False)
        self.weight_ih = nn.Parameter(torch.empty(hidden_size, input_size, **self.factory))
        self.weight_hh = nn.Parameter(torch.empty(hidden_size, hidden_size, **self.factory))
        self.bias = nn.Parameter(torch.empty(hidden_size, **self.factory))
        self.reset_parameters()

    @staticmethod
    def _check_periods(periods: Sequence[int] | None, num_modules: int) -> list[int]:
        if periods is None:
            return [2**i for i in range(num_modules)]
        periods = list(periods)
        if len(periods) != num_modules or not all(
            isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in periods
        ):
            raise ValueError(f"periods: expected {num_modules} positive integers (one per module), got {periods!r}")
        if periods != sorted(periods):
            raise ValueError(f"periods: expected non-decreasing periods (fast modules first), got {periods!r}")
        return periods

    def reset_parameters(self) -> None:
        for p in self.parameters():
            nn.init.normal_(p, 0.0, 0.1)

    def init_state(self, batch_size: int, device=None, dtype=None) -> State:
        h = super().init_state(batch_size, device, dtype)
        return h, torch.zeros(batch_size, dtype=torch.long, device=h.device)

    def precompute(self, x: Tensor) -> Tensor:
        """``(T, B, d) -> (T, B, H)``: ``W_I x_t + b``."""
        return F.linear(x, self.weight_ih, self.bias)

    def active_units(self, step: Tensor) -> Tensor:
        """``(B,)`` step counts -> ``(B, H)`` bool: units whose module ticks at that step."""
        return torch.remainder(step.unsqueeze(1), self.unit_periods) == 0

    def step_with_aux(self, p_t: Tensor, state: State):
        h, step = state
        mask = self.active_units(step).to(h.dtype)
        candidate = self.phi(p_t + h @ (self.weight_hh * self.recurrent_mask).t())
        h_new = torch.lerp(h, candidate, mask)
        return h_new, (h_new, step + 1), {"update_mask": mask, "update_prob": mask}

    def unit_costs(self) -> Tensor:
        """``(H,)`` multiplications to update each unit: ``d`` inputs and the units it reads."""
        return self.input_size + self.recurrent_mask.sum(1).cpu()

    def flops_per_sequence(self, steps: int, skip_fraction: float | None = None) -> float:
        """``skip_fraction=None``: the exact schedule (unit j works on ``ceil(T / T_j)`` steps);
        otherwise the average unit cost times the updated fraction."""
        costs = self.unit_costs()
        if skip_fraction is not None:
            return float(steps * costs.sum() * (1.0 - skip_fraction))
        ticks = torch.ceil(steps / self.unit_periods.cpu().double())
        return float((ticks * costs.double()).sum())

    def extra_repr(self) -> str:
        return super().extra_repr() + f", num_modules={self.num_modules}, periods={self.periods}"
