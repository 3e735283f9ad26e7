"""Verdicts: each rule of a claim judged seed by seed (it holds only if it holds in every seed), refused or
left undecided where the data cannot support it, and the claim's verdict with its reason.

A rule's outcome is "yes", "no", "undecided" (the data cannot decide it: a competitor that never learned
or was trained on other terms, a speed comparison whose faster run needed more steps than the slower one
was given, a derived measure of an unsolved run) or "not measured". The claim is reproduced if every rule
says yes and its runs train the papers' cells (no ``variant`` among its conditions), partly if a rule
about one of its own papers' cells says yes, not reproduced otherwise; a proxy claim (the data are a
stand-in for the paper's) is "proxy" whatever its rules say, and a claim with a judged run missing is
"not run yet".

A claim whose settings were chosen by looking at its results (``tuning.runs`` in the claims table) is
judged on the rows of the held-out seeds (:data:`HELD_OUT_SEEDS`, never used while tuning) alone, every
judged run with every one of them; the other seeds' rows (the development seeds) get a verdict of their own,
shown beside it and deciding nothing. Until every held-out row is stored, such a claim is "not measured on
held-out seeds". An untuned claim is judged on all its rows, once every judged run has each of the seeds
1-3 ("not run yet" until then): a rule that holds in the one seed stored holds "in every seed" and says
nothing beyond the seeds' noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from ..results import seed_of
from .claims import DERIVED_MEASURES, PAPER_CELLS, Check, Claim
from .expressions import Underflow, Unmeasured
from .measurements import STABILISERS, Measurements, format_number, stabilisers, step_budget

HELD_OUT_SEEDS = (4, 5, 6)
DEVELOPMENT_SEEDS = (1, 2, 3)  # what `reproduce run` trains by default; an untuned claim's seeds
NOT_HELD_OUT = "not measured on held-out seeds"
STATUSES = ("reproduced", "partly", "not reproduced", "proxy", NOT_HELD_OUT, "not run yet")
MARKS = {"yes": "✓", "no": "✗", "undecided": "?", "not measured": "–"}
# measures that say how well a run learned: a rule reading one of them needs that run above chance
# (a subject at chance fails the rule; a run it is compared with makes it undecided)
QUALITY_MEASURES = ("metric", "best_val", "steps_to", "train_s", "skip", "jac_ratio", "lag_ratio")
UNKNOWN = (-math.inf, math.inf)


@dataclass
class CheckResult:
    """A rule's outcome, the numbers it read (``(call, shown)``, means over seeds), why the machinery
    refused it or left it undecided (``notes``) and in how many seeds it holds on that seed's rows alone
    (``seeds``: held, of; ``paired``: False where the runs have different seeds and every combination of
    them was judged)."""

    check: Check
    outcome: str
    values: List[Tuple[str, str]] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    seeds: Tuple[int, int] = (0, 0)
    paired: bool = True

    @property
    def passed(self) -> bool:
        return self.outcome == "yes"

    @property
    def mark(self) -> str:
        return MARKS[self.outcome]

    @property
    def seeds_text(self) -> str:
        held, of = self.seeds
        return f"{held}/{of} {'seeds' if self.paired else 'seed combinations'}" if of else ""

    def text(self) -> str:
        shown = ", ".join(f"{call} = {value}" for call, value in self.values)
        notes = f" ({'; '.join(self.notes)})" if self.notes else ""
        return f"{self.check.says}: {shown}{' ' if shown else ''}-> {self.outcome}{notes}"


@dataclass
class Verdict:
    """A claim's status, why, the budget judged, its rules' results, the variants that capped it, and for a
    tuned claim the verdict of its development seeds (``development``: shown beside, deciding nothing) and
    the held-out rows it still lacks (``pending``: ``["tarnn (seeds 5, 6)"]``; empty once all are stored)."""

    status: str
    reason: str
    budget: Optional[str]
    checks: List[CheckResult]
    capped: List[str] = field(default_factory=list)
    development: Optional["Verdict"] = None
    pending: List[str] = field(default_factory=list)


def unique(items, key=lambda item: item[0]):
    """``items`` without repeats of ``key(item)``, first kept."""
    seen, out = set(), []
    for item in items:
        if key(item) not in seen:
            seen.add(key(item))
            out.append(item)
    return out


def evaluate_check(claim: Claim, check: Check, measurements: Measurements) -> CheckResult:
    """One rule, judged on each seed's rows alone: it holds only if it holds in every seed (where the
    runs it reads have different seeds, in every combination of them); it fails if it fails in one;
    otherwise it is undecided. The numbers shown are the means over seeds.

    On each seed (:func:`_evaluate`), whatever the expression says:

    - A run whose quality the rule reads (:data:`QUALITY_MEASURES`) must be above chance
      (:meth:`Measurements.at_chance`): a subject at chance fails the rule; a run it is compared with
      (``versus``) at chance leaves it undecided, because the paper has that run learn. Runs the paper
      itself reports at chance (``may_fail``) are exempt, but a rule that lets one sit at chance counts
      only when a run of the rule's papers' cells learned. Structural rules are exempt.
    - Derived measures (``skip``, ``train_s``) count only for runs that meet the claim's success
      threshold; for the others they are unknown.
    - ``steps_to`` is censored at a run's last evaluated step, so a speed comparison whose faster run
      needed more steps than the slower one was given is undecided.
    - A gradient-norm ratio that is exactly 0 (underflow) or not finite fails every rule that reads it.

    A rule that holds about a competitor (``versus`` or ``may_fail``) is undecided if the competitor was
    given fewer optimiser steps than a subject of the rule, or lacks one of its stabilisers
    (:func:`unequal_training`).
    """
    result = _evaluate(claim, check, measurements)
    if result.outcome == "not measured":
        return result
    draws = measurements.draws(check.expression.labels())
    if not draws:
        return result
    judged = [(name, _evaluate(claim, check, view)) for name, view in draws]
    failed = [(name, found) for name, found in judged if found.outcome != "yes"]
    on_means = result.outcome
    result.seeds = (len(judged) - len(failed), len(judged))
    result.paired = draws[0][0].startswith("seed ")
    result.outcome = "yes" if not failed else "no" if any(f.outcome == "no" for _, f in failed) else "undecided"
    if failed:
        result.notes.append(f"does not hold in {_draws_text([name for name, _ in failed], len(judged))}")
    if result.outcome != on_means:  # the means hide it: what the seeds that decide it read, and why
        deciding = [(name, found) for name, found in failed if found.outcome == result.outcome]
        result.notes += [f"{name}: {_seed_text(found)}" for name, found in deciding[:3]]
    unequal = unequal_training(claim, check, measurements)
    if unequal and result.outcome == "yes":
        result.outcome = "undecided"
        result.notes += unequal + ["a competitor not trained alike decides nothing"]
    return result


def _seed_text(found: CheckResult) -> str:
    shown = ", ".join(f"{call} = {value}" for call, value in found.values).replace(" (n=1)", "")
    return "; ".join(part for part in (shown, *found.notes) if part)


def _draws_text(names: List[str], of: int) -> str:
    """``["seed 1", "seed 3"]`` -> ``"seed 1, 3"``; combinations of seeds: how many of how many."""
    if all(name.startswith("seed ") for name in names):
        return "seed " + ", ".join(name[5:] for name in names)
    return f"{len(names)} of the {of} combinations of the runs' seeds"


def unequal_training(claim: Claim, check: Check, measurements: Measurements) -> List[str]:
    """Why a competitor of the rule (a run in ``versus`` or ``may_fail``) was not trained on the terms of
    the rule's subjects (the other runs it reads; for a rule about the competitor alone, the runs of the
    rule's papers' cells): fewer optimiser steps (:func:`step_budget`), or without a stabiliser a
    subject had (:data:`STABILISERS`). Empty: trained alike, or the rule has no competitor."""
    read = check.expression.labels()
    competitors = sorted((set(check.versus) | set(check.may_fail)) & read & set(measurements.seeds))
    if not competitors:
        return []
    subjects = sorted(read - set(competitors))
    if not subjects:
        cells = {PAPER_CELLS[p] for p in claim.rule_papers(check)}
        subjects = [label for label, cell in measurements.cells_of(claim.checked_labels).items() if cell in cells]
    out = []
    for competitor in competitors:
        mine = measurements.seeds[competitor][-1]
        for subject in subjects:
            theirs = measurements.seeds[subject][-1]
            out += _unequal(competitor, mine, subject, theirs)
    return out


def _unequal(competitor: str, mine: Dict, subject: str, theirs: Dict) -> List[str]:
    parts = []
    given, needed = step_budget(mine), step_budget(theirs)
    if given is not None and needed is not None and given < needed:
        parts.append(f"{given:,.0f} optimiser steps to {needed:,.0f}")
    had, has = stabilisers(theirs), stabilisers(mine)
    lacking = [STABILISERS[key].format(format_number(value)) for key, value in had.items() if has.get(key) != value]
    if lacking:
        parts.append(f"without {', '.join(lacking)}")
    return [f"{competitor} was not trained as {subject} was ({'; '.join(parts)})"] if parts else []


def _evaluate(claim: Claim, check: Check, measurements: Measurements) -> CheckResult:
    expression = check.expression
    cells = measurements.cells_of(expression.labels())
    may_fail = {label for label in check.may_fail if cells.get(label) not in claim.own_cells}
    failing, unknown, notes = _vetoes(claim, check, measurements, may_fail)

    def measure(name: str, label: str, args: Tuple[float, ...]) -> Tuple[float, float]:
        bounds = measurements.summary(name, label, args).bounds
        return UNKNOWN if label in unknown else bounds

    try:
        value, seen = expression.evaluate(measure)
    except Underflow as error:
        return CheckResult(check, "no", [(error.call, error.shown)], [str(error)])
    except Unmeasured as error:
        return CheckResult(check, "not measured", notes=[str(error)])
    values = unique([(call, shown_value(measurements, call)) for call, _ in seen])
    if failing:
        return CheckResult(check, "no", values, failing)
    if may_fail:
        learned = _learned_subjects(claim, check, measurements)
        if not learned:
            cells = ", ".join(PAPER_CELLS[p] for p in claim.rule_papers(check))
            notes.append(
                f"a rule that lets {', '.join(sorted(may_fail))} sit at chance counts only when a run of "
                f"{cells} learned, and none did"
            )
            return CheckResult(check, "undecided", values, notes)
    outcome = "undecided" if value is None else "yes" if value else "no"
    return CheckResult(check, outcome, values, notes)


def _vetoes(
    claim: Claim, check: Check, measurements: Measurements, may_fail: Set[str]
) -> Tuple[List[str], Set[str], List[str]]:
    """``(failing, unknown, notes)``: why the rule fails outright (a subject at chance), the runs whose
    numbers it may not use (a competitor at chance, a derived measure of an unsolved run) and why."""
    failing: List[str] = []
    unknown: Set[str] = set()
    notes: List[str] = []
    if check.structural:
        return failing, unknown, notes
    at_chance: Set[str] = set()
    reads = check.expression.reads()
    quality = sorted({label for name, label in reads if name in QUALITY_MEASURES and label in measurements.seeds})
    for label in quality:
        why = measurements.at_chance(label)
        if why is None or label in may_fail:
            continue
        if label in check.versus:
            unknown.add(label)
            notes.append(f"{why}: at chance, where the paper has it learn, so there is nothing to compare with")
        else:
            at_chance.add(label)
            failing.append(f"{why}: at chance")
    if claim.success is not None:
        derived: Dict[str, List[str]] = {}
        for name, label in sorted(reads):
            if name in DERIVED_MEASURES and label in measurements.seeds:
                derived.setdefault(label, []).append(name)
        for label, names in derived.items():
            why = measurements.unsolved(label, claim.success)
            if why and label not in unknown | at_chance:
                unknown.add(label)
                notes.append(f"{why}, so its {' and '.join(names)} says nothing")
    return failing, unknown, notes


def _learned_subjects(claim: Claim, check: Check, measurements: Measurements) -> List[str]:
    cells = {PAPER_CELLS[p] for p in claim.rule_papers(check)}
    subjects = [label for label, cell in measurements.cells_of(claim.checked_labels).items() if cell in cells]
    return [label for label in subjects if measurements.at_chance(label) is None]


def shown_value(measurements: Measurements, call: str) -> str:
    """The number a rule read, as the page shows it: mean ± std (n), accuracies in percent, a censored
    ``steps_to`` as "never within N steps", a recall bounded in some seed as its lower bound."""
    name, rest = call.split("(", 1)
    label, *args = [a.strip() for a in rest.rstrip(")").split(",")]
    found = measurements.summary(name, label, tuple(float(a) for a in args))
    if name == "recall":  # an interval up to 1 unless measured: only its lower bound says something
        return found.text(accuracy=True) if found.lo == found.hi else f"≥ {found.text(accuracy=True)}"
    row = measurements.seeds[label][-1]
    accuracy = name in ("metric", "best_val") and (row.get("metrics") or {}).get("metric_name") == "accuracy"
    return found.text(accuracy=accuracy, steps=name == "steps_to")


def about_own_cell(claim: Claim, check: Check, measurements: Measurements) -> bool:
    """Whether ``check`` says something about one of the claim's own papers' cells: it reads a run of one
    (not one it lets fail) through a measure other than the parameter count, which needs no training."""
    own = {label for label, cell in measurements.cells_of(claim.checked_labels).items() if cell in claim.own_cells}
    own -= set(check.may_fail)
    return any(label in own and name != "params" for name, label in check.expression.reads())


def deciding_rows(claim: Claim, measurements: Measurements) -> Tuple[Measurements, Optional[Measurements]]:
    """``(the rows that decide the verdict, the development rows shown beside them)``: for a tuned claim
    the rows of the held-out seeds and the others; for an untuned one every row and None."""
    if not claim.tuning.tuned:
        return measurements, None
    return measurements.split(HELD_OUT_SEEDS)


def deciding_seeds(claim: Claim) -> Tuple[int, ...]:
    """The seeds whose rows decide the claim: a tuned claim's held-out seeds, an untuned claim's 1-3."""
    return HELD_OUT_SEEDS if claim.tuning.tuned else DEVELOPMENT_SEEDS


def missing_seeds(claim: Claim, found: Measurements, seeds: Tuple[int, ...] = HELD_OUT_SEEDS) -> List[str]:
    """The judged runs lacking one of ``seeds`` (by default the held-out ones), with the seeds they lack:
    ``["tarnn (seeds 5, 6)"]``."""
    out = []
    for label in claim.checked_labels:
        stored = {seed_of(row) for row in found.seeds.get(label, [])}
        lacking = [str(seed) for seed in seeds if seed not in stored]
        if lacking:
            out.append(f"{label} (seed{'s' if len(lacking) > 1 else ''} {', '.join(lacking)})")
    return out


def held_out_command(claim: Claim, budget: Optional[str]) -> str:
    """The command that trains the held-out seeds' rows a claim lacks."""
    seeds = ",".join(str(seed) for seed in HELD_OUT_SEEDS)
    return f"ltdrnn reproduce run {claim.id} --budget {budget or 'paper'} --seeds {seeds} --resume"


