"""SRNN, the shuffling recurrent neural network (Rotman & Wolf, AAAI 2021).

The state is shifted by one position each step and the output of a state-free input network is added:
``h_t = act(roll(h_{t-1}, 1) + beta(x_t))``. Since ``beta`` does not see the state, it runs for every
step at once in ``precompute``; only a shift, an add and ``act`` remain sequential. See
``docs/cells/srnn.md`` for the equations, defaults, paper settings and measurements.

Doc: docs/cells/srnn.md
Tests: tests/cells/test_srnn.py, tests/cells/test_contract.py
Kernel: src/ltdrnn/csrc/srnn.cpp (CPU); src/ltdrnn/cells/fused/srnn_triton.py (GPU)
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor, nn

from ..kernels import StreamOperands, kernel_runs_on, stream_in_kernel
from ..memory import empty_buffer, release, scratch_buffer
from ..scan import ParameterCache, final_state_at_lengths
from .base import Cell, check_choice, check_nonnegative_int, check_positive_int, mask_outputs
from .fused.triton_support import triton_runs_on
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
        impl: ``"reference"`` (loop over :meth:`step`), ``"fused"`` (whole-sequence autograd function
            with a hand-written backward, pure PyTorch), ``"kernel"`` (the same in a compiled loop;
            falls back to ``"fused"`` when it cannot be built or for non-CPU/non-float32/64 tensors;
            with ``input_size=1`` and ``fr_layers=1``, ``f_r`` is read from a table of its linear
            pieces: :class:`PiecewiseLinearScan`),
            ``"closed_form"`` (relu only: cumsum/cummin, no time loop), ``"triton"`` (the recurrence in
            one Triton launch per direction, :mod:`ltdrnn.cells.fused.srnn_triton`; the default for CUDA
            tensors when Triton is installed; runs ``"fused"`` where Triton cannot run), or ``"auto"``.

    Parameters are initialised like ``torch.nn.Linear`` (the authors' code). The shift ``W_p`` is
    fixed and has no parameters.

    Examples::

        >>> import torch
        >>> from ltdrnn.cells.srnn import SRNNCell
        >>> _ = torch.manual_seed(0)
        >>> cell = SRNNCell(input_size=3, hidden_size=8)
        >>> x = torch.randn(20, 4, 3)                       # (T, B, d)
        >>> outputs, state = cell.scan(x)                   # impl "auto": the compiled kernel or "fused"
        >>> outputs.shape, state.shape
        (torch.Size([20, 4, 8]), torch.Size([4, 8]))
        >>> reference, _ = cell.scan(x, impl="reference")   # the plain loop over step()
        >>> torch.allclose(outputs, reference, atol=1e-6)
        True
        >>> closed, _ = cell.scan(x, impl="closed_form")    # relu: no time loop at all
        >>> torch.allclose(closed, reference, atol=1e-5)
        True
    """

    impls = ("reference", "fused", "kernel", "closed_form", "triton")
    default_impl = "kernel"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        hyper_size: int = 32,
        fr_layers: int = 1,
        gate: bool = True,
        activation: str = "relu",
        impl: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        self.activation = check_choice("activation", activation, ("relu", "tanh"))
        if activation != "relu":  # the closed form exists for relu only
            self.impls = ("reference", "fused", "kernel", "triton")
        super().__init__(input_size, hidden_size, impl, device, dtype)
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
        self._stream_cache = ParameterCache()

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

    def forward(self, x_t: Tensor, state: Tensor | None = None) -> Tuple[Tensor, Tensor]:
        """One streaming step from raw input ``x_t (B, d)``: ``step(precompute(x_t), h)``, no scan setup.

        Without autograd, at batch up to :data:`~ltdrnn.kernels.STREAM_MAX_BATCH` and with ``impl``
        resolving to ``"kernel"``, the whole step is one call of ``torch.ops.ltdrnn.srnn_stream``."""
        if state is not None and self.resolved_impl() == "kernel":
            h = self._stream_in_kernel(x_t, state)
            if h is not None:
                return h, h
        self.check_input(x_t, expected_dims=2, name="x_t")
        if state is None:
            state = self.init_state(x_t.shape[0], x_t.device, x_t.dtype)
        return self.step(self.precompute(x_t), state)

    def _stream_in_kernel(self, x_t: Tensor, h: Tensor) -> Tensor | None:
        """``h_t`` from one call of the compiled streaming step, or None where it does not apply."""
        outputs = stream_in_kernel(
            "srnn",
            lambda: self._stream_cache.get(self._beta_parameters(), self._stream_operands),
            x_t,
            h,
            self.input_size,
            (self.hidden_size,),
        )
        return None if outputs is None else outputs[0]

    def _beta_parameters(self) -> list:
        """The weights and biases of beta's layers, in order: f_r's hidden layers, f_r's last layer,
        the gate. Read from the module dicts directly: ``parameters()`` costs several us per call."""
        modules = self._modules
        layers = [*modules["fr_hidden"]._modules.values(), modules["fr_out"]]
        if modules.get("gate_layer") is not None:
            layers.append(modules["gate_layer"])
        return [p for layer in layers for p in (layer._parameters["weight"], layer._parameters["bias"])]

    def _stream_operands(self) -> StreamOperands:
        return StreamOperands(self._beta_parameters(), (self.fr_layers, self.activation == "relu"))

    def stream_step(self, x_t: Tensor, state: Tensor, impl: str) -> Tuple[Tensor, Tensor] | None:
        h = self._stream_in_kernel(x_t, state) if impl == "kernel" else None
        return None if h is None else (h, h)

    def scan_fast(self, x: Tensor, state: Tensor, lengths: Tensor | None, impl: str) -> Tuple[Tensor, Tensor]:
        if impl == "triton" and triton_runs_on(x):
            from .fused.srnn_triton import srnn_scan

            outputs = srnn_scan(self.precompute(x), state, lengths, self.activation)
            return outputs, final_state_at_lengths(outputs, lengths)
        if impl == "closed_form":
            outputs = shift_relu_closed_form(self.precompute(x), state)
        elif impl == "kernel" and kernel_supports(x):
            outputs = self._kernel_scan(x, state)
        else:
            outputs = ShiftScan.apply(self.precompute(x), state, self.activation == "relu")
        return mask_outputs(outputs, lengths), final_state_at_lengths(outputs, lengths)

    # ---- internals ------------------------------------------------------------------------------
    def _fr_features(self, x: Tensor) -> Tensor:
        """The last hidden activation of ``f_r`` (``x`` itself when ``fr_layers=0``)."""
        for layer in self.fr_hidden:
            x = torch.relu(layer(x))
        return x

    def _kernel_scan(self, x: Tensor, state: Tensor) -> Tensor:
        gate = self.gate_layer
        piecewise = self.input_size == 1 and self.fr_layers == 1  # f_r is piecewise linear in the scalar x
        if piecewise and x.shape[0] * x.shape[1] >= PIECEWISE_LINEAR_MIN_ROWS:
            hidden_layer = self.fr_hidden[0]
            return PiecewiseLinearScan.apply(
                x,
                hidden_layer.weight,
                hidden_layer.bias,
                self.fr_out.weight,
                self.fr_out.bias,
                None if gate is None else gate.weight,
                None if gate is None else gate.bias,
                state,
                self.activation == "relu",
            )
        features = self._fr_features(x)
        return KernelScan.apply(
            features,
            self.fr_out.weight,
            self.fr_out.bias,
            x,
            None if gate is None else gate.weight,
            None if gate is None else gate.bias,
            state,
            self.activation == "relu",
        )

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, hyper_size={self.hyper_size}, fr_layers={self.fr_layers}, "
            f"gate={self.gate}, activation={self.activation!r}"
        )


