"""iRNN, the incremental RNN (Kag, Zhang & Saligrama, ICLR 2020).

Shapes follow the legend in :mod:`ltdrnn.cells.base`. The paper runs K Euler steps of an ODE per time
step; the state ``h_k`` is the *increment* that brings ``h_{k-1}`` onto the equilibrium of the ODE:

    g_0 = 0
    g_i = g_{i-1} + eta_i * (phi(P[U (g_{i-1} + h_{k-1}) + W x_k + b]) - alpha * (g_{i-1} + h_{k-1}))
    h_k = g_K

(Eq. 5 without ``P``; Eq. 8, used in all the paper's experiments, with ``P = U = I + V H``.) The option
``reading`` selects where the iteration starts and how ``h_k`` is read from it (:data:`READINGS`).

This module holds the cell: its parameters, init, the reference step (:meth:`IRNN.step`, ``U`` and ``P``
applied literally) and registration. Its fast paths (backends ``"torch"``, ``"cpp"`` and
``"triton"``: a hand-written forward and backward over the whole sequence that folds ``P U`` into one
matrix ``M`` and ``P (W x + b)`` into the precomputed input, in PyTorch, with its K = 1 time loops compiled,
or in Triton) are :mod:`ltdrnn.ops.irnn`.

Doc: docs/cells/irnn.md
Tests: tests/cells/test_irnn.py, tests/cells/test_euler.py, tests/cells/test_contract.py
Kernel: src/ltdrnn/ops/csrc/irnn.cpp (CPU); src/ltdrnn/ops/irnn_triton.py (GPU)
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..ops import irnn as irnn_ops
from ..ops.common import ParameterCache, join_counter, split_counter
from .base import State, check_choice, check_finite_float, check_positive_float, check_positive_int
from .base import activation as activation_function
from .euler import EulerCell, EulerSteps
from .registry import ParamCount, register

#: reading -> (s, r) in the variable ``y_i = g_i + h_{k-1}``: ``y_0 = s h_{k-1}``, ``h_k = y_K - r h_{k-1}``.
#: "paper": g_0 = 0, h_k = g_K (Eq. 5/8 as printed); "state": g_0 = h_{k-1}, h_k = g_K (same fixed point);
#: "residual": g_0 = 0, h_k = h_{k-1} + g_K.
READINGS = {"paper": (1.0, 1.0), "state": (2.0, 1.0), "residual": (1.0, 0.0)}
DEFAULT_RANK = 16
#: ``gate="outside"``: the authors' update gate after the Euler loop (``iRNN_DualODECell`` in their TARNN
#: repository) starts its weights at ``N(0, 0.1^2)`` (its bias at ``gate_bias``, -3 there: nearly closed).
GATE_WEIGHT_STD = 0.1


@register(
    "irnn",
    family="source",
    paper="Kag, Zhang & Saligrama, RNNs incrementally evolving on an equilibrium manifold: a panacea for "
    "vanishing and exploding gradients? (ICLR 2020; reviewed as 'Incremental RNN: a dynamical view')",
    test_options={"rank": 2},
    variants={
        "full_rank_eq5": {"rank": None, "projection": False},
        "full_rank_eq8": {"rank": None, "projection": True},
        "printed": {"reading": "paper"},
        "guarded": {"contractive": True},
        "state_reading_K3": {"reading": "state", "K": 3},
        "learn_alpha_tanh_K2": {"learn_alpha": True, "alpha": 1.5, "activation": "tanh", "K": 2},
        "eta_per_time_step": {"eta_per_time_step": True, "max_length": 1300, "K": 2},
        "gated_projected_eta": {
            "gate": "outside",
            "eta_per_time_step": True,
            "max_length": 1300,
            "eta_param": "projected",
        },
        "gated_K2": {"gate": "outside", "K": 2},
    },
    param_counts=(
        ParamCount(
            1, 128, 3_500, 4_500, {"rank": 15}, source="iRNN Table 1 pixel-MNIST K=1/3: 4k (rank not given; 15 fits)"
        ),
        ParamCount(
            1, 128, 7_500, 8_500, {"rank": 30}, source="iRNN Table 1 permuted-MNIST K=1: 8k (rank not given; 30 fits)"
        ),
        ParamCount(
            28, 128, 5_500, 6_500, {"rank": 9}, source="iRNN Table 2 noisy-MNIST K=1: 6k (rank not given; 9 fits)"
        ),
        ParamCount(
            9, 80, 3_500, 4_500, {"rank": 20}, source="iRNN Table 3 HAR-2 K=1/3/5: 4k (rank not given; 20 fits)"
        ),
        ParamCount(32, 80, 8_000, 8_200, {"rank": 34}, source="iRNN Table 9 Google-12: 8.1k (rank not given; 34 fits)"),
        ParamCount(32, 80, 8_400, 8_600, {"rank": 36}, source="iRNN Table 3 Google-30: 8.5k (rank not given; 36 fits)"),
    ),
)
class IRNN(EulerCell):
    """Incremental RNN: K Euler steps towards the equilibrium of an incremental CTRNN per time step.

    State ``h (B, H)`` (with ``eta_per_time_step``: ``(h, counter)``, counter ``(B,)`` int64, the
    number of time steps taken so far). Output ``h_k``::

        g_0 = 0 ("paper", "residual")  or  h_{k-1} ("state")
        for i in 1..K:
            a   = U (g_{i-1} + h_{k-1}) + W x_k + b
            g_i = g_{i-1} + eta_i * (phi(P a  or  a) - alpha * (g_{i-1} + h_{k-1}))
        h_k = g_K ("paper", "state")  or  h_{k-1} + g_K ("residual")
        # gate="outside" (the authors' code): u = sigmoid(U_g h_{k-1} + W_g x_k + b_g)
        #                                      h_k = (1 - u) h_{k-1} + u h_k

    ``U = I + V H`` (``V (H, r)``, ``H (r, H)``) when ``rank=r``, a dense ``(H, H)`` matrix when
    ``rank=None``; ``P = U`` applied after the sum (Eq. 8) when ``projection=True``. K = 1 with
    ``reading="paper"`` is the paper's SiRNN, ``h_k = eta (phi(U h_{k-1} + W x_k + b) - alpha h_{k-1})``;
    with the default ``"residual"`` it is ``h_k = h_{k-1} + eta (phi(U h_{k-1} + W x_k + b) - alpha h_{k-1})``.

    Args:
        input_size: d.  hidden_size: H.
        K: Euler steps per time step (paper: 1 in most tables, up to 10 in the ablation).
        rank: r of ``U = I + V H``; None for a dense ``U``; ``"auto"`` (default): ``min(16, hidden_size)``.
        projection: apply ``P = U`` after the sum, Eq. 8 (all the paper's experiments).
        alpha: the leak ``alpha > 0`` (paper: 1).
        learn_alpha: learn alpha, kept positive as ``exp(log_alpha)``.
        contractive: keep Theorem 1's condition ``||M||_2 <= alpha`` (``M = P U``, or ``U`` without ``P``)
            by using the leak ``max(alpha, ||M||_2)``, so that no Euler step expands (default False,
            as printed: the guard kept training stable but also removed the memory, see the docs).
        eta: initial Euler step size (paper: 1e-2).
        eta_per_time_step: a separate row of K step sizes for every time step (the paper's ``eta_k^i``;
            needs ``max_length``).
        eta_param: how the step sizes are learned: ``"exp"`` (default, ``exp(log eta)``), ``"raw"``
            (as printed) or ``"projected"`` (raw, kept in ``[0, eta_max]``; :class:`~ltdrnn.cells.euler.EulerSteps`).
        eta_max: upper bound on the step sizes, kept by projection (``"projected"``: 1 unless given;
            ``"exp"``: none unless given; not with ``"raw"``).
        max_length: number of time steps covered by ``eta_per_time_step``.
        reading: ``"residual"`` (default; docs/cells/irnn.md gives the choice and its measurements),
            ``"paper"`` (Eq. 5/8 as printed) or ``"state"`` (``g_0 = h_{k-1}``; the printed fixed point).
        activation: phi, ``"relu"`` (paper), ``"tanh"`` or ``"sigmoid"``.
        gate: ``"none"`` (default, the paper) or ``"outside"``: the authors' update gate after the Euler
            loop (not in the paper; their code's default), which the copy task needs (docs/cells/irnn.md).
        gate_bias: the gate's initial bias ``b_g`` (authors' code: -3, the gate nearly closed).
        u_init: ``"identity"`` (default): ``U = I`` at init (``V = 0``; a dense ``U`` starts at ``I``), so
            ``||U|| = alpha`` and no direction of the state grows at init; ``"uniform"``: ``V``, ``H`` (or
            the dense ``U``) ``U(-1/sqrt(H), 1/sqrt(H))`` like the other weights, where ``||P U||_2`` is
            about 1.7 and the state grows geometrically with T (docs/cells/irnn.md, "Long inputs").
        backend: ``"torch"`` (hand-written backward), ``"cpp"`` (the same, its K = 1 time loops compiled;
            the default on the CPU), ``"reference"`` (loop over :meth:`step`) or ``"triton"`` (any K, with or
            without the gate and per-time-step step sizes: the time loop in one Triton launch per direction,
            :mod:`ltdrnn.ops.irnn_triton`; the default for CUDA tensors when Triton is installed; where Triton
            cannot run: ``"cpp"`` or ``"torch"``). With the gate or
            per-time-step step sizes ``"torch"`` and ``"cpp"`` run :class:`~ltdrnn.ops.irnn_torch.IRNNLoop`; see
            :mod:`ltdrnn.ops.irnn`.

    Init (not given in the paper): every weight and ``b`` ``U(-1/sqrt(H), 1/sqrt(H))`` as torch.nn's
    RNN, except ``U = I`` (``u_init="identity"``); ``eta = 1e-2`` (paper); the gate as the authors' code:
    ``U_g, W_g ~ N(0, 0.1^2)``, ``b_g = gate_bias``.

    Examples::

        >>> import torch
        >>> from ltdrnn.cells.irnn import IRNN
        >>> _ = torch.manual_seed(0)
        >>> cell = IRNN(input_size=3, hidden_size=8, K=2)
        >>> x = torch.randn(20, 4, 3)                       # (T, B, d)
        >>> outputs, state = cell.scan(x)                   # "auto": "cpp" where the kernels build
        >>> outputs.shape, state.shape
        (torch.Size([20, 4, 8]), torch.Size([4, 8]))
        >>> reference, _ = cell.scan(x, backend="reference")  # U and P applied literally
        >>> torch.allclose(outputs, reference, atol=1e-6)
        True
        >>> h, state = cell(x[0], cell.init_state(4))       # one streaming step
        >>> torch.allclose(h, outputs[0], atol=1e-6)
        True
    """

    backends = ("reference", "torch", "cpp", "triton")
    kernel = "irnn"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        K: int = 1,
        rank: int | str | None = "auto",
        projection: bool = True,
        alpha: float = 1.0,
        learn_alpha: bool = False,
        eta: float = 1e-2,
        eta_per_time_step: bool = False,
        max_length: int | None = None,
        reading: str = "residual",
        contractive: bool = False,
        activation: str = "relu",
        eta_param: str = "exp",
        eta_max: float | None = None,
        gate: str = "none",
        gate_bias: float = -3.0,
        u_init: str = "identity",
        backend: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        self.K = check_positive_int("K", K)
        if rank == "auto":
            rank = min(DEFAULT_RANK, check_positive_int("hidden_size", hidden_size))
        self.rank = None if rank is None else check_positive_int("rank", rank)
        if self.rank is not None and self.rank > hidden_size:
            raise ValueError(f"rank: expected at most hidden_size={hidden_size}, got {rank}")
        flags = (("projection", projection), ("learn_alpha", learn_alpha), ("contractive", contractive))
        for name, flag in flags:
            if not isinstance(flag, bool):
                raise TypeError(f"{name}: expected a bool, got {flag!r}")
        self.projection = projection
        self.alpha_init = check_positive_float("alpha", alpha)
        self.learn_alpha = learn_alpha
        self.contractive = contractive
        self.reading = check_choice("reading", reading, tuple(READINGS))
        self.activation = activation
        self.phi = activation_function(activation)
        self.steps = EulerSteps(K, eta, eta_per_time_step, max_length, self.factory, eta_param, eta_max)
        self.gate = check_choice("gate", gate, ("none", "outside"))
        self.gate_bias = check_finite_float("gate_bias", gate_bias)
        self.u_init = check_choice("u_init", u_init, ("identity", "uniform"))
        #: the operands of a streamed step, formed once per parameter change (:func:`ltdrnn.ops.irnn.stream`)
        self.stream_cache = ParameterCache()
        self.weight_x = nn.Parameter(torch.empty(hidden_size, input_size, **self.factory))
        self.bias = nn.Parameter(torch.empty(hidden_size, **self.factory))
        if self.rank is None:
            self.weight_u = nn.Parameter(torch.empty(hidden_size, hidden_size, **self.factory))
        else:
            self.weight_v = nn.Parameter(torch.empty(hidden_size, self.rank, **self.factory))
            self.weight_h = nn.Parameter(torch.empty(self.rank, hidden_size, **self.factory))
        if learn_alpha:
            self.log_alpha = nn.Parameter(torch.empty((), **self.factory))
        if self.gated:
            self.weight_gate_h = nn.Parameter(torch.empty(hidden_size, hidden_size, **self.factory))
            self.weight_gate_x = nn.Parameter(torch.empty(hidden_size, input_size, **self.factory))
            self.bias_gate = nn.Parameter(torch.empty(hidden_size, **self.factory))
        self.reset_parameters()

    @property
    def gated(self) -> bool:
        return self.gate == "outside"

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for name, p in self.named_parameters(recurse=False):
            if name != "log_alpha" and "gate" not in name:
                nn.init.uniform_(p, -bound, bound)
        if self.u_init == "identity":  # U = I: ||U|| = alpha = 1, no direction grows at init
            with torch.no_grad():
                if self.rank is None:
                    self.weight_u.copy_(torch.eye(self.hidden_size))
                else:
                    self.weight_v.zero_()
        if self.learn_alpha:
            nn.init.constant_(self.log_alpha, math.log(self.alpha_init))
        if self.gated:
            nn.init.normal_(self.weight_gate_h, 0.0, GATE_WEIGHT_STD)
            nn.init.normal_(self.weight_gate_x, 0.0, GATE_WEIGHT_STD)
            nn.init.constant_(self.bias_gate, self.gate_bias)
        self.steps.reset_parameters()

    # ---- the maths, literally ----------------------------------------------------------------------
    def alpha(self) -> Tensor | float:
        """The leak used by the dynamics: alpha, or with ``contractive`` ``max(alpha, ||M||_2)``."""
        alpha = self.log_alpha.exp() if self.learn_alpha else self.alpha_init
        if not self.contractive:
            return alpha
        first, second = self.recurrent_operator()
        operator = first if second is None else irnn_ops.dense_operator(first, second)
        if not torch.isfinite(operator).all():
            # Diverged weights: the SVD would raise, while a NaN leak lets the loss turn non-finite,
            # which the trainer reports as a diverged run.
            return torch.full((), math.nan, dtype=operator.dtype, device=operator.device)
        norm = torch.linalg.matrix_norm(operator, 2)
        return torch.maximum(norm, torch.as_tensor(alpha, dtype=norm.dtype, device=norm.device))

    def apply_u(self, y: Tensor) -> Tensor:
        """``U y`` row-wise: ``(..., H) -> (..., H)``; ``U = I + V H`` or dense."""
        if self.rank is None:
            return F.linear(y, self.weight_u)
        return y + F.linear(F.linear(y, self.weight_h), self.weight_v)

    def precompute(self, x: Tensor) -> Tensor:
        """``(T, B, d) -> (T, B, H)``: ``W x_t + b``; with the gate ``(T, B, 2H)``: ``[W x_t + b, W_g x_t + b_g]``."""
        if not self.gated:
            return F.linear(x, self.weight_x, self.bias)
        return F.linear(x, torch.cat([self.weight_x, self.weight_gate_x]), torch.cat([self.bias, self.bias_gate]))

    def step(self, p_t: Tensor, state: State) -> Tuple[Tensor, State]:
        """Eq. 5 / Eq. 8 for one time step, exactly as written (U and P applied as matrices), then
        the authors' update gate when ``gate="outside"``."""
        h, counter = split_counter(self.per_time_step, state)
        if self.gated:
            p_t, gate_x = p_t.chunk(2, dim=-1)
        eta = self.steps.at(counter)
        alpha = self.alpha()
        g = h if self.reading == "state" else torch.zeros_like(h)
        for i in range(self.K):
            y = g + h
            a = self.apply_u(y) + p_t
            drive = self.phi(self.apply_u(a) if self.projection else a)
            eta_i = eta[i] if counter is None else eta[:, i : i + 1]
            g = g + eta_i * (drive - alpha * y)
        h_new = h + g if self.reading == "residual" else g
        if self.gated:
            u = torch.sigmoid(F.linear(h, self.weight_gate_h) + gate_x)
            h_new = (1 - u) * h + u * h_new
        return h_new, join_counter(h_new, None if counter is None else counter + 1)

    # ---- the fast paths (ltdrnn.ops.irnn) ------------------------------------------------------------
    def recurrent_operator(self) -> Tuple[Tensor, Tensor | None]:
        """``M`` with ``pre = M y + c``: ``(M, None)`` dense, or low rank ``(V', H)`` with ``M = I + V' H``.

        ``M = P U = U^2 = I + V (2 I + H V) H`` with Eq. 8, ``M = U`` without it.
        """
        if self.rank is None:
            u = self.weight_u
            return (u @ u if self.projection else u), None
        v = self.weight_v
        if self.projection:
            eye = torch.eye(self.rank, device=v.device, dtype=v.dtype)
            v = v @ (2 * eye + self.weight_h @ v)
        return v, self.weight_h

    def input_map(self) -> Tuple[Tensor, Tensor]:
        """``(weight, bias)`` with ``c = weight x + bias``: ``P (W x + b) = (P W) x + P b`` under Eq. 8."""
        if self.projection:
            return self.apply_u(self.weight_x.t()).t(), self.apply_u(self.bias)
        return self.weight_x, self.bias

    def reading_pair(self) -> Tuple[float, float]:
        """The reading as ``(start, keep)`` in ``y_i = g_i + h_{k-1}``: ``y_0 = start h_{k-1}``,
        ``h_k = y_K - keep h_{k-1}`` (:data:`READINGS`)."""
        return READINGS[self.reading]

    def scan_fast(self, x: Tensor, state: State, lengths: Tensor | None, backend: str) -> Tuple[Tensor, State]:
        """The whole sequence in ``backend``: :func:`ltdrnn.ops.irnn.scan`."""
        return irnn_ops.scan(self, x, state, lengths, backend)

    def stream_step(self, x_t: Tensor, state: State, backend: str) -> Tuple[Tensor, State] | None:
        """One step without autograd: :func:`ltdrnn.ops.irnn.stream`."""
        return irnn_ops.stream(self, x_t, state, backend)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, K={self.K}, rank={self.rank}, projection={self.projection}, "
            f"alpha={self.alpha_init}, learn_alpha={self.learn_alpha}, reading={self.reading!r}, "
            f"contractive={self.contractive}, activation={self.activation!r}, gate={self.gate!r}"
        )
