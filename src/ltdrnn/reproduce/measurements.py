"""The numbers a claim's checks read: per run label the stored rows of each seed, their analyses, and
the measures over them (mean and spread over seeds, steps to a threshold, whether a run is at chance or
solved the task).

A measure is an interval ``(lo, hi)``: equal bounds for a number that was measured, and a lower bound
only for a ``steps_to`` that a run never reached within the steps it was evaluated at (it is censored:
"never" means "more than the run's last evaluated step", :func:`steps_to_bounds`). The mean over seeds
is the interval of the means, so one censored seed leaves the mean censored too.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from .expressions import Underflow, Unmeasured

# A run is "at chance" unless its mean test metric closes at least this fraction of the gap between the
# task's trivial baseline and a perfect score (accuracy 1, loss 0); see ``Measurements.at_chance``.
CHANCE_MARGIN = 0.2
RATIOS = {"lag_ratio": "gradient_vs_lag", "jac_ratio": "jacobian_ratio"}
Bounds = Tuple[float, float]


@dataclass(frozen=True)
class Summary:
    """A measure of one run label over its seeds: the mean as an interval ``(lo, hi)`` (equal unless a
    seed is censored), the sample std (0 when every seed gave the same number, nan when censored), the
    number of seeds, and per seed ``(seed, lo, hi)``."""

    lo: float
    hi: float
    std: float
    n: int
    seeds: Tuple[Tuple[Any, float, float], ...] = ()

    @property
    def bounds(self) -> Bounds:
        return self.lo, self.hi

    def text(self, accuracy: bool = False, steps: bool = False) -> str:
        """``"0.0019 ± 0.0014 (n=3)"``; a ``steps_to`` some seed never reached says which and how:
        ``"never within 1000 steps (n=3)"``, ``"≥ 767 (seed 2 not within 1000 steps; seed 1 at 600; ...)"``,
        ``"never (seed 1 diverged first; seed 2 at 650)"``."""
        never = [(seed, lo) for seed, lo, hi in self.seeds if hi == math.inf]
        if not never or not steps:
            return mean_text(self.lo, self.std, self.n, accuracy)
        horizons = sorted({lo - 1 for _, lo in never if lo != math.inf})
        if len(never) == self.n and len(horizons) == 1 and all(lo != math.inf for _, lo in never):
            return f"never within {format_number(horizons[0])} steps (n={self.n})"
        parts = [
            f"seed {seed} " + ("diverged first" if lo == math.inf else f"not within {format_number(lo - 1)} steps")
            for seed, lo in never
        ]
        reached = [(seed, lo) for seed, lo, hi in self.seeds if hi != math.inf]
        if reached:
            parts.append("; ".join(f"seed {seed} at {format_number(lo)}" for seed, lo in reached))
        head = "never" if self.lo == math.inf else f"≥ {format_number(self.lo)}"
        return f"{head} ({'; '.join(parts)})"


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

    def summary(self, name: str, label: str, args: Tuple[float, ...] = ()) -> Summary:
        """The measure ``name`` of ``label`` over its seeds (:class:`Summary`); a gradient ratio that is
        exactly 0 or not finite in any seed raises :class:`Underflow`."""
        values = self.per_seed(name, label, args)
        if name in RATIOS and not all(lo > 0 and math.isfinite(lo) for _, lo, _ in values):
            per_seed = ", ".join(format_number(lo) for _, lo, _ in values)
            if any(lo == 0.0 for _, lo, _ in values):
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
        los, his = [lo for _, lo, _ in values], [hi for _, _, hi in values]
        lo, std = mean_std(los)
        hi = lo if los == his else _mean_std_bounds(his)
        return Summary(lo, hi, std if los == his else math.nan, len(values), tuple(values))

    def spread(self, name: str, label: str, args: Tuple[float, ...] = ()) -> Tuple[float, float, int]:
        """``(mean, std, n)`` of a measure over the seeds of ``label`` (sample std; 0 for n = 1 or equal
        values); a censored mean is its lower bound with a nan std."""
        found = self.summary(name, label, args)
        return found.lo, found.std, found.n

    def per_seed(self, name: str, label: str, args: Tuple[float, ...] = ()) -> List[Tuple[Any, float, float]]:
        """``[(seed, lo, hi), ...]`` of a measure, one per stored seed of ``label``."""
        from ..results import seed_of

        rows = self.seeds.get(label)
        if not rows:
            raise Unmeasured(f"run {label!r} has no stored result")
        if name == "recall":
            analyses = self.analyses_of.get(label, [])
            return [
                (seed_of(row), *recall_bounds(row, label, analyses[i] if i < len(analyses) else {}))
                for i, row in enumerate(rows)
            ]
        if name in RATIOS:
            analyses = self.analyses_of.get(label, [])
            found = [(seed_of(row), a[RATIOS[name]]) for row, a in zip(rows, analyses) if RATIOS[name] in a]
            if not found:
                raise Unmeasured(f"run {label!r} has no {RATIOS[name]} analysis")
            return [(seed, float(data["ratio"]), float(data["ratio"])) for seed, data in found]
        return [(seed_of(row), *_row_bounds(row, name, label, args)) for row in rows]

    def draws(self, labels: Iterable[str]) -> List[Tuple[str, "Measurements"]]:
        """The views a rule is judged on, one seed at a time: where every one of ``labels`` has the same
        seeds, one per seed (``"seed 2"``); where their seeds differ, one per combination of their seeds
        (``"lstm 0, tarnn 1"``), so that a rule holds only if it holds however the seeds are paired."""
        labels = sorted(label for label in labels if label in self.seeds)
        seeds = {label: unique_seeds(self.seeds[label]) for label in labels}
        if not labels:
            return []
        if len({frozenset(found) for found in seeds.values()}) == 1:
            return [(f"seed {seed}", self.pick(self._seed_everywhere(seed))) for seed in seeds[labels[0]]]
        return [
            (", ".join(f"{label} {seed}" for label, seed in zip(labels, chosen)), self.pick(dict(zip(labels, chosen))))
            for chosen in itertools.product(*(seeds[label] for label in labels))
        ]

    def _seed_everywhere(self, seed: Any) -> Dict[str, Any]:
        """``{label: seed}`` for every label that has a row of ``seed``."""
        return {label: seed for label, rows in self.seeds.items() if seed in unique_seeds(rows)}

    def pick(self, chosen: Dict[str, Any]) -> "Measurements":
        """The rows (and analyses) of the seed ``chosen[label]`` for each chosen label; the other labels
        keep all their rows."""
        from ..results import seed_of

        rows, analyses = {}, {}
        for label, found in self.seeds.items():
            kept = [i for i, row in enumerate(found) if label not in chosen or seed_of(row) == chosen[label]]
            if kept:
                rows[label] = [found[i] for i in kept]
                of = self.analyses_of.get(label, [])
                analyses[label] = [of[i] if i < len(of) else {} for i in kept]
        return Measurements(rows, analyses)

    def split(self, seeds: Sequence[Any]) -> Tuple["Measurements", "Measurements"]:
        """``(the rows of the given seeds, the other rows)``, each with its analyses; a label without rows
        on one side is absent from it."""
        from ..results import seed_of

        chosen = set(seeds)
        sides: Tuple[Tuple[Dict, Dict], Tuple[Dict, Dict]] = (({}, {}), ({}, {}))
        for label, found in self.seeds.items():
            of = self.analyses_of.get(label, [])
            for i, row in enumerate(found):
                rows, analyses = sides[0 if seed_of(row) in chosen else 1]
                rows.setdefault(label, []).append(row)
                analyses.setdefault(label, []).append(of[i] if i < len(of) else {})
        return Measurements(*sides[0]), Measurements(*sides[1])

    def at_chance(self, label: str) -> Optional[str]:
        """Why run ``label`` counts as at chance, or None if its mean test metric is clearly better
        than the task's trivial baseline: it closes at least ``CHANCE_MARGIN`` of the gap between the
        baseline and a perfect score (accuracy ``m >= b + margin (1 - b)``, losses ``m <= (1 - margin) b``)."""
        rows = self.seeds.get(label)
        if not rows:
            return f"{label} has no stored result"
        found = self.summary("metric", label)
        metrics = rows[-1].get("metrics") or {}
        baseline, higher = metrics.get("baseline"), bool(metrics.get("higher_is_better"))
        shown = f"{label} {found.text(accuracy=higher and _is_accuracy(rows[-1]))}"
        if baseline is None:
            return f"{shown}, no trivial baseline stored"
        base = f"{format_number(100 * baseline)}%" if higher and _is_accuracy(rows[-1]) else format_number(baseline)
        mean = found.lo
        gap = (mean - baseline) / (1 - baseline) if higher else (baseline - mean) / baseline
        if not math.isfinite(mean) or not gap >= CHANCE_MARGIN:
            return f"{shown} vs trivial baseline {base}"
        return None

    def unsolved(self, label: str, threshold: float) -> Optional[str]:
        """Why run ``label`` does not meet the success threshold (its mean test metric ``<= threshold``
        for errors, ``>= threshold`` for accuracies), or None if it does."""
        rows = self.seeds.get(label)
        if not rows:
            return f"{label} has no stored result"
        found = self.summary("metric", label)
        higher = bool((rows[-1].get("metrics") or {}).get("higher_is_better"))
        ok = found.lo >= threshold if higher else found.lo <= threshold
        if math.isfinite(found.lo) and ok:
            return None
        accuracy = higher and _is_accuracy(rows[-1])
        shown = f"{format_number(100 * threshold)}%" if accuracy else format_number(threshold)
        return (
            f"{label} {found.text(accuracy=accuracy)} misses the success threshold {'>=' if higher else '<='} {shown}"
        )

    def cells_of(self, labels: Iterable[str]) -> Dict[str, str]:
        """The stored cell of each of ``labels`` that has a row."""
        return {label: self.seeds[label][-1].get("cell") for label in labels if label in self.seeds}

    def source_labels(self, labels: Iterable[str]) -> List[str]:
        """The labels among ``labels`` whose stored cell is one of the papers' five cells (not a baseline)."""
        from ..cells.registry import list_cells

        source = set(list_cells("source"))
        return [label for label, cell in self.cells_of(labels).items() if cell in source]


