"""IndRNN (Li et al. 2018): every hidden unit has one recurrent weight onto itself.

Shapes follow the legend in :mod:`ltdrnn.cells.base`.

Doc: docs/cells/indrnn.md
Tests: tests/cells/test_baselines.py, tests/cells/test_contract.py
Kernel: none (PyTorch operations only)
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
from torch import Tensor, nn

from .base import Cell, activation, check_positive_float, check_positive_int
from .registry import register


def recurrent_bound(steps: int, gamma: float = 2.0) -> float:
    """The paper's bound on ``|u|`` for sequences of ``steps`` steps: ``gamma ** (1 / steps)``.

    With relu, ``prod_t u = u^T`` is the gradient factor over the sequence; keeping ``|u|^T <= gamma``
    stops it from exploding (the paper uses gamma = 2 and clips after every update).
    """
    steps = check_positive_int("steps", steps)
    return float(check_positive_float("gamma", gamma) ** (1.0 / steps))


@register(
    "indrnn",
    family="baseline",
    paper="Li, Li, Cook, Zhu & Gao 2018, Independently Recurrent Neural Network (IndRNN): "
    "Building A Longer and Deeper RNN (CVPR)",
    variants={"clipped": {"recurrent_max": 1.05}, "tanh": {"nonlinearity": "tanh"}},
)
class IndRNN(Cell):
    """Independently recurrent network: the recurrent weight is a vector, applied elementwise.

    State ``h (B, H)``::

        h_t = phi(W x_t + u * h_{t-1} + b),   u in R^H,  phi = relu

    Args:
        nonlinearity: phi (``"relu"`` as in the paper, or ``"tanh"``).
        recurrent_max: if set, the recurrent weights are used as ``clamp(u, -max, max)``, the paper's
            constraint ``|u_i| <= max`` (:func:`recurrent_bound` gives the paper's ``2^(1/T)``).
            :meth:`clip_recurrent_` also clips the stored weights, as the paper does after every
            optimiser step, so they cannot drift out of the range where their gradient is zero.
        recurrent_init: ``(low, high)`` of the uniform initialisation of ``u`` (paper: ``(0, 1)``;
            for long sequences the paper draws the last layer's ``u`` from ``(2^(-10/T), 2^(1/T))``).
        input_init_std: std of the Gaussian initialisation of ``W`` (paper, adding task: 0.001).

    Init: ``u ~ U(recurrent_init)``, ``W ~ N(0, input_init_std^2)``, ``b = 0``.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        nonlinearity: str = "relu",
        recurrent_max: float | None = None,
        recurrent_init: Tuple[float, float] = (0.0, 1.0),
        input_init_std: float = 0.001,
        backend: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity
        self.phi = activation(nonlinearity, "nonlinearity")
        self.recurrent_max = None if recurrent_max is None else check_positive_float("recurrent_max", recurrent_max)
        if not (
            isinstance(recurrent_init, (tuple, list))
            and len(recurrent_init) == 2
            and all(isinstance(v, (int, float)) and math.isfinite(v) for v in recurrent_init)
            and recurrent_init[0] <= recurrent_init[1]
        ):
            raise ValueError(f"recurrent_init: expected (low, high) with low <= high, got {recurrent_init!r}")
        self.recurrent_init = (float(recurrent_init[0]), float(recurrent_init[1]))
        self.input_init_std = check_positive_float("input_init_std", input_init_std)
        self.weight_ih = nn.Parameter(torch.empty(hidden_size, input_size, **self.factory))
        self.weight_hh = nn.Parameter(torch.empty(hidden_size, **self.factory))
        self.bias = nn.Parameter(torch.empty(hidden_size, **self.factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.uniform_(self.weight_hh, *self.recurrent_init)
        nn.init.normal_(self.weight_ih, 0.0, self.input_init_std)
        nn.init.zeros_(self.bias)
        self.clip_recurrent_()

    def clip_recurrent_(self) -> None:
        """Clip the stored recurrent weights to ``[-recurrent_max, recurrent_max]`` (no-op if unset)."""
        if self.recurrent_max is not None:
            with torch.no_grad():
                self.weight_hh.clamp_(-self.recurrent_max, self.recurrent_max)

    def recurrent_weights(self) -> Tensor:
        """``u`` as used in the step, ``(H,)``."""
        if self.recurrent_max is None:
            return self.weight_hh
        return self.weight_hh.clamp(-self.recurrent_max, self.recurrent_max)

    def precompute(self, x: Tensor) -> Tensor:
        return x @ self.weight_ih.T + self.bias

    def step(self, p_t: Tensor, state: Tensor) -> Tuple[Tensor, Tensor]:
        h = self.phi(p_t + self.recurrent_weights() * state)
        return h, h

    def extra_repr(self) -> str:
        return (
            super().extra_repr() + f", nonlinearity={self.nonlinearity!r}, "
            f"recurrent_max={self.recurrent_max}, recurrent_init={self.recurrent_init}"
        )
