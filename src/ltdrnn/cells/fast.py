"""FastRNN and FastGRNN (Kusupati et al. 2018): a residual step with learned scalar weights.

Both cells share one pre-activation ``a_t = W x_t + U h_{t-1}`` (``W`` and ``U`` optionally low rank,
``W = W_1 W_2`` with rank ``w_rank``), so the input half is precomputed for the whole sequence.
Shapes follow the legend in :mod:`ltdrnn.cells.base`.

Doc: docs/cells/fast.md
Tests: tests/cells/test_baselines.py, tests/cells/test_contract.py
Kernel: none (PyTorch operations only)
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor, nn

from .base import Cell, activation, check_finite_float, check_positive_int
from .registry import ParamCount, register

_PAPER = (
    "Kusupati et al. 2018, FastGRNN: A Fast, Accurate, Stable and Tiny Kilobyte Sized Gated "
    "Recurrent Neural Network (NeurIPS)"
)


class FastBase(Cell):
    """The shared pre-activation ``W x_t + U h_{t-1}`` with optional low-rank factors.

    Full rank: ``W (H, d)``, ``U (H, H)``. With ``w_rank = r``: ``W = W_1 W_2``, ``W_1 (H, r)``,
    ``W_2 (r, d)``; likewise ``u_rank`` for ``U``. Init (the authors' reference implementation,
    EdgeML): every weight factor ``N(0, 0.1^2)``, biases 1.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        w_rank: int | None = None,
        u_rank: int | None = None,
        backend: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        self.w_rank = None if w_rank is None else check_positive_int("w_rank", w_rank)
        self.u_rank = None if u_rank is None else check_positive_int("u_rank", u_rank)
        self.W = self._matrix(hidden_size, input_size, self.w_rank)
        self.U = self._matrix(hidden_size, hidden_size, self.u_rank)

    def _matrix(self, rows: int, cols: int, rank: int | None) -> nn.ParameterList:
        shapes = [(rows, cols)] if rank is None else [(rows, rank), (rank, cols)]
        return nn.ParameterList(nn.Parameter(torch.empty(*s, **self.factory)) for s in shapes)

    def reset_weights(self) -> None:
        for p in list(self.W) + list(self.U):
            nn.init.normal_(p, 0.0, 0.1)

    @staticmethod
    def apply_factors(factors: nn.ParameterList, v: Tensor) -> Tensor:
        """``M v`` for ``M = product of factors``, right to left so low rank stays cheap. (Not named
        ``apply``: that would shadow ``nn.Module.apply``, which ``model.apply(init_fn)`` relies on.)"""
        for f in reversed(factors):
            v = v @ f.T
        return v

    def precompute(self, x: Tensor) -> Tensor:
        """``(T, B, d) -> (T, B, H)``: ``W x_t``."""
        return self.apply_factors(self.W, x)

    def extra_repr(self) -> str:
        ranks = "".join(f", {n}={v}" for n, v in (("w_rank", self.w_rank), ("u_rank", self.u_rank)) if v is not None)
        return super().extra_repr() + ranks


