"""MIST RNN, the mixed-history NARX RNN (DiPietro, Rupprecht, Navab & Hager 2018).

Each step mixes the states ``1, 2, 4, ..., 2^(n_d-1)`` steps back with learned convex weights, resets
units of the mix with a GRU-like gate, and applies one tanh layer. Paths from ``t - tau`` to ``t``
need only about ``log2(tau)`` edges (``tau / 2^(n_d-1)`` beyond the longest delay), so gradients
from the distant past survive. See ``docs/cells/mist.md``.

Doc: docs/cells/mist.md
Tests: tests/cells/test_mist.py, tests/cells/test_contract.py
Kernel: src/ltdrnn/csrc/mist.cpp (CPU); src/ltdrnn/cells/fused/mist_triton.py (GPU)
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
from torch import Tensor, nn

from ..kernels import StreamOperands, kernel_runs_on, stream_in_kernel
from ..memory import empty_buffer, release, scratch_buffer
from ..scan import ParameterCache
from .base import Cell, check_positive_int, mask_outputs
from .fused.triton_support import autocast_weight, triton_runs_on
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
        impl: ``"reference"`` (loop over :meth:`step`, which re-forms the history tensor each step),
            ``"list"`` (autograd-recorded loop that keeps a list of past states and reads the delayed
            ones from it), ``"fused"`` (one autograd function over the whole sequence with a
            hand-written backward; weight gradients as one matrix product each), ``"kernel"`` (the
            same with each whole time loop in one compiled operator call, which also forms the input
            projections and every gradient per step; falls back to ``"fused"`` when the kernel cannot
            be built or for non-CPU/non-float32/64 tensors), ``"triton"`` (each time loop in one Triton launch,
            :mod:`ltdrnn.cells.fused.mist_triton`; the default for CUDA tensors when Triton is installed;
            where Triton cannot run, ``"fused"``), or ``"auto"``.

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
        >>> reference, _ = cell.scan(x, impl="reference")
        >>> torch.allclose(outputs, reference, atol=1e-6)
        True
        >>> h, history = cell(x[0], cell.init_state(4))     # one streaming step
        >>> torch.allclose(h, outputs[0], atol=1e-6)
        True
    """

    impls = ("reference", "list", "fused", "kernel", "triton")
    default_impl = "kernel"  # measured fastest; see docs/cells/mist.md

    def __init__(
        self, input_size: int, hidden_size: int, num_delays: int = 8, impl: str = "auto", device=None, dtype=None
    ) -> None:
        super().__init__(input_size, hidden_size, impl, device, dtype)
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
        self._stream_cache = ParameterCache()
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
        h = self._update(p_t[:, :split], p_t[:, split:], history[:, -1], history.index_select(1, self.delay_index))
        return h, torch.cat([history[:, 1:], h.unsqueeze(1)], 1)

    def forward(self, x_t: Tensor, state: Tensor | None = None) -> Tuple[Tensor, Tensor]:
        """One streaming step from raw input ``x_t (B, d)``; the lean path for online use.

        Without gradient recording, with ``impl`` resolving to ``"kernel"`` and batch up to
        :data:`~ltdrnn.kernels.STREAM_MAX_BATCH`, the whole step is one call of
        ``torch.ops.ltdrnn.mist_stream`` (:meth:`_stream_in_kernel`); otherwise
        ``step(precompute(x_t))``.
        """
        if state is not None and self.resolved_impl() == "kernel":
            stepped = self._stream_in_kernel(x_t, state)
            if stepped is not None:
                return stepped
        self.check_input(x_t, expected_dims=2, name="x_t")
        if state is None:
            state = self.init_state(x_t.shape[0], x_t.device, x_t.dtype)
        return self.step(self.precompute(x_t), state)

    def _stream_in_kernel(self, x_t: Tensor, history: Tensor) -> Tuple[Tensor, Tensor] | None:
        """``(h_t, new history)`` from one call of the compiled streaming step, or None where it
        does not apply."""
        outputs = stream_in_kernel(
            "mist",
            lambda: self._stream_cache.get(tuple(self._parameters.values()), self._stream_operands),
            x_t,
            history,
            self.input_size,
            (self.history_size, self.hidden_size),
        )
        return None if outputs is None else tuple(outputs)

    def _stream_operands(self) -> StreamOperands:
        return StreamOperands((self.weight_ih, self.bias, self.weight_hh, self.weight_mix))

    def stream_step(self, x_t: Tensor, state: Tensor, impl: str) -> Tuple[Tensor, Tensor] | None:
        return self._stream_in_kernel(x_t, state) if impl == "kernel" else None

    def scan_fast(self, x: Tensor, state: Tensor, lengths: Tensor | None, impl: str) -> Tuple[Tensor, Tensor]:
        if impl == "triton" and triton_runs_on(x):
            return self._triton_scan(x, state, lengths)
        if impl in ("fused", "kernel", "triton"):
            outputs, final, states = MISTScan.apply(
                x,
                state,
                self.weight_ih,
                self.bias,
                self.weight_hh,
                self.weight_mix,
                self.delays,
                impl == "kernel" and kernel_supports(x),
            )
            if lengths is None:  # the separate views keep the backward free of full-size zero fills
                return outputs, final
        else:
            # two separate input projections: slicing one per step would cost a zero-filled gradient each
            split = self.num_delays + self.hidden_size
            gates_in = nn.functional.linear(x, self.weight_ih[:split], self.bias[:split])
            state_in = nn.functional.linear(x, self.weight_ih[split:], self.bias[split:])
            states = self._list_scan(gates_in, state_in, state)
        return mask_outputs(states[self.history_size :], lengths), self._final_history(states, lengths)

    def _list_scan(self, gates_in: Tensor, state_in: Tensor, history0: Tensor) -> Tensor:
        """Autograd-recorded loop that reads delayed states from a growing list: ``-> (N + T, B, H)``."""
        history = list(history0.unbind(1))
        for g_t, s_t in zip(gates_in.unbind(0), state_in.unbind(0)):
            history.append(self._update(g_t, s_t, history[-1], torch.stack([history[-k] for k in self.delays], 1)))
        return torch.stack(history)

    # ---- internals ------------------------------------------------------------------------------
    def _triton_scan(self, x: Tensor, history: Tensor, lengths: Tensor | None) -> Tuple[Tensor, Tensor]:
        """The time loop in one Triton launch per direction (:mod:`ltdrnn.cells.fused.mist_triton`), the
        input projections one GEMM before it."""
        from .fused.mist_triton import mist_scan

        device = x.device.type
        p = nn.functional.linear(x, self.weight_ih, self.bias)
        w_hh, w_mix = autocast_weight(self.weight_hh, device), autocast_weight(self.weight_mix, device)
        states = mist_scan(p, history, w_hh, w_mix, lengths)
        return states[self.history_size :], self._final_history(states, lengths)

    def _update(self, gates_in: Tensor, state_in: Tensor, h_prev: Tensor, delayed: Tensor) -> Tensor:
        """``h_t`` from the input parts ``gates_in (B, n_d + H)`` (a, r) and ``state_in (B, H)``,
        ``h_{t-1} (B, H)`` and ``delayed (B, n_d, H)`` (the states 1, 2, 4, ... steps back)."""
        nd = self.num_delays
        gates = torch.addmm(gates_in, h_prev, self.weight_hh.t())
        mix_weights = torch.softmax(gates[:, :nd], dim=-1)
        reset = torch.sigmoid(gates[:, nd:])
        mixed = torch.bmm(mix_weights.unsqueeze(1), delayed).squeeze(1)
        return torch.tanh(torch.addmm(state_in, reset * mixed, self.weight_mix.t()))

    def _final_history(self, states: Tensor, lengths: Tensor | None) -> Tensor:
        """The last N states of each sequence, ``(B, N, H)``; ``states (N + T, B, H)``."""
        n = self.history_size
        if lengths is None:
            return states[-n:].transpose(0, 1)
        # sequence b ends after step lengths[b] - 1, i.e. at row N + lengths[b] - 1 of states
        rows = lengths.to(states.device).view(1, -1) + torch.arange(n, device=states.device).view(-1, 1)
        index = rows.unsqueeze(-1).expand(n, states.shape[1], states.shape[2])
        return states.gather(0, index).transpose(0, 1)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, num_delays={self.num_delays}"


