"""TARNN, the time-adaptive RNN (Kag & Saligrama; reviewed at ICLR 2021, published at CVPR 2021).

Shapes follow the legend in :mod:`ltdrnn.cells.base`. Per time step the state ``s`` follows K Euler
steps of the ODE ``z' = F(z) = beta * (A z + B u + phi(U z + W u))`` from ``z_0 = s_{m-1}``, where
``u = [x_m, s_{m-1}]`` and ``beta = sigmoid(U_s s_{m-1} + W_x x_m + b_beta)`` is a per-unit inverse time
constant: a unit with ``beta = 0`` keeps its state exactly, one with ``beta`` near 1 settles on the
equilibrium of the current input.

This module holds the cell: its parameters, init, the reference step (the equations as they stand,
:meth:`TARNN.step`), the losses, FLOPs and registration. Its fast paths (backends ``"torch"``, ``"cpp"`` and
``"triton"``: a hand-written forward and backward over the whole sequence with one matmul of the state per
time step plus one per further Euler step, in PyTorch, compiled or in Triton) are :mod:`ltdrnn.ops.tarnn`.

Doc: docs/cells/tarnn.md
Tests: tests/cells/test_tarnn.py, tests/cells/test_euler.py, tests/cells/test_contract.py
Kernel: src/ltdrnn/ops/csrc/tarnn.cpp (CPU); src/ltdrnn/ops/tarnn_triton.py (GPU)
"""

from __future__ import annotations

from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..ops import tarnn as tarnn_ops
from ..ops.common import ParameterCache, join_counter, mask_outputs, split_counter
from .base import State, check_choice, loop_scan
from .base import activation as activation_function
from .euler import EulerCell, EulerSteps
from .registry import ParamCount, register

READINGS = ("paper", "code", "theorem")
_T1 = "TARNN paper Table 1 ({task}, H=128): {count} incl. a 10-class linear head (1,290); cell with K=5"