# ---- closed form (relu) -------------------------------------------------------------------------------
def shift_relu_closed_form(beta: Tensor, h0: Tensor) -> Tensor:
    """All ``h_t = relu(roll(h_{t-1}, 1) + beta_t)`` without a time loop: ``(T, B, H) -> (T, B, H)``.

    In the co-rotating frame ``g_t = roll(h_t, -(t+1))`` (step t counts from 0) the shift disappears:
    ``g_t = relu(g_{t-1} + c_t)`` with ``c_t = roll(beta_t, -(t+1))`` and ``g_{-1} = h0``, which
    :func:`relu_accumulate` solves with one cumsum and one cummin.
    """
    steps, hidden = beta.shape[0], beta.shape[-1]
    shift = torch.arange(1, steps + 1, device=beta.device).view(-1, 1, 1)
    position = torch.arange(hidden, device=beta.device).view(1, 1, -1)
    into_frame = ((position + shift) % hidden).expand_as(beta)  # c_t[i] = beta_t[i + t + 1]
    out_of_frame = ((position - shift) % hidden).expand_as(beta)  # h_t[i] = g_t[i - t - 1]
    g = relu_accumulate(beta.gather(-1, into_frame), h0)
    return g.gather(-1, out_of_frame)


def relu_accumulate(c: Tensor, g0: Tensor) -> Tensor:
    """Solve ``g_t = max(0, g_{t-1} + c_t)`` for all t at once.

    Shapes: ``c (T, B, H)``, ``g0 (B, H)`` (any sign) -> ``g (T, B, H)``.

    With ``S_t = c_1 + ... + c_t`` the solution is ``g_t = S_t - min(-g_0, min_{j<=t} S_j)``
    (Lindley's recursion). ``S`` is accumulated in float64: in float32 the difference of two large
    partial sums loses the small values the recurrence would have kept.

    Equivalent to::

        g = g0
        for t in range(T):
            g = torch.relu(g + c[t]); out[t] = g
    """
    wide = torch.float64 if c.dtype in (torch.float32, torch.float16, torch.bfloat16) else c.dtype
    # time on the last (contiguous) axis: cumsum and cummin are several times faster there
    s = c.to(wide).permute(1, 2, 0).cumsum(-1)
    floor = torch.minimum(s.cummin(-1).values, -g0.to(wide).unsqueeze(-1))
    return (s - floor).permute(2, 0, 1).to(c.dtype)


