"""SA-RNN, the selective-activation RNN (Hartvigsen et al. 2020).

Shapes follow the legend in :mod:`ltdrnn.cells.base`. Like the other conditional-computation cells it
records ``aux["update_mask"]`` and ``aux["update_prob"]`` (:mod:`ltdrnn.cells.masked`, which holds the
update-mask tools they share).

Doc: docs/cells/sarnn.md
Tests: tests/cells/test_sarnn.py, tests/cells/test_contract.py
Kernel: src/ltdrnn/csrc/sarnn.cpp (CPU); src/ltdrnn/cells/fused/sarnn_triton.py (GPU)
"""

from __future__ import annotations

import math
from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..flops import GRU_UNIT_EXTRA, LSTM_UNIT_EXTRA, masked_unit_flops
from ..kernels import StreamOperands, load_torch_ops, stream_in_kernel
from ..scan import ParameterCache, final_state_at_lengths
from .base import State, check_choice, check_positive_float, mask_outputs
from .fused.triton_support import autocast_weight, triton_runs_on
from .masked import (
    MaskedCell,
    binary,
    gru_candidate,
    gru_gates,
    init_uniform,
    lstm_candidate,
    straight_through_mix,
    sum_over_valid_steps,
)
from .registry import register

_PAPER = (
    "Hartvigsen, Sen, Kong & Rundensteiner 2020, Learning to Selectively Update State Neurons "
    "in Recurrent Networks (CIKM)"
)


