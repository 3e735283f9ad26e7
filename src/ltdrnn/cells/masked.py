"""The update-mask tools of the conditional-computation cells: SA-RNN (:mod:`ltdrnn.cells.sarnn`) and the
baselines ``skip``, ``clockwork``, ``phased`` and ``vcrnn``.

Shapes follow the legend in :mod:`ltdrnn.cells.base`.

Every cell of this group records, after each forward pass, ``aux["update_mask"]`` ``(T, B, H)``:
1 where unit ``j`` of sequence ``b`` was updated at step ``t`` and 0 where it kept its previous value
(cells with soft masks record the ceiling of the mask, as the SA-RNN paper counts them), and
``aux["update_prob"]``: the soft quantity the mask comes from. :func:`skip_fraction` turns the masks
into the paper's Skip % (eq. 10). :class:`MaskedCell` is their base: it stacks each step's extras into
``aux``. The straight-through helpers and the LSTM candidate are the pieces their steps share (the GRU step and
:func:`~ltdrnn.ops.common.binary` are in :mod:`ltdrnn.ops.common`, which SA-RNN's fast paths share too).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Tuple

import torch
from torch import Tensor

from ..ops.common import mask_outputs, step_mask, valid_steps
from .base import Cell, FinalStateRecorder, State, time_slices


def hard_sigmoid(a: Tensor, slope: float) -> Tensor:
    """``clamp((slope * a + 1) / 2, 0, 1)``, elementwise."""
    return torch.clamp((slope * a + 1.0) * 0.5, 0.0, 1.0)


def straight_through(decision: Tensor, prob: Tensor) -> Tensor:
    """``decision`` (float 0/1) whose gradient flows to ``prob`` unchanged (d/dprob = 1).

    Written ``decision + (prob - prob.detach())`` so the value is exactly 0 or 1.
    """
    return decision + (prob - prob.detach())


def straight_through_mix(decision: Tensor, prob: Tensor, candidate: Tensor, previous: Tensor) -> Tensor:
    """``u * candidate + (1 - u) * previous`` with ``u = decision`` (float 0/1) exactly in value and
    the straight-through gradient ``d/dprob = candidate - previous`` (``du/dprob = 1``).

    The value is a selection: ``lerp`` is exact at weights 0 and 1, so a skipped unit keeps its
    previous value bit for bit.
    """
    chosen = torch.lerp(previous, candidate, decision)
    return chosen + (prob - prob.detach()) * (candidate - previous)


def skip_fraction(masks: Tensor | Dict[str, Tensor], lengths: Tensor | None = None) -> Tensor:
    """Skip % of the SA-RNN paper (eq. 10): ``1 - mean(u)`` over time, batch and units.

    Args:
        masks: ``(T, B, H)`` update mask (1 = updated), or an ``aux`` dict holding ``"update_mask"``.
        lengths: ``(B,)`` true lengths; steps ``t >= lengths[b]`` are left out of the mean.

    Returns:
        a 0-dim tensor in ``[0, 1]``.
    """
    updated, counted = update_counts(masks["update_mask"] if isinstance(masks, dict) else masks, lengths)
    return 1.0 - updated / counted


def update_counts(mask: Tensor, lengths: Tensor | None) -> Tuple[Tensor, Tensor]:
    """``(updated, counted)`` of an update mask ``(T, B, ...)`` (1 = updated): its sum over the true
    steps ``t < lengths[b]`` (all steps when ``lengths`` is None) and how many entries that sum covers."""
    mask = mask.float()
    if lengths is None:
        return mask.sum(), torch.tensor(float(mask.numel()), device=mask.device)
    valid = valid_steps(mask, lengths).to(mask.dtype)
    return (mask * valid).sum(), valid.sum() * math.prod(mask.shape[2:])


def sum_over_valid_steps(values: Tensor, valid: Tensor | None) -> Tensor:
    """``values (T, B, ...)`` summed over the true steps of each sequence: ``(B, ...)``."""
    if valid is not None:
        values = values * valid.view(*valid.shape, *([1] * (values.dim() - 2))).to(values.dtype)
    return values.sum(0)


class MaskedCell(Cell):
    """A cell whose step also reports per-step extras (update masks) that ``scan`` stacks into ``aux``.

    Subclasses implement ``step_with_aux(p_t, state) -> (h_t, state, {name: (B, ...)})``; ``step`` is
    that without the extras. The reference scan is the plain loop; it stacks the extras over time and
    remembers which steps were real (``lengths``) for the loss terms.
    """

    def step_with_aux(self, p_t: Any, state: State) -> Tuple[Tensor, State, Dict[str, Tensor]]:
        raise NotImplementedError

    def step(self, p_t: Any, state: State) -> Tuple[Tensor, State]:
        h, state, _ = self.step_with_aux(p_t, state)
        return h, state

    def scan_reference(self, x: Tensor, state: State, lengths: Tensor | None = None) -> Tuple[Tensor, State]:
        """``for t: h_t, state, extras_t = step_with_aux(precompute(x)[t], state)``."""
        slices = time_slices(self.precompute(x))
        recorder = FinalStateRecorder(lengths, len(slices))
        outputs, extras = [], []
        for t, p_t in enumerate(slices):
            h, state, extra = self.step_with_aux(p_t, state)
            outputs.append(h)
            extras.append(extra)
            recorder.offer(t + 1, state)
        self.record_aux({k: torch.stack([e[k] for e in extras]) for k in extras[0]}, lengths)
        return mask_outputs(torch.stack(outputs), lengths), recorder.final(state)

    def record_aux(self, aux: Dict[str, Tensor], lengths: Tensor | None) -> None:
        """Keep the extras of this forward pass; masks become ``(T, B, H)`` (expanded, not copied)."""
        steps, batch = aux["update_mask"].shape[:2]
        aux["update_mask"] = aux["update_mask"].expand(steps, batch, self.hidden_size)
        self.aux = aux
        self._valid = None if lengths is None else step_mask(steps, lengths, aux["update_mask"].device)

    def valid(self) -> Tensor | None:
        """``(T, B)`` bool of the real steps of the last forward pass (None: all of them)."""
        return getattr(self, "_valid", None)


def lstm_candidate(gi: Tensor, h: Tensor, c: Tensor, weight_hh: Tensor, bias_hh: Tensor) -> Tuple[Tensor, Tensor]:
    """The torch.nn.LSTM step (gates ``i, f, g, o``) from ``gi = W_ih x + b_ih``: ``-> (h~, c~)``."""
    gates = gi + torch.addmm(bias_hh, h, weight_hh.t())
    i, f, g, o = gates.chunk(4, dim=-1)
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_new), c_new
