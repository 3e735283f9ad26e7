"""MIST RNN, the mixed-history NARX RNN (DiPietro, Rupprecht, Navab & Hager 2018).

Each step mixes the states ``1, 2, 4, ..., 2^(n_d-1)`` steps back with learned convex weights, resets
units of the mix with a GRU-like gate, and applies one tanh layer. Paths from ``t - tau`` to ``t``
need only about ``log2(tau)`` edges (``tau / 2^(n_d-1)`` beyond the longest delay), so gradients
from the distant past survive. See ``docs/cells/mist.md``. This module holds the cell: its parameters, init,
the step's maths and the reference step. Its fast paths (backends ``"list"``, ``"torch"``, ``"cpp"`` and
``"triton"``) and its streaming step are :mod:`ltdrnn.ops.mist`.

Doc: docs/cells/mist.md
Tests: tests/cells/test_mist.py, tests/cells/test_contract.py
Kernel: src/ltdrnn/ops/csrc/mist.cpp (CPU); src/ltdrnn/ops/mist_triton.py (GPU)
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
from torch import Tensor, nn

from ..ops import mist as mist_ops
from ..ops.common import ParameterCache
from .base import Cell, check_positive_int
from .registry import ParamCount, register

_TABLE1 = (
    "MIST paper Table 1 (pMNIST, d=1, H=139): ~42,000 for the whole model; the cell has 40,326 "
    "and the 10-class linear head 1,400 (41,726)"
)


@register(
    "mist",
    family="source",
    paper="DiPietro, Rupprecht, Navab & Hager 2018, Analyzing and Exploiting NARX Recurrent Neural "
    "Networks for Long-Term Dependencies, ICLR workshop (arXiv:1702.07805)",
    test_options={"num_delays": 3},
    variants={"one_delay": {"num_delays": 1}, "five_delays": {"num_delays": 5}},
    param_counts=(ParamCount(1, 139, 40_000, 40_700, {"num_delays": 8}, _TABLE1),),
)
class MISTCell(Cell):
    r"""Mixed-history (MIST) NARX RNN cell.

    Shapes: ``x (T, B, d)``; state ``history (B, N, H)`` with ``N = 2^(n_d-1)``, the last N states in
    time order (``history[:, -k] = h_{t-k}``); outputs ``(T, B, H)``.

    Maths (delays ``2^i``, ``i = 0..n_d-1``)::

        a_t = softmax(W_ah h_{t-1} + W_ax x_t + b_a)                  (n_d mixing weights)
        r_t = sigmoid(W_rh h_{t-1} + W_rx x_t + b_r)                  (reset gate, H)
        h_t = tanh(W_h (r_t * sum_i a_{t,i} h_{t-2^i}) + W_x x_t + b)
        h_t = 0 for t < 1 (the zero initial history)

    Equivalent to::

        for t in range(T):
            h_prev = history[:, -1]
            a = softmax(h_prev @ W_ah.T + x[t] @ W_ax.T + b_a)
            r = sigmoid(h_prev @ W_rh.T + x[t] @ W_rx.T + b_r)
            mix = sum(a[:, i:i+1] * history[:, -2**i] for i in range(n_d))
            h = tanh((r * mix) @ W_h.T + x[t] @ W_x.T + b)
            history = torch.cat([history[:, 1:], h[:, None]], 1); out[t] = h

    Args:
        input_size: d.
        hidden_size: H.
        num_delays: n_d (paper: 8, i.e. delays 1..128).
        backend: ``"reference"`` (loop over :meth:`step`, which re-forms the history tensor each step),
            ``"list"`` (autograd-recorded loop that keeps a list of past states and reads the delayed
            ones from it), ``"torch"`` (one autograd function over the whole sequence with a
            hand-written backward; weight gradients as one matrix product each), ``"cpp"`` (the
            same with each whole time loop in one compiled operator call, which also forms the input
            projections and every gradient per step; falls back to ``"torch"`` when the kernel cannot
            be built or for non-CPU/non-float32/64 tensors), ``"triton"`` (each time loop in one Triton launch;
            the default for CUDA tensors when Triton is installed; where Triton cannot run, ``"cpp"`` or
            ``"torch"``), or ``"auto"`` (:func:`ltdrnn.ops.resolve`); see :mod:`ltdrnn.ops.mist`.

    Parameters (stacked so that each step needs two matrix products):
        ``weight_hh (n_d + H, H)`` = ``[W_ah; W_rh]``; ``weight_ih (n_d + 2H, d)`` = ``[W_ax; W_rx; W_x]``;
        ``bias (n_d + 2H)`` = ``[b_a; b_r; b]``; ``weight_mix (H, H)`` = ``W_h``.
        Every weight ~ N(0, std = 1/sqrt(H)), biases 0 (paper, appendix 8.1).

    Examples::

        >>> import torch
        >>> from ltdrnn.cells.mist import MISTCell
        >>> _ = torch.manual_seed(0)
        >>> cell = MISTCell(input_size=3, hidden_size=8)    # n_d = 8 delays: 1, 2, 4, ..., 128 steps back
        >>> x = torch.randn(20, 4, 3)                       # (T, B, d)
        >>> outputs, history = cell.scan(x)
        >>> outputs.shape, history.shape                    # the state is the last 2^(n_d-1) outputs
        (torch.Size([20, 4, 8]), torch.Size([4, 128, 8]))
        >>> reference, _ = cell.scan(x, backend="reference")
        >>> torch.allclose(outputs, reference, atol=1e-6)
        True
        >>> h, history = cell(x[0], cell.init_state(4))     # one streaming step
        >>> torch.allclose(h, outputs[0], atol=1e-6)
        True
    """

    backends = ("reference", "list", "torch", "cpp", "triton")
    kernel = "mist"

    def __init__(
        self, input_size: int, hidden_size: int, num_delays: int = 8, backend: str = "auto", device=None, dtype=None
    ) -> None:
        super().__init__(input_size, hidden_size, backend, device, dtype)
        self.num_delays = check_positive_int("num_delays", num_delays)
        if num_delays > 20:
            raise ValueError(f"num_delays: expected at most 20 (a history of 2^(n_d-1) states), got {num_delays}")
        self.history_size = 2 ** (num_delays - 1)
        self.delays = tuple(2**i for i in range(num_delays))
        gates = num_delays + hidden_size
        self.weight_hh = nn.Parameter(torch.empty(gates, hidden_size, **self.factory))
        self.weight_ih = nn.Parameter(torch.empty(gates + hidden_size, input_size, **self.factory))
        self.bias = nn.Parameter(torch.empty(gates + hidden_size, **self.factory))
        self.weight_mix = nn.Parameter(torch.empty(hidden_size, hidden_size, **self.factory))
        # history index of h_{t-2^i} when history[:, -1] is h_{t-1}
        self.register_buffer(
            "delay_index", torch.tensor([self.history_size - k for k in self.delays], device=device), persistent=False
        )
        #: the operands of a streamed step, formed once per parameter change (:func:`ltdrnn.ops.mist.stream`)
        self.stream_cache = ParameterCache()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every weight matrix N(0, std 1/sqrt(H)), every bias 0 (paper, appendix 8.1)."""
        std = 1.0 / math.sqrt(self.hidden_size)
        for weight in (self.weight_hh, self.weight_ih, self.weight_mix):
            nn.init.normal_(weight, 0.0, std)
        nn.init.zeros_(self.bias)

    # ---- the contract ---------------------------------------------------------------------------
    def init_state(self, batch_size: int, device=None, dtype=None) -> Tensor:
        """Zero history ``(B, N, H)``: all states before the first step are 0."""
        return torch.zeros(
            batch_size,
            self.history_size,
            self.hidden_size,
            device=device if device is not None else self.bias.device,
            dtype=dtype if dtype is not None else self.bias.dtype,
        )

    def precompute(self, x: Tensor) -> Tensor:
        """Input parts of all three pre-activations: ``(T, B, d) -> (T, B, n_d + 2H)``."""
        return nn.functional.linear(x, self.weight_ih, self.bias)

    def step(self, p_t: Tensor, history: Tensor) -> Tuple[Tensor, Tensor]:
        """``p_t (B, n_d + 2H)``, ``history (B, N, H)`` -> ``(h_t (B, H), new history)``."""
        split = self.num_delays + self.hidden_size
        h = self.update(p_t[:, :split], p_t[:, split:], history[:, -1], history.index_select(1, self.delay_index))
        return h, torch.cat([history[:, 1:], h.unsqueeze(1)], 1)

    def update(self, gates_in: Tensor, state_in: Tensor, h_prev: Tensor, delayed: Tensor) -> Tensor:
        """``h_t`` from the input parts ``gates_in (B, n_d + H)`` (a, r) and ``state_in (B, H)``,
        ``h_{t-1} (B, H)`` and ``delayed (B, n_d, H)`` (the states 1, 2, 4, ... steps back): the step's maths,
        which :meth:`step` and the ``"list"`` backend share."""
        nd = self.num_delays
        gates = torch.addmm(gates_in, h_prev, self.weight_hh.t())
        mix_weights = torch.softmax(gates[:, :nd], dim=-1)
        reset = torch.sigmoid(gates[:, nd:])
        mixed = torch.bmm(mix_weights.unsqueeze(1), delayed).squeeze(1)
        return torch.tanh(torch.addmm(state_in, reset * mixed, self.weight_mix.t()))

    # ---- the fast paths (ltdrnn.ops.mist) ------------------------------------------------------------
    def own_parameters(self) -> tuple:
        """The tensors the cached streaming operands derive from."""
        return tuple(self._parameters.values())

    def scan_fast(self, x: Tensor, state: Tensor, lengths: Tensor | None, backend: str) -> Tuple[Tensor, Tensor]:
        """The whole sequence in ``backend``: :func:`ltdrnn.ops.mist.scan`."""
        return mist_ops.scan(self, x, state, lengths, backend)

    def stream_step(self, x_t: Tensor, state: Tensor, backend: str) -> Tuple[Tensor, Tensor] | None:
        """One step without autograd: :func:`ltdrnn.ops.mist.stream`."""
        return mist_ops.stream(self, x_t, state, backend)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, num_delays={self.num_delays}"