class MISTScan(torch.autograd.Function):
    """The MIST recurrence over a whole sequence with a hand-written backward pass.

    ``forward(x (T, B, d), history0 (B, N, H), W_ih (n_d + 2H, d), bias (n_d + 2H), W_hh (n_d + H, H),
    W_mix (H, H), delays, kernel) -> (outputs (T, B, H), final history (B, N, H), states (N + T, B, H))``:
    rows ``0..N-1`` of ``states`` are the initial history, row ``N + t`` is ``h_t``; the first two
    outputs are views of it (the last ``T`` rows; the last ``N`` rows, batch first).

    Forward runs without recording a graph, completing the gate logits in ``activated`` and the tanh
    argument in the state rows in place. Backward walks time in reverse and adds each step's gradient
    into the rows of the delayed states it read. With ``kernel=True`` each time loop, forward and
    backward, is one call of the compiled ``torch.ops.ltdrnn.mist_forward`` / ``mist_backward``
    (csrc/mist.cpp: the batch split into one block of rows per thread, each running all T steps), and
    everything that is one pass over ``(T, B, .)`` buffers in the PyTorch version happens per step
    inside those loops while the step's rows are hot: the forward forms each step's input projection
    and reads the initial history in whatever strides it has; the backward forms every parameter and
    input gradient from each step's gradients (the parameters' as one sum per thread block, added in
    block order) and reads the outputs' gradient where it lies instead of copying it into a
    ``(N + T, B, H)`` buffer. Otherwise (``_pytorch_forward`` / ``_pytorch_backward``, the reference
    the compiled loops are tested against) the input projections are one product each before the loop
    and the weight gradients one product each after it.
    """

    @staticmethod
    def forward(ctx, x, history0, w_ih, bias, w_hh, w_mix, delays, kernel):
        steps, batch = x.shape[:2]
        past, hidden, split = history0.shape[1], w_mix.shape[0], w_hh.shape[0]
        states = empty_buffer((past + steps, batch, hidden), w_mix)
        activated = empty_buffer((steps, batch, split), w_hh)  # logits, then [softmax(a) | sigmoid(r)]
        reset_mixed = empty_buffer((steps, batch, hidden), w_mix)  # r_t * sum_i a_i h_{t-2^i}
        rows = past - torch.tensor(delays, device=states.device)  # rows of h_{t-2^i} at t = 0
        if kernel:
            x = x.contiguous()  # the backward reads it too
            weights = (w_hh.contiguous(), w_mix.contiguous(), x, w_ih.contiguous(), bias.contiguous())
            torch.ops.ltdrnn.mist_forward(activated, states, reset_mixed, *weights, history0)
        else:
            _pytorch_forward(x, history0, w_ih, bias, w_hh, w_mix, states, activated, reset_mixed, rows)
        ctx.kernel = kernel
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, states, activated, reset_mixed, w_ih, w_hh, w_mix, rows)
        return states[past:], states[steps:].transpose(0, 1), states

    @staticmethod
    def backward(ctx, d_outputs, d_final, d_states):
        x, states, activated, reset_mixed, w_ih, w_hh, w_mix, rows = ctx.saved_tensors
        outside = _outside_gradient(states, d_outputs, d_final, d_states)
        backward = _compiled_backward if ctx.kernel else _pytorch_backward
        d_x, d_history0, *d_weights = backward(
            x, states, activated, reset_mixed, w_ih, w_hh, w_mix, rows, outside, ctx.needs_input_grad[0]
        )
        d_w_ih, d_bias, d_w_hh, d_w_mix = (g if ctx.needs_input_grad[2 + i] else None for i, g in enumerate(d_weights))
        return d_x, d_history0, d_w_ih, d_bias, d_w_hh, d_w_mix, None, None


