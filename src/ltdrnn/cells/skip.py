"""Skip RNN (Campos et al. 2018) and Random Updates, the SA-RNN paper's learned and random baselines.

Shapes follow the legend in :mod:`ltdrnn.cells.base`. Both cells record ``aux["update_mask"]``
``(T, B, H)`` like SA-RNN (see :mod:`ltdrnn.cells.sarnn`), so :func:`~ltdrnn.cells.masked.skip_fraction`
applies unchanged.

Doc: docs/cells/skip.md
Tests: tests/cells/test_skip.py, tests/cells/test_contract.py
Kernel: none (PyTorch operations only)
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..flops import GRU_UNIT_EXTRA, LSTM_UNIT_EXTRA, masked_unit_flops
from ..ops.common import binary, gru_candidate
from .base import State, check_choice, init_uniform
from .masked import (
    MaskedCell,
    lstm_candidate,
    straight_through,
    straight_through_mix,
    sum_over_valid_steps,
)
from .registry import register

_CAMPOS = (
    "Campos, Jou, Giro-i-Nieto, Torres & Chang 2018, Skip RNN: Learning to Skip State Updates "
    "in Recurrent Neural Networks (ICLR)"
)
_SARNN = (
    "Hartvigsen et al. 2020, Learning to Selectively Update State Neurons in Recurrent Networks "
    "(CIKM), baseline 'Random Updates'"
)


class GatedRecurrence(MaskedCell):
    """A torch.nn GRU or LSTM recurrence (same layout and init) under a per-step update mask."""

    def __init__(self, input_size: int, hidden_size: int, recurrence: str, backend: str, device, dtype) -> None:
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        self.recurrence = check_choice("recurrence", recurrence, ("gru", "lstm"))
        gates = 3 if recurrence == "gru" else 4
        self.weight_ih = nn.Parameter(torch.empty(gates * hidden_size, input_size, **self.factory))
        self.weight_hh = nn.Parameter(torch.empty(gates * hidden_size, hidden_size, **self.factory))
        self.bias_ih = nn.Parameter(torch.empty(gates * hidden_size, **self.factory))
        self.bias_hh = nn.Parameter(torch.empty(gates * hidden_size, **self.factory))

    def reset_recurrence(self) -> None:
        """torch.nn init: ``U(-1/sqrt(H), 1/sqrt(H))``."""
        init_uniform([self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh], 1.0 / math.sqrt(self.hidden_size))

    def precompute(self, x: Tensor) -> Tensor:
        """``(T, B, d) -> (T, B, G*H)``: ``W_ih x_t + b_ih``."""
        return F.linear(x, self.weight_ih, self.bias_ih)

    def candidate(self, gi: Tensor, h: Tensor, c: Tensor | None) -> Tuple[Tensor, Tensor | None]:
        """The recurrence's new ``(h~, c~)`` (``c~`` None for the GRU)."""
        if self.recurrence == "gru":
            return gru_candidate(gi, h, h, self.weight_hh, self.bias_hh), None
        return lstm_candidate(gi, h, c, self.weight_hh, self.bias_hh)

    def unit_flops(self) -> int:
        """Multiplications to update one unit (see :mod:`ltdrnn.flops`)."""
        d, hdim = self.input_size, self.hidden_size
        if self.recurrence == "gru":
            return 3 * (d + hdim) + GRU_UNIT_EXTRA
        return 4 * (d + hdim) + LSTM_UNIT_EXTRA