# ---- whole-sequence autograd functions ---------------------------------------------------------------
class ShiftScan(torch.autograd.Function):
    """``h_t = act(roll(h_{t-1}, 1) + beta_t)`` over all t, with a hand-written backward (pure PyTorch).

    ``forward(beta (T, B, H), h0 (B, H), relu: bool) -> h (T, B, H)``. Each step writes into one
    preallocated output in place (three small ops), so autograd records one node, not 3T.
    """

    @staticmethod
    def forward(ctx, beta: Tensor, h0: Tensor, relu: bool) -> Tensor:
        h = empty_buffer(beta.shape, beta)
        prev = h0
        for beta_t, out in zip(beta.unbind(0), h.unbind(0)):
            torch.add(prev[:, :-1], beta_t[:, 1:], out=out[:, 1:])
            torch.add(prev[:, -1:], beta_t[:, :1], out=out[:, :1])
            out.relu_() if relu else out.tanh_()
            prev = out
        ctx.relu = relu
        ctx.save_for_backward(h)
        return h

    @staticmethod
    def backward(ctx, dh: Tensor):
        (h,) = ctx.saved_tensors
        derivative = (h > 0).to(h.dtype) if ctx.relu else 1 - h * h
        gz = empty_buffer(h.shape, h).copy_(dh)  # becomes dL/dz_t = dL/dbeta_t, from the end
        for t in range(h.shape[0] - 1, -1, -1):
            if t + 1 < h.shape[0]:
                gz[t, :, :-1].add_(gz[t + 1, :, 1:])
                gz[t, :, -1:].add_(gz[t + 1, :, :1])
            gz[t].mul_(derivative[t])
        dh0 = torch.roll(gz[0], -1, dims=-1)
        return gz, dh0, None


