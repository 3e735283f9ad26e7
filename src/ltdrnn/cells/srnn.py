"""SRNN, the shuffling recurrent neural network (Rotman & Wolf, AAAI 2021).

The state is shifted by one position each step and the output of a state-free input network is added:
``h_t = act(roll(h_{t-1}, 1) + beta(x_t))``. Since ``beta`` does not see the state, it runs for every
step at once in ``precompute``; only a shift, an add and ``act`` remain sequential. See
``docs/cells/srnn.md`` for the equations, defaults, paper settings and measurements. This module holds
the cell: its parameters, init, ``beta`` and the reference step. Its fast paths (backends ``"torch"``,
``"cpp"``, ``"closed_form"`` and ``"triton"``) and its streaming step are :mod:`ltdrnn.ops.srnn`.

Doc: docs/cells/srnn.md
Tests: tests/cells/test_srnn.py, tests/cells/test_contract.py
Kernel: src/ltdrnn/ops/csrc/srnn.cpp (CPU); src/ltdrnn/ops/srnn_triton.py (GPU)
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor, nn

from ..ops import srnn as srnn_ops
from ..ops.common import ParameterCache
from .base import Cell, check_choice, check_nonnegative_int, check_positive_int
from .registry import ParamCount, register

_TABLE5 = "SRNN paper Table 5 (adding, d=2, one f_r layer of 32): 5k"
_PMNIST = (
    "SRNN paper pMNIST (d=1, three f_r layers of 32): 50k for the whole model; the cell has "
    "38,016 and the 10-class linear head 10,250 (48,266)"
)


@register(
    "srnn",
    family="source",
    paper="Rotman & Wolf 2021, Shuffling Recurrent Neural Networks, AAAI",
    test_options={"hyper_size": 5},
    variants={
        "tanh": {"activation": "tanh"},
        "no_gate": {"gate": False},
        "three_layers": {"fr_layers": 3},
        "affine_fr": {"fr_layers": 0},
        "tanh_no_gate": {"activation": "tanh", "gate": False},
    },
    param_counts=(
        ParamCount(2, 128, 4_600, 5_000, {"hyper_size": 32, "fr_layers": 1}, _TABLE5),
        ParamCount(1, 1024, 37_500, 38_500, {"hyper_size": 32, "fr_layers": 3}, _PMNIST),
    ),
)
class SRNNCell(Cell):
    r"""Shuffling RNN cell.

    Shapes: ``x (T, B, d)``, state ``h (B, H)``, outputs ``(T, B, H)``.

    Maths::

        beta(x) = f_r(x) * sigmoid(W_g x + b_g)          (gate=False: beta(x) = f_r(x))
        f_r(x)  = A_L relu(... relu(A_1 x + a_1) ...) + a_L     (fr_layers hidden layers of hyper_size)
        h_t     = act(roll(h_{t-1}, 1) + beta(x_t))       roll(h, 1)[i] = h[i - 1 mod H]

    Equivalent to::

        for t in range(T):
            h = act(torch.roll(h, 1, dims=-1) + beta(x[t])); out[t] = h

    Args:
        input_size: d.
        hidden_size: H.
        hyper_size: width of the hidden layers of ``f_r`` (paper: 8 for add/copy, 32 for pMNIST/TIMIT).
        fr_layers: number of hidden layers of ``f_r`` (paper: 1 or 3); 0 makes ``f_r`` one affine map.
        gate: multiply ``f_r(x)`` by ``sigmoid(W_g x + b_g)`` (the paper's self-gating; its ablation
            turns it off).
        activation: ``"relu"`` (the paper's experiments) or ``"tanh"``.
        backend: ``"reference"`` (loop over :meth:`step`), ``"torch"`` (whole-sequence autograd function
            with a hand-written backward, pure PyTorch), ``"cpp"`` (the same in a compiled loop;
            falls back to ``"torch"`` when it cannot be built or for non-CPU/non-float32/64 tensors;
            with ``input_size=1`` and ``fr_layers=1``, ``f_r`` is read from a table of its linear
            pieces), ``"closed_form"`` (relu only: cumsum/cummin, no time loop), ``"triton"`` (the
            recurrence in one Triton launch per direction; the default for CUDA tensors when Triton is
            installed; runs ``"cpp"`` or ``"torch"`` where Triton cannot run), or ``"auto"``
            (:func:`ltdrnn.ops.resolve`); see :mod:`ltdrnn.ops.srnn`.

    Parameters are initialised like ``torch.nn.Linear`` (the authors' code). The shift ``W_p`` is
    fixed and has no parameters.

    Examples::

        >>> import torch
        >>> from ltdrnn.cells.srnn import SRNNCell
        >>> _ = torch.manual_seed(0)
        >>> cell = SRNNCell(input_size=3, hidden_size=8)
        >>> x = torch.randn(20, 4, 3)                       # (T, B, d)
        >>> outputs, state = cell.scan(x)                   # "auto": "cpp" where the kernels build
        >>> outputs.shape, state.shape
        (torch.Size([20, 4, 8]), torch.Size([4, 8]))
        >>> reference, _ = cell.scan(x, backend="reference")  # the plain loop over step()
        >>> torch.allclose(outputs, reference, atol=1e-6)
        True
        >>> closed, _ = cell.scan(x, backend="closed_form")  # relu: no time loop at all
        >>> torch.allclose(closed, reference, atol=1e-5)
        True
    """

    backends = ("reference", "torch", "cpp", "closed_form", "triton")
    kernel = "srnn"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        hyper_size: int = 32,
        fr_layers: int = 1,
        gate: bool = True,
        activation: str = "relu",
        backend: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        self.activation = check_choice("activation", activation, ("relu", "tanh"))
        if activation != "relu":  # the closed form exists for relu only
            self.backends = ("reference", "torch", "cpp", "triton")
        super().__init__(input_size, hidden_size, backend, device, dtype)
        self.hyper_size = check_positive_int("hyper_size", hyper_size)
        self.fr_layers = check_nonnegative_int("fr_layers", fr_layers)
        if not isinstance(gate, bool):
            raise TypeError(f"gate: expected a bool, got {gate!r}")
        self.gate = gate
        widths = [input_size] + [hyper_size] * fr_layers
        self.fr_hidden = nn.ModuleList(nn.Linear(a, b, **self.factory) for a, b in zip(widths, widths[1:]))
        self.fr_out = nn.Linear(widths[-1], hidden_size, **self.factory)
        self.gate_layer = nn.Linear(input_size, hidden_size, **self.factory) if gate else None
        self._act = torch.relu if activation == "relu" else torch.tanh
        #: the operands of a streamed step, formed once per parameter change (:func:`ltdrnn.ops.srnn.stream`)
        self.stream_cache = ParameterCache()

    def reset_parameters(self) -> None:
        """PyTorch's ``nn.Linear`` default for every layer of ``beta``."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                module.reset_parameters()

    # ---- the contract ---------------------------------------------------------------------------
    def precompute(self, x: Tensor) -> Tensor:
        """``beta(x)`` for every step: ``(T, B, d) -> (T, B, H)``."""
        beta = self.fr_out(self._fr_features(x))
        if self.gate_layer is not None:
            beta = beta * torch.sigmoid(self.gate_layer(x))
        return beta

    def step(self, beta_t: Tensor, h: Tensor) -> Tuple[Tensor, Tensor]:
        """``beta_t (B, H)``, ``h (B, H)`` -> ``(h_t, h_t)``."""
        h = self._act(torch.roll(h, 1, dims=-1) + beta_t)
        return h, h

    # ---- the fast paths (ltdrnn.ops.srnn) ------------------------------------------------------------
    def own_parameters(self) -> list:
        """The tensors the cached streaming operands derive from: the weights and biases of beta's layers,
        in order (f_r's hidden layers, f_r's last layer, the gate). Read from the module dicts directly:
        ``parameters()`` costs several us per call."""
        modules = self._modules
        layers = [*modules["fr_hidden"]._modules.values(), modules["fr_out"]]
        if modules.get("gate_layer") is not None:
            layers.append(modules["gate_layer"])
        return [p for layer in layers for p in (layer._parameters["weight"], layer._parameters["bias"])]

    def scan_fast(self, x: Tensor, state: Tensor, lengths: Tensor | None, backend: str) -> Tuple[Tensor, Tensor]:
        """The whole sequence in ``backend``: :func:`ltdrnn.ops.srnn.scan`."""
        return srnn_ops.scan(self, x, state, lengths, backend)

    def stream_step(self, x_t: Tensor, state: Tensor, backend: str) -> Tuple[Tensor, Tensor] | None:
        """One step without autograd: :func:`ltdrnn.ops.srnn.stream`."""
        return srnn_ops.stream(self, x_t, state, backend)

    # ---- internals ------------------------------------------------------------------------------
    def _fr_features(self, x: Tensor) -> Tensor:
        """The last hidden activation of ``f_r`` (``x`` itself when ``fr_layers=0``)."""
        for layer in self.fr_hidden:
            x = torch.relu(layer(x))
        return x

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, hyper_size={self.hyper_size}, fr_layers={self.fr_layers}, "
            f"gate={self.gate}, activation={self.activation!r}"
        )
