"""The torch.nn recurrent cells (LSTM, GRU, Elman RNN) and UGRNN, as ltdrnn cells.

``lstm``, ``gru``, ``rnn_tanh`` and ``rnn_relu`` follow ``torch.nn.LSTM`` / ``GRU`` / ``RNN`` exactly:
same equations, same parameter names and layouts (``weight_ih``, ``weight_hh``, ``bias_ih``,
``bias_hh``, gates stacked in torch's order), same initialisation. Their default backend,
``"torch"``, calls torch's own fused recurrent kernel (``torch._VF.lstm`` and friends, the op
``nn.LSTM.forward`` calls), so a layer whose weights were copied from a torch module gives the same
numbers as that module. ``"torch_packed"`` differs only for sequences with ``lengths``, where it uses
torch's (slower) PackedSequence kernel. ``"reference"`` is a plain loop over :meth:`step`.

Shapes follow the legend in :mod:`ltdrnn.cells.base`.

Doc: docs/cells/gated.md
Tests: tests/cells/test_gated.py, tests/cells/test_contract.py
Kernel: none of ours (the "torch" backends of gru, lstm, rnn_relu and rnn_tanh call torch's RNN kernels, torch._VF)
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from ..ops.common import mask_outputs
from .base import Cell, State, check_finite_float, init_uniform, select_state
from .registry import ParamCount, register

_SRNN_T5 = "SRNN paper Table 5 (adding, d=2, H=128), incl. a {head}-parameter linear head"
_TARNN_T1 = "TARNN paper Table 1 ({task}, d={d}, H=128), incl. a 10-class linear head (1290)"
_MIST_T1 = "MIST paper Table 1 (pMNIST, d=1), approx. 42,000 incl. a 10-class linear head"


class TorchRNNCell(Cell):
    """Shared body of the four torch.nn cells: parameters in torch's layout and the fused path.

    Parameters (``G`` gates: LSTM 4, GRU 3, RNN 1):
        weight_ih: ``(G*H, d)``, weight_hh: ``(G*H, H)``, bias_ih, bias_hh: ``(G*H,)`` (if ``bias``).

    Init (torch.nn): every parameter ``U(-1/sqrt(H), 1/sqrt(H))``.
    """

    backends = ("reference", "torch", "torch_packed")
    gates = 1
    #: the name of the torch fused op in ``torch._VF``
    fused_op = ""

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, backend: str = "auto", device=None, dtype=None
    ) -> None:
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        if not isinstance(bias, bool):
            raise TypeError(f"bias: expected a bool, got {bias!r}")
        self.bias = bias
        rows = self.gates * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(rows, input_size, **self.factory))
        self.weight_hh = nn.Parameter(torch.empty(rows, hidden_size, **self.factory))
        if bias:
            self.bias_ih = nn.Parameter(torch.empty(rows, **self.factory))
            self.bias_hh = nn.Parameter(torch.empty(rows, **self.factory))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init_uniform(self.parameters(), 1.0 / math.sqrt(self.hidden_size))

    def flat_weights(self) -> list:
        """The weights in the order torch's fused kernels take them."""
        if self.bias:
            return [self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh]
        return [self.weight_ih, self.weight_hh]

    def precompute(self, x: Tensor) -> Tensor:
        """``(T, B, d) -> (T, B, G*H)``: ``W_ih x_t + b_ih``."""
        return F.linear(x, self.weight_ih, self.bias_ih)

    def hidden_projection(self, h: Tensor) -> Tensor:
        """``W_hh h + b_hh``, ``(B, H) -> (B, G*H)``."""
        return F.linear(h, self.weight_hh, self.bias_hh)

    # ---- fused paths ---------------------------------------------------------------------------
    def scan_fast(self, x: Tensor, state: State, lengths: Tensor | None, backend: str) -> Tuple[Tensor, State]:
        """Torch's fused kernel over the whole sequence.

        With ``lengths``, ``"torch"`` runs the kernel once per stretch between consecutive distinct
        lengths, carrying the state and keeping each sequence's state at its own end (same arithmetic
        as one unpacked call; torch's PackedSequence kernel is much slower on CPU, measured in
        docs/cells/gated.md). ``"torch_packed"`` packs the batch and runs torch's
        packed kernel, bit-identical to ``nn.LSTM`` on a PackedSequence.
        """
        if lengths is None:
            return self._fused(x, state)
        if backend == "torch_packed":
            return self._fused_packed(x, state, lengths)
        return self._fused_segments(x, state, lengths)

    def _fused(self, x: Tensor, state: State) -> Tuple[Tensor, State]:
        op = getattr(torch._VF, self.fused_op)
        result = op(x, self._to_torch_state(state), self.flat_weights(), self.bias, 1, 0.0, self.training, False, False)
        return result[0], self._from_torch_state(result[1:])

    def _fused_segments(self, x: Tensor, state: State, lengths: Tensor) -> Tuple[Tensor, State]:
        outputs, final, start = [], state, 0
        for end in sorted(set(lengths.tolist())):
            out, state = self._fused(x[start:end], state)
            outputs.append(out)
            final = select_state(lengths == end, state, final)
            start = end
        if start < x.shape[0]:  # every sequence has ended: the remaining outputs are zero
            outputs.append(x.new_zeros(x.shape[0] - start, x.shape[1], self.hidden_size))
        return mask_outputs(torch.cat(outputs), lengths), final

    def _fused_packed(self, x: Tensor, state: State, lengths: Tensor) -> Tuple[Tensor, State]:
        op = getattr(torch._VF, self.fused_op)
        packed = pack_padded_sequence(x, lengths.cpu(), enforce_sorted=False)
        hx = self._permute(self._to_torch_state(state), packed.sorted_indices)
        result = op(packed.data, packed.batch_sizes, hx, self.flat_weights(), self.bias, 1, 0.0, self.training, False)
        out = PackedSequence(result[0], packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices)
        outputs, _ = pad_packed_sequence(out, total_length=x.shape[0])
        return outputs, self._from_torch_state(self._permute(result[1:], packed.unsorted_indices))

    def _to_torch_state(self, state: State):
        return state.unsqueeze(0)

    def _from_torch_state(self, hidden) -> State:
        return hidden[0].squeeze(0)

    @staticmethod
    def _permute(hx, order: Tensor):
        if isinstance(hx, Tensor):
            return hx.index_select(1, order)
        return tuple(h.index_select(1, order) for h in hx)

    def extra_repr(self) -> str:
        return super().extra_repr() + ("" if self.bias else ", bias=False")