def _pytorch_forward(x, history0, w_ih, bias, w_hh, w_mix, states, activated, reset_mixed, rows):
    """Fills ``states``, ``activated`` and ``reset_mixed`` as ``torch.ops.ltdrnn.mist_forward`` does, with
    a Python loop over PyTorch ops: the input projections are written straight into the buffers the steps
    then complete in place."""
    steps, past, hidden, split = x.shape[0], history0.shape[1], w_mix.shape[0], w_hh.shape[0]
    flat_x = x.reshape(-1, x.shape[-1])
    states[:past] = history0.transpose(0, 1)
    torch.addmm(bias[split:], flat_x, w_ih[split:].t(), out=states[past:].view(-1, hidden))
    torch.addmm(bias[:split], flat_x, w_ih[:split].t(), out=activated.view(-1, split))
    step = _torch_forward_step(states, activated, reset_mixed, rows)
    w_hh_t, w_mix_t = w_hh.t(), w_mix.t()
    h_rows, gate_rows, rm_rows = states.unbind(0), activated.unbind(0), reset_mixed.unbind(0)
    for t in range(steps):
        gate_rows[t].addmm_(h_rows[past + t - 1], w_hh_t)
        step(t)
        h_rows[past + t].addmm_(rm_rows[t], w_mix_t).tanh_()