def unique_seeds(rows: Sequence[Dict[str, Any]]) -> List[Any]:
    """The seeds of ``rows`` (``train.seed``), each once, in ascending order."""
    from ..results import seed_of

    return sorted({seed_of(row) for row in rows}, key=seed_key)


def seed_key(seed: Any) -> Tuple[int, Any]:
    """Sorts seeds as numbers, any other kind after them as text."""
    return (0, seed) if isinstance(seed, int) else (1, str(seed))


def _is_accuracy(row: Dict[str, Any]) -> bool:
    return ((row.get("metrics") or {}).get("metric_name") or row.get("metric_name")) == "accuracy"


def _row_bounds(row: Dict[str, Any], name: str, label: str, args: Tuple[float, ...]) -> Bounds:
    if name == "metric":
        value = math.nan if row.get("metric") is None else float(row["metric"])
        return value, value
    if name == "steps_to":
        return steps_to_bounds(row, args[0])
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
    return float(value), float(value)


def recall_bounds(row: Dict[str, Any], label: str, analyses: Optional[Dict[str, Any]] = None) -> Bounds:
    """The accuracy on the copy task's recall steps. Measured exactly where the row's test metrics have
    it (``recall_accuracy``: rows trained since it was added) or a ``recall`` analysis re-measured it
    from the tested checkpoint (``ltdrnn reproduce recall``). Otherwise an interval from the accuracy
    over all ``T + 20`` steps: every error may sit on a recall step (the lower bound) or on none (1); a
    row without that accuracy says nothing, ``(0, 1)``."""
    from ..tasks.synthetic import CopyTask

    if row.get("task", "copy") != "copy":
        raise Unmeasured(f"run {label!r} is not a run of the copy task: it has no recall steps")
    metrics = row.get("metrics") or {}
    test = metrics.get("test") or {}
    exact = test.get("recall_accuracy", ((analyses or {}).get("recall") or {}).get("accuracy"))
    if exact is not None:
        return float(exact), float(exact)
    accuracy, length = test.get("accuracy"), metrics.get("seq_len")
    if accuracy is None or not length:
        return 0.0, 1.0
    return max(0.0, 1 - (1 - float(accuracy)) * length / CopyTask.COPIED), 1.0