@register(
    "lstm",
    family="baseline",
    paper="Hochreiter & Schmidhuber 1997, Long short-term memory; torch.nn.LSTM formulation",
    variants={"no_bias": {"bias": False}, "forget_bias": {"forget_bias": 1.0}},
    param_counts=(
        ParamCount(2, 128, 66_500, 67_900, source=_SRNN_T5.format(head=129) + ": 67k"),
        ParamCount(1, 128, 66_500, 67_500, source=_TARNN_T1.format(task="pixel MNIST", d=1) + ": 68K"),
        ParamCount(28, 128, 80_200, 81_200, source=_TARNN_T1.format(task="noisy MNIST", d=28) + ": 82K"),
        ParamCount(1, 100, 40_500, 41_500, source=_MIST_T1),
        ParamCount(
            256,
            256,
            522_000,
            527_000,
            source="TARNN paper Table 2 (PTB, embedding 256, H=256, RNN parameters only): 524K",
        ),
    ),
)
class LSTM(TorchRNNCell):
    """Long short-term memory, exactly as ``torch.nn.LSTM`` (one layer, one direction).

    State ``(h, c)``, each ``(B, H)``; output ``h_t``. Gates stacked in the order ``i, f, g, o``::

        i, f, g, o = split(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)
        c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)
        h_t = sigmoid(o) * tanh(c_t)

    Args:
        input_size: d.  hidden_size: H.  bias: use ``b_ih`` and ``b_hh`` (torch's ``bias``).
        forget_bias: if set, the forget-gate biases start at ``b_ih[f] = forget_bias``, ``b_hh[f] = 0``
            instead of torch's uniform draw (Gers et al. 2000; MIST's LSTM baseline uses 1).
        backend: ``"torch"`` (torch's kernel, the default), ``"torch_packed"`` (torch's PackedSequence kernel
            when ``lengths`` are given) or ``"reference"`` (loop over :meth:`step`).
    """

    gates = 4
    fused_op = "lstm"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        forget_bias: float | None = None,
        backend: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        self.forget_bias = None if forget_bias is None else check_finite_float("forget_bias", forget_bias)
        if forget_bias is not None and not bias:
            raise ValueError("forget_bias: needs bias=True (there is no bias to set)")
        super().__init__(input_size, hidden_size, bias=bias, backend=backend, device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if self.forget_bias is not None:
            forget = slice(self.hidden_size, 2 * self.hidden_size)
            with torch.no_grad():
                self.bias_ih[forget] = self.forget_bias
                self.bias_hh[forget] = 0.0

    def extra_repr(self) -> str:
        extra = "" if self.forget_bias is None else f", forget_bias={self.forget_bias}"
        return super().extra_repr() + extra

    def init_state(self, batch_size: int, device=None, dtype=None) -> State:
        h = super().init_state(batch_size, device, dtype)
        return h, torch.zeros_like(h)

    def step(self, p_t: Tensor, state: State) -> Tuple[Tensor, State]:
        h, c = state
        i, f, g, o = (p_t + self.hidden_projection(h)).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, (h, c)

    def _to_torch_state(self, state: State):
        return tuple(s.unsqueeze(0) for s in state)

    def _from_torch_state(self, hidden) -> State:
        return tuple(s.squeeze(0) for s in hidden)


@register(
    "gru",
    family="baseline",
    paper="Cho et al. 2014, Learning phrase representations using RNN encoder-decoder; torch.nn.GRU formulation",
    variants={"no_bias": {"bias": False}},
    param_counts=(ParamCount(2, 128, 50_000, 51_000, source=_SRNN_T5.format(head=129) + ": 50k"),),
)
class GRU(TorchRNNCell):
    """Gated recurrent unit, exactly as ``torch.nn.GRU`` (reset gate applied after ``W_hn``).

    State ``h (B, H)``. Gates stacked in the order ``r, z, n``::

        a_r, a_z, a_n = split(W_ih x_t + b_ih);   u_r, u_z, u_n = split(W_hh h_{t-1} + b_hh)
        r = sigmoid(a_r + u_r);   z = sigmoid(a_z + u_z)
        n = tanh(a_n + r * u_n)
        h_t = (1 - z) * n + z * h_{t-1}
    """

    gates = 3
    fused_op = "gru"

    def step(self, p_t: Tensor, state: Tensor) -> Tuple[Tensor, Tensor]:
        a_r, a_z, a_n = p_t.chunk(3, dim=-1)
        u_r, u_z, u_n = self.hidden_projection(state).chunk(3, dim=-1)
        r = torch.sigmoid(a_r + u_r)
        z = torch.sigmoid(a_z + u_z)
        n = torch.tanh(a_n + r * u_n)
        h = (1 - z) * n + z * state
        return h, h


class ElmanRNN(TorchRNNCell):
    """Elman RNN, exactly as ``torch.nn.RNN``: ``h_t = phi(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)``."""

    gates = 1
    nonlinearity = "tanh"

    def step(self, p_t: Tensor, state: Tensor) -> Tuple[Tensor, Tensor]:
        pre = p_t + self.hidden_projection(state)
        h = torch.tanh(pre) if self.nonlinearity == "tanh" else torch.relu(pre)
        return h, h


@register(
    "rnn_tanh",
    family="baseline",
    paper="Elman 1990, Finding structure in time; torch.nn.RNN",
    variants={"no_bias": {"bias": False}},
    param_counts=(
        ParamCount(2, 128, 16_500, 17_500, source=_SRNN_T5.format(head=129) + ": 17k"),
        ParamCount(1, 198, 39_300, 40_300, source=_MIST_T1 + " (simple RNN, H=198)"),
    ),
)
class RNNTanh(ElmanRNN):
    """``torch.nn.RNN(nonlinearity="tanh")``: ``h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)``."""

    nonlinearity = "tanh"
    fused_op = "rnn_tanh"


@register(
    "rnn_relu",
    family="baseline",
    paper="Elman 1990, Finding structure in time; torch.nn.RNN",
    variants={"no_bias": {"bias": False}},
)
class RNNReLU(ElmanRNN):
    """``torch.nn.RNN(nonlinearity="relu")``: ``h_t = relu(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)``."""

    nonlinearity = "relu"
    fused_op = "rnn_relu"


# ---- UGRNN ---------------------------------------------------------------------------------------
@register(
    "ugrnn",
    family="baseline",
    paper="Collins, Sohl-Dickstein & Sussillo 2017, Capacity and trainability in recurrent neural networks (ICLR)",
)
class UGRNN(Cell):
    """Update-gate RNN: one gate interpolating between the old state and a tanh candidate.

    State ``h (B, H)``::

        c_t = tanh(W_c x_t + U_c h_{t-1} + b_c)
        g_t = sigmoid(W_g x_t + U_g h_{t-1} + b_g)
        h_t = g_t * h_{t-1} + (1 - g_t) * c_t

    Parameters: ``weight_ih (2H, d)``, ``weight_hh (2H, H)`` and ``bias (2H,)``, rows ``[c; g]``.
    Init: weights ``U(-1/sqrt(H), 1/sqrt(H))`` (as torch.nn's RNNs), ``b_c = 0`` and
    ``b_g = gate_bias`` (default 1.0, so the cell starts by mostly keeping its state, as TensorFlow's
    UGRNN cell used by the paper's authors does with its forget bias).
    """

    def __init__(
        self, input_size: int, hidden_size: int, gate_bias: float = 1.0, backend: str = "auto", device=None, dtype=None
    ) -> None:
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        self.gate_bias = check_finite_float("gate_bias", gate_bias)
        self.weight_ih = nn.Parameter(torch.empty(2 * hidden_size, input_size, **self.factory))
        self.weight_hh = nn.Parameter(torch.empty(2 * hidden_size, hidden_size, **self.factory))
        self.bias = nn.Parameter(torch.empty(2 * hidden_size, **self.factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        nn.init.uniform_(self.weight_ih, -bound, bound)
        nn.init.uniform_(self.weight_hh, -bound, bound)
        with torch.no_grad():
            self.bias.zero_()
            self.bias[self.hidden_size :] = self.gate_bias

    def precompute(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight_ih, self.bias)

    def step(self, p_t: Tensor, state: Tensor) -> Tuple[Tensor, Tensor]:
        c, g = (p_t + state @ self.weight_hh.T).chunk(2, dim=-1)
        g = torch.sigmoid(g)
        h = g * state + (1 - g) * torch.tanh(c)
        return h, h

    def extra_repr(self) -> str:
        return super().extra_repr() + f", gate_bias={self.gate_bias}"