def _outside_gradient(states, d_outputs, d_final, d_states):
    """dL/dh from outside the recurrence, the sum of the three outputs' gradients (None = zero), for the
    last R rows of ``states (N + T, B, H)`` (the earlier rows get none) as one contiguous ``(R, B, H)``
    tensor. The usual case, ``d_outputs`` alone, is passed on as it is (R = T), not copied."""
    if d_final is None and d_states is None:
        return states.new_zeros((0, *states.shape[1:])) if d_outputs is None else d_outputs.contiguous()
    extents = [g.shape[0] for g in (d_outputs, d_states) if g is not None]
    rows = max(extents + [d_final.shape[1] if d_final is not None else 0])
    total = states.new_zeros((rows, *states.shape[1:]))
    for part in (d_states, d_outputs, None if d_final is None else d_final.transpose(0, 1)):
        if part is not None:
            total[rows - part.shape[0] :] += part
    return total


def _compiled_backward(x, states, activated, reset_mixed, w_ih, w_hh, w_mix, rows, outside, needs_x_grad):
    """``(d_x or None, d_history0, d_w_ih, d_bias, d_w_hh, d_w_mix)`` from one call of
    ``torch.ops.ltdrnn.mist_backward``, which forms them all inside its time loop."""
    past, batch, hidden = states.shape[0] - reset_mixed.shape[0], states.shape[1], states.shape[2]
    grad = scratch_buffer(states.shape, states)  # a work buffer: the kernel writes each row before reading it
    d_x = torch.empty_like(x) if needs_x_grad else None
    d_history0 = states.new_empty(batch, past, hidden)
    d_w_ih, d_bias = w_ih.new_empty(w_ih.shape), w_ih.new_empty(w_ih.shape[0])  # contiguous, as the kernel writes
    d_w_hh, d_w_mix = w_hh.new_empty(w_hh.shape), w_mix.new_empty(w_mix.shape)
    operands = (activated, states, reset_mixed, w_hh.contiguous(), w_mix.contiguous(), x, w_ih.contiguous())
    torch.ops.ltdrnn.mist_backward(*operands, outside, grad, d_x, d_history0, d_w_ih, d_bias, d_w_hh, d_w_mix)
    release(grad)
    return d_x, d_history0, d_w_ih, d_bias, d_w_hh, d_w_mix


