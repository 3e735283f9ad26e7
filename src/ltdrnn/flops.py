"""Analytic FLOPs per sequence: the multiplications a cell needs to compute its states.

Convention (the SA-RNN paper's: "the number of multiplications required to compute the new states
..., including the networks used to output the skip decisions"): one per weight of every
matrix-vector product and one per elementwise product; additions, nonlinearities and the selection
``u * h~ + (1 - u) * h`` (a copy, not arithmetic, when ``u`` is binary) are not counted. Counts
are per sequence (batch size 1). Counting a multiply-add as two FLOPs doubles every number; the
SA-RNN paper's GRU figure on the adding task (49.7e6 for T=500, H=128, d=2) is about twice our
24.96e6 for the matrix products, so it appears to count that way.

Cells that know their own cost implement ``flops_per_sequence(steps, skip_fraction=None)`` (the
conditional-computation cells count the coordinator on every step and the recurrence only for
updated units). For every other cell :func:`flops_per_sequence` applies a generic rule from the
parameter shapes: one multiplication per weight of every parameter with two or more dimensions, per
step, scaled by ``1 - skip_fraction``.
"""

from __future__ import annotations

from typing import Any

#: elementwise products of a GRU unit beyond its matrix rows: ``r * (W_hn h)``, ``z * h``, ``(1-z) * n``
GRU_UNIT_EXTRA = 3
#: elementwise products of an LSTM unit beyond its matrix rows: ``f * c``, ``i * g``, ``o * tanh(c)``
LSTM_UNIT_EXTRA = 3


def flops_per_sequence(cell: Any, steps: int, skip_fraction: float | None = None) -> float:
    """Multiplications for one sequence of ``steps`` steps.

    Args:
        cell: any registered cell.
        steps: T.
        skip_fraction: the fraction of unit updates skipped (e.g. :func:`ltdrnn.cells.masked.skip_fraction`
            of a forward pass). None: the cell's own default (dense for learned masks, the fixed
            schedule for Clockwork, Phased LSTM and Random Updates).
    """
    if not isinstance(steps, int) or isinstance(steps, bool) or steps <= 0:
        raise ValueError(f"steps: expected a positive integer, got {steps!r}")
    if skip_fraction is not None and not 0.0 <= float(skip_fraction) <= 1.0:
        raise ValueError(f"skip_fraction: expected a number in [0, 1] or None, got {skip_fraction!r}")
    own = getattr(cell, "flops_per_sequence", None)
    if own is not None:
        return float(own(steps, None if skip_fraction is None else float(skip_fraction)))
    return generic_flops(cell, steps, skip_fraction)


def generic_flops(cell: Any, steps: int, skip_fraction: float | None = None) -> float:
    """One multiplication per weight of every matrix parameter per step, times ``1 - skip_fraction``."""
    per_step = sum(p.numel() for p in cell.parameters() if p.dim() >= 2)
    return float(steps * per_step * (1.0 - (skip_fraction or 0.0)))


def masked_unit_flops(
    steps: int, units: int, unit_cost: float, per_unit_always: float, skip_fraction: float | None
) -> float:
    """``steps * units * (per_unit_always + (1 - skip) * unit_cost)``: a per-unit coordinator that
    always runs, and a per-unit recurrence that runs only when the unit is updated."""
    updated = 1.0 - (skip_fraction or 0.0)
    return float(steps * units * (per_unit_always + updated * unit_cost))
