"""VC-RNN: variable computation (Jernite, Grave, Joulin & Mikolov 2017), GRU form, a SA-RNN baseline.

Shapes follow the legend in :mod:`ltdrnn.cells.base`.

Doc: docs/cells/vcrnn.md
Tests: tests/cells/test_vcrnn.py, tests/cells/test_contract.py
Kernel: none (PyTorch operations only)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..flops import GRU_UNIT_EXTRA
from ..ops.common import gru_candidate
from .base import check_nonnegative_float, check_positive_float, init_uniform
from .masked import MaskedCell, sum_over_valid_steps
from .registry import register

_PAPER = "Jernite, Grave, Joulin & Mikolov 2017, Variable Computation in Recurrent Neural Networks (ICLR)"


@register("vcrnn", family="baseline", paper=_PAPER, variants={"sharp": {"sharpness": 20.0, "epsilon": 0.1}})
class VCRNN(MaskedCell):
    """Variable-computation GRU: a scheduler picks, per step, the fraction of units to update; a
    sharpened soft mask updates the first units fully and the rest not at all.

    State ``h (B, H)``. Output ``h_t``. With units numbered ``i = 1 .. H``::

        m_t   = sigmoid(w_h . h_{t-1} + w_x . x_t + b)                  (B, 1), fraction to compute
        e_t,i = thres_eps(sigmoid(lambda * (m_t * H - i)))              soft mask, ~1 for i < m_t H
        thres_eps(v) = 0 if v < eps, 1 if v > 1 - eps, v otherwise
        h~_t  = GRU(x_t, read = e_t * h_{t-1}, carry = h_{t-1})        gates read only the masked state
        h_t   = e_t * h~_t + (1 - e_t) * h_{t-1}

    Equivalent to::

        for t in range(T):
            m = sigmoid(w_h @ h + w_x @ x[t] + b);  e = thres(sigmoid(lam * (m * H - arange(1, H + 1))))
            h = e * GRU(x[t], e * h, carry=h) + (1 - e) * h

    ``losses()["budget"]`` = ``sum_t |m_t - target|`` (mean over the batch, real steps only), the
    paper's penalty on deviations from the target computation fraction ``target``.
    ``aux["update_prob"]`` is ``e``, ``aux["update_mask"]`` is ``e > 0`` (partial updates count as
    updates), ``aux["computation"]`` is ``m`` ``(T, B, 1)``.

    Sharpening: ``lambda = sharpness + sharpness_increment * epoch`` after ``set_epoch(epoch)``.

    Init: GRU as torch.nn; scheduler ``w_h, w_x, b ~ U(-1/sqrt(H), 1/sqrt(H))``.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        target: float = 0.5,
        sharpness: float = 1.0,
        sharpness_increment: float = 0.0,
        epsilon: float = 0.1,
        backend: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 <= target <= 1:
            raise ValueError(f"target: expected a fraction in [0, 1], got {target!r}")
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 <= epsilon < 0.5:
            raise ValueError(f"epsilon: expected a number in [0, 0.5), got {epsilon!r}")
        self.target, self.epsilon = float(target), float(epsilon)
        self.sharpness_increment = check_nonnegative_float("sharpness_increment", sharpness_increment)
        self.initial_sharpness = check_positive_float("sharpness", sharpness)
        self.sharpness = self.initial_sharpness
        self.weight_ih = nn.Parameter(torch.empty(3 * hidden_size, input_size, **self.factory))
        self.weight_hh = nn.Parameter(torch.empty(3 * hidden_size, hidden_size, **self.factory))
        self.bias_ih = nn.Parameter(torch.empty(3 * hidden_size, **self.factory))
        self.bias_hh = nn.Parameter(torch.empty(3 * hidden_size, **self.factory))
        self.scheduler_weight_ih = nn.Parameter(torch.empty(1, input_size, **self.factory))
        self.scheduler_weight_hh = nn.Parameter(torch.empty(1, hidden_size, **self.factory))
        self.scheduler_bias = nn.Parameter(torch.empty(1, **self.factory))
        self.register_buffer("unit_index", torch.arange(1, hidden_size + 1, **self.factory), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init_uniform(self.parameters(), 1.0 / math.sqrt(self.hidden_size))

    def set_epoch(self, epoch: int) -> None:
        """Sharpening: ``lambda = sharpness + sharpness_increment * epoch``."""
        self.sharpness = self.initial_sharpness + self.sharpness_increment * epoch

    def precompute(self, x: Tensor):
        """``(W_ih x + b_ih (T, B, 3H), w_x . x + b (T, B, 1))``."""
        return (F.linear(x, self.weight_ih, self.bias_ih), F.linear(x, self.scheduler_weight_ih, self.scheduler_bias))

    def soft_mask(self, m: Tensor) -> Tensor:
        """``(B, 1)`` fractions -> ``(B, H)`` thresholded soft mask ``e``."""
        e = torch.sigmoid(self.sharpness * (m * self.hidden_size - self.unit_index))
        e = torch.where(e < self.epsilon, torch.zeros_like(e), e)
        return torch.where(e > 1 - self.epsilon, torch.ones_like(e), e)

    def step_with_aux(self, p_t, state: Tensor):
        gi, scheduler_in = p_t
        h = state
        m = torch.sigmoid(scheduler_in + F.linear(h, self.scheduler_weight_hh))
        e = self.soft_mask(m)
        candidate = gru_candidate(gi, e * h, h, self.weight_hh, self.bias_hh)
        h_new = torch.lerp(h, candidate, e)
        return h_new, h_new, {"update_mask": (e > 0).to(h.dtype), "update_prob": e, "computation": m}

    def losses(self) -> dict[str, Tensor]:
        """``{"budget": sum_t |m_t - target|}``, mean over the batch."""
        if "computation" not in self.aux:
            return {}
        return {"budget": sum_over_valid_steps((self.aux["computation"] - self.target).abs(), self.valid()).mean()}

    def flops_per_sequence(self, steps: int, skip_fraction: float | None = None) -> float:
        """Scheduler (``w_h . h``, ``w_x . x``, the mask's ``lambda`` product per unit) on every step;
        an updated unit reads only the ``k`` updated units' state, so with ``k = (1 - skip) H``
        units updated a step costs ``k (3 (d + k) + 3 + 2)`` (read and blend products included).
        ``skip_fraction=None`` counts every unit as updated."""
        d, hdim = self.input_size, self.hidden_size
        k = hdim * (1.0 - (skip_fraction or 0.0))
        scheduler = hdim + d + hdim
        return float(steps * (scheduler + k * (3 * (d + k) + GRU_UNIT_EXTRA + 2)))

    def extra_repr(self) -> str:
        return (
            super().extra_repr() + f", target={self.target:g}, sharpness={self.sharpness:g}, epsilon={self.epsilon:g}"
        )