def _pytorch_backward(x, states, activated, reset_mixed, w_ih, w_hh, w_mix, rows, outside, needs_x_grad):
    """The same results as :func:`_compiled_backward` from a Python loop over PyTorch ops (the reference
    the compiled loop is tested against), the weight gradients as one matrix product each at the end."""
    steps, hidden, split = reset_mixed.shape[0], states.shape[-1], activated.shape[-1]
    past = states.shape[0] - steps
    # the three (T, B, .) gradient buffers never leave this call: reuse them across calls
    grad = scratch_buffer(states.shape, states)  # dL/dh for every row
    grad[: grad.shape[0] - outside.shape[0]].zero_()
    grad[grad.shape[0] - outside.shape[0] :].copy_(outside)
    d_gates = scratch_buffer(activated.shape, activated)
    d_pre = scratch_buffer(reset_mixed.shape, reset_mixed)  # dL/d(tanh argument)
    step = _torch_backward_step(states, activated, reset_mixed, grad, d_gates, rows)
    tanh_backward = torch.ops.aten.tanh_backward.grad_input
    grad_rows, state_rows, d_pre_rows = grad.unbind(0), states.unbind(0), d_pre.unbind(0)
    for t in range(steps - 1, -1, -1):
        tanh_backward(grad_rows[past + t], state_rows[past + t], grad_input=d_pre_rows[t])
        step(t, d_pre_rows[t] @ w_mix)
        grad_rows[past + t - 1].addmm_(d_gates[t], w_hh)
    flat_gates, flat_pre = d_gates.view(-1, split), d_pre.view(-1, hidden)
    flat_x = x.reshape(-1, x.shape[-1])
    d_x = (flat_gates @ w_ih[:split]).addmm_(flat_pre, w_ih[split:]).view_as(x) if needs_x_grad else None
    d_w_ih = torch.cat([flat_gates.t() @ flat_x, flat_pre.t() @ flat_x])
    d_bias = torch.cat([flat_gates.sum(0), flat_pre.sum(0)])
    d_w_hh = flat_gates.t() @ states[past - 1 : -1].reshape(-1, hidden)
    d_w_mix = flat_pre.t() @ reset_mixed.view(-1, hidden)
    d_history0 = grad[:past].transpose(0, 1).clone(memory_format=torch.contiguous_format)
    release(grad, d_gates, d_pre)
    return d_x, d_history0, d_w_ih, d_bias, d_w_hh, d_w_mix


def _torch_forward_step(states, activated, reset_mixed, rows):
    nd = rows.shape[0]

    def step(t):
        gates = activated[t]
        gates[:, :nd] = torch.softmax(gates[:, :nd], dim=-1)
        gates[:, nd:].sigmoid_()
        delayed = states.index_select(0, rows + t).transpose(0, 1)  # (B, n_d, H)
        mixed = torch.bmm(gates[:, :nd].unsqueeze(1), delayed).squeeze(1)
        torch.mul(gates[:, nd:], mixed, out=reset_mixed[t])

    return step


def _torch_backward_step(states, activated, reset_mixed, grad, d_gates, rows):
    nd = rows.shape[0]

    def step(t, d_reset_mixed):
        mix, reset = activated[t, :, :nd], activated[t, :, nd:]
        d_mixed = d_reset_mixed * reset
        # dL/d(r-logits) = d_rm * m * r (1 - r) = d_rm * rm * (1 - r): the mix m itself is not kept
        torch.mul(d_reset_mixed * reset_mixed[t], 1 - reset, out=d_gates[t, :, nd:])
        delayed = states.index_select(0, rows + t).transpose(0, 1)  # (B, n_d, H)
        d_mix = torch.bmm(delayed, d_mixed.unsqueeze(-1)).squeeze(-1)
        d_gates[t, :, :nd] = torch._softmax_backward_data(d_mix, mix, -1, mix.dtype)
        grad.index_add_(0, rows + t, mix.t().unsqueeze(-1) * d_mixed.unsqueeze(0))

    return step


def kernel_supports(x: Tensor) -> bool:
    """True when ``csrc/mist.cpp`` can run on tensors like ``x`` (and it builds on this machine)."""
    return kernel_runs_on("mist", x)
