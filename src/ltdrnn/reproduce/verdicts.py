"""Verdicts: each rule of a claim evaluated on the means over seeds, refused where it would pass at
chance, and the claim's verdict (reproduced, partly, not reproduced, not run yet) with its reason."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from ..results import seed_of
from .claims import Check, Claim
from .expressions import Underflow, Unmeasured
from .measurements import Measurements, format_number, mean_text

STATUSES = ("reproduced", "partly", "not reproduced", "not run yet")
# measures that say how well a run learned: a check reading one of them needs that run above chance
QUALITY_MEASURES = ("metric", "best_val", "steps_to", "train_s", "skip")


@dataclass
class CheckResult:
    check: Check
    passed: Optional[bool]  # None: not measured
    values: List[Tuple[str, float]] = field(default_factory=list)
    missing: str = ""
    underflow: Tuple[str, str] = ()  # (call, "underflow" | "not finite")
    spreads: List[Tuple[float, int]] = field(default_factory=list)  # (std, n) of each value
    vetoes: List[str] = field(default_factory=list)  # why the machinery refused it

    def text(self) -> str:
        if self.passed is None:
            return f"{self.check.says}: not measured ({self.missing})"
        if self.underflow:
            return f"{self.check.says}: {self.missing} -> no"
        shown = ", ".join(
            f"{call} = {call_value(call, v, spread)}"
            for (call, v), spread in unique(zip(self.values, self.spreads), key=lambda i: i[0][0])
        )
        refused = f" ({'; '.join(self.vetoes)})" if self.vetoes else ""
        return f"{self.check.says}: {shown} -> {'yes' if self.passed else 'no'}{refused}"


def call_value(call: str, value: float, spread: Tuple[float, int] = (0.0, 1)) -> str:
    if call.startswith("steps_to") and value == math.inf:
        return "never"
    std, n = spread
    return format_number(value) if n == 1 else mean_text(value, std, n)


@dataclass
class Verdict:
    status: str
    reason: str
    budget: Optional[str]
    checks: List[CheckResult]


def unique(items, key=lambda item: item[0]):
    """``items`` without repeats of ``key(item)``, first kept."""
    seen, out = set(), []
    for item in items:
        if key(item) not in seen:
            seen.add(key(item))
            out.append(item)
    return out


def evaluate_check(claim: Claim, check: Check, measurements: Measurements) -> CheckResult:
    """One rule on the means over seeds, refused (``vetoes``) where it would pass at chance:

    - every run whose quality the rule reads (``metric``, ``best_val``, ``steps_to``, ``train_s``,
      ``skip``) must be above chance (:meth:`Measurements.at_chance`), except the ``may_fail`` ones;
    - a rule with ``may_fail`` runs (an "LSTM fails" rule, or a comparison with a competitor that may
      fail) counts only if a run of the claim's own cells succeeds on the task;
    - a gradient-norm ratio that is exactly 0 is "underflow" and fails every rule that reads it.
    """
    spreads: List[Tuple[float, int]] = []

    def measure(name: str, label: str, args: Tuple[float, ...]) -> float:
        mean, std, n = measurements.spread(name, label, args)
        spreads.append((std, n))
        return mean

    try:
        value, values = check.expression.evaluate(measure)
    except Underflow as error:
        return CheckResult(check, False, missing=str(error), underflow=(error.call, error.shown))
    except Unmeasured as error:
        return CheckResult(check, None, missing=str(error))
    vetoes = []
    read = sorted({label for name, label in check.expression.reads() if name in QUALITY_MEASURES})
    chance = {label: measurements.at_chance(label) for label in read}
    if len(read) > 1 and all(chance.values()):
        vetoes.append(("both" if len(read) == 2 else "all") + " at chance: " + ", ".join(chance.values()))
    elif any(chance[label] for label in read if label not in check.may_fail):
        vetoes.append(
            "at chance: " + ", ".join(chance[label] for label in read if chance[label] and label not in check.may_fail)
        )
    if check.may_fail:
        own = measurements.source_labels(claim.checked_labels)
        if not any(measurements.at_chance(label) is None for label in own):
            vetoes.append(
                "a rule that lets " + ", ".join(check.may_fail) + " fail counts only when a cell "
                "of the claim succeeds on the task, and none does"
            )
    return CheckResult(check, bool(value) and not vetoes, values, spreads=spreads, vetoes=vetoes)


def about_own_cell(claim: Claim, check: Check, measurements: Measurements) -> bool:
    """Whether ``check`` says something about one of the papers' cells: it reads a run of a source
    cell (not one it lets fail) through a measure other than the parameter count, which needs no
    training."""
    own = set(measurements.source_labels(claim.checked_labels)) - set(check.may_fail)
    return any(label in own and name != "params" for name, label in check.expression.reads())


def judge(claim: Claim, measurements: Measurements, budget: Optional[str]) -> Verdict:
    """The verdict of ``claim`` from the means over seeds: all rules hold -> reproduced; a rule about
    one of the papers' own cells holds -> partly; else not reproduced; a judged run missing -> not run
    yet. The reason gives every rule with its numbers, and the claim's explanation of each failure."""
    missing = [label for label in claim.checked_labels if label not in measurements.seeds]
    results = [evaluate_check(claim, check, measurements) for check in claim.checks]
    if missing:
        done = len(claim.checked_labels) - len(missing)
        reason = (
            f"{done} of {len(claim.checked_labels)} runs finished"
            + (f" at the {budget!r} budget" if budget else "")
            + f"; missing: {', '.join(missing)}."
        )
        return Verdict("not run yet", reason, budget, results)
    passed = [r for r in results if r.passed]
    status = (
        "reproduced"
        if len(passed) == len(results)
        else "partly"
        if any(about_own_cell(claim, r.check, measurements) for r in passed)
        else "not reproduced"
    )
    reason = "; ".join(r.text() for r in results) + "."
    diverged = [
        f"{label} (seed {seed_of(row)})"
        for label, rows in measurements.seeds.items()
        for row in rows
        if row.get("status") != "finished"
    ]
    if diverged:
        reason += f" Did not finish: {', '.join(diverged)}."
    causes = unique([(r.check.if_fails, r.check.says) for r in results if not r.passed and r.check.if_fails])
    if causes:
        reason += " " + " ".join(f"Why '{says}' fails: {cause}" for cause, says in causes)
    return Verdict(status, reason, budget, results)