class SkipRNN(GatedRecurrence):
    """Skip RNN: the whole state is updated or copied, by a binary gate with a learned schedule.

    State: ``(h, u~)`` (GRU) or ``(h, c, u~)`` (LSTM) with ``u~ (B, 1)`` the cumulative update
    probability, initially 1 (the first step always updates). Output ``h_t``::

        u_t      = round(u~_t) = 1[u~_t > 0.5]                 (straight-through: du/du~ = 1)
        s_t      = u_t * S(x_t, s_{t-1}) + (1 - u_t) * s_{t-1}  (S: GRU or LSTM; s = h or (h, c))
        du~_t    = sigmoid(w_p . h_t + b_p)                     (B, 1)
        u~_{t+1} = u_t * du~_t + (1 - u_t) * (u~_t + min(du~_t, 1 - u~_t))

    Equivalent to::

        for t in range(T):
            u = prob > 0.5;  h = S(x[t], h) if u else h
            delta = sigmoid(w_p @ h + b_p);  prob = delta if u else prob + min(delta, 1 - prob)

    ``losses()["budget"]`` = ``sum_t u_t`` (Campos eq. 8 without lambda), mean over the batch, real
    steps only. ``aux["update_mask"]`` is ``u_t`` broadcast to ``(T, B, H)``, ``aux["update_prob"]`` is
    ``u~_t`` ``(T, B, 1)``.

    Init: recurrence as torch.nn; ``w_p ~ U(-1/sqrt(H), 1/sqrt(H))`` and ``b_p = 1`` (the paper does
    not state it; our choice, so that training starts with frequent updates).
    """

    def __init__(
        self, input_size: int, hidden_size: int, recurrence: str = "gru", backend: str = "auto", device=None, dtype=None
    ) -> None:
        super().__init__(input_size, hidden_size, recurrence, backend, device, dtype)
        self.update_weight = nn.Parameter(torch.empty(1, hidden_size, **self.factory))
        self.update_bias = nn.Parameter(torch.empty(1, **self.factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.reset_recurrence()
        init_uniform([self.update_weight], 1.0 / math.sqrt(self.hidden_size))
        nn.init.constant_(self.update_bias, 1.0)

    def init_state(self, batch_size: int, device=None, dtype=None) -> State:
        h = super().init_state(batch_size, device, dtype)
        prob = torch.ones(batch_size, 1, device=h.device, dtype=h.dtype)
        return (h, prob) if self.recurrence == "gru" else (h, h.clone(), prob)

    def step_with_aux(self, p_t: Tensor, state: State):
        h, prob = state[0], state[-1]
        c = state[1] if self.recurrence == "lstm" else None
        decision = binary(prob, 0.5)
        u = straight_through(decision, prob)
        h_cand, c_cand = self.candidate(p_t, h, c)
        h_new = straight_through_mix(decision, prob, h_cand, h)
        delta = torch.sigmoid(F.linear(h_new, self.update_weight, self.update_bias))
        prob_new = u * delta + (1 - u) * (prob + torch.minimum(delta, 1 - prob))
        if self.recurrence == "gru":
            new_state = (h_new, prob_new)
        else:
            new_state = (h_new, straight_through_mix(decision, prob, c_cand, c), prob_new)
        return h_new, new_state, {"update_mask": u.detach(), "update_prob": prob, "update_gate": u}

    def record_aux(self, aux, lengths) -> None:
        # the budget needs the straight-through u; aux keeps the detached mask for metrics
        self._gates = aux.pop("update_gate")
        super().record_aux(aux, lengths)

    def losses(self) -> dict[str, Tensor]:
        """``{"budget": sum_t u_t}`` (number of state updates), mean over the batch."""
        if getattr(self, "_gates", None) is None:
            return {}
        return {"budget": sum_over_valid_steps(self._gates, self.valid()).mean()}

    def flops_per_sequence(self, steps: int, skip_fraction: float | None = None) -> float:
        """Updated steps cost the recurrence for every unit plus ``w_p . h`` (H); skipped steps
        cost nothing but the scalar update of ``u~`` (one multiplication is not counted).
        ``skip_fraction=None`` counts every step as updated."""
        updated = 1.0 - (skip_fraction or 0.0)
        return float(steps * updated * self.hidden_size * (self.unit_flops() + 1))

    def extra_repr(self) -> str:
        return super().extra_repr() + f", recurrence={self.recurrence!r}"


@register("skiprnn_gru", family="baseline", paper=_CAMPOS, gradcheck=False)
class SkipGRU(SkipRNN):
    """Skip RNN with a GRU recurrence (``SkipRNN(..., recurrence="gru")``)."""

    def __init__(self, input_size: int, hidden_size: int, backend: str = "auto", device=None, dtype=None):
        super().__init__(input_size, hidden_size, "gru", backend=backend, device=device, dtype=dtype)


@register("skiprnn_lstm", family="baseline", paper=_CAMPOS, gradcheck=False)
class SkipLSTM(SkipRNN):
    """Skip RNN with an LSTM recurrence (``SkipRNN(..., recurrence="lstm")``)."""

    def __init__(self, input_size: int, hidden_size: int, backend: str = "auto", device=None, dtype=None):
        super().__init__(input_size, hidden_size, "lstm", backend=backend, device=device, dtype=dtype)


@register("random_updates", family="baseline", paper=_SARNN, deterministic=False)
class RandomUpdates(GatedRecurrence):
    """A GRU (or LSTM) whose units are each updated with probability ``update_prob``, at random, in
    training and at test time (the "random version" of SA-RNN).

    State: ``(h, clock)`` (GRU) or ``(h, c, clock)``, ``clock (B, 2)`` int64 = ``(key, step)``.
    Output ``h_t``::

        u_t = 1[hash(key, step, j) < p]      per unit j: a Bernoulli(p) draw
        h_t = u_t * GRU(x_t, h_{t-1}) + (1 - u_t) * h_{t-1}      (LSTM: c_t likewise)

    The draws come from a counter-based hash of the random ``key`` that ``init_state`` takes from
    torch's global generator, the step count and the unit, so they live in the state: a sequence
    run in chunks, streamed step by step, or run inside a batch or alone sees the same mask.
    ``init_state`` gives every sequence of the batch the same key, so the sequences of one batch
    share their update pattern (each sequence's mask is still i.i.d. Bernoulli(p) over steps and
    units; a new ``init_state`` draws a new pattern). The mask carries no gradient. Init: torch.nn.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        update_prob: float = 0.5,
        recurrence: str = "gru",
        backend: str = "auto",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(input_size, hidden_size, recurrence, backend, device, dtype)
        if isinstance(update_prob, bool) or not isinstance(update_prob, (int, float)) or not 0.0 <= update_prob <= 1.0:
            raise ValueError(f"update_prob: expected a probability in [0, 1], got {update_prob!r}")
        self.update_prob = float(update_prob)
        self.register_buffer("unit_index", torch.arange(hidden_size, device=device), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.reset_recurrence()

    def init_state(self, batch_size: int, device=None, dtype=None) -> State:
        h = super().init_state(batch_size, device, dtype)
        key = torch.randint(0, 2**62, (1,)).to(h.device)
        clock = torch.stack([key.expand(batch_size), torch.zeros_like(key).expand(batch_size)], dim=1)
        return (h, clock) if self.recurrence == "gru" else (h, h.clone(), clock)

    def draw(self, clock: Tensor) -> Tensor:
        """``(B, 2)`` (key, step) -> ``(B, H)`` float 0/1, each 1 with probability ``update_prob``."""
        uniform = counter_hash(clock[:, :1], clock[:, 1:], self.unit_index)
        return binary(self.update_prob - uniform, 0.0)

    def step_with_aux(self, p_t: Tensor, state: State):
        h, clock = state[0], state[-1]
        c = state[1] if self.recurrence == "lstm" else None
        decision = self.draw(clock)
        h_cand, c_cand = self.candidate(p_t, h, c)
        decision = decision.to(h.dtype)
        h_new = torch.lerp(h, h_cand, decision)
        clock = clock + torch.tensor([0, 1], device=clock.device)
        new_state = (h_new, clock) if c is None else (h_new, torch.lerp(c, c_cand, decision), clock)
        return h_new, new_state, {"update_mask": decision, "update_prob": torch.full_like(decision, self.update_prob)}

    def flops_per_sequence(self, steps: int, skip_fraction: float | None = None) -> float:
        """Only updated units cost their recurrence; ``skip_fraction=None`` uses ``1 - update_prob``."""
        skip = 1.0 - self.update_prob if skip_fraction is None else skip_fraction
        return masked_unit_flops(steps, self.hidden_size, self.unit_flops(), 0, skip)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", update_prob={self.update_prob:g}, recurrence={self.recurrence!r}"


def counter_hash(key: Tensor, step: Tensor, unit: Tensor) -> Tensor:
    """Uniform numbers in [0, 1) from int64 counters (broadcast together), by a 64-bit mix of
    ``(key, step, unit)`` (multiply / xor-shift rounds as in splitmix64; int64 products wrap)."""
    x = key * -7046029254386353131 + step * 1442695040888963407 + unit * -4658895280553007687
    for multiplier in (-4658895280553007687, -7723592293110705685):
        x = (x ^ ((x >> 31) & 0x1FFFFFFFF)) * multiplier
    x = x ^ ((x >> 29) & 0x7FFFFFFFF)
    return (x & 0xFFFFFF).double() / float(1 << 24)