class KernelScan(torch.autograd.Function):
    """The last layer of ``f_r``, the gate and the recurrence in one compiled loop per direction
    (``torch.ops.ltdrnn.srnn_forward`` / ``srnn_backward``).

    ``forward(features (T, B, k), W_f (H, k), b_f, x (T, B, d), W_g (H, d) | None, b_g | None,
    h0 (B, H), relu) -> h (T, B, H)`` with ``f = features W_f^T + b_f``, ``g = x W_g^T + b_g`` and
    ``h_t = act(roll(h_{t-1}, 1) + f_t * sigmoid(g_t))``. Without the gate or for features up to
    ``READOUT_IN_KERNEL_MAX_WIDTH`` wide, the kernel forms ``f_t`` step by step for each thread's
    block of batch rows (a small product that stays in cache; again in the backward where the gate
    needs it), accumulates ``dL/dW_f`` and writes ``dL/dfeatures`` the same way, so neither ``f`` nor
    its gradient is a ``(T, B, H)`` array; otherwise ``f`` and ``dL/df`` are BLAS products in
    PyTorch. The gate's logits are formed in the kernel up to ``GATE_IN_KERNEL_MAX_INPUT`` inputs,
    else a BLAS product too. The kernel adds the biases and sums their gradients, fuses the gate,
    shift, add and activation and their derivatives, and reads the features and the output gradient
    with their own strides (a batch-first layer's transposed views, or the expanded gradient of a
    sum, are not copied).
    """

    @staticmethod
    def forward(ctx, features, w_f, b_f, x, w_g, b_g, h0, relu):
        steps, batch, hidden = features.shape[0], features.shape[1], w_f.shape[0]
        readout_in_kernel = w_g is None or features.shape[-1] <= READOUT_IN_KERNEL_MAX_WIDTH
        if readout_in_kernel:
            features, w_f = _as_blas_rows(features), w_f.contiguous()
            f = None
        else:
            f = _product_into(empty_buffer((steps, batch, hidden), features), features, w_f)
        inline_gate = w_g is not None and x.shape[-1] <= GATE_IN_KERNEL_MAX_INPUT
        if inline_gate:  # the kernel forms the gate's logits from x itself
            g, x, w_g = None, x.contiguous(), w_g.contiguous()
        else:
            g = None if w_g is None else _product_into(empty_buffer((steps, batch, hidden), x), x, w_g)
        b_f, h0 = b_f.contiguous(), h0.contiguous()
        b_g = None if b_g is None else b_g.contiguous()
        h = empty_buffer((steps, batch, hidden), h0)
        torch.ops.ltdrnn.srnn_forward(
            features if f is None else f,
            b_f,
            g,
            b_g,
            x if inline_gate else None,
            w_g if inline_gate else None,
            h0,
            relu,
            h,
            w_f if f is None else None,
        )
        ctx.relu, ctx.inline_gate = relu, inline_gate
        ctx.save_for_backward(features, w_f, b_f, x, w_g, b_g, f, g, h)
        return h

    @staticmethod
    def backward(ctx, dh):
        features, w_f, b_f, x, w_g, b_g, f, g, h = ctx.saved_tensors
        hidden = h.shape[-1]
        inline_gate = ctx.inline_gate
        if dh.stride(-1) not in (0, 1):
            dh = dh.contiguous()
        # df and dg never leave this call: reuse them across calls
        if f is None:
            d_features = empty_buffer(features.shape, features) if ctx.needs_input_grad[0] else None
            d_wf = torch.empty_like(w_f)
        else:
            d_features, d_wf = scratch_buffer(h.shape, h), None  # dL/df
        dg = scratch_buffer(h.shape, h) if g is not None else None
        dh0, d_bf = torch.empty_like(h[0]), torch.empty_like(b_f)
        d_bg = None if b_g is None else torch.empty_like(b_g)
        d_wg = torch.empty_like(w_g) if inline_gate else None
        d_x = torch.empty_like(x) if inline_gate and ctx.needs_input_grad[3] else None
        torch.ops.ltdrnn.srnn_backward(
            dh,
            h,
            features if f is None else f,
            b_f,
            g,
            b_g,
            x if inline_gate else None,
            w_g if inline_gate else None,
            ctx.relu,
            d_features,
            dg,
            dh0,
            d_bf,
            d_bg,
            d_wg,
            d_x,
            w_f if f is None else None,
            d_wf,
        )
        df = None if f is None else d_features
        if df is not None:
            df2 = df.view(-1, hidden)
            d_features = (df2 @ w_f).view_as(features) if ctx.needs_input_grad[0] else None
            d_wf = df2.t() @ features.reshape(-1, features.shape[-1])
        if dg is not None:
            dg2 = dg.view(-1, hidden)
            d_x = (dg2 @ w_g).view_as(x) if ctx.needs_input_grad[3] else None
            d_wg = dg2.t() @ x.reshape(-1, x.shape[-1]) if ctx.needs_input_grad[4] else None
        release(df, dg)
        d_wf = d_wf if ctx.needs_input_grad[1] else None
        return d_features, d_wf, d_bf, d_x, d_wg, d_bg, dh0, None