# ---- SA-RNN ---------------------------------------------------------------------------------------
@register(
    "sarnn",
    family="source",
    paper=_PAPER,
    gradcheck=False,
    variants={"lstm": {"recurrence": "lstm"}, "fixed_slope": {"anneal_slope": False, "slope": 2.0}},
)
class SARNN(MaskedCell):
    """Selective-activation RNN: a GRU (or LSTM) whose units are updated only where a coordinator says.

    State: ``h (B, H)`` for ``recurrence="gru"``; ``(h, c)`` for ``"lstm"``. Output ``h_t``::

        a_t   = w_u * h_{t-1} + W_i x_t + b            (w_u a vector: the diagonal of W_u)
        u~_t  = clamp((alpha * a_t + 1) / 2, 0, 1)      (hard sigmoid with slope alpha)
        u_t   = 1[u~_t > 0.5]                           (straight-through: du/du~ = 1)
        h~_t  = GRU(x_t, h_{t-1})                       (torch.nn.GRU equations and layout)
        h_t   = u_t * h~_t + (1 - u_t) * h_{t-1}
        LSTM: (h~_t, c~_t) = LSTM(x_t, h_{t-1}, c_{t-1}); the same u_t selects both h and c, so a
              skipped unit keeps its whole memory (h and c) unchanged.

    Equivalent to (the reference)::

        for t in range(T):
            prob = hard_sigmoid(w_u * h + W_i @ x[t] + b, alpha); u = prob > 0.5
            h = where(u, GRU(x[t], h), h)

    Slope: ``alpha = slope`` if not ``anneal_slope``, else ``alpha = min(max_slope, slope +
    slope_increment * epoch)`` after ``set_epoch(epoch)`` (paper: ``min(5, 1 + 0.04 epoch)``).

    Extra outputs of the last forward pass: ``aux["update_mask"]`` ``u`` and ``aux["update_prob"]``
    ``u~``, each ``(T, B, H)``; ``losses()["budget"]`` = ``sum_t u~_t`` averaged over batch and units
    (real steps only). The paper's loss sums over units, so its lambda equals ours divided by ``H``.

    Implementations: ``"reference"`` (loop over ``step``), ``"fused"`` (GRU only: precomputed input
    projections, one ``addmm`` per step, hand-written backward), ``"sparse"`` (GRU only, inference:
    computes the candidate only for units that some sequence updates; under autograd it runs
    ``"fused"``, because the straight-through gradient needs every unit's candidate), ``"triton"`` (GRU only:
    the time loop in one Triton launch per direction, :mod:`ltdrnn.cells.fused.sarnn_triton`; the default
    for CUDA tensors when Triton is installed; where Triton cannot run, ``"fused"``).

    Args:
        input_size, hidden_size: d, H.
        recurrence: ``"gru"`` (paper) or ``"lstm"``.
        slope, anneal_slope, slope_increment, max_slope: the hard-sigmoid slope and its schedule.
        impl, device, dtype: see :class:`~ltdrnn.cells.base.Cell`.

    Init: recurrence as torch.nn (``U(-1/sqrt(H), 1/sqrt(H))``); coordinator ``W_i``, ``w_u``, ``b``
    also ``U(-1/sqrt(H), 1/sqrt(H))`` (the paper does not say), so about half the units update at first.

    Examples::

        >>> import torch
        >>> from ltdrnn.cells.sarnn import SARNN
        >>> _ = torch.manual_seed(0)
        >>> cell = SARNN(input_size=3, hidden_size=8)
        >>> x = torch.randn(20, 4, 3)                       # (T, B, d)
        >>> outputs, state = cell.scan(x)
        >>> outputs.shape, cell.aux["update_mask"].shape    # 1 where a unit was updated at a step
        (torch.Size([20, 4, 8]), torch.Size([20, 4, 8]))
        >>> reference, _ = cell.scan(x, impl="reference")
        >>> torch.allclose(outputs, reference, atol=1e-6)
        True
        >>> skipped = 1 - cell.aux["update_mask"].mean()    # the paper's Skip %, as a fraction
        >>> bool(0 <= skipped <= 1), sorted(cell.losses())  # the budget term, weighted by lambda
        (True, ['budget'])
    """

    # The straight-through surrogate lets gradients grow with T: over 3 seeds (H=64) the largest
    # parameter-gradient norm stays below 1e5 up to T=2000 and passes 1e6 at T=3000 (docs/reliability.md).
    gradient_length_limit = 2000

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        recurrence: str = "gru",
        slope: float = 1.0,
        anneal_slope: bool = True,
        slope_increment: float = 0.04,
        max_slope: float = 5.0,
        impl: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        check_choice("recurrence", recurrence, ("gru", "lstm"))
        # set before Cell.__init__ validates ``impl`` against them: the fast paths are GRU-only
        self.impls = ("reference", "fused", "sparse", "triton") if recurrence == "gru" else ("reference",)
        self.default_impl = "fused" if recurrence == "gru" else "reference"
        super().__init__(input_size, hidden_size, impl=impl, device=device, dtype=dtype)
        self.recurrence = recurrence
        if not isinstance(anneal_slope, bool):
            raise TypeError(f"anneal_slope: expected a bool, got {anneal_slope!r}")
        self.initial_slope = check_positive_float("slope", slope)
        self.anneal_slope = anneal_slope
        self.slope_increment = float(slope_increment)
        if not math.isfinite(self.slope_increment) or self.slope_increment < 0:
            raise ValueError(f"slope_increment: expected a finite number >= 0, got {slope_increment!r}")
        self.max_slope = check_positive_float("max_slope", max_slope)
        self.slope = self.initial_slope
        gates = 3 if recurrence == "gru" else 4
        self.weight_ih = nn.Parameter(torch.empty(gates * hidden_size, input_size, **self.factory))
        self.weight_hh = nn.Parameter(torch.empty(gates * hidden_size, hidden_size, **self.factory))
        self.bias_ih = nn.Parameter(torch.empty(gates * hidden_size, **self.factory))
        self.bias_hh = nn.Parameter(torch.empty(gates * hidden_size, **self.factory))
        self.coord_weight_ih = nn.Parameter(torch.empty(hidden_size, input_size, **self.factory))
        self.coord_weight_hh = nn.Parameter(torch.empty(hidden_size, **self.factory))
        self.coord_bias = nn.Parameter(torch.empty(hidden_size, **self.factory))
        self._stream_cache = ParameterCache()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init_uniform(self.parameters(), 1.0 / math.sqrt(self.hidden_size))

    def set_epoch(self, epoch: int) -> None:
        """Slope annealing: ``alpha = min(max_slope, slope + slope_increment * epoch)``."""
        if self.anneal_slope:
            self.slope = min(self.max_slope, self.initial_slope + self.slope_increment * epoch)

    # The annealed slope is part of the trained model: it travels in the state dict (and so in every
    # checkpoint), or a model restored for evaluation or export would run with the initial slope.
    def get_extra_state(self) -> Dict[str, float]:
        return {"slope": self.slope}

    def set_extra_state(self, state: Dict[str, float]) -> None:
        self.slope = float(state["slope"])

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # a state dict saved before the slope was stored keeps the slope the cell has
        state_dict.setdefault(prefix + "_extra_state", self.get_extra_state())
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def init_state(self, batch_size: int, device=None, dtype=None) -> State:
        h = super().init_state(batch_size, device, dtype)
        return h if self.recurrence == "gru" else (h, h.clone())

    def precompute(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        """``(T, B, d) -> (W_ih x + b_ih (T, B, G*H), (alpha (W_i x + b) + 1) / 2 (T, B, H))``.

        The coordinator's input half is stored already scaled by the slope, so that per step only
        ``u~ = clamp(that + (alpha / 2) w_u * h, 0, 1)`` remains (the hard sigmoid, rearranged).
        """
        half = 0.5 * self.slope
        gi = F.linear(x, self.weight_ih, self.bias_ih)
        coord_in = F.linear(x, self.coord_weight_ih * half, self.coord_bias * half + 0.5)
        return gi, coord_in

    def coordinate(self, coord_in: Tensor, h: Tensor) -> Tuple[Tensor, Tensor]:
        """``(u~, u)``: update probability and the update decision (float 0/1), each ``(B, H)``.

        ``u~ = hard_sigmoid(w_u * h + W_i x + b, alpha)``, computed from ``coord_in`` of
        :meth:`precompute` as ``clamp(coord_in + (alpha / 2) w_u * h, 0, 1)``.
        """
        prob = torch.clamp(torch.addcmul(coord_in, self.scaled_coord_weight(), h), 0.0, 1.0)
        return prob, binary(prob, 0.5)

    def scaled_coord_weight(self) -> Tensor:
        """``(alpha / 2) w_u``, the diagonal recurrent weight of the coordinator times the half slope."""
        return self.coord_weight_hh * (0.5 * self.slope)

    def step_with_aux(self, p_t: Tuple[Tensor, Tensor], state: State):
        gi, coord_in = p_t
        if self.recurrence == "gru":
            h = state
            prob, u = self.coordinate(coord_in, h)
            h_new = straight_through_mix(u, prob, gru_candidate(gi, h, h, self.weight_hh, self.bias_hh), h)
            new_state = h_new
        else:
            h, c = state
            prob, u = self.coordinate(coord_in, h)
            h_cand, c_cand = lstm_candidate(gi, h, c, self.weight_hh, self.bias_hh)
            h_new = straight_through_mix(u, prob, h_cand, h)
            new_state = (h_new, straight_through_mix(u, prob, c_cand, c))
        return h_new, new_state, {"update_mask": u, "update_prob": prob}

    def forward(self, x_t: Tensor, state: State | None = None) -> Tuple[Tensor, State]:
        """One step from raw input, as :meth:`Cell.forward`. Without autograd, with a GRU, a fast
        ``impl`` and batch up to :data:`~ltdrnn.kernels.STREAM_MAX_BATCH`, the whole step is one call of
        ``torch.ops.ltdrnn.sarnn_stream`` (which computes the candidate only for the units it updates)."""
        if state is not None and self.resolved_impl() != "reference":
            h = self._stream_in_kernel(x_t, state)
            if h is not None:
                return h, h
        return super().forward(x_t, state)

    def _stream_in_kernel(self, x_t: Tensor, h: Tensor) -> Tensor | None:
        """``h_t`` from one call of the compiled streaming step (recording ``aux``), or None where it
        does not apply."""
        outputs = stream_in_kernel(
            "sarnn",
            lambda: self._stream_cache.get(tuple(self._parameters.values()), self._stream_operands, self.slope),
            x_t,
            h,
            self.input_size,
            (self.hidden_size,),
        )
        if outputs is None:
            return None
        out, prob, mask = outputs
        # what record_aux(..., lengths=None) keeps; set through __dict__ because nn.Module's
        # __setattr__ costs microseconds, a large share of a streaming step
        vars(self).update(aux={"update_mask": mask[None], "update_prob": prob[None]}, _valid=None)
        return out

    def _stream_operands(self) -> StreamOperands:
        """The GRU weights and the coordinator scaled as in :meth:`precompute` (same ops, same values)."""
        half = 0.5 * self.slope
        return StreamOperands(
            (
                self.weight_ih,
                self.bias_ih,
                self.weight_hh,
                self.bias_hh,
                self.coord_weight_ih * half,
                self.coord_bias * half + 0.5,
                self.scaled_coord_weight(),
            )
        )

    def stream_step(self, x_t: Tensor, state: State, impl: str) -> Tuple[Tensor, State] | None:
        h = self._stream_in_kernel(x_t, state)
        return None if h is None else (h, h)

    def scan_fast(self, x: Tensor, state: State, lengths: Tensor | None, impl: str) -> Tuple[Tensor, State]:
        if impl == "triton" and triton_runs_on(x):
            return self._triton_scan(x, state, lengths)
        gi, coord_in = self.precompute(x)
        needs_grad = torch.is_grad_enabled() and (
            x.requires_grad or state.requires_grad or any(p.requires_grad for p in self.parameters())
        )
        if impl == "sparse" and not needs_grad:
            with torch.no_grad():
                outputs, probs, masks = sparse_sarnn_gru(
                    gi, coord_in, state, self.weight_hh, self.bias_hh, self.scaled_coord_weight()
                )
        else:
            outputs, probs, masks = FusedSARNNGRU.apply(
                gi, coord_in, state, self.weight_hh, self.bias_hh, self.scaled_coord_weight()
            )
        self.record_aux({"update_mask": masks, "update_prob": probs}, lengths)
        return final_from_outputs(outputs, state, lengths)

    def _triton_scan(self, x: Tensor, state: Tensor, lengths: Tensor | None) -> Tuple[Tensor, Tensor]:
        """The GRU time loop in one Triton launch per direction (:mod:`ltdrnn.cells.fused.sarnn_triton`), the
        input projections one GEMM each before it; records ``aux`` as the other paths do."""
        from .fused.sarnn_triton import sarnn_scan

        gi, coord_in = self.precompute(x)
        weight_hh = autocast_weight(self.weight_hh, x.device.type)
        outputs, probs, masks = sarnn_scan(
            gi, coord_in, state, weight_hh, self.bias_hh, self.scaled_coord_weight(), lengths
        )
        self.record_aux({"update_mask": masks.detach(), "update_prob": probs}, lengths)
        return outputs, final_state_at_lengths(outputs, lengths)

    def losses(self) -> dict[str, Tensor]:
        """``{"budget": sum_t u~_t}``, averaged over batch and units (real steps only)."""
        if "update_prob" not in self.aux:
            return {}
        return {"budget": sum_over_valid_steps(self.aux["update_prob"], self.valid()).mean()}

    def flops_per_sequence(self, steps: int, skip_fraction: float | None = None) -> float:
        """Multiplications for one sequence: the coordinator on every step for every unit
        (``W_i x``: d, ``w_u h``: 1, slope: 1), the candidate only for updated units.
        ``skip_fraction=None`` counts the dense upper bound (every unit updated)."""
        d, hdim = self.input_size, self.hidden_size
        if self.recurrence == "gru":
            unit = 3 * (d + hdim) + GRU_UNIT_EXTRA
        else:
            unit = 4 * (d + hdim) + LSTM_UNIT_EXTRA
        return masked_unit_flops(steps, hdim, unit, d + 2, skip_fraction)

    def extra_repr(self) -> str:
        return (
            super().extra_repr() + f", recurrence={self.recurrence!r}, slope={self.slope:g}, "
            f"anneal_slope={self.anneal_slope}"
        )


def final_from_outputs(outputs: Tensor, state: Tensor, lengths: Tensor | None) -> Tuple[Tensor, Tensor]:
    """For cells whose state is their output: the final state is the output at each true length."""
    if lengths is None:
        return outputs, outputs[-1]
    last = (lengths.to(outputs.device) - 1).view(1, -1, 1).expand(1, -1, outputs.shape[-1])
    return mask_outputs(outputs, lengths), outputs.gather(0, last)[0]


class FusedSARNNGRU(torch.autograd.Function):
    """SA-RNN (GRU) over a whole sequence with a hand-written backward through time.

    Forward ``(gi (T,B,3H), coord_in (T,B,H), h0 (B,H), weight_hh, bias_hh, scaled_coord_weight (H,))
    -> (outputs, probs, masks)``, each ``(T, B, H)`` (see :meth:`SARNN.precompute` for ``coord_in``;
    ``masks`` float 0/1). It runs the same ops as the reference step, so the decisions agree bit for
    bit; the backward implements the straight-through estimator without autograd's per-op
    bookkeeping. Per-step intermediates stay in small per-step tensors (reused warm by the
    allocator); sequence-sized tensors are allocated once and written in place, never stacked.

    On CPU in float32/64, both time loops run in one call each of the ATen operators of
    ``csrc/sarnn.cpp`` when it builds here (:func:`_compiled_loop_runs`): no Python per step.
    Without a C++ compiler, or with ``LTDRNN_NO_KERNELS=1``, the PyTorch loops below run.
    """

    @staticmethod
    def forward(ctx, gi, coord_in, h0, weight_hh, bias_hh, coord_weight):
        ctx.compiled = _compiled_loop_runs(gi)
        if ctx.compiled:
            return _compiled_forward(ctx, gi, coord_in, h0, weight_hh, bias_hh, coord_weight)
        hidden = coord_in.shape[-1]
        weight_t = weight_hh.t()
        outputs, pres, masks = (torch.empty_like(coord_in) for _ in range(3))
        keep = any(ctx.needs_input_grad)  # nothing to save for inference
        h = h0
        saved = []
        for gi_t, c_t, out_t, pre_t, mask_t in zip(
            gi.unbind(0), coord_in.unbind(0), outputs.unbind(0), pres.unbind(0), masks.unbind(0)
        ):
            gh = torch.addmm(bias_hh, h, weight_t)
            # in place: gh_rz is not needed again, so gh ends up holding (r, z, gh_n)
            rz = gh[:, : 2 * hidden].add_(gi_t[:, : 2 * hidden]).sigmoid_()
            n = torch.tanh(torch.addcmul(gi_t[:, 2 * hidden :], rz[:, :hidden], gh[:, 2 * hidden :]))
            cand = torch.lerp(n, h, rz[:, hidden:])
            # clamp(pre) > 0.5 exactly when pre > 0.5, so the clamp waits until after the loop
            u = torch.gt(torch.addcmul(c_t, coord_weight, h, out=pre_t), 0.5, out=mask_t)
            h = torch.lerp(h, cand, u, out=out_t)
            if keep:
                saved.append((gh, n))
        ctx.saved = saved
        ctx.save_for_backward(h0, weight_hh, coord_weight, outputs, masks, pres)
        ctx.mark_non_differentiable(masks)
        return outputs, torch.clamp(pres, 0.0, 1.0), masks

    @staticmethod
    def backward(ctx, d_outputs, d_probs, _d_masks):
        if ctx.compiled:
            return _compiled_backward(ctx, d_outputs, d_probs)
        h0, weight_hh, coord_weight, outputs, masks, pres = ctx.saved_tensors
        saved, ctx.saved = ctx.saved, None
        steps, batch, hidden = outputs.shape
        aten = torch.ops.aten
        weight_rz, weight_n = weight_hh[: 2 * hidden], weight_hh[2 * hidden :]
        d_gi = outputs.new_empty(steps, batch, 3 * hidden)
        d_gh_n, d_coord = torch.empty_like(outputs), torch.empty_like(outputs)
        d_coord_weight = torch.zeros_like(h0)
        carry = torch.zeros_like(h0)
        previous = [h0] + list(outputs.unbind(0))[:-1]
        per_step = zip(
            saved,
            previous,
            masks.unbind(0),
            pres.unbind(0),
            d_outputs.unbind(0),
            d_probs.unbind(0),
            d_gi.unbind(0),
            d_gh_n.unbind(0),
            d_coord.unbind(0),
        )
        for (gh, n), hp, u, pre, d_out, d_prob, d_gi_t, d_gh_n_t, d_coord_t in reversed(list(per_step)):
            r, z = gh[:, :hidden], gh[:, hidden : 2 * hidden]
            dh = carry + d_out
            d_cand = dh * u
            d_n = aten.tanh_backward(
                torch.addcmul(d_cand, d_cand, z, value=-1.0), n, grad_input=d_gi_t[:, 2 * hidden :]
            )
            aten.sigmoid_backward(d_n * gh[:, 2 * hidden :], r, grad_input=d_gi_t[:, :hidden])
            aten.sigmoid_backward(d_cand * (hp - n), z, grad_input=d_gi_t[:, hidden : 2 * hidden])
            torch.mul(d_n, r, out=d_gh_n_t)
            # straight-through (d u / d u~ = 1), then the clamp of the hard sigmoid; the candidate
            # is recomputed exactly as in forward rather than kept for every step
            delta = torch.lerp(n, hp, z).sub_(hp)
            aten.hardtanh_backward(torch.addcmul(d_prob, dh, delta), pre, 0.0, 1.0, grad_input=d_coord_t)
            d_coord_weight.addcmul_(d_coord_t, hp)
            carry = torch.addcmul(dh - d_cand, d_cand, z).addcmul_(d_coord_t, coord_weight)
            carry.addmm_(d_gi_t[:, : 2 * hidden], weight_rz).addmm_(d_gh_n_t, weight_n)
        d_rz = d_gi[..., : 2 * hidden]
        d_weight_hh = torch.cat([weight_gradient(d_rz, outputs, h0), weight_gradient(d_gh_n, outputs, h0)])
        d_bias_hh = torch.cat([d_rz.sum((0, 1)), d_gh_n.sum((0, 1))])
        return d_gi, d_coord, carry, d_weight_hh, d_bias_hh, d_coord_weight.sum(0)


# ---- the whole time loop in compiled code (csrc/sarnn.cpp) ----------------------------------------
def _compiled_loop_runs(gi: Tensor) -> bool:
    """Whether both time loops run in ``csrc/sarnn.cpp``: CPU, float32/64, and the operators build."""
    return gi.device.type == "cpu" and gi.dtype in (torch.float32, torch.float64) and load_torch_ops("sarnn")


def _compiled_forward(ctx, gi, coord_in, h0, weight_hh, bias_hh, coord_weight):
    """The forward time loop in one call; keeps each step's gates and candidate ``n`` for the backward
    (one reused row of each when no gradient is needed)."""
    steps, batch, hidden = coord_in.shape
    rows = steps if any(ctx.needs_input_grad) else 1
    gi, coord_in, h0 = gi.detach().contiguous(), coord_in.detach().contiguous(), h0.detach().contiguous()
    outputs, pres, masks = (torch.empty_like(coord_in) for _ in range(3))
    gates, news = gi.new_empty(rows, batch, 3 * hidden), gi.new_empty(rows, batch, hidden)
    torch.ops.ltdrnn.sarnn_gru_forward(
        gi, coord_in, h0, weight_hh.detach().t(), bias_hh.detach().contiguous(),
        coord_weight.detach().contiguous(), outputs, pres, masks, gates, news,
    )  # fmt: skip
    ctx.save_for_backward(h0, weight_hh, coord_weight, outputs, masks, pres, gates, news)
    ctx.mark_non_differentiable(masks)
    return outputs, torch.clamp(pres, 0.0, 1.0), masks


def _compiled_backward(ctx, d_outputs: Tensor, d_probs: Tensor) -> tuple:
    """The backward time loop in one call; the weight gradients are two large products after it."""
    h0, weight_hh, coord_weight, outputs, masks, pres, gates, news = ctx.saved_tensors
    steps, batch, hidden = outputs.shape
    d_gi = outputs.new_empty(steps, batch, 3 * hidden)
    d_gh_n, d_coord = torch.empty_like(outputs), torch.empty_like(outputs)
    d_coord_weight, carry = torch.empty_like(h0), torch.empty_like(h0)
    torch.ops.ltdrnn.sarnn_gru_backward(
        gates, news, outputs, h0, masks, pres, d_outputs.contiguous(), d_probs.contiguous(), weight_hh.detach(),
        coord_weight.detach().contiguous(), d_gi, d_gh_n, d_coord, d_coord_weight,
        outputs.new_empty(batch, 3 * hidden), carry,
    )  # fmt: skip
    d_rz = d_gi[..., : 2 * hidden]
    d_weight_hh = torch.cat([weight_gradient(d_rz, outputs, h0), weight_gradient(d_gh_n, outputs, h0)])
    d_bias_hh = torch.cat([d_rz.sum((0, 1)), d_gh_n.sum((0, 1))])
    return d_gi, d_coord, carry, d_weight_hh, d_bias_hh, d_coord_weight.sum(0)


def weight_gradient(d_pre: Tensor, outputs: Tensor, h0: Tensor) -> Tensor:
    """``sum_t d_pre[t]^T h_{t-1}`` for pre-activations ``W h_{t-1}``, with ``h_{t-1}`` read from
    ``outputs`` shifted by one step (no copy of the sequence)."""
    hidden = outputs.shape[-1]
    first = d_pre[0].t() @ h0
    if outputs.shape[0] == 1:
        return first
    rest = d_pre[1:].reshape(-1, d_pre.shape[-1]).t() @ outputs[:-1].reshape(-1, hidden)
    return first + rest


def sparse_sarnn_gru(
    gi: Tensor,
    coord_in: Tensor,
    h0: Tensor,
    weight_hh: Tensor,
    bias_hh: Tensor,
    coord_weight: Tensor,
    dense_above: float = 0.3,
) -> Tuple[Tensor, Tensor, Tensor]:
    """Inference that computes the GRU candidate only for units updated by at least one sequence.

    Per step, with ``k`` such units, the recurrent matmul is ``(B, H) x (H, 3k)`` on the gathered rows
    of ``W_hh`` instead of ``(B, H) x (H, 3H)``; a step where no unit updates does no GRU work at all.
    Gathering the rows costs about as much as using them once, so steps with more than
    ``dense_above * H`` active units run the dense step instead. (The union over the batch is what
    one matmul can skip; with ``B = 1`` it is exactly the skipped units.)
    Returns ``(outputs, probs, masks)`` like :class:`FusedSARNNGRU`.
    """
    hidden = coord_in.shape[-1]
    gate_offsets = torch.arange(3, device=coord_in.device).unsqueeze(1) * hidden
    h = h0
    hs, probs, masks = [], [], []
    for gi_t, c_t in zip(gi.unbind(0), coord_in.unbind(0)):
        prob = torch.clamp(torch.addcmul(c_t, coord_weight, h), 0.0, 1.0)
        u = binary(prob, 0.5)
        active = u.amax(0).nonzero().squeeze(1)
        if active.numel() > dense_above * hidden:
            h = torch.lerp(h, gru_candidate(gi_t, h, h, weight_hh, bias_hh), u)
        elif active.numel():
            rows = (gate_offsets + active).reshape(-1)  # r, z, n rows of the active units
            gh = torch.addmm(bias_hh.index_select(0, rows), h, weight_hh.index_select(0, rows).t())
            h_active = h.index_select(1, active)
            rz, n, _ = gru_gates(gi_t.index_select(1, rows), gh, active.numel())
            cand = torch.lerp(n, h_active, rz[:, active.numel() :])
            h = h.index_copy(1, active, torch.lerp(h_active, cand, u.index_select(1, active)))
        hs.append(h)
        probs.append(prob)
        masks.append(u)
    return torch.stack(hs), torch.stack(probs), torch.stack(masks)