@register(
    "fastrnn",
    family="baseline",
    paper=_PAPER,
    variants={"lowrank": {"w_rank": 2, "u_rank": 3}, "relu": {"nonlinearity": "relu"}},
    param_counts=(
        ParamCount(
            1,
            128,
            16_500,
            17_000,
            source="TARNN paper Table 1 (pixel MNIST, d=1, H=128): 18K incl. a 10-class linear head (1290)",
        ),
        ParamCount(
            256,
            256,
            130_500,
            131_500,
            source="TARNN paper Table 2 (PTB, embedding 256, H=256, RNN parameters only): 131K",
        ),
    ),
)
class FastRNN(FastBase):
    """FastRNN: a tanh RNN step added to a leaky copy of the state.

    State ``h (B, H)``::

        h~_t = phi(W x_t + U h_{t-1} + b)
        h_t  = alpha * h~_t + beta * h_{t-1},   alpha = sigmoid(a),  beta = sigmoid(b_)

    ``a`` and ``b_`` are learned scalars (the paper keeps ``0 <= alpha, beta <= 1`` through the
    sigmoid). Init: ``a = alpha_init = -3`` (alpha ~ 0.05), ``b_ = beta_init = 3`` (beta ~ 0.95), ``b = 1``,
    weights ``N(0, 0.01)`` — the authors' EdgeML defaults.

    Args:
        nonlinearity: phi, ``"tanh"`` (default), ``"sigmoid"`` or ``"relu"``.
        w_rank, u_rank: ranks of low-rank ``W`` and ``U`` (None: full rank).
        alpha_init, beta_init: initial values of the pre-sigmoid scalars.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        nonlinearity: str = "tanh",
        w_rank: int | None = None,
        u_rank: int | None = None,
        alpha_init: float = -3.0,
        beta_init: float = 3.0,
        backend: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(input_size, hidden_size, w_rank, u_rank, backend=backend, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity
        self.phi = activation(nonlinearity, "nonlinearity")
        self.alpha_init = check_finite_float("alpha_init", alpha_init)
        self.beta_init = check_finite_float("beta_init", beta_init)
        self.bias = nn.Parameter(torch.empty(hidden_size, **self.factory))
        self.alpha = nn.Parameter(torch.empty(1, **self.factory))
        self.beta = nn.Parameter(torch.empty(1, **self.factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.reset_weights()
        nn.init.ones_(self.bias)
        nn.init.constant_(self.alpha, self.alpha_init)
        nn.init.constant_(self.beta, self.beta_init)

    def step(self, p_t: Tensor, state: Tensor) -> Tuple[Tensor, Tensor]:
        candidate = self.phi(p_t + self.apply_factors(self.U, state) + self.bias)
        h = torch.sigmoid(self.alpha) * candidate + torch.sigmoid(self.beta) * state
        return h, h

    def extra_repr(self) -> str:
        return super().extra_repr() + f", nonlinearity={self.nonlinearity!r}"


@register("fastgrnn", family="baseline", paper=_PAPER, variants={"lowrank": {"w_rank": 2, "u_rank": 3}})
class FastGRNN(FastBase):
    """FastGRNN: a gate that shares ``W`` and ``U`` with the update, plus learned scalars zeta, nu.

    State ``h (B, H)``::

        a_t  = W x_t + U h_{t-1}
        z_t  = sigma(a_t + b_z)                       (gate nonlinearity, sigmoid)
        h~_t = phi(a_t + b_h)                          (update nonlinearity, tanh)
        h_t  = (zeta * (1 - z_t) + nu) * h~_t + z_t * h_{t-1},  zeta = sigmoid(c), nu = sigmoid(e)

    Init (EdgeML defaults): ``c = zeta_init = 1``, ``e = nu_init = -4``, ``b_z = gate_bias = 1``,
    ``b_h = 1``, weights ``N(0, 0.01)``. Sparsity and 8-bit quantisation (the paper's compression stages)
    are training procedures, not part of the cell.

    Args:
        gate_nonlinearity, update_nonlinearity: ``"sigmoid"``/``"tanh"``/``"relu"``.
        w_rank, u_rank: ranks of low-rank ``W`` and ``U`` (None: full rank; the paper's "LSQ"
            model is the full-rank one).
        gate_bias: the initial gate bias ``b_z``. With a sigmoid gate the state starts keeping
            ``z ~ sigmoid(gate_bias)`` of itself per step, a memory of about ``1 / (1 - z)`` steps: 1
            (EdgeML) remembers ~4 steps, 3 remembers ~20. The deploy/tiny-fastgrnn preset starts at 3: on
            GunPoint (150 steps, read at the last) 1 sat at chance for hundreds of steps, and for the
            whole run with weight decay (lab/2026-11-29-tiny-recipes).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        gate_nonlinearity: str = "sigmoid",
        update_nonlinearity: str = "tanh",
        w_rank: int | None = None,
        u_rank: int | None = None,
        zeta_init: float = 1.0,
        nu_init: float = -4.0,
        gate_bias: float = 1.0,
        backend: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(input_size, hidden_size, w_rank, u_rank, backend=backend, device=device, dtype=dtype)
        self.gate_nonlinearity, self.update_nonlinearity = gate_nonlinearity, update_nonlinearity
        self.gate_phi = activation(gate_nonlinearity, "gate_nonlinearity")
        self.update_phi = activation(update_nonlinearity, "update_nonlinearity")
        self.zeta_init = check_finite_float("zeta_init", zeta_init)
        self.nu_init = check_finite_float("nu_init", nu_init)
        self.gate_bias = check_finite_float("gate_bias", gate_bias)
        self.bias_gate = nn.Parameter(torch.empty(hidden_size, **self.factory))
        self.bias_update = nn.Parameter(torch.empty(hidden_size, **self.factory))
        self.zeta = nn.Parameter(torch.empty(1, **self.factory))
        self.nu = nn.Parameter(torch.empty(1, **self.factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.reset_weights()
        nn.init.constant_(self.bias_gate, self.gate_bias)
        nn.init.ones_(self.bias_update)
        nn.init.constant_(self.zeta, self.zeta_init)
        nn.init.constant_(self.nu, self.nu_init)

    def step(self, p_t: Tensor, state: Tensor) -> Tuple[Tensor, Tensor]:
        a = p_t + self.apply_factors(self.U, state)
        z = self.gate_phi(a + self.bias_gate)
        candidate = self.update_phi(a + self.bias_update)
        h = (torch.sigmoid(self.zeta) * (1 - z) + torch.sigmoid(self.nu)) * candidate + z * state
        return h, h

    def extra_repr(self) -> str:
        return (
            super().extra_repr() + f", gate_nonlinearity={self.gate_nonlinearity!r}, "
            f"update_nonlinearity={self.update_nonlinearity!r}"
        )