class PiecewiseLinearScan(torch.autograd.Function):
    r"""The ``kernel`` path for a scalar input and one hidden layer of ``f_r`` (``input_size=1``,
    ``fr_layers=1``: every pixel/permuted-MNIST preset), gate on or off, relu or tanh, for scans of at
    least ``PIECEWISE_LINEAR_MIN_ROWS`` rows (``torch.ops.ltdrnn.srnn_pwl_forward`` / ``srnn_pwl_backward``).

    ``forward(x (T, B, 1), A (k, 1), a (k,), W_f (H, k), b_f (H,), W_g (H, 1) | None, b_g | None,
    h0 (B, H), relu) -> h (T, B, H)``, the same function as :class:`KernelScan` on
    ``features = relu(x A^T + a)``.

    With a scalar x, ``f_r(x) = W_f relu(A x + a) + b_f`` is piecewise linear with at most k knots
    ``x_j = -a_j / A_j`` (:func:`segment_tables`): on each of the k + 1 segments between the sorted
    knots the active units are fixed, so ``f(x) = slope[s] x + offset[s]``. The forward kernel finds
    each ``(t, b)``'s segment (the number of knots below x: ``searchsorted(knots, x)``, kept for the
    backward; torch's own starts an OpenMP team, ~8 ms at 2 threads on a loaded machine) and forms ``f``
    with one multiply-add per element
    instead of k (3 x 0.8 GFLOP of ``(T B, k) x (k, H)`` products less per training step at the
    pixel-MNIST shape). The backward kernel sums ``df = dL/df`` per segment, ``m0[s] = sum df``,
    ``m1[s] = sum df x`` (in the data's type over runs of ~256 rows, then in double; returned in
    double), from which every gradient of ``f_r`` follows
    (:func:`f_r_gradients`); it forms ``dL/dx = df . slope[s] + dL/dg . w_g`` only when x needs it.

    Ties: an x exactly at a knot (``A_j x + a_j = 0``) is put on the segment below it, where a unit
    with ``A_j < 0`` counts as active (autograd's relu'(0) = 0 counts it inactive): f is the same
    there, but that one element's contributions to ``dL/dA_j``, ``dL/da_j`` and ``dL/dx`` are one-sided.
    Learned knots meet an input exactly with probability 0; and near a knot, where ``A_j x + a_j``
    rounds to either side, the reference's rounding may decide the other way.
    """

    @staticmethod
    def forward(ctx, x, w_in, b_in, w_f, b_f, w_g, b_g, h0, relu):
        steps, batch, hidden = x.shape[0], x.shape[1], w_f.shape[0]
        x = x.reshape(steps, batch).contiguous()
        active, slope, offset, knots = segment_tables(w_in, b_in, w_f, b_f)
        segment = torch.empty((steps, batch), dtype=torch.int32)  # the kernel's searchsorted(knots, x)
        w_g = None if w_g is None else w_g.reshape(hidden).contiguous()
        b_g = None if b_g is None else b_g.contiguous()
        h0 = h0.contiguous()
        h = empty_buffer((steps, batch, hidden), h0)
        torch.ops.ltdrnn.srnn_pwl_forward(x, knots, slope, offset, w_g, b_g, h0, relu, h, segment)
        ctx.relu = relu
        ctx.save_for_backward(x, segment, active, slope, offset, w_in, b_in, w_f, w_g, b_g, h)
        return h

    @staticmethod
    def backward(ctx, dh):
        x, segment, active, slope, offset, w_in, b_in, w_f, w_g, b_g, h = ctx.saved_tensors
        if dh.stride(-1) not in (0, 1):
            dh = dh.contiguous()
        sums = [torch.empty(slope.shape, dtype=torch.float64) for _ in range(2)]
        dh0 = torch.empty_like(h[0])
        d_bg, d_wg = (None, None) if w_g is None else (torch.empty_like(b_g), torch.empty_like(w_g))
        d_x = torch.empty_like(x) if ctx.needs_input_grad[0] else None
        torch.ops.ltdrnn.srnn_pwl_backward(
            dh, h, x, segment, slope, offset, w_g, b_g, ctx.relu, dh0, *sums, d_bg, d_wg, d_x
        )
        d_in, d_bin, d_wf, d_bf = f_r_gradients(*sums, active, w_in, b_in, w_f)
        if d_x is not None:
            d_x = d_x.unsqueeze(-1)
        if d_wg is not None:
            d_wg = d_wg.unsqueeze(-1)
        return d_x, d_in, d_bin, d_wf, d_bf, d_wg, d_bg, dh0, None


