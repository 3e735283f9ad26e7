"""The numbers a claim's checks read: per run label the stored rows of each seed, their analyses, and
the measures over them (mean and spread over seeds, steps to a threshold, whether a run is at chance).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from .expressions import Underflow, Unmeasured

# A run is "at chance" unless its mean test metric closes at least this fraction of the gap between the
# task's trivial baseline and a perfect score (accuracy 1, loss 0); see ``Measurements.at_chance``.
CHANCE_MARGIN = 0.2
RATIOS = {"lag_ratio": "gradient_vs_lag", "jac_ratio": "jacobian_ratio"}


class Measurements:
    """The numbers a claim's checks read: per run label, the latest stored row of each seed (oldest
    first) and the analyses of those rows. A measure is the mean over the seeds.

    ``rows`` maps a label to one row or to a list of rows (one per seed); ``analyses`` maps a label to
    ``{kind: data}`` or to a list of them, in the order of its rows. ``stale``: the stored rows left out
    because they no longer match the claim (:mod:`.staleness`), kept to be listed, never measured.
    """

    def __init__(
        self, rows: Dict[str, Any], analyses: Optional[Dict[str, Any]] = None, stale: Sequence[Any] = ()
    ) -> None:
        self.seeds = {label: list(r) if isinstance(r, list) else [r] for label, r in rows.items()}
        self.analyses_of = {label: list(a) if isinstance(a, list) else [a] for label, a in (analyses or {}).items()}
        self.stale = list(stale)

    @property
    def rows(self) -> Dict[str, Dict[str, Any]]:
        """The latest row of each label (the one whose command and curve the document shows)."""
        return {label: rows[-1] for label, rows in self.seeds.items()}

    @property
    def analyses(self) -> Dict[str, Dict[str, Any]]:
        return {label: found[-1] for label, found in self.analyses_of.items() if found}

    def __call__(self, name: str, label: str, args: Tuple[float, ...]) -> float:
        return self.spread(name, label, args)[0]

    def spread(self, name: str, label: str, args: Tuple[float, ...]) -> Tuple[float, float, int]:
        """``(mean, std, n)`` of a measure over the seeds of ``label`` (sample std; 0 for n = 1)."""
        values = self.per_seed(name, label, args)
        if name in RATIOS and not all(v > 0 and math.isfinite(v) for v in values):
            per_seed = ", ".join(format_number(v) for v in values)
            if 0.0 in values:
                raise Underflow(
                    f"{name}({label})",
                    "underflow",
                    f"{name}({label}) is underflow (per seed: "
                    f"{per_seed}): a gradient norm that is exactly 0 cannot be compared with",
                )
            raise Underflow(
                f"{name}({label})",
                "not finite",
                f"{name}({label}) is not finite (per seed: "
                f"{per_seed}; did the run diverge?): it cannot be compared with",
            )
        return _mean_std(values) + (len(values),)

    def per_seed(self, name: str, label: str, args: Tuple[float, ...]) -> List[float]:
        rows = self.seeds.get(label)
        if not rows:
            raise Unmeasured(f"run {label!r} has no stored result")
        if name in RATIOS:
            found = [a[RATIOS[name]] for a in self.analyses_of.get(label, []) if RATIOS[name] in a]
            if not found:
                raise Unmeasured(f"run {label!r} has no {RATIOS[name]} analysis")
            return [float(data["ratio"]) for data in found]
        return [_row_measure(row, name, label, args) for row in rows]

    def at_chance(self, label: str) -> Optional[str]:
        """Why run ``label`` counts as at chance, or None if its mean test metric is clearly better
        than the task's trivial baseline: it closes at least ``CHANCE_MARGIN`` of the gap between the
        baseline and a perfect score (accuracy ``m >= b + margin (1 - b)``, losses ``m <= (1 - margin) b``)."""
        rows = self.seeds.get(label)
        if not rows:
            return f"{label} has no stored result"
        mean, std, n = self.spread("metric", label, ())
        metrics = rows[-1].get("metrics") or {}
        baseline, higher = metrics.get("baseline"), bool(metrics.get("higher_is_better"))
        shown = f"{label} {mean_text(mean, std, n)}"
        if baseline is None:
            return f"{shown}, no trivial baseline stored"
        gap = (mean - baseline) / (1 - baseline) if higher else (baseline - mean) / baseline
        if not math.isfinite(mean) or not gap >= CHANCE_MARGIN:
            return f"{shown} vs trivial baseline {format_number(baseline)}"
        return None

    def source_labels(self, labels: Iterable[str]) -> List[str]:
        """The labels among ``labels`` whose stored cell is one of the papers' five cells (not a baseline)."""
        from ..cells.registry import list_cells

        source = set(list_cells("source"))
        return [label for label in labels if label in self.seeds and self.seeds[label][-1].get("cell") in source]


def _row_measure(row: Dict[str, Any], name: str, label: str, args: Tuple[float, ...]) -> float:
    if name == "metric":
        return math.nan if row.get("metric") is None else float(row["metric"])
    if name == "steps_to":
        return steps_to(row, args[0])
    metrics = row.get("metrics") or {}
    value = {
        "baseline": metrics.get("baseline"),
        "params": row.get("params"),
        "train_s": row.get("train_time_s"),
        "skip": metrics.get("skip_fraction"),
        "best_val": metrics.get("val_best"),
    }[name]
    if value is None:
        raise Unmeasured(f"run {label!r} has no {name}")
    return float(value)


def _mean_std(values: Sequence[float]) -> Tuple[float, float]:
    if any(math.isnan(v) for v in values):
        return math.nan, math.nan
    if any(math.isinf(v) for v in values):  # "never" in one seed: the mean never gets there either
        return max(values) if any(v == math.inf for v in values) else min(values), math.nan
    mean = math.fsum(values) / len(values)
    if len(values) == 1:
        return mean, 0.0
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def mean_text(mean: float, std: float, n: int, accuracy: bool = False) -> str:
    scale, unit = (100, "%") if accuracy else (1, "")
    if n == 1 or not math.isfinite(std):
        return f"{format_number(scale * mean)}{unit} (n={n})"
    return f"{format_number(scale * mean)}{unit} ± {format_number(scale * std)}{unit} (n={n})"


def steps_to(row: Dict[str, Any], threshold: float) -> float:
    """The first validated step whose metric reaches ``threshold`` (<= for MSE/CE, >= for accuracy);
    ``inf`` if none did."""
    higher = bool((row.get("metrics") or {}).get("higher_is_better"))
    for entry in row.get("history") or []:
        value = entry.get("val_metric")
        if value is None or not math.isfinite(value):
            continue
        if (value >= threshold) if higher else (value <= threshold):
            return float(entry["step"])
    return math.inf


def format_number(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.4g}"