# The training safeguards (ours or a paper's) a comparison between runs must share, as they read on the page
STABILISERS = {
    "optim.clip_norm": "gradient clipping at {}",
    "optim.beta2": "Adam β2 {}",
    "optim.skip_spikes": "skipped updates over {}x the median gradient norm",
    "train.rollbacks": "up to {} rollbacks",
    "train.max_val_loss": "a validation-loss limit of {}",
}


def stabilisers(row: Dict[str, Any]) -> Dict[str, Any]:
    """The :data:`STABILISERS` a row was trained with (``{key: setting}``; off ones left out; Adam's β2 only
    where it is not torch's 0.999). A key the stored config lacks takes the schema's default, off."""
    from ..config import OptimConfig

    config = row.get("config") or {}
    optim, train = config.get("optim") or {}, config.get("train") or {}
    found = {
        "optim.clip_norm": optim.get("clip_norm"),
        "optim.skip_spikes": optim.get("skip_spikes"),
        "train.rollbacks": train.get("rollbacks") or None,
        "train.max_val_loss": train.get("max_val_loss"),
    }
    beta2 = optim.get("beta2", OptimConfig.beta2)
    if optim.get("name", OptimConfig.name) == "adam" and beta2 != OptimConfig.beta2:
        found["optim.beta2"] = beta2
    return {key: value for key, value in found.items() if value is not None}


