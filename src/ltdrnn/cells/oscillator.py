"""Oscillator RNNs of Rusch & Mishra: coRNN (2021) and LEM (2022). Both carry a state ``(y, z)`` and
output ``y``. Shapes follow the legend in :mod:`ltdrnn.cells.base`.

Doc: docs/cells/oscillator.md
Tests: tests/cells/test_baselines.py, tests/cells/test_contract.py
Kernel: none (PyTorch operations only)
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
from torch import Tensor, nn

from .base import Cell, State, check_choice, check_nonnegative_float, check_positive_float, init_uniform
from .registry import register


class TwoStateCell(Cell):
    """A cell whose state is ``(y, z)``, both ``(B, H)``, and whose output is ``y``."""

    def init_state(self, batch_size: int, device=None, dtype=None) -> State:
        y = super().init_state(batch_size, device, dtype)
        return y, torch.zeros_like(y)


@register(
    "cornn",
    family="baseline",
    paper="Rusch & Mishra 2021, Coupled Oscillatory Recurrent Neural Network (coRNN): An accurate "
    "and (gradient) stable architecture for learning long time dependencies (ICLR)",
    variants={"explicit": {"scheme": "explicit"}},
)
class CoRNN(TwoStateCell):
    """coRNN: a network of coupled, damped, driven oscillators ``y'' = tanh(W y + Wz y' + V u + b) - gamma y - eps y'``.

    State ``(y, z)`` with ``z = y'``; output ``y``. Discretised with step ``dt``::

        s_t = tanh(W y_{t-1} + Wz z_{t-1} + V x_t + b)
        imex:      z_t = (z_{t-1} + dt (s_t - gamma y_{t-1})) / (1 + dt eps)      (damping implicit)
        explicit:  z_t = z_{t-1} + dt (s_t - gamma y_{t-1} - eps z_{t-1})
        y_t = y_{t-1} + dt z_t

    Args:
        dt, gamma, eps: step size, restoring force, damping (defaults: the paper's sequential-MNIST
            values 0.042, 2.7, 4.7).
        scheme: ``"imex"`` (the paper's eq. 3, default) or ``"explicit"`` (what the authors' public
            code computes).

    Parameters: ``weight_ih = V (H, d)``, ``weight_hh = [W, Wz] (H, 2H)``, ``bias (H,)``. Init (the
    authors' code, one ``nn.Linear`` on ``[x, z, y]``): all ``U(-1/sqrt(d + 2H), 1/sqrt(d + 2H))``.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        dt: float = 0.042,
        gamma: float = 2.7,
        eps: float = 4.7,
        scheme: str = "imex",
        backend: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        self.dt = check_positive_float("dt", dt)
        self.gamma = check_nonnegative_float("gamma", gamma)
        self.eps = check_nonnegative_float("eps", eps)
        self.scheme = check_choice("scheme", scheme, ("imex", "explicit"))
        self.weight_ih = nn.Parameter(torch.empty(hidden_size, input_size, **self.factory))
        self.weight_hh = nn.Parameter(torch.empty(hidden_size, 2 * hidden_size, **self.factory))
        self.bias = nn.Parameter(torch.empty(hidden_size, **self.factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init_uniform(self.parameters(), 1.0 / math.sqrt(self.input_size + 2 * self.hidden_size))

    def precompute(self, x: Tensor) -> Tensor:
        return x @ self.weight_ih.T + self.bias

    def step(self, p_t: Tensor, state: State) -> Tuple[Tensor, State]:
        y, z = state
        drive = torch.tanh(p_t + torch.cat([y, z], dim=-1) @ self.weight_hh.T)
        if self.scheme == "imex":
            z = (z + self.dt * (drive - self.gamma * y)) / (1 + self.dt * self.eps)
        else:
            z = z + self.dt * (drive - self.gamma * y - self.eps * z)
        y = y + self.dt * z
        return y, (y, z)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", dt={self.dt}, gamma={self.gamma}, eps={self.eps}, scheme={self.scheme!r}"


@register(
    "lem",
    family="baseline",
    paper="Rusch, Mishra, Erichson & Mahoney 2022, Long Expressive Memory for Sequence Modeling (ICLR)",
)
class LEM(TwoStateCell):
    """Long expressive memory: two coupled ODEs with learned, input-dependent multiscale time steps.

    State ``(y, z)``; output ``y``::

        dt1_t = dt * sigmoid(W1 y_{t-1} + V1 x_t + b1)          (time step of z)
        dt2_t = dt * sigmoid(W2 y_{t-1} + V2 x_t + b2)          (time step of y)
        z_t   = (1 - dt1_t) * z_{t-1} + dt1_t * tanh(Wz y_{t-1} + Vz x_t + bz)
        y_t   = (1 - dt2_t) * y_{t-1} + dt2_t * tanh(Wy z_t + Vy x_t + by)

    Note ``y_t`` reads the new ``z_t`` (the paper's IMEX-like ordering).

    Args:
        dt: the maximal step Delta t (default 1.0, the authors' model default; the paper's sequential
            MNIST run uses 0.21).

    Parameters: ``weight_ih = [V1; V2; Vz; Vy] (4H, d)``, ``bias_ih (4H,)``,
    ``weight_hh = [W1; W2; Wz] (3H, H)``, ``bias_hh (3H,)``, ``weight_zy = Wy (H, H)``, ``bias_zy (H,)``
    (``b1`` etc. are the sums of the two biases). Init (the authors' code): every parameter
    ``U(-1/sqrt(H), 1/sqrt(H))``.
    """

    def __init__(
        self, input_size: int, hidden_size: int, dt: float = 1.0, backend: str = "auto", device=None, dtype=None
    ) -> None:
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        self.dt = check_positive_float("dt", dt)
        h = hidden_size
        self.weight_ih = nn.Parameter(torch.empty(4 * h, input_size, **self.factory))
        self.bias_ih = nn.Parameter(torch.empty(4 * h, **self.factory))
        self.weight_hh = nn.Parameter(torch.empty(3 * h, h, **self.factory))
        self.bias_hh = nn.Parameter(torch.empty(3 * h, **self.factory))
        self.weight_zy = nn.Parameter(torch.empty(h, h, **self.factory))
        self.bias_zy = nn.Parameter(torch.empty(h, **self.factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init_uniform(self.parameters(), 1.0 / math.sqrt(self.hidden_size))

    def precompute(self, x: Tensor) -> Tensor:
        return x @ self.weight_ih.T + self.bias_ih

    def step(self, p_t: Tensor, state: State) -> Tuple[Tensor, State]:
        y, z = state
        in_dt1, in_dt2, in_z, in_y = p_t.chunk(4, dim=-1)
        rec_dt1, rec_dt2, rec_z = (y @ self.weight_hh.T + self.bias_hh).chunk(3, dim=-1)
        dt1 = self.dt * torch.sigmoid(in_dt1 + rec_dt1)
        dt2 = self.dt * torch.sigmoid(in_dt2 + rec_dt2)
        z = (1 - dt1) * z + dt1 * torch.tanh(in_z + rec_z)
        y = (1 - dt2) * y + dt2 * torch.tanh(z @ self.weight_zy.T + self.bias_zy + in_y)
        return y, (y, z)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", dt={self.dt}"
