"""SA-RNN, the selective-activation RNN (Hartvigsen et al. 2020).

Shapes follow the legend in :mod:`ltdrnn.cells.base`. Like the other conditional-computation cells it
records ``aux["update_mask"]`` and ``aux["update_prob"]`` (:mod:`ltdrnn.cells.masked`, which holds the
update-mask tools they share).

This module holds the cell: its parameters, init, the slope's schedule, the reference step, the budget loss,
the FLOPs and registration. Its fast paths (the GRU in backends ``"torch"``, ``"cpp"``, ``"sparse"`` and
``"triton"``: a hand-written forward and backward over the whole sequence, in PyTorch, compiled or in Triton,
and inference that skips the candidate of units no sequence updates) are :mod:`ltdrnn.ops.sarnn`.

Doc: docs/cells/sarnn.md
Tests: tests/cells/test_sarnn.py, tests/cells/test_contract.py
Kernel: src/ltdrnn/ops/csrc/sarnn.cpp (CPU); src/ltdrnn/ops/sarnn_triton.py (GPU)
"""

from __future__ import annotations

import math
from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..flops import GRU_UNIT_EXTRA, LSTM_UNIT_EXTRA, masked_unit_flops
from ..ops import sarnn as sarnn_ops
from ..ops.common import ParameterCache, binary, gru_candidate
from .base import State, check_choice, check_positive_float, init_uniform
from .masked import MaskedCell, lstm_candidate, straight_through_mix, sum_over_valid_steps
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
    variants={
        "lstm": {"recurrence": "lstm"},
        "fixed_slope": {"anneal_slope": False, "slope": 2.0},
        "authors_coordinator_gradient": {"coordinator_state_grad": True},
    },
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

    Gradient: straight-through, ``du/du~ = 1``. By default (``coordinator_state_grad=False``) the coordinator
    reads ``h_{t-1}`` as a constant in the backward pass (``a_t = w_u * stop_grad(h_{t-1}) + ...``): the
    surrogate trains ``w_u``, ``W_i`` and ``b``, but adds nothing to ``dL/dh_{t-1}``. With True (the
    authors' code) it also flows into ``h_{t-1}``, a term the forward function does not have, which
    compounds along the sequence. The forward pass is the same either way.

    Slope: ``alpha = slope`` if not ``anneal_slope``, else ``alpha = min(max_slope, slope +
    slope_increment * epoch)`` after ``set_epoch(epoch)`` (paper: ``min(5, 1 + 0.04 epoch)``).

    Extra outputs of the last forward pass: ``aux["update_mask"]`` ``u`` and ``aux["update_prob"]``
    ``u~``, each ``(T, B, H)``; ``losses()["budget"]`` = ``sum_t u~_t`` averaged over batch and units
    (real steps only). The paper's loss sums over units, so its lambda equals ours divided by ``H``.

    Backends: ``"reference"`` (loop over ``step``), ``"torch"`` (GRU only: precomputed input
    projections, one ``addmm`` per step, hand-written backward), ``"cpp"`` (GRU only: the same time loops
    compiled, ``ops/csrc/sarnn.cpp``; where they cannot run, ``"torch"``), ``"sparse"`` (GRU only, inference:
    computes the candidate only for units that some sequence updates; under autograd it runs
    ``"cpp"``, because the straight-through gradient needs every unit's candidate), ``"triton"`` (GRU only:
    the time loop in one Triton launch per direction, :mod:`ltdrnn.ops.sarnn_triton`; the default
    for CUDA tensors when Triton is installed; where Triton cannot run, ``"cpp"`` or ``"torch"``).

    Args:
        input_size, hidden_size: d, H.
        recurrence: ``"gru"`` (paper) or ``"lstm"``.
        slope, anneal_slope, slope_increment, max_slope: the hard-sigmoid slope and its schedule.
        coordinator_state_grad: whether the straight-through gradient flows from the coordinator into
            ``h_{t-1}`` (True, as the authors' code) or stops there (False, the default since 2026-11-27:
            with True most adding T = 500 and pixel-MNIST runs jumped; docs/cells/sarnn.md, "Gradient").
        backend, device, dtype: see :class:`~ltdrnn.cells.base.Cell`.

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
        >>> reference, _ = cell.scan(x, backend="reference")
        >>> torch.allclose(outputs, reference, atol=1e-6)
        True
        >>> skipped = 1 - cell.aux["update_mask"].mean()    # the paper's Skip %, as a fraction
        >>> bool(0 <= skipped <= 1), sorted(cell.losses())  # the budget term, weighted by lambda
        (True, ['budget'])
    """

    # With the straight-through surrogate's path through the coordinator's read of h_{t-1}
    # (coordinator_state_grad=True) gradients grow geometrically with T; measured up to which T they stay
    # usable: docs/reliability.md, "SA-RNN's gradients with the authors' surrogate path grow with T".
    # Without it they grow about linearly.
    authors_gradient_length_limit = 2000
    kernel = "sarnn"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        recurrence: str = "gru",
        slope: float = 1.0,
        anneal_slope: bool = True,
        slope_increment: float = 0.04,
        max_slope: float = 5.0,
        coordinator_state_grad: bool = False,
        backend: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        check_choice("recurrence", recurrence, ("gru", "lstm"))
        # set before Cell.__init__ validates ``backend`` against them: the fast paths are GRU-only
        self.backends = ("reference", "torch", "cpp", "sparse", "triton") if recurrence == "gru" else ("reference",)
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        self.recurrence = recurrence
        if not isinstance(anneal_slope, bool):
            raise TypeError(f"anneal_slope: expected a bool, got {anneal_slope!r}")
        self.initial_slope = check_positive_float("slope", slope)
        self.anneal_slope = anneal_slope
        if not isinstance(coordinator_state_grad, bool):
            raise TypeError(f"coordinator_state_grad: expected a bool, got {coordinator_state_grad!r}")
        self.coordinator_state_grad = coordinator_state_grad
        if coordinator_state_grad:
            self.gradient_length_limit = self.authors_gradient_length_limit
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
        #: the operands of a streamed step, formed once per parameter or slope change (:func:`ltdrnn.ops.sarnn.stream`)
        self.stream_cache = ParameterCache()
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
        return F.linear(x, self.weight_ih, self.bias_ih), self.coordinator_input(x)

    def coordinator_input(self, x: Tensor) -> Tensor:
        """The second half of :meth:`precompute`: ``(T, B, d) -> (alpha (W_i x + b) + 1) / 2 (T, B, H)``."""
        half = 0.5 * self.slope
        return F.linear(x, self.coord_weight_ih * half, self.coord_bias * half + 0.5)

    def coordinate(self, coord_in: Tensor, h: Tensor) -> Tuple[Tensor, Tensor]:
        """``(u~, u)``: update probability and the update decision (float 0/1), each ``(B, H)``.

        ``u~ = hard_sigmoid(w_u * h + W_i x + b, alpha)``, computed from ``coord_in`` of
        :meth:`precompute` as ``clamp(coord_in + (alpha / 2) w_u * h, 0, 1)``.
        """
        read = h if self.coordinator_state_grad else h.detach()
        prob = torch.clamp(torch.addcmul(coord_in, self.scaled_coord_weight(), read), 0.0, 1.0)
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

    # ---- the fast paths (ltdrnn.ops.sarnn) -----------------------------------------------------------
    def own_parameters(self) -> tuple:
        """The tensors the cached streaming operands derive from (with the slope)."""
        return tuple(self._parameters.values())

    def scan_fast(self, x: Tensor, state: State, lengths: Tensor | None, backend: str) -> Tuple[Tensor, State]:
        """The whole sequence in ``backend``: :func:`ltdrnn.ops.sarnn.scan`."""
        return sarnn_ops.scan(self, x, state, lengths, backend)

    def stream_step(self, x_t: Tensor, state: State, backend: str) -> Tuple[Tensor, State] | None:
        """One step without autograd: :func:`ltdrnn.ops.sarnn.stream`."""
        return sarnn_ops.stream(self, x_t, state, backend)

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
            + (", coordinator_state_grad=True" if self.coordinator_state_grad else "")
        )
