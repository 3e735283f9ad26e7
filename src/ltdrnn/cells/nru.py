"""NRU, the non-saturating recurrent unit (Chandar et al. 2019): a relu RNN with an additive memory
written and erased by unbounded (non-saturating) strengths. Shapes follow :mod:`ltdrnn.cells.base`;
``M`` is the memory size and ``k`` the number of write and of erase heads.

Doc: docs/cells/nru.md
Tests: tests/cells/test_baselines.py, tests/cells/test_contract.py
Kernel: none (PyTorch operations only)
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import Cell, State, check_positive_float, check_positive_int, init_uniform
from .registry import ParamCount, register


@register(
    "nru",
    family="baseline",
    paper="Chandar, Sankar, Vorontsov, Kahou & Bengio 2019, Towards Non-saturating Recurrent Units "
    "for Modelling Long-term Dependencies (AAAI)",
    test_options={"memory_size": 4, "heads": 1},
    variants={
        "relu_heads": {"memory_size": 4, "heads": 1, "relu_heads": True},
        "layer_norm": {"memory_size": 4, "heads": 1, "layer_norm": True},
    },
    param_counts=(
        ParamCount(
            2,
            128,
            101_000,
            102_500,
            options={"memory_size": 256, "heads": 4},
            source="SRNN paper Table 5 (adding, d=2, H=128): 102k incl. a "
            "129-parameter linear head; memory 256 and 4 heads (the "
            "authors' configuration) give 101,896 + 129",
        ),
    ),
)
class NRU(Cell):
    """Non-saturating recurrent unit.

    State ``(h (B, H), m (B, M))``; output ``h``. With ``s = sqrt(M k)`` (must be an integer)::

        h_t      = relu(LN?(W [x_t; h_{t-1}; m_{t-1}] + b))
        q_t      = [h_t; m_{t-1}]
        alpha_t  = g(A_a q_t + c_a),  beta_t = g(A_b q_t + c_b)                 (k write / erase strengths)
        [a; a']  = P_a q_t + e_a  (2s values);   v^a = rows of outer(a, a') as (k, M), g applied,
                                                  each row divided by its p-norm
        v^b      likewise from P_b
        m_t      = m_{t-1} + mean_i (alpha_t,i v^a_i - beta_t,i v^b_i)

    ``g`` is the identity by default (non-saturating, unbounded) or relu (``relu_heads=True``).

    Args:
        memory_size: M (default 64).  heads: k (default 4).  ``M * k`` must be a perfect square.
        relu_heads: apply relu to the strengths and to the write/erase vectors.
        layer_norm: layer normalisation before the relu of ``h``.
        norm_p: the p of the p-norm that normalises each write/erase vector (the authors' code: 5).

    Init (the authors' code, torch Linear defaults): the ``h`` map ``U(+-1/sqrt(d + H + M))``, the
    memory heads ``U(+-1/sqrt(H + M))`` (weights and biases).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        memory_size: int = 64,
        heads: int = 4,
        relu_heads: bool = False,
        layer_norm: bool = False,
        norm_p: float = 5.0,
        backend: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        self.memory_size = check_positive_int("memory_size", memory_size)
        self.heads = check_positive_int("heads", heads)
        side = math.isqrt(memory_size * heads)
        if side * side != memory_size * heads:
            raise ValueError(
                f"memory_size, heads: expected memory_size * heads to be a perfect square, "
                f"got {memory_size} * {heads} = {memory_size * heads}"
            )
        self.side = side
        for name, flag in (("relu_heads", relu_heads), ("layer_norm", layer_norm)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name}: expected a bool, got {flag!r}")
        self.relu_heads, self.use_layer_norm = relu_heads, layer_norm
        self.norm_p = check_positive_float("norm_p", norm_p)
        h, m = hidden_size, memory_size
        self.weight_ih = nn.Parameter(torch.empty(h, input_size, **self.factory))
        self.weight_hh = nn.Parameter(torch.empty(h, h + m, **self.factory))
        self.bias = nn.Parameter(torch.empty(h, **self.factory))
        self.layer_norm = nn.LayerNorm(h, **self.factory) if layer_norm else None
        head_rows = 2 * heads + 4 * side
        self.weight_heads = nn.Parameter(torch.empty(head_rows, h + m, **self.factory))
        self.bias_heads = nn.Parameter(torch.empty(head_rows, **self.factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init_uniform(
            (self.weight_ih, self.weight_hh, self.bias),
            1.0 / math.sqrt(self.input_size + self.hidden_size + self.memory_size),
        )
        init_uniform((self.weight_heads, self.bias_heads), 1.0 / math.sqrt(self.hidden_size + self.memory_size))
        if self.layer_norm is not None:
            self.layer_norm.reset_parameters()

    def init_state(self, batch_size: int, device=None, dtype=None) -> State:
        h = super().init_state(batch_size, device, dtype)
        return h, h.new_zeros(batch_size, self.memory_size)

    def precompute(self, x: Tensor) -> Tensor:
        return x @ self.weight_ih.T + self.bias

    def _g(self, v: Tensor) -> Tensor:
        return torch.relu(v) if self.relu_heads else v

    def _memory_vectors(self, u: Tensor) -> Tensor:
        """``(B, 2s) -> (B, k, M)``: rows of the outer product, normalised."""
        a, b = u.chunk(2, dim=-1)
        v = self._g((a.unsqueeze(2) * b.unsqueeze(1)).reshape(-1, self.heads, self.memory_size))
        return F.normalize(v, p=self.norm_p, dim=2)

    def step(self, p_t: Tensor, state: State) -> Tuple[Tensor, State]:
        h, m = state
        pre = p_t + torch.cat([h, m], dim=-1) @ self.weight_hh.T
        h = torch.relu(self.layer_norm(pre) if self.layer_norm is not None else pre)
        heads = torch.cat([h, m], dim=-1) @ self.weight_heads.T + self.bias_heads
        k, s = self.heads, self.side
        alpha, beta, u_write, u_erase = heads.split([k, k, 2 * s, 2 * s], dim=-1)
        write = self._g(alpha).unsqueeze(2) * self._memory_vectors(u_write)
        erase = self._g(beta).unsqueeze(2) * self._memory_vectors(u_erase)
        m = m + (write - erase).mean(dim=1)
        return h, (h, m)

    def extra_repr(self) -> str:
        return (
            super().extra_repr() + f", memory_size={self.memory_size}, heads={self.heads}, "
            f"relu_heads={self.relu_heads}, layer_norm={self.use_layer_norm}, norm_p={self.norm_p}"
        )