def judge(claim: Claim, measurements: Measurements, budget: Optional[str]) -> Verdict:
    """The verdict of ``claim`` on the rows that decide it (:func:`deciding_rows`): for an untuned claim
    every row (:func:`judge_rows`); for a tuned one the held-out seeds' rows, with the development seeds'
    verdict beside it, or "not measured on held-out seeds" (proxy data: "proxy") until every judged run
    has every held-out seed, with the command that trains them."""
    deciding, development = deciding_rows(claim, measurements)
    if development is None:
        return with_every_seed(claim, judge_rows(claim, measurements, budget), measurements)
    shown = judge_rows(claim, development, budget)
    seeds = ", ".join(str(seed) for seed in HELD_OUT_SEEDS)
    tuned = f"{', '.join(claim.tuning.runs)} tuned on the development seeds"
    missing = missing_seeds(claim, deciding)
    if not missing:
        verdict = judge_rows(claim, deciding, budget)
        verdict.reason = f"On the held-out seeds {seeds} ({tuned}, {shown.status} there). " + verdict.reason
        verdict.development = shown
        return verdict
    results = [evaluate_check(claim, check, deciding) for check in claim.checks]
    if not deciding.seeds and not development.seeds:
        return Verdict("not run yet", shown.reason, budget, results, development=shown)
    reason = (
        f"Only the held-out seeds {seeds} decide ({tuned}, {shown.status} there); not stored yet: "
        f"{', '.join(missing)}. `{held_out_command(claim, budget)}` trains them."
    )
    status = "proxy" if claim.data == "proxy" else NOT_HELD_OUT
    return Verdict(status, reason, budget, results, development=shown, pending=missing)