@register(
    "tarnn",
    family="source",
    paper="Kag & Saligrama, Time adaptive recurrent neural network (CVPR 2021; reviewed at ICLR 2021)",
    test_options={"K": 2},
    variants={
        "coupled_tanh": {"A": "coupled", "activation": "tanh"},
        "gate_outside": {"gate": "outside", "activation": "sigmoid", "K": 3},
        "eta_per_time_step": {"eta_per_time_step": True, "max_length": 1300},
        "projected_eta_per_time_step": {"eta_per_time_step": True, "max_length": 1300, "eta_param": "projected"},
        "projected_eta": {"eta_param": "projected"},
        "K1": {"K": 1},
        "code_reading": {"reading": "code"},
        "theorem_reading_raw_eta": {"reading": "theorem", "eta_param": "raw"},
    },
    param_counts=(
        ParamCount(
            1,
            128,
            66_200,
            67_200,
            {"A": "coupled"},
            source=_T1.format(task="pixel-MNIST / permuted-MNIST, d=1", count="68K"),
        ),
        ParamCount(28, 128, 76_200, 77_200, source=_T1.format(task="noisy MNIST, d=28", count="78K")),
        ParamCount(
            2,
            128,
            66_500,
            67_900,
            source="our specification: H=128, d=2 about 67-68K (add task; the paper gives no count for it)",
        ),
    ),
)
class TARNN(EulerCell):
    """Time-adaptive RNN: K Euler steps of a per-unit time-scaled ODE per time step.

    State ``s (B, H)`` (with ``eta_per_time_step``: ``(s, counter)``, counter ``(B,)`` int64, the
    number of time steps taken so far). Output ``s_m``. With ``u = [x_m, s_{m-1}]``::

        beta  = sigmoid(U_s s_{m-1} + W_x x_m + b_beta)
        G(z)  = A z + B1 x_m + B2 s_{m-1} + b_lin + phi(U z + W1 x_m + W2 s_{m-1} + b)
        z_0 = s_{m-1};  for k in 1..K:  z_k = z_{k-1} + eta_k * beta * G(z_{k-1})     (gate="inside")
        s_m = z_K
        # gate="outside" (authors' code variant): z_k = z_{k-1} + eta_k G(z_{k-1}),
        #   with reading="code" and the gate outside, A = -2I (the code's (1 - eta) z + eta (.. - z ..)),
        #                                         s_m = (1 - beta) s_{m-1} + beta z_K

    ``A`` is fixed: ``-I`` (``"identity"``) or ``"coupled"``: ``-I`` plus ``+I`` on the upper right
    ``(H/2, H/2)`` block (H even).

    Args:
        input_size: d.  hidden_size: H.
        K: Euler steps per time step (paper text 3, appendix and default 5).
        A: ``"identity"`` (paper default) or ``"coupled"`` (paper: pixel and permuted MNIST).
        activation: phi, ``"relu"`` (paper default), ``"tanh"`` (paper: copy, PTB) or ``"sigmoid"``.
        gate: ``"inside"`` (paper, beta scales F) or ``"outside"`` (beta mixes after the Euler steps).
        eta: initial Euler step size (authors' code 0.01; paper Table 4 per task, see the docs).
        eta_per_time_step: a separate row of K step sizes for every time step (the authors' code;
            the TARNN paper prints one eta; needs ``max_length``).
        max_length: number of time steps covered by ``eta_per_time_step``.
        eta_param: how the step sizes are learned: ``"exp"`` (default, ``exp(log eta)``), ``"raw"``
            (as printed) or ``"projected"`` (raw, kept in ``[0, eta_max]``; :class:`~ltdrnn.cells.euler.EulerSteps`).
        eta_max: upper bound on the step sizes, kept by projection (``"projected"``: 1 unless given;
            ``"exp"``: none unless given; not with ``"raw"``).
        backend: ``"auto"`` (the fastest that runs: :func:`ltdrnn.ops.resolve`), ``"reference"`` (loop over
            :meth:`step`), ``"torch"`` (hand-written backward), ``"cpp"`` (the same, compiled; the default on
            the CPU) or ``"triton"`` (the time loop in one Triton launch per direction, any K, gate, A,
            activation, shared or per-time-step step sizes; the default for CUDA tensors when Triton is
            installed); see :mod:`ltdrnn.ops.tarnn`.

    Init (paper A.4): weights ``N(0, 0.1^2)``, ``b_beta = -3``, other biases 0, ``eta`` constant.

    Extra outputs: ``aux["beta"]`` ``(T, B, H)``, detached, the time constants of the last forward;
    :meth:`losses` ``{"omega_A": ||A + B2||_F^2, "omega_U": ||U + W2||_F^2}`` (Theorem 1's regulariser;
    the trainer weights them by gamma1, gamma2).

    Examples::

        >>> import torch
        >>> from ltdrnn.cells.tarnn import TARNN
        >>> _ = torch.manual_seed(0)
        >>> cell = TARNN(input_size=3, hidden_size=8, K=2)
        >>> x = torch.randn(20, 4, 3)                       # (T, B, d): time-major inside the package
        >>> outputs, state = cell.scan(x)                   # "auto": "cpp" where the kernels build
        >>> outputs.shape, state.shape
        (torch.Size([20, 4, 8]), torch.Size([4, 8]))
        >>> reference, _ = cell.scan(x, backend="reference")  # the plain loop over step()
        >>> torch.allclose(outputs, reference, atol=1e-6)
        True
        >>> h, state = cell(x[0], cell.init_state(4))       # one streaming step
        >>> torch.allclose(h, outputs[0], atol=1e-6)
        True
        >>> sorted(cell.losses())                           # Theorem 1's regulariser, weighted by the trainer
        ['omega_A', 'omega_U']
    """

    backends = ("reference", "torch", "cpp", "triton")
    kernel = "tarnn"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        K: int = 5,
        A: str = "identity",
        activation: str = "relu",
        gate: str = "inside",
        reading: str = "paper",
        eta: float = 0.01,
        eta_per_time_step: bool = False,
        max_length: int | None = None,
        eta_param: str = "exp",
        eta_max: float | None = None,
        backend: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        self.A_kind = check_choice("A", A, ("identity", "coupled"))
        if A == "coupled" and hidden_size % 2:
            raise ValueError(
                f"hidden_size: A='coupled' couples unit i with unit i + H/2 and needs an "
                f"even hidden_size, got {hidden_size}"
            )
        self.activation = activation
        self.phi = activation_function(activation)
        self.gate = check_choice("gate", gate, ("inside", "outside"))
        self.reading = check_choice("reading", reading, READINGS)
        self.damping = reading == "code"
        # the authors' gate-outside body, (1 - eta) z + eta (phi(..) - z - s + ..), damps z twice
        self.double_damping = reading == "code" and gate == "outside"
        self.steps = EulerSteps(K, eta, eta_per_time_step, max_length, self.factory, eta_param, eta_max)
        self.K = self.steps.steps
        h, d = hidden_size, input_size
        self.weight_B1 = nn.Parameter(torch.empty(h, d, **self.factory))
        self.weight_B2 = nn.Parameter(torch.empty(h, h, **self.factory))
        self.weight_W1 = nn.Parameter(torch.empty(h, d, **self.factory))
        self.weight_W2 = nn.Parameter(torch.empty(h, h, **self.factory))
        self.weight_U = nn.Parameter(torch.empty(h, h, **self.factory))
        self.weight_Us = nn.Parameter(torch.empty(h, h, **self.factory))
        self.weight_Wx = nn.Parameter(torch.empty(h, d, **self.factory))
        self.bias = nn.Parameter(torch.empty(h, **self.factory))
        self.bias_linear = nn.Parameter(torch.empty(h, **self.factory))
        self.bias_beta = nn.Parameter(torch.empty(h, **self.factory))
        self.register_buffer("A", self._matrix_a(), persistent=False)
        #: the operands of a streamed step, formed once per parameter change (:func:`ltdrnn.ops.tarnn.stream`)
        self.stream_cache = ParameterCache()
        self.reset_parameters()
        self._betas: list | None = None

    def _matrix_a(self) -> Tensor:
        h = self.hidden_size
        a = -torch.eye(h, **self.factory) * (2 if self.double_damping else 1)
        if self.A_kind == "coupled":
            a[: h // 2, h // 2 :] += torch.eye(h // 2, **self.factory)
        return a

    def reset_parameters(self) -> None:
        for name, p in self.named_parameters(recurse=False):
            if name.startswith("weight_"):
                nn.init.normal_(p, 0.0, 0.1)
        nn.init.zeros_(self.bias)
        nn.init.zeros_(self.bias_linear)
        nn.init.constant_(self.bias_beta, self.beta_bias_init())
        if self.reading == "theorem":  # start on Theorem 1's set A + B2 = 0, U + W2 = 0 (Omega = 0)
            with torch.no_grad():
                self.weight_B2.copy_(-self.A)
                self.weight_W2.copy_(-self.weight_U)
        self.steps.reset_parameters()

    def beta_bias_init(self) -> float:
        """``b_beta`` at init: -3 (paper A.4); the authors' code uses -3 only with the gate outside the
        Euler loop and 0 with it inside (``reading="code"``)."""
        return 0.0 if self.reading == "code" and self.gate == "inside" else -3.0

    def state_matrix(self) -> Tensor:
        """The weight of ``s_{m-1}`` in the linear term of ``G``: ``B2``, or ``B2 - I`` with
        ``reading="code"`` (the authors' code adds ``-s_{m-1}`` to G: extra damping)."""
        if not self.damping:
            return self.weight_B2
        return self.weight_B2 - torch.eye(self.hidden_size, device=self.weight_B2.device, dtype=self.weight_B2.dtype)

    # ---- the maths, literally ----------------------------------------------------------------------
    def input_weights(self) -> Tuple[Tensor, Tensor]:
        """``[B1; W1; W_x]`` ``(3H, d)`` and ``[b_lin; b; b_beta]`` ``(3H,)``."""
        return (
            torch.cat([self.weight_B1, self.weight_W1, self.weight_Wx]),
            torch.cat([self.bias_linear, self.bias, self.bias_beta]),
        )

    def precompute(self, x: Tensor) -> Tensor:
        """``(T, B, d) -> (T, B, 3H)``: ``[B1 x + b_lin, W1 x + b, W_x x + b_beta]``."""
        return F.linear(x, *self.input_weights())

    def step(self, p_t: Tensor, state: State) -> Tuple[Tensor, State]:
        """One time step: K Euler steps of ``F``, written as in the paper."""
        s, counter = split_counter(self.per_time_step, state)
        bx, wx, gx = p_t.chunk(3, dim=-1)
        beta = torch.sigmoid(F.linear(s, self.weight_Us) + gx)
        linear_u = bx + F.linear(s, self.weight_B2)  # B u + b_lin
        if self.damping:
            linear_u = linear_u - s  # the authors' code: G(z) = ... - z - s
        inside_u = wx + F.linear(s, self.weight_W2)  # W u + b
        eta = self.steps.at(counter)
        z = s
        for k in range(self.K):
            g = F.linear(z, self.A) + linear_u + self.phi(F.linear(z, self.weight_U) + inside_u)
            eta_k = eta[k] if counter is None else eta[:, k : k + 1]
            z = z + eta_k * (beta * g if self.gate == "inside" else g)
        if self.gate == "outside":
            z = (1 - beta) * s + beta * z
        if self._betas is not None:
            self._betas.append(beta.detach())
        return z, join_counter(z, None if counter is None else counter + 1)

    def scan_reference(self, x: Tensor, state: State, lengths: Tensor | None = None) -> Tuple[Tensor, State]:
        """The loop over :meth:`step`; also records ``aux["beta"]``."""
        self._betas = []
        try:
            outputs, final = loop_scan(self, self.precompute(x), state, lengths)
            self.aux["beta"] = mask_outputs(torch.stack(self._betas), lengths)
        finally:
            self._betas = None
        return outputs, final

    def losses(self) -> dict[str, Tensor]:
        """Theorem 1's regulariser terms, unweighted: ``||A + B2||_F^2`` and ``||U + W2||_F^2`` (with
        ``reading="code"``, ``B2 - I``: the whole weight of ``s_{m-1}`` in the linear term)."""
        return {
            "omega_A": (self.A + self.state_matrix()).square().sum(),
            "omega_U": (self.weight_U + self.weight_W2).square().sum(),
        }

    def flops_per_sequence(self, steps: int, skip_fraction: float | None = None) -> float:
        """Multiplications per sequence (convention of :mod:`ltdrnn.flops`), as the fused path needs
        them: per time step the input map ``3Hd``, the stacked state product ``3H^2`` (``A z_0`` and
        ``U z_0`` join ``B2 s`` and ``W2 s``; ``A`` is fixed, so it costs no multiplication),
        ``H^2`` for ``U delta`` in each further Euler step, and the elementwise products: ``eta beta
        G`` (2H) per Euler step with the gate inside; ``eta G`` (H) per Euler step plus the mix
        ``(1 - beta) s + beta z`` (2H) with it outside. Scaled by ``1 - skip_fraction`` like the
        generic rule."""
        h, d, k = self.hidden_size, self.input_size, self.K
        elementwise = 2 * k * h if self.gate == "inside" else k * h + 2 * h
        per_step = 3 * h * d + 3 * h * h + (k - 1) * h * h + elementwise
        return float(steps * per_step * (1.0 - (skip_fraction or 0.0)))

    # ---- the fast paths (ltdrnn.ops.tarnn) -----------------------------------------------------------
    def state_weights(self) -> Tensor:
        """``[B2 + A; W2 + U; U_s]`` ``(3H, H)``: everything the state meets in a time step's first
        Euler step (``z_0 = s``), for one matmul."""
        return torch.cat([self.state_matrix() + self.A, self.weight_W2 + self.weight_U, self.weight_Us])

    def scan_fast(self, x: Tensor, state: State, lengths: Tensor | None, backend: str) -> Tuple[Tensor, State]:
        """The whole sequence in ``backend``: :func:`ltdrnn.ops.tarnn.scan`."""
        return tarnn_ops.scan(self, x, state, lengths, backend)

    def stream_step(self, x_t: Tensor, state: State, backend: str) -> Tuple[Tensor, State] | None:
        """One step without autograd: :func:`ltdrnn.ops.tarnn.stream`."""
        return tarnn_ops.stream(self, x_t, state, backend)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, K={self.K}, A={self.A_kind!r}, activation={self.activation!r}, "
            f"gate={self.gate!r}, reading={self.reading!r}"
        )
