"""AntisymmetricRNN (Chang et al. 2019): forward Euler on an ODE whose Jacobian has imaginary spectrum.

The recurrent matrix is ``M = W - W^T - gamma I``: ``W - W^T`` is antisymmetric, so its eigenvalues are
purely imaginary, and ``-gamma I`` (diffusion) moves them to real part ``-gamma`` so the Euler step
``h + eps * f(h)`` stays stable. Shapes follow the legend in :mod:`ltdrnn.cells.base`.

Doc: docs/cells/antisymmetric.md
Tests: tests/cells/test_baselines.py, tests/cells/test_contract.py
Kernel: none (PyTorch operations only)
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
from torch import Tensor, nn

from .base import Cell, check_nonnegative_float, check_positive_float
from .registry import ParamCount, register

_PAPER = "Chang, Chen, Haber & Chi 2019, AntisymmetricRNN: A Dynamical System View on Recurrent Neural Networks (ICLR)"


@register(
    "antisymmetric",
    family="baseline",
    paper=_PAPER,
    variants={"no_diffusion": {"gamma": 0.0}},
    param_counts=(
        ParamCount(
            1,
            128,
            16_500,
            17_000,
            source="TARNN paper Table 1 (pixel MNIST, d=1, H=128): 18K incl. a 10-class linear head (1290)",
        ),
    ),
)
class AntisymmetricRNN(Cell):
    """AntisymmetricRNN, optionally with the paper's input gate (``gated=True``).

    State ``h (B, H)``::

        M   = W - W^T - gamma I
        z_t = sigmoid(M h_{t-1} + V_z x_t + b_z)                     (gated only)
        h_t = h_{t-1} + eps * [z_t *] tanh(M h_{t-1} + V_h x_t + b_h)

    The gate uses the same ``M`` as the update, as in the paper.

    Args:
        eps: Euler step size epsilon (default 0.01).
        gamma: diffusion gamma >= 0 (default 0.01).
        gated: add the gate z_t (the paper's "AntisymmetricRNN w/ gating").
        init_std: ``W`` is drawn ``N(0, init_std^2 / H)`` (the paper's sigma_w; default 1).

    Init: ``V`` is ``N(0, 1/d)``, biases 0. With ``gated`` the input weights ``[V_h; V_z]`` form one
    ``(2H, d)`` matrix and the biases one ``(2H,)`` vector.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        eps: float = 0.01,
        gamma: float = 0.01,
        gated: bool = False,
        init_std: float = 1.0,
        backend: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        self.eps = check_positive_float("eps", eps)
        self.gamma = check_nonnegative_float("gamma", gamma)
        self.init_std = check_nonnegative_float("init_std", init_std)
        if not isinstance(gated, bool):
            raise TypeError(f"gated: expected a bool, got {gated!r}")
        self.gated = gated
        rows = (2 if gated else 1) * hidden_size
        self.weight_hh = nn.Parameter(torch.empty(hidden_size, hidden_size, **self.factory))
        self.weight_ih = nn.Parameter(torch.empty(rows, input_size, **self.factory))
        self.bias = nn.Parameter(torch.empty(rows, **self.factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight_hh, 0.0, self.init_std / math.sqrt(self.hidden_size))
        nn.init.normal_(self.weight_ih, 0.0, 1.0 / math.sqrt(self.input_size))
        nn.init.zeros_(self.bias)

    def recurrent_matrix(self) -> Tensor:
        """``M = W - W^T - gamma I``, ``(H, H)``."""
        eye = torch.eye(self.hidden_size, device=self.weight_hh.device, dtype=self.weight_hh.dtype)
        return self.weight_hh - self.weight_hh.T - self.gamma * eye

    def precompute(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        """``(T, B, d) -> ((T, B, H or 2H), M broadcast over T)``; ``M`` is built once per sequence."""
        p = x @ self.weight_ih.T + self.bias
        m_t = self.recurrent_matrix().T
        return p, m_t.expand(x.shape[0], *m_t.shape)

    def step(self, p_t: Tuple[Tensor, Tensor], state: Tensor) -> Tuple[Tensor, Tensor]:
        p, m_t = p_t
        recurrent = state @ m_t
        if self.gated:
            p_h, p_z = p.chunk(2, dim=-1)
            update = torch.sigmoid(recurrent + p_z) * torch.tanh(recurrent + p_h)
        else:
            update = torch.tanh(recurrent + p)
        h = state + self.eps * update
        return h, h

    def extra_repr(self) -> str:
        return (
            super().extra_repr() + f", eps={self.eps}, gamma={self.gamma}, gated={self.gated}, init_std={self.init_std}"
        )


@register("antisymmetric_gated", family="baseline", paper=_PAPER)
class GatedAntisymmetricRNN(AntisymmetricRNN):
    """:class:`AntisymmetricRNN` with ``gated=True`` (its own registry name for benchmarks)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        eps: float = 0.01,
        gamma: float = 0.01,
        init_std: float = 1.0,
        backend: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            input_size,
            hidden_size,
            eps=eps,
            gamma=gamma,
            gated=True,
            init_std=init_std,
            backend=backend,
            device=device,
            dtype=dtype,
        )
