"""RNNs with orthogonal, unitary or spectrally constrained recurrent matrices and the modReLU activation.

``exprnn`` (Lezcano-Casado & Martinez-Rubio 2019): ``B = exp(A)`` with ``A`` skew-symmetric, through
``torch.nn.utils.parametrizations.orthogonal`` with the matrix-exponential map.
``nnrnn`` (Kerg et al. 2019): ``V = P (Lambda + T) P^T``, a real Schur form with an orthogonal ``P``.
``urnn`` (Arjovsky, Shah & Bengio 2016): a complex unitary product of diagonal, reflection,
permutation and Fourier matrices; its complex state is carried as real ``[Re h; Im h]``.

Shapes follow the legend in :mod:`ltdrnn.cells.base`.

Doc: docs/cells/orthogonal.md
Tests: tests/cells/test_baselines.py, tests/cells/test_contract.py
Kernel: none (PyTorch operations only)
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrizations

from .base import Cell, check_choice
from .registry import ParamCount, register

#: added to |z| before dividing by it in the complex modReLU, so z = 0 has a finite gradient
_MODULUS_EPS = 1e-6


def modrelu(z: Tensor, bias: Tensor) -> Tensor:
    """Real modReLU: ``sign(z) * relu(|z| + b)``; ``z (..., H)``, ``b (H,)``."""
    return torch.sign(z) * torch.relu(z.abs() + bias)


def skew_init(size: int, scheme: str, dtype=None, device=None) -> Tensor:
    """A skew-symmetric ``(size, size)`` matrix whose exponential is the paper's initial orthogonal matrix.

    ``"henaff"``: block diagonal of 2x2 blocks ``[[0, s], [-s, 0]]``, ``s ~ U(-pi, pi)`` (Henaff et al.
    2016); ``"cayley"``: the same blocks with ``s = -sqrt((1 - cos u) / (1 + cos u))``,
    ``u ~ U(0, pi/2)`` (Helfrich et al. 2018); ``"identity"``: zero (``exp(0) = I``). With an odd
    size the last unit has no partner and its row and column stay zero.
    """
    check_choice("init", scheme, ("henaff", "cayley", "identity"))
    a = torch.zeros(size, size, dtype=dtype, device=device)
    blocks = size // 2
    if scheme == "identity" or blocks == 0:
        return a
    if scheme == "henaff":
        s = torch.empty(blocks, dtype=dtype, device=device).uniform_(-math.pi, math.pi)
    else:
        u = torch.empty(blocks, dtype=dtype, device=device).uniform_(0.0, math.pi / 2)
        s = -torch.sqrt((1 - torch.cos(u)) / (1 + torch.cos(u)))
    index = torch.arange(blocks, device=device) * 2
    a[index, index + 1] = s
    a[index + 1, index] = -s
    return a


class ExpOrthogonal(nn.Module):
    """An orthogonal ``(H, H)`` matrix ``exp(A)``, ``A`` skew-symmetric, learned through ``A``.

    Built on ``torch.nn.utils.parametrizations.orthogonal(orthogonal_map="matrix_exp")``. That
    parametrization computes ``base @ exp(tril(X) - tril(X)^T)``; we fix ``base = I`` and store the
    lower triangle of the initial ``A`` in ``X``, which is exactly expRNN's ``B = exp(A)`` with
    gradients taken with respect to ``A``. :meth:`rebase_` moves ``base`` to the current matrix
    (the "dynamic trivialisation" of Lezcano-Casado 2019, NeurIPS), which the paper's static expRNN
    does not do.
    """

    def __init__(self, size: int, init: str = "henaff", device=None, dtype=None) -> None:
        super().__init__()
        self.init = check_choice("init", init, ("henaff", "cayley", "identity"))
        self.linear = nn.Linear(size, size, bias=False, device=device, dtype=dtype)
        parametrizations.orthogonal(self.linear, "weight", orthogonal_map="matrix_exp")
        self.reset_parameters()

    @property
    def _parametrization(self):
        return self.linear.parametrizations.weight

    def reset_parameters(self) -> None:
        original = self._parametrization.original
        with torch.no_grad():
            skew = skew_init(original.shape[0], self.init, original.dtype, original.device)
            original.copy_(skew.tril())
            self._parametrization[0].base = torch.eye(original.shape[0], dtype=original.dtype, device=original.device)

    def rebase_(self) -> None:
        """Make the current matrix the new base and reset ``A`` to zero (same matrix afterwards)."""
        with torch.no_grad():
            current = self.linear.weight.detach().clone()
            self._parametrization[0].base = current
            self._parametrization.original.zero_()

    def forward(self) -> Tensor:
        return self.linear.weight


class ModReluRNN(Cell):
    """``h_t = modrelu(M h_{t-1} + W x_t, b)`` with the recurrent matrix ``M`` of :meth:`recurrent_matrix`.

    Subclasses create ``weight_ih (H, I)``, ``bias (H,)`` and ``init`` and build ``M`` from their own
    parameters; ``M`` is formed once per :meth:`precompute` call, not once per step.
    """

    def recurrent_matrix(self) -> Tensor:
        """``M``, ``(H, H)``: each subclass builds it from its own parameters."""
        raise NotImplementedError

    def precompute(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        """``-> (W x_t (T, B, H), M^T broadcast over T)``."""
        m_t = self.recurrent_matrix().T
        return x @ self.weight_ih.T, m_t.expand(x.shape[0], *m_t.shape)

    def step(self, p_t: Tuple[Tensor, Tensor], state: Tensor) -> Tuple[Tensor, Tensor]:
        p, m_t = p_t
        h = modrelu(p + state @ m_t, self.bias)
        return h, h

    def extra_repr(self) -> str:
        return super().extra_repr() + f", init={self.init!r}"


@register(
    "exprnn",
    family="baseline",
    paper="Lezcano-Casado & Martinez-Rubio 2019, Cheap Orthogonal Constraints in Neural Networks: "
    "A Simple Parametrization of the Orthogonal and Unitary Group (ICML)",
    variants={"cayley": {"init": "cayley"}},
)
class ExpRNN(ModReluRNN):
    """expRNN: an orthogonal recurrent matrix ``B = exp(A)`` and the modReLU activation.

    State ``h (B, H)``::

        h_t = modrelu(B h_{t-1} + W x_t, b),   modrelu(z, b) = sign(z) * relu(|z| + b)

    Args:
        init: initial ``A``: ``"henaff"`` (default), ``"cayley"`` or ``"identity"`` (see :func:`skew_init`).

    Init (the paper's code): ``W`` Kaiming-normal (fan-in, relu gain), ``b ~ U(-0.01, 0.01)``.
    The input map has no bias (the modReLU bias plays that role), as in the paper.
    """

    def __init__(
        self, input_size: int, hidden_size: int, init: str = "henaff", backend: str = "auto", device=None, dtype=None
    ) -> None:
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        self.init = init
        self.weight_ih = nn.Parameter(torch.empty(hidden_size, input_size, **self.factory))
        self.recurrent = ExpOrthogonal(hidden_size, init, **self.factory)
        self.bias = nn.Parameter(torch.empty(hidden_size, **self.factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.kaiming_normal_(self.weight_ih, nonlinearity="relu")
        self.recurrent.reset_parameters()
        nn.init.uniform_(self.bias, -0.01, 0.01)

    def recurrent_matrix(self) -> Tensor:
        """The orthogonal ``B``, ``(H, H)``."""
        return self.recurrent()


@register(
    "nnrnn",
    family="baseline",
    paper="Kerg et al. 2019, Non-normal Recurrent Neural Network (nnRNN): learning long time "
    "dependencies while improving expressivity with transient dynamics (NeurIPS)",
)
class NonNormalRNN(ModReluRNN):
    """nnRNN: a recurrent matrix in real Schur form, ``V = P (Lambda + T) P^T``.

    State ``h (B, H)``, ``H`` even::

        Lambda = blockdiag(gamma_k [[cos th_k, -sin th_k], [sin th_k, cos th_k]]),  k = 1..H/2
        T      = strictly block-upper-triangular (entries above the 2x2 diagonal blocks), learned
        P      = exp(A), A skew-symmetric (orthogonal, learned like expRNN's matrix)
        h_t    = modrelu(V h_{t-1} + U x_t, b)

    ``Lambda`` carries the eigenvalues ``gamma_k exp(+-i th_k)``, ``T`` the non-normal part. The paper
    penalises ``gamma_k`` away from 1; :meth:`losses` returns that term unweighted as
    ``"eigenvalue_radius"`` (``sum_k (gamma_k - 1)^2``) for the trainer to weight (the paper's delta).

    Args:
        init: initial ``A`` of ``P`` (``"henaff"``, ``"cayley"``, ``"identity"``).

    Init: ``th ~ U(0, 2 pi)``, ``gamma = 1``, ``T = 0`` (so ``V`` starts orthogonal), ``U`` Glorot
    normal, ``b ~ U(-0.01, 0.01)``.
    """

    def __init__(
        self, input_size: int, hidden_size: int, init: str = "henaff", backend: str = "auto", device=None, dtype=None
    ) -> None:
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        if hidden_size % 2:
            raise ValueError(f"hidden_size: nnrnn needs an even size (2x2 Schur blocks), got {hidden_size}")
        self.init = init
        blocks = hidden_size // 2
        self.weight_ih = nn.Parameter(torch.empty(hidden_size, input_size, **self.factory))
        self.basis = ExpOrthogonal(hidden_size, init, **self.factory)
        self.non_normal = nn.Parameter(torch.empty(hidden_size, hidden_size, **self.factory))
        self.angle = nn.Parameter(torch.empty(blocks, **self.factory))
        self.radius = nn.Parameter(torch.empty(blocks, **self.factory))
        self.bias = nn.Parameter(torch.empty(hidden_size, **self.factory))
        block = torch.arange(hidden_size) // 2
        self.register_buffer(
            "upper_mask",
            (block.unsqueeze(1) < block.unsqueeze(0)).to(dtype=self.non_normal.dtype, device=self.non_normal.device),
            persistent=False,
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_normal_(self.weight_ih)
        self.basis.reset_parameters()
        nn.init.zeros_(self.non_normal)
        nn.init.uniform_(self.angle, 0.0, 2 * math.pi)
        nn.init.ones_(self.radius)
        nn.init.uniform_(self.bias, -0.01, 0.01)

    def schur_form(self) -> Tensor:
        """``Lambda + T``, ``(H, H)``."""
        cos, sin = self.radius * torch.cos(self.angle), self.radius * torch.sin(self.angle)
        blocks = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)
        return torch.block_diag(*blocks.unbind(0)) + self.non_normal * self.upper_mask

    def recurrent_matrix(self) -> Tensor:
        """``V = P (Lambda + T) P^T``, ``(H, H)``."""
        p = self.basis()
        return p @ self.schur_form() @ p.T

    def losses(self) -> dict[str, Tensor]:
        return {"eigenvalue_radius": ((self.radius - 1) ** 2).sum()}


@register(
    "urnn",
    family="baseline",
    paper="Arjovsky, Shah & Bengio 2016, Unitary Evolution Recurrent Neural Networks (ICML)",
    param_counts=(
        ParamCount(
            2,
            256,
            1_250,
            2_250,
            source="SRNN paper Table 5 (adding, d=2, 128 complex units = hidden_size "
            "256 here): 2k incl. a 257-parameter linear head",
        ),
    ),
)
class UnitaryRNN(Cell):
    """uRNN: ``h_t = modrelu(W h_{t-1} + V x_t, b)`` in ``C^N`` with a unitary ``W``.

    ``W = D_3 R_2 F^{-1} D_2 Pi R_1 F D_1``: ``D_k = diag(exp(i th_k))``, ``R_k = I - 2 v_k v_k^* / |v_k|^2``
    complex reflections, ``Pi`` a fixed random permutation, ``F`` the unitary DFT. The complex
    modReLU is ``z / |z| * relu(|z| + b)``.

    Real representation: ``hidden_size = H = 2N`` real numbers per step, the state and output are
    ``[Re h; Im h]`` of shape ``(B, 2N)`` (so ``H`` must be even and a head reads both parts, as in the
    paper). ``V`` is stored as the real ``(2N, d)`` matrix ``[Re V; Im V]``.

    Init (the paper): ``th ~ U(-pi, pi)``, reflection vectors ``U(-1, 1)`` (real and imaginary parts),
    ``V`` Glorot-uniform ``U(+-sqrt(6 / (d + 2N)))``, ``b = 0``. Deviation: the paper learns the initial
    state; here it is zero like every cell's (pass a state to ``scan`` to use another).
    """

    def __init__(self, input_size: int, hidden_size: int, backend: str = "auto", device=None, dtype=None) -> None:
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        if hidden_size % 2:
            raise ValueError(f"hidden_size: urnn needs an even size ([Re h; Im h]), got {hidden_size}")
        n = self.complex_size = hidden_size // 2
        self.weight_ih = nn.Parameter(torch.empty(2 * n, input_size, **self.factory))
        self.diagonal = nn.Parameter(torch.empty(3, n, **self.factory))
        self.reflection = nn.Parameter(torch.empty(2, 2, n, **self.factory))
        self.bias = nn.Parameter(torch.empty(n, **self.factory))
        self.register_buffer("permutation", torch.empty(n, dtype=torch.long, device=device))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        n = self.complex_size
        nn.init.uniform_(self.diagonal, -math.pi, math.pi)
        nn.init.uniform_(self.reflection, -1.0, 1.0)
        bound = math.sqrt(6.0 / (self.input_size + 2 * n))
        nn.init.uniform_(self.weight_ih, -bound, bound)
        nn.init.zeros_(self.bias)
        self.permutation.copy_(torch.randperm(n, device=self.permutation.device))

    def precompute(self, x: Tensor) -> Tensor:
        """``(T, B, d) -> (T, B, 2N)``: ``[Re V x_t; Im V x_t]``."""
        return x @ self.weight_ih.T

    def unitary(self, z: Tensor) -> Tensor:
        """``W z`` for complex ``z (B, N)``."""
        phases = torch.polar(torch.ones_like(self.diagonal), self.diagonal)
        v = torch.complex(self.reflection[:, 0], self.reflection[:, 1])
        z = z * phases[0]
        z = torch.fft.fft(z, norm="ortho")
        z = _reflect(z, v[0])
        z = z[:, self.permutation] * phases[1]
        z = torch.fft.ifft(z, norm="ortho")
        z = _reflect(z, v[1])
        return z * phases[2]

    def step(self, p_t: Tensor, state: Tensor) -> Tuple[Tensor, Tensor]:
        n = self.complex_size
        z = self.unitary(torch.complex(state[:, :n], state[:, n:]))
        z = z + torch.complex(p_t[:, :n], p_t[:, n:])
        modulus = z.abs()
        z = z * (torch.relu(modulus + self.bias) / (modulus + _MODULUS_EPS))
        h = torch.cat([z.real, z.imag], dim=-1)
        return h, h


def _reflect(z: Tensor, v: Tensor) -> Tensor:
    """``(I - 2 v v^* / |v|^2) z`` for ``z (B, N)`` complex, ``v (N,)`` complex."""
    coefficient = (z * v.conj()).sum(-1, keepdim=True) * (2 / (v.abs() ** 2).sum())
    return z - coefficient * v