def segment_tables(w_in: Tensor, b_in: Tensor, w_f: Tensor, b_f: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""``f_r(x) = W_f relu(A x + a) + b_f`` of a scalar x as a table of linear pieces.

    Shapes: ``A (k, 1)``, ``a (k,)``, ``W_f (H, k)``, ``b_f (H,)`` -> ``active (2, k)`` (int64),
    ``slope, offset (k + 1, H)``, ``knots (k,)`` (sorted; inputs' dtype).

    Unit j is active (``A_j x + a_j > 0``) for ``x > x_j`` if ``A_j > 0``, for ``x < x_j`` if
    ``A_j < 0``, with ``x_j = -a_j / A_j``; for ``A_j = 0`` always or never (``a_j > 0``), its knot at
    +inf. Segment s is ``(knots[s-1], knots[s]]``, what ``searchsorted(knots, x)`` returns; with
    ``rank_j`` unit j's place among the sorted knots, unit j is active on the segments
    ``active[0, j] <= s < active[1, j]``: ``[rank_j + 1, k + 1)`` (``A_j > 0``), ``[0, rank_j + 1)``
    (``A_j < 0``), ``[0, k + 1)`` or none (``A_j = 0``). On segment s::

        f(x) = slope[s] x + offset[s],  slope[s] = sum_{j active on s} A_j W_f[:, j],
                                        offset[s] = b_f + sum_{j active on s} a_j W_f[:, j]

    Each sum is a prefix sum over s of the units' entries at their first and past their last segment
    (no matrix product: at 2 threads MKL's thread team for these tiny products cost ~27 ms each on a
    loaded machine). Formed in float64 and rounded once.
    """
    slope_in, bias_in = w_in.detach().reshape(-1).double(), b_in.detach().double()
    width, dtype = slope_in.shape[0], w_in.dtype
    flat = slope_in == 0
    knots = torch.where(flat, torch.inf, -bias_in / torch.where(flat, 1.0, slope_in)).to(dtype)
    knots, order = knots.sort()
    rank = torch.empty_like(order)
    rank[order] = torch.arange(width)
    always = flat & (bias_in > 0)
    first = torch.where(slope_in > 0, rank + 1, 0)
    stop = torch.where(slope_in < 0, rank + 1, torch.where(flat & ~always, 0, width + 1))
    active = torch.stack([first, stop])
    readout = w_f.detach().double()
    slope = _sum_over_active_units(active, (readout * slope_in).t())
    offset = _sum_over_active_units(active, (readout * bias_in).t()) + b_f.detach().double()
    return active, slope.to(dtype), offset.to(dtype), knots


def _sum_over_active_units(active: Tensor, values: Tensor) -> Tensor:
    """``out[s] = sum_{j: active[0, j] <= s < active[1, j]} values[j]``: ``active (2, k)``, ``values (k, H)``
    -> ``(k + 1, H)``, a prefix sum of each unit's value added at its first segment and taken off past its last."""
    steps = torch.zeros(values.shape[0] + 2, values.shape[1], dtype=values.dtype)
    steps.index_add_(0, active[0], values).index_add_(0, active[1], -values)
    return steps.cumsum(0)[:-1]


def f_r_gradients(
    m0: Tensor, m1: Tensor, active: Tensor, w_in: Tensor, b_in: Tensor, w_f: Tensor
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""The gradients of ``f_r``'s parameters from the per-segment sums of ``df = dL/df``.

    Shapes: ``m0, m1 (k + 1, H)`` float64 (``m0[s] = sum_{(t,b) in s} df``, ``m1[s] = sum df x``),
    ``active (2, k)`` (:func:`segment_tables`), ``A (k, 1)``, ``a (k,)``, ``W_f (H, k)`` ->
    ``dA, da, dW_f, db_f``. Each element's f is ``sum_j W_f[:, j] (A_j x + a_j)`` over its active units
    plus ``b_f``, so with ``P0[:, j] = sum_{s: j active} m0[s]`` and ``P1`` likewise from ``m1``
    (differences of prefix sums over s, since each unit is active on one run of segments)::

        dW_f[:, j] = A_j P1[:, j] + a_j P0[:, j],   db_f = sum_s m0[s]
        dA_j = W_f[:, j] . P1[:, j],                da_j = W_f[:, j] . P0[:, j]
    """
    p0, p1 = (_sum_over_active_segments(active, sums) for sums in (m0, m1))
    slope_in, bias_in, readout = w_in.detach().reshape(-1).double(), b_in.detach().double(), w_f.detach().double()
    d_wf = p1 * slope_in + p0 * bias_in
    d_in = (p1 * readout).sum(0).view_as(w_in)
    d_bin = (p0 * readout).sum(0)
    return d_in.to(w_in.dtype), d_bin.to(b_in.dtype), d_wf.to(w_f.dtype), m0.sum(0).to(w_f.dtype)


def _sum_over_active_segments(active: Tensor, sums: Tensor) -> Tensor:
    """``out[:, j] = sum_{active[0, j] <= s < active[1, j]} sums[s]``: ``active (2, k)``, ``sums (k + 1, H)``
    -> ``(H, k)``, as a difference of prefix sums."""
    prefix = torch.cat([sums.new_zeros(1, sums.shape[1]), sums.cumsum(0)])
    # index_select, not prefix[active]: advanced indexing starts an OpenMP team (~8 ms at 2 threads under load)
    return (prefix.index_select(0, active[1]) - prefix.index_select(0, active[0])).t()


#: Fewest rows (T B) for which a scan with ``input_size=1``, ``fr_layers=1`` reads f_r from its table of
#: linear pieces (:class:`PiecewiseLinearScan`). Building the tables and assembling the gradients are ~30
#: small PyTorch ops (~0.35 ms per call) that the k multiply-adds saved per element repay from ~800 rows:
#: forward + backward at H = 128, k = 32, one thread, 512 rows 648 us against KernelScan's 581, 1280 rows
#: 876 against 1197; a one-step scan (Recurrent.step with autograd) 539 against 186 us.
PIECEWISE_LINEAR_MIN_ROWS = 1024

#: Widest f_r features (k) for which, with the gate, the kernel forms f_r's last layer ``f_t`` itself.
#: The backward forms ``f_t`` again for the gate's derivative: one more product of H k multiply-adds
#: per row, where a BLAS-filled ``(T, B, H)`` array of f costs passes over memory instead. At k = 32
#: (the default width) the two cost about the same time, the kernel's saves two ``(T, B, H)``
#: arrays; wider, the extra product costs more. Without the gate, ``f_t`` is formed once: always here.
READOUT_IN_KERNEL_MAX_WIDTH = 32

#: Largest input size d for which the kernel forms the gate's logits ``W_g x_t`` itself (d
#: multiply-adds per element) instead of reading them from a (T, B, H) array filled by BLAS.
GATE_IN_KERNEL_MAX_INPUT = 4


def _product_into(out: Tensor, inputs: Tensor, weight: Tensor) -> Tensor:
    """``out = inputs weight^T`` (no bias) for ``inputs (T, B, k)``, written into ``out (T, B, H)``."""
    torch.mm(inputs.reshape(-1, inputs.shape[-1]), weight.t(), out=out.view(-1, out.shape[-1]))
    return out


def _as_blas_rows(features: Tensor) -> Tensor:
    """``features (T, B, k)`` as the kernel reads them: each step's rows a BLAS operand (last axis
    contiguous, rows apart by at least their width). Time-major or batch-first views pass as they are."""
    width = features.shape[-1]
    if (width <= 1 or features.stride(-1) == 1) and (features.shape[1] <= 1 or features.stride(1) >= width):
        return features
    return features.contiguous()


def kernel_supports(x: Tensor) -> bool:
    """True when the compiled kernel can run on tensors like ``x`` (and it builds on this machine)."""
    return kernel_runs_on("srnn", x)