def rollbacks(row: Dict[str, Any]) -> Tuple[int, int]:
    """``(rollbacks, steps replayed)`` of a row: each rollback went back from the step that failed to an
    earlier checkpoint and trained those steps again."""
    found = (row.get("metrics") or {}).get("rollbacks") or []
    return len(found), sum(max(0, int(r.get("failed_at", 0)) - int(r.get("to_step", 0))) for r in found)


def step_budget(row: Dict[str, Any]) -> Optional[float]:
    """The optimiser steps a row was given: ``train.steps``, or its epochs times the batches per epoch
    (from its timings), and no more than it took (a run that stopped early, or never started); None if
    the row says neither."""
    train, timings = (row.get("config") or {}).get("train") or {}, row.get("timings") or {}
    found = [train.get("steps"), timings.get("steps")]
    if train.get("epochs") and timings.get("steps") and timings.get("epochs"):
        found.append(train["epochs"] * round(timings["steps"] / timings["epochs"]))
    found = [float(value) for value in found if value is not None]
    return min(found) if found else None


def mean_std(values: Sequence[float]) -> Tuple[float, float]:
    """The mean and the sample std (n - 1 in the denominator) of ``values``: exactly the value and 0
    when they are all equal (no rounding residue such as 1e-16), std 0 for one value, nan with a nan, and
    for an infinite value the infinite mean with a nan std."""
    if any(math.isnan(v) for v in values):
        return math.nan, math.nan
    if any(math.isinf(v) for v in values):
        return _mean_std_bounds(values), math.nan
    if all(v == values[0] for v in values):
        return float(values[0]), 0.0
    mean = math.fsum(values) / len(values)
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _mean_std_bounds(values: Sequence[float]) -> float:
    if any(math.isnan(v) for v in values):
        return math.nan
    if any(v == math.inf for v in values):
        return math.inf
    if any(v == -math.inf for v in values):
        return -math.inf
    return math.fsum(values) / len(values)


def mean_text(mean: float, std: float, n: int, accuracy: bool = False) -> str:
    """``"0.0019 ± 0.0014 (n=3)"``: the std to two significant digits and the mean to the same decimal
    place; accuracies in percent; an exact-zero std as 0."""
    scale, unit = (100, "%") if accuracy else (1, "")
    if n == 1 or not math.isfinite(std) or not math.isfinite(mean):
        return f"{format_number(scale * mean)}{unit} (n={n})"
    return f"{mean_std_text(scale * mean, scale * std, unit)} (n={n})"


def mean_std_text(mean: float, std: float, unit: str = "") -> str:
    if std == 0:
        return f"{format_number(mean)}{unit} ± 0{unit}"
    if abs(mean) < 1e-3 and mean != 0:
        return f"{mean:#.2g}{unit} ± {std:#.2g}{unit}"
    decimals = 1 - math.floor(math.log10(std))
    if decimals < 0:  # two significant digits of the std, the mean rounded at the same place
        mean, std, decimals = round(mean, decimals), round(std, decimals), 0
    return f"{mean:,.{decimals}f}{unit} ± {std:,.{decimals}f}{unit}"


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


def steps_to_bounds(row: Dict[str, Any], threshold: float) -> Bounds:
    """:func:`steps_to` as an interval: the step itself if the run got there; if not, more than its last
    evaluated step ``H`` (``(H + 1, inf)``: censored, the run was stopped before it could) for a run that
    finished, and ``(inf, inf)`` for one that did not (it diverged: no later step will get there)."""
    step = steps_to(row, threshold)
    if step != math.inf:
        return step, step
    if row.get("status", "finished") != "finished":
        return math.inf, math.inf
    evaluated = [e["step"] for e in row.get("history") or [] if e.get("val_metric") is not None]
    return float(max(evaluated, default=0)) + 1, math.inf


def format_number(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == int(value) and abs(value) < 1e6:
        return f"{int(value):,}" if abs(value) >= 10_000 else str(int(value))
    return f"{value:.4g}"