def with_every_seed(claim: Claim, verdict: Verdict, measurements: Measurements) -> Verdict:
    """``verdict`` of an untuned claim, or "not run yet" where a judged run lacks one of the seeds 1-3: a
    rule that holds "in every seed" of one or two says little beyond the seeds' noise."""
    missing = missing_seeds(claim, measurements, DEVELOPMENT_SEEDS)
    if not missing or verdict.status in ("proxy", "not run yet"):
        return verdict
    verdict.reason = (
        f"Every judged run needs seeds {', '.join(str(seed) for seed in DEVELOPMENT_SEEDS)}; not stored yet: "
        f"{', '.join(missing)}. On the seeds stored: {verdict.status}. " + verdict.reason
    )
    verdict.status = "not run yet"
    return verdict


def judge_rows(claim: Claim, measurements: Measurements, budget: Optional[str]) -> Verdict:
    """The verdict of ``claim`` on ``measurements``, whatever their seeds: all rules hold on the papers'
    cells -> reproduced; all rules hold on a variant of a cell (a condition with a ``variant``), or a rule
    about one of the claim's own cells holds -> partly; else not reproduced; proxy data -> proxy; a judged
    run missing -> not run yet. The reason gives every rule with its numbers, and the variants that capped
    it (``capped``)."""
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
    capped = [f"{c.what} ({c.source}): {c.variant}" for c in claim.variants]
    if claim.data == "proxy":
        status = "proxy"
    elif len(passed) == len(results) and not capped:
        status = "reproduced"
    elif any(about_own_cell(claim, r.check, measurements) for r in passed):
        status = "partly"
    else:
        status = "not reproduced"
    reason = "; ".join(r.text() for r in results) + "."
    if capped and status == "partly" and len(passed) == len(results):
        reason = f"Every rule holds, but the runs train a variant of the paper's cell: {'; '.join(capped)}. " + reason
    diverged = [
        f"{label} (seed {seed_of(row)})"
        for label, rows in measurements.seeds.items()
        for row in rows
        if row.get("status") != "finished"
    ]
    if diverged:
        reason += f" Did not finish: {', '.join(diverged)}."
    return Verdict(status, reason, budget, results, capped)
