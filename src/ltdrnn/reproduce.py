"""Reproduce the source papers' headline claims and publish them, with the papers' numbers, in REPRODUCTION.md.

    ltdrnn reproduce list                                  the claims, and their verdicts so far
    ltdrnn reproduce run CLAIM [CLAIM ...] | all [--budget quick|paper] [--seeds 1,2,3] [--set KEY=VALUE ...]
                                                           train the claim's runs into the store, analyse
    ltdrnn reproduce report                                REPRODUCTION.md + plots from the store
    ltdrnn reproduce check                                 validate the claims table

The claims table is packaged data, ``ltdrnn/presets/reproduce/_claims.yaml``. A claim names the paper's
numbers and their sources, the runs that measure ours (a label, a preset, overrides, analyses), two
budgets (``quick``: what a small CPU carries; ``paper``: the paper's protocol), the full-data run and
``checks``: expressions over the means over seeds such as ``metric(tarnn) >= 0.99`` or
``steps_to(tarnn, 0.05) < steps_to(lstm, 0.05)``. The machinery refuses a check that would pass at
chance (:func:`evaluate_check`). All checks true -> reproduced, a check about one of the papers' cells
true -> partly, else not reproduced; a claim with a judged run missing is "not run yet".

Every run is a normal ``train(cfg)`` run stored in the results store (``reproduction/results.db``) with
``study = "reproduce/<claim>/<budget>"``, ``name = <label>`` and its seed in ``train.seed``; the command
that produced it is kept in the run's ``notes``. Analyses (gradient norm versus lag, MIST Fig. 2;
||dh_T/dh_1|| / ||dh_T/dh_{T-1}||, iRNN Fig. 3) go to the table ``reproduce_analyses`` of the same
database. ``report`` reads only the database, so the document can be regenerated anywhere the database is.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import shlex
import sys
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from .results import markdown_table

BUDGETS = ("quick", "paper")
DEFAULT_SEEDS = (1, 2, 3)
DEFAULT_STORE = "reproduction/results.db"
DEFAULT_DOC = "REPRODUCTION.md"
DEFAULT_PLOTS = "reproduction"
DEFAULT_RUNS = "runs/reproduce"
ANALYSES = ("gradient_vs_lag", "jacobian_ratio")
STATUSES = ("reproduced", "partly", "not reproduced", "not run yet")
# A run is "at chance" unless its mean test metric closes at least this fraction of the gap between the
# task's trivial baseline and a perfect score (accuracy 1, loss 0); see ``Measurements.at_chance``.
CHANCE_MARGIN = 0.2


class ClaimError(ValueError):
    """The claims table is malformed; the message names the claim and the key."""


# ---- the claims table ------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunSpec:
    """One run of a claim: ``label`` (the name checks use), a preset, overrides and analyses.
    ``reading_of``: the label of the run whose cell this run trains under another reading; such runs
    are shown beside it and never read by the checks."""

    label: str
    preset: str
    overrides: Tuple[str, ...] = ()
    analyses: Tuple[str, ...] = ()
    reading_of: str = ""


@dataclass(frozen=True)
class Budget:
    """Overrides applied to every run (``overrides``) and to single runs (``runs``), and what they mean."""

    name: str
    overrides: Tuple[str, ...]
    runs: Dict[str, Tuple[str, ...]]
    note: str


@dataclass(frozen=True)
class Check:
    """A verdict rule: an expression over measured numbers and the sentence it stands for.
    ``may_fail``: labels the rule lets sit at chance (the baseline it says fails, the competitor it
    beats); ``if_fails``: the claim's own explanation when the rule does not hold."""

    expr: str
    says: str
    may_fail: Tuple[str, ...] = ()
    if_fails: str = ""

    @property
    def expression(self) -> "Expression":
        return Expression(self.expr)


@dataclass(frozen=True)
class FullRun:
    """The full-data run on a bigger machine: extra ``--set`` items on top of the paper budget, and
    an estimate of its hours with what the estimate rests on."""

    sets: Tuple[str, ...]
    hours: float
    machine: str
    basis: str


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str
    title: str
    claim: str
    paper_numbers: Tuple[Dict[str, str], ...]
    runs: Tuple[RunSpec, ...]
    budgets: Dict[str, Budget]
    checks: Tuple[Check, ...]
    readings: str = ""
    deviation: str = ""
    full_run: Optional[FullRun] = None

    @property
    def labels(self) -> List[str]:
        return [r.label for r in self.runs]

    @property
    def checked_labels(self) -> List[str]:
        """The labels the verdict needs (runs of another reading are shown, not judged)."""
        return [r.label for r in self.runs if not r.reading_of]

    def study(self, budget: str) -> str:
        return f"reproduce/{self.id}/{budget}"

    def overrides(self, spec: RunSpec, budget: str, extra: Sequence[str] = ()) -> List[str]:
        """The overrides of one run under a budget, in the order they apply (later wins)."""
        b = self.budgets[budget]
        return [*spec.overrides, *b.overrides, *b.runs.get(spec.label, ()), *extra]


def _keys(data: Dict[str, Any], where: str, required: Iterable[str], optional: Iterable[str] = ()) -> None:
    if not isinstance(data, dict):
        raise ClaimError(f"{where}: expected a mapping, got {data!r}")
    allowed = set(required) | set(optional)
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ClaimError(f"{where}: unknown key {unknown[0]!r}; valid keys: {', '.join(sorted(allowed))}")
    missing = [k for k in required if k not in data]
    if missing:
        raise ClaimError(f"{where}: missing key {missing[0]!r}")


def _strings(value: Any, where: str) -> Tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ClaimError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(value)


def parse_claim(data: Dict[str, Any]) -> Claim:
    """A :class:`Claim` from plain data; keys and types are checked (not presets: see ``validate``)."""
    _keys(
        data,
        "claim",
        ("id", "paper", "title", "claim", "paper_numbers", "runs", "budgets", "checks"),
        ("readings", "deviation", "full_run"),
    )
    cid = data["id"]
    runs = []
    for i, run in enumerate(data["runs"] or []):
        where = f"claim {cid!r}: runs[{i}]"
        _keys(run, where, ("label", "preset"), ("overrides", "analyses", "reading_of"))
        analyses = _strings(run.get("analyses"), f"{where}.analyses")
        for kind in analyses:
            if kind not in ANALYSES:
                raise ClaimError(f"{where}.analyses: expected one of {', '.join(ANALYSES)}, got {kind!r}")
        runs.append(
            RunSpec(
                str(run["label"]),
                str(run["preset"]),
                _strings(run.get("overrides"), f"{where}.overrides"),
                analyses,
                str(run.get("reading_of") or ""),
            )
        )
    labels = [r.label for r in runs]
    if not runs or len(set(labels)) != len(labels):
        raise ClaimError(f"claim {cid!r}: runs: expected at least one run and unique labels, got {labels}")
    judged = [r.label for r in runs if not r.reading_of]
    for i, run in enumerate(runs):
        if run.reading_of and run.reading_of not in judged:
            raise ClaimError(
                f"claim {cid!r}: runs[{i}].reading_of: expected the label of a judged run "
                f"({', '.join(judged)}), got {run.reading_of!r}"
            )
    budgets = {}
    for name in BUDGETS:
        if name not in (data["budgets"] or {}):
            raise ClaimError(f"claim {cid!r}: budgets: missing budget {name!r}")
    for name, budget in data["budgets"].items():
        where = f"claim {cid!r}: budgets.{name}"
        _keys(budget, where, ("overrides", "note"), ("runs",))
        per_run = {}
        for label, overrides in (budget.get("runs") or {}).items():
            if label not in labels:
                raise ClaimError(f"{where}.runs: unknown run label {label!r}; labels: {', '.join(labels)}")
            per_run[label] = _strings(overrides, f"{where}.runs.{label}")
        budgets[name] = Budget(name, _strings(budget["overrides"], f"{where}.overrides"), per_run, str(budget["note"]))
    checks = []
    for i, check in enumerate(data["checks"] or []):
        where = f"claim {cid!r}: checks[{i}]"
        _keys(check, where, ("expr", "says"), ("may_fail", "if_fails"))
        try:
            expression = Expression(check["expr"])
        except ClaimError as error:
            raise ClaimError(f"{where}: {error}") from None
        unknown = sorted(expression.labels() - set(judged))
        if unknown:
            raise ClaimError(
                f"{where}: unknown run label {unknown[0]!r} in {check['expr']!r} (runs of "
                f"another reading are not judged); labels: {', '.join(judged)}"
            )
        may_fail = _strings(check.get("may_fail"), f"{where}.may_fail")
        stray = sorted(set(may_fail) - expression.labels())
        if stray:
            raise ClaimError(f"{where}.may_fail: expected labels that {check['expr']!r} reads, got {stray[0]!r}")
        checks.append(Check(check["expr"], str(check["says"]), may_fail, str(check.get("if_fails") or "")))
    if not checks:
        raise ClaimError(f"claim {cid!r}: checks: expected at least one check")
    numbers = []
    for i, number in enumerate(data["paper_numbers"] or []):
        _keys(number, f"claim {cid!r}: paper_numbers[{i}]", ("what", "value", "source"))
        numbers.append({k: str(v) for k, v in number.items()})
    return Claim(
        str(cid),
        str(data["paper"]),
        str(data["title"]),
        str(data["claim"]),
        tuple(numbers),
        tuple(runs),
        budgets,
        tuple(checks),
        str(data.get("readings") or ""),
        str(data.get("deviation") or ""),
        _full_run(data.get("full_run"), f"claim {cid!r}: full_run"),
    )


def _full_run(data: Any, where: str) -> Optional[FullRun]:
    if data is None:
        return None
    _keys(data, where, ("hours", "machine", "basis"), ("set",))
    hours = data["hours"]
    if isinstance(hours, bool) or not isinstance(hours, (int, float)) or hours <= 0:
        raise ClaimError(f"{where}.hours: expected a positive number of hours, got {hours!r}")
    return FullRun(_strings(data.get("set"), f"{where}.set"), float(hours), str(data["machine"]), str(data["basis"]))


def load_claims(text: Optional[str] = None) -> List[Claim]:
    """The packaged claims (or those of a YAML ``text``), in the table's order."""
    import yaml

    if text is None:
        text = (resources.files("ltdrnn") / "presets" / "reproduce" / "_claims.yaml").read_text()
    data = yaml.safe_load(text) or {}
    _keys(data, "claims file", ("claims",))
    claims = [parse_claim(c) for c in data["claims"]]
    ids = [c.id for c in claims]
    if len(set(ids)) != len(ids):
        raise ClaimError(f"claims file: claim ids must be unique, got {ids}")
    return claims


def find_claim(claims: Sequence[Claim], cid: str) -> Claim:
    for claim in claims:
        if claim.id == cid:
            return claim
    raise ClaimError(f"unknown claim {cid!r}; claims: {', '.join(c.id for c in claims)}")


def validate(claims: Sequence[Claim]) -> List[str]:
    """Problems of the table that parsing cannot see: every preset loads under every budget, with a
    registered cell and task, and a run of another reading trains the cell of the run it re-reads.
    Returns one message per problem (empty: valid)."""
    from .cells.registry import list_cells
    from .config import ConfigError, load_config
    from .tasks import list_tasks

    cells, tasks = set(list_cells()), set(list_tasks())
    problems = []
    for claim in claims:
        cell_of: Dict[str, str] = {}
        for spec in claim.runs:
            for budget in claim.budgets:
                where = f"{claim.id}/{spec.label} ({budget})"
                try:
                    cfg = load_config(spec.preset, claim.overrides(spec, budget))
                except (ConfigError, OSError) as error:
                    problems.append(f"{where}: {error}")
                    continue
                if cfg.model.cell not in cells:
                    problems.append(f"{where}: cell {cfg.model.cell!r} is not registered")
                if cfg.task.name not in tasks:
                    problems.append(f"{where}: task {cfg.task.name!r} is not registered")
                cell_of[spec.label] = cfg.model.cell
        for spec in claim.runs:
            if spec.reading_of and cell_of.get(spec.label) != cell_of.get(spec.reading_of):
                problems.append(
                    f"{claim.id}/{spec.label}: reading_of {spec.reading_of!r} expects the same cell, "
                    f"got {cell_of.get(spec.label)!r} vs {cell_of.get(spec.reading_of)!r}"
                )
    return problems


# ---- verdict expressions ---------------------------------------------------------------------------
# name -> number of arguments after the run label
MEASURES = {
    "metric": 0,
    "baseline": 0,
    "params": 0,
    "train_s": 0,
    "skip": 0,
    "best_val": 0,
    "steps_to": 1,
    "lag_ratio": 0,
    "jac_ratio": 0,
}
AGGREGATES = {"min": min, "max": max, "abs": abs}
_ALLOWED = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.Compare,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.Eq,
    ast.NotEq,
    ast.BinOp,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.UnaryOp,
    ast.USub,
    ast.Not,
    ast.Call,
    ast.Name,
    ast.Constant,
    ast.Load,
)


class Unmeasured(LookupError):
    """A check needs a number that the stored runs do not have."""


class Underflow(Unmeasured):
    """A gradient-norm ratio is exactly 0 ("underflow") or not a finite number ("not finite": 0/0, or
    a model that diverged): nothing can be compared with it. ``call`` names it, ``shown`` says which."""

    def __init__(self, call: str, shown: str, message: str) -> None:
        super().__init__(message)
        self.call, self.shown = call, shown


# measures that say how well a run learned: a check reading one of them needs that run above chance
QUALITY_MEASURES = ("metric", "best_val", "steps_to", "train_s", "skip")
RATIOS = {"lag_ratio": "gradient_vs_lag", "jac_ratio": "jacobian_ratio"}


class Expression:
    """A verdict rule such as ``metric(tarnn) >= 0.99 and steps_to(lstm, 0.05) > 300``.

    Allowed: numbers, ``inf``, arithmetic (+ - * /), comparisons (also chained), and/or/not, the
    measures ``metric(run)``, ``baseline(run)``, ``params(run)``, ``train_s(run)``, ``skip(run)``,
    ``best_val(run)``, ``steps_to(run, threshold)``, ``lag_ratio(run)`` (gradient norm at the largest
    lag / its peak over lags), ``jac_ratio(run)`` (``||dh_T/dh_1|| / ||dh_T/dh_{T-1}||``) (``run`` is a
    label of the claim) and ``min``, ``max``, ``abs``. Anything else is refused when parsed.
    """

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise ClaimError(f"expr: expected a string, got {text!r}")
        try:
            self.tree = ast.parse(text, mode="eval")
        except SyntaxError as error:
            raise ClaimError(f"expr {text!r}: not an expression ({error.msg})") from None
        self.text = text
        self._check(self.tree)

    def _check(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            if not isinstance(node, _ALLOWED):
                raise ClaimError(f"expr {self.text!r}: {type(node).__name__} is not allowed")
            if isinstance(node, ast.Constant) and (
                isinstance(node.value, bool) or not isinstance(node.value, (int, float))
            ):
                raise ClaimError(f"expr {self.text!r}: only numbers are allowed as constants, got {node.value!r}")
            if isinstance(node, ast.Call):
                self._check_call(node)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Name)
                and not self._is_label(node)
                and node.id != "inf"
                and not self._is_function(node)
            ):
                raise ClaimError(
                    f"expr {self.text!r}: unknown name {node.id!r} (run labels go inside a "
                    f"measure, e.g. metric({node.id}))"
                )

    def _check_call(self, node: ast.Call) -> None:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if node.keywords or name not in {**MEASURES, **AGGREGATES}:
            raise ClaimError(
                f"expr {self.text!r}: unknown function {ast.unparse(node.func)!r}; functions: "
                f"{', '.join([*MEASURES, *AGGREGATES])}"
            )
        if name in MEASURES:
            if len(node.args) != 1 + MEASURES[name] or not isinstance(node.args[0], ast.Name):
                raise ClaimError(
                    f"expr {self.text!r}: {name} takes a run label"
                    + (f" and {MEASURES[name]} number(s)" if MEASURES[name] else "")
                    + f", got {ast.unparse(node)!r}"
                )
        elif not node.args:
            raise ClaimError(f"expr {self.text!r}: {name} needs arguments")

    def _measure_calls(self) -> List[ast.Call]:
        return [
            n
            for n in ast.walk(self.tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in MEASURES
        ]

    def _is_label(self, node: ast.Name) -> bool:
        return any(call.args and call.args[0] is node for call in self._measure_calls())

    def _is_function(self, node: ast.Name) -> bool:
        return any(isinstance(n, ast.Call) and n.func is node for n in ast.walk(self.tree))

    def labels(self) -> set:
        return {call.args[0].id for call in self._measure_calls()}

    def reads(self) -> set:
        """``{(measure, label), ...}`` the expression reads."""
        return {(call.func.id, call.args[0].id) for call in self._measure_calls()}

    def evaluate(self, measure: Callable[[str, str, Tuple[float, ...]], float]):
        """``(value, [(call text, number), ...])``; ``measure(name, label, args)`` gives each number and
        may raise :class:`Unmeasured`."""
        seen: List[Tuple[str, float]] = []
        return self._eval(self.tree.body, measure, seen), seen

    def _eval(self, node, measure, seen):
        ev = lambda n: self._eval(n, measure, seen)  # noqa: E731
        if isinstance(node, ast.Constant):
            return float(node.value)
        if isinstance(node, ast.Name):
            return math.inf
        if isinstance(node, ast.UnaryOp):
            return -ev(node.operand) if isinstance(node.op, ast.USub) else not ev(node.operand)
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            ops = {
                ast.Add: lambda: a + b,
                ast.Sub: lambda: a - b,
                ast.Mult: lambda: a * b,
                ast.Div: lambda: a / b if b else math.copysign(math.inf, a) if a else math.nan,
            }
            return ops[type(node.op)]()
        if isinstance(node, ast.BoolOp):
            values = [bool(ev(v)) for v in node.values]
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.Compare):
            left, result = ev(node.left), True
            for op, right_node in zip(node.ops, node.comparators):
                right = ev(right_node)
                ok = {
                    ast.Lt: left < right,
                    ast.LtE: left <= right,
                    ast.Gt: left > right,
                    ast.GtE: left >= right,
                    ast.Eq: left == right,
                    ast.NotEq: left != right,
                }[type(op)]
                result = result and ok
                left = right
            return result
        name = node.func.id
        if name in AGGREGATES:
            return AGGREGATES[name](*[ev(a) for a in node.args])
        args = tuple(ev(a) for a in node.args[1:])
        value = float(measure(name, node.args[0].id, args))
        seen.append((ast.unparse(node), value))
        return value


# ---- measured numbers ------------------------------------------------------------------------------
class Measurements:
    """The numbers a claim's checks read: per run label, the latest stored row of each seed (oldest
    first) and the analyses of those rows. A measure is the mean over the seeds.

    ``rows`` maps a label to one row or to a list of rows (one per seed); ``analyses`` maps a label to
    ``{kind: data}`` or to a list of them, in the order of its rows.
    """

    def __init__(self, rows: Dict[str, Any], analyses: Optional[Dict[str, Any]] = None):
        self.seeds = {label: list(r) if isinstance(r, list) else [r] for label, r in rows.items()}
        self.analyses_of = {label: list(a) if isinstance(a, list) else [a] for label, a in (analyses or {}).items()}

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
        """``(mean, std, n)`` of a measure over the seeds of ``label`` (population std; 0 for n = 1)."""
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
        shown = f"{label} {_mean_text(mean, std, n)}"
        if baseline is None:
            return f"{shown}, no trivial baseline stored"
        gap = (mean - baseline) / (1 - baseline) if higher else (baseline - mean) / baseline
        if not math.isfinite(mean) or not gap >= CHANCE_MARGIN:
            return f"{shown} vs trivial baseline {format_number(baseline)}"
        return None

    def source_labels(self, labels: Iterable[str]) -> List[str]:
        """The labels among ``labels`` whose stored cell is one of the papers' five cells (not a baseline)."""
        from .cells.registry import list_cells

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
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))


def _mean_text(mean: float, std: float, n: int, accuracy: bool = False) -> str:
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
            f"{call} = {_call_value(call, v, spread)}"
            for (call, v), spread in _unique(zip(self.values, self.spreads), key=lambda i: i[0][0])
        )
        refused = f" ({'; '.join(self.vetoes)})" if self.vetoes else ""
        return f"{self.check.says}: {shown} -> {'yes' if self.passed else 'no'}{refused}"


def _call_value(call: str, value: float, spread: Tuple[float, int] = (0.0, 1)) -> str:
    if call.startswith("steps_to") and value == math.inf:
        return "never"
    std, n = spread
    return format_number(value) if n == 1 else _mean_text(value, std, n)


@dataclass
class Verdict:
    status: str
    reason: str
    budget: Optional[str]
    checks: List[CheckResult]


def _unique(items, key=lambda item: item[0]):
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
        f"{label} (seed {_seed(row)})"
        for label, rows in measurements.seeds.items()
        for row in rows
        if row.get("status") != "finished"
    ]
    if diverged:
        reason += f" Did not finish: {', '.join(diverged)}."
    causes = _unique([(r.check.if_fails, r.check.says) for r in results if not r.passed and r.check.if_fails])
    if causes:
        reason += " " + " ".join(f"Why '{says}' fails: {cause}" for cause, says in causes)
    return Verdict(status, reason, budget, results)


def format_number(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.4g}"


# ---- the analyses store ----------------------------------------------------------------------------
class Store:
    """The results store plus the table ``reproduce_analyses`` (one row per analysis of a run)."""

    def __init__(self, location: str) -> None:
        from .results import ResultStore

        self.results = ResultStore(location)
        sa = self.results.sa
        self.table = sa.Table(
            "reproduce_analyses",
            sa.MetaData(),
            sa.Column("id", sa.String(64), primary_key=True),
            sa.Column("run_id", sa.String(200), nullable=False, index=True),
            sa.Column("study", sa.String(200), index=True),
            sa.Column("label", sa.String(100)),
            sa.Column("kind", sa.String(40), nullable=False),
            sa.Column("created", sa.String(40), nullable=False),
            sa.Column("data", sa.Text, nullable=False),
        )
        from .results import create_tables

        create_tables(sa, self.table.metadata, self.results.engine)

    def add_analysis(self, run_id: str, study: str, label: str, kind: str, data: Dict[str, Any]) -> None:
        row = {
            "id": uuid.uuid4().hex,
            "run_id": run_id,
            "study": study,
            "label": label,
            "kind": kind,
            "created": datetime.now(timezone.utc).isoformat(),
            "data": json.dumps(data),
        }
        with self.results.engine.begin() as connection:
            connection.execute(self.table.insert().values(**row))

    def analyses(self, study: str) -> Dict[str, Dict[str, Dict[str, Any]]]:
        """``{run_id: {kind: data}}`` for one study (the latest analysis of each kind)."""
        sa = self.results.sa
        query = sa.select(self.table).where(self.table.c.study == study).order_by(self.table.c.created)
        out: Dict[str, Dict[str, Any]] = {}
        with self.results.engine.connect() as connection:
            for row in connection.execute(query).mappings():
                out.setdefault(row["run_id"], {})[row["kind"]] = json.loads(row["data"])
        return out

    def measurements(self, claim: Claim, budget: str) -> Measurements:
        """Per label, the latest stored row of each seed (``train.seed`` of its config) under ``budget``,
        oldest first, and their analyses. Rows of the same label and seed are re-runs: the latest wins."""
        study = claim.study(budget)
        latest: Dict[str, Dict[Any, Dict[str, Any]]] = {}
        for row in self.results.rows(study=study):  # oldest first
            if row["name"] in claim.labels:
                per_seed = latest.setdefault(row["name"], {})
                per_seed.pop(_seed(row), None)  # re-inserted last: the dict stays ordered by time
                per_seed[_seed(row)] = row
        by_run = self.analyses(study)
        rows = {label: list(per_seed.values()) for label, per_seed in latest.items()}
        return Measurements(
            rows, {label: [by_run.get(row["id"], {}) for row in found] for label, found in rows.items()}
        )

    def shown_budget(self, claim: Claim) -> Tuple[Optional[str], Measurements]:
        """The budget whose runs the document shows: the paper budget if every judged run has a
        result, else quick if so, else the one with more runs finished (None: nothing stored)."""
        found = {b: self.measurements(claim, b) for b in BUDGETS}
        done = {b: sum(label in found[b].seeds for label in claim.checked_labels) for b in BUDGETS}
        for budget in ("paper", "quick"):
            if done[budget] == len(claim.checked_labels):
                return budget, found[budget]
        budget = max(("quick", "paper"), key=lambda b: done[b])
        if not found[budget].seeds:
            return None, found["quick"]
        return budget, found[budget]


def _seed(row: Dict[str, Any]) -> Any:
    """The training seed of a stored row (``train.seed`` of its resolved config)."""
    return ((row.get("config") or {}).get("train") or {}).get("seed")


# ---- running a claim -------------------------------------------------------------------------------
def invocation(claim_id: str, budget: str, extra: Sequence[str], seeds: Sequence[int] = DEFAULT_SEEDS) -> str:
    """The command line that runs one claim (kept in each run's notes; ``--seeds`` only if not the
    default)."""
    words = ["ltdrnn", "reproduce", "run", claim_id, "--budget", budget]
    if tuple(seeds) != DEFAULT_SEEDS:
        words += ["--seeds", ",".join(str(s) for s in seeds)]
    for item in extra:
        words += ["--set", item]
    return " ".join(shlex.quote(w) for w in words)


def train_command(spec: RunSpec, overrides: Sequence[str]) -> str:
    """The ``ltdrnn train`` command equivalent to one run (without the analyses)."""
    return " ".join(shlex.quote(w) for w in ["ltdrnn", "train", spec.preset, *overrides])


def run_config(
    claim: Claim,
    spec: RunSpec,
    budget: str,
    store: str,
    runs_dir: str,
    extra: Sequence[str] = (),
    progress: bool = False,
    seed: int = DEFAULT_SEEDS[0],
):
    from .config import load_config

    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    overrides = claim.overrides(spec, budget, [*extra, f"train.seed={seed}"])
    # the notes keep both command lines as run, so the document shows them even if the table changes
    notes = f"{invocation(claim.id, budget, extra, (seed,))}\n{train_command(spec, overrides)}"
    bookkeeping = [
        f"study={claim.study(budget)}",
        f"name={spec.label}",
        f"results={store}",
        f"run_dir={Path(runs_dir) / claim.id / budget / f'{spec.label}-s{seed}-{stamp}'}",
        f"train.progress={str(progress).lower()}",
    ]
    cfg = load_config(spec.preset, overrides + bookkeeping)
    cfg.notes = notes
    return cfg


def run_claim(
    claim: Claim,
    budget: str = "quick",
    store: str = DEFAULT_STORE,
    runs_dir: str = DEFAULT_RUNS,
    extra: Sequence[str] = (),
    only: Optional[Sequence[str]] = None,
    skip_done: bool = False,
    progress: bool = False,
    log: Callable[[str], None] = print,
    seeds: Sequence[int] = DEFAULT_SEEDS,
) -> List[str]:
    """Train each of the claim's runs once per seed under ``budget`` into ``store`` and store their
    analyses; returns the ``label (seed S)`` items that failed (a failing run does not stop the others).
    ``skip_done`` skips the label and seed pairs already stored for the budget."""
    from .train import train

    if budget not in claim.budgets:
        raise ClaimError(f"budget: expected one of {', '.join(claim.budgets)}, got {budget!r}")
    unknown = sorted(set(only or ()) - set(claim.labels))
    if unknown:
        raise ClaimError(f"--only: unknown run label {unknown[0]!r}; labels of {claim.id}: {', '.join(claim.labels)}")
    stored = Store(store)
    found = stored.measurements(claim, budget).seeds if skip_done else {}
    done = {(label, _seed(row)) for label, rows in found.items() for row in rows}
    failed = []
    for spec in claim.runs:
        for seed in seeds:
            if (only and spec.label not in only) or (spec.label, seed) in done:
                continue
            cfg = run_config(claim, spec, budget, store, runs_dir, extra, progress, seed)
            where = f"[{claim.id}/{budget}] {spec.label} (seed {seed})"
            log(f"{where}: {cfg.notes.splitlines()[1]}")
            watcher = AnalysisWatcher(spec, cfg)
            try:
                record = train(cfg, callbacks=[watcher])
                for kind, data in watcher.finish(record).items():
                    stored.add_analysis(record["id"], cfg.study, spec.label, kind, data)
            except Exception as error:  # one failing run must not stop the claim's others
                failed.append(f"{spec.label} (seed {seed})")
                log(f"{where}: FAILED {type(error).__name__}: {error}")
                continue
            m = record["metrics"]
            log(
                f"{where}: {record['status']}, test {m['metric_name']} {format_number(m['metric'])}, "
                f"{m['params']} params, {record['timings']['train_s']:.1f} s, {record['timings']['steps']} steps"
            )
    return failed


def parse_seeds(text: Optional[str], extra: Sequence[str]) -> Tuple[Tuple[int, ...], List[str]]:
    """``(seeds, extra)`` from ``--seeds`` and the ``--set`` items: ``--set train.seed=S`` alone means
    the one seed S (it is taken out of ``extra``); neither means the default seeds."""
    fixed = [item for item in extra if item.split("=", 1)[0].strip() == "train.seed"]
    rest = [item for item in extra if item not in fixed]
    if fixed and text is not None:
        raise ClaimError(f"--seeds: --set {fixed[0]} also chooses the seed; give one of them, got both")
    words = (
        [item.split("=", 1)[1] if "=" in item else "" for item in fixed]
        if fixed
        else (text.split(",") if text is not None else [str(s) for s in DEFAULT_SEEDS])
    )
    try:
        seeds = tuple(int(word) for word in words)
    except ValueError:
        where = "--set train.seed" if fixed else "--seeds"
        raise ClaimError(
            f"{where}: expected comma-separated integers such as 1,2,3, got {text if text is not None else fixed[-1]!r}"
        ) from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ClaimError(f"--seeds: expected distinct integers such as 1,2,3, got {text!r}")
    return seeds, rest


class AnalysisWatcher:
    """A training callback: keeps the model, and for ``jacobian_ratio`` measures the ratio every
    ``train.eval_every`` steps on 32 fixed validation sequences (iRNN Fig. 3b over iterations).
    ``gradient_vs_lag`` is measured after training on 100 test examples drawn with a fixed seed."""

    def __init__(self, spec: RunSpec, cfg) -> None:
        self.spec, self.cfg = spec, cfg
        self.model = None
        self.every = cfg.train.eval_every or 50
        self.trace: List[Dict[str, float]] = []
        self._batch = None

    def __call__(self, state: Dict[str, Any]) -> None:
        self.model = state["model"]
        if "jacobian_ratio" in self.spec.analyses and state["step"] % self.every == 0:
            x = self.batch("val", 32)[0][0]
            self.trace.append({"step": state["step"], **jacobian_ratio(self.model, x)})

    def batch(self, split: str, size: int):
        if self._batch is None or self._batch[0] != split:
            import torch

            from .tasks.base import build_task

            task = build_task(self.cfg.task.name, **self.cfg.task.options)
            dataset = task.dataset(split)
            # a fixed random sample: stored splits may be ordered by class
            order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))[:size]
            x, y, lengths = task.collate([dataset[i] for i in order.tolist()])
            self._batch = (split, (x, y, lengths), task.info)
        return self._batch[1], self._batch[2]

    def finish(self, record: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
        """The analyses of the trained model (the weights at the last step)."""
        out: Dict[str, Dict[str, Any]] = {}
        if self.model is None:
            return out
        if "gradient_vs_lag" in self.spec.analyses:
            from .analysis.gradients import gradient_vs_lag

            self._batch = None
            (x, y, lengths), info = self.batch("test", 100)
            model, x = _in_float64(self.model, x)
            batch = (x, y, lengths)
            curve = [float(v) for v in gradient_vs_lag(model, batch, info)]
            # relative to the peak, not to lag 0: a cell whose output is not the tensor kept in its
            # state (MIST's ring buffer) has no gradient on the state at lag 0
            peak = max(curve)
            out["gradient_vs_lag"] = {
                "curve": curve,
                "ratio": curve[-1] / peak if peak else math.nan,
                "examples": int(x.shape[0]),
                "step": record["timings"]["steps"],
                "dtype": "float64",
            }
        if "jacobian_ratio" in self.spec.analyses:
            final = jacobian_ratio(self.model, self.batch("val", 32)[0][0])
            steps = record["timings"]["steps"]
            trace = [t for t in self.trace if t["step"] != steps] + [{"step": steps, **final}]
            out["jacobian_ratio"] = {**final, "trace": trace}
        return out


def jacobian_ratio(model, x, probes: int = 8, seed: int = 0) -> Dict[str, float]:
    """``||dh_T/dh_1||_F``, ``||dh_T/dh_{T-1}||_F`` (means over the batch) and their ratio (iRNN Fig. 3b).

    ``h_t`` is the first layer's whole state after step t. Frobenius norms are estimated with
    ``probes`` Gaussian vectors v (``E||v^T J||^2 = ||J||_F^2``); the same v serve both Jacobians.
    Computed in float64 on a copy of the model (a product of T Jacobians underflows float32 long before
    float64). Needs a one-layer, one-direction model; the global RNG is left untouched.
    """
    import torch

    model, x = _in_float64(model, x)
    rnn = model.rnn
    if rnn.num_layers != 1 or rnn.bidirectional:
        raise ValueError(
            "jacobian_ratio: expected a one-layer, one-direction model, got "
            f"num_layers={rnn.num_layers}, bidirectional={rnn.bidirectional}"
        )
    cell = rnn.cells[0]
    generator = torch.Generator().manual_seed(seed)
    with torch.enable_grad():
        inputs = (model.embed(x) if model.embed is not None else x).detach().transpose(0, 1)
        p = cell.precompute(inputs)
        slices = list(zip(*[q.unbind(0) for q in p])) if isinstance(p, tuple) else list(p.unbind(0))
        if len(slices) < 3:
            raise ValueError(f"jacobian_ratio: expected sequences of at least 3 steps, got {len(slices)}")
        state = cell.init_state(x.shape[0], x.device, x.dtype)
        kept = {}
        for t, p_t in enumerate(slices):
            _, state = cell.step(p_t, state)
            if t in (0, len(slices) - 2):
                kept[t] = _float_tensors(state)
        last = _float_tensors(state)
        starts = list(kept)
        squares = {t: torch.zeros(x.shape[0], dtype=torch.float64) for t in starts}
        for _ in range(probes):
            vs = [torch.randn(s.shape, generator=generator, dtype=s.dtype) for s in last]
            # one backward pass gives v^T J for both starting points
            grads = iter(
                torch.autograd.grad(
                    last, [s for t in starts for s in kept[t]], grad_outputs=vs, retain_graph=True, allow_unused=True
                )
            )
            for t in starts:
                for _ in kept[t]:
                    g = next(grads)
                    if g is not None:
                        squares[t] += (g.detach().flatten(1) ** 2).sum(1)
    first, previous = (float((squares[t] / probes).sqrt().mean()) for t in (0, len(slices) - 2))
    return {"first": first, "previous": previous, "ratio": first / previous if previous else math.nan}


def _in_float64(model, x):
    """A float64 copy of ``model`` in eval mode and ``x`` in float64 (token ids stay integers)."""
    import copy

    twin = copy.deepcopy(model).double().eval()
    return twin, (x.double() if x.is_floating_point() else x)


def _float_tensors(state) -> List[Any]:
    import torch

    if isinstance(state, torch.Tensor):
        return [state] if state.is_floating_point() and state.requires_grad else []
    return [t for part in state for t in _float_tensors(part)]


# ---- the document ----------------------------------------------------------------------------------
def _metric_text(value: Optional[float], name: Optional[str]) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{100 * value:.1f}%" if name == "accuracy" else f"{value:.4g}"


def _setting(config: Dict[str, Any]) -> str:
    task = config.get("task", {})
    options = task.get("options", {})
    shown = {k: v for k, v in options.items() if k in ("T", "perm_seed", "crop", "n", "source")}
    return task.get("name", "?") + (f"({', '.join(f'{k}={v}' for k, v in shown.items())})" if shown else "")


def _budget_text(row: Dict[str, Any]) -> str:
    config, timings = row.get("config") or {}, row.get("timings") or {}
    options = config.get("task", {}).get("options", {})
    data = options.get("n_train") or options.get("n")
    parts = [
        f"{timings.get('steps')} steps",
        f"{timings.get('epochs', 0):.2g} epochs",
        f"batch {config.get('train', {}).get('batch_size')}",
    ]
    if data:
        parts.append(f"{data:,} train seqs")
    elif options.get("source"):
        parts.append(f"data {options['source']}")
    return ", ".join(parts)


def _analysis_text(measurements: Measurements, label: str) -> str:
    parts = []
    for name, what in (("lag_ratio", "grad at the largest lag / peak"), ("jac_ratio", "‖dh_T/dh_1‖ / ‖dh_T/dh_T-1‖")):
        try:
            mean, std, n = measurements.spread(name, label, ())
        except Underflow as error:
            parts.append(f"{what} = {error.shown}")
        except Unmeasured:
            continue
        else:
            parts.append(f"{what} = {_mean_text(mean, std, n)}")
    return "; ".join(parts)


def _quality_text(measurements: Measurements, label: str) -> str:
    """``"accuracy 83.4% ± 1.2% (n=3)"``, marked when at chance or when a seed did not finish."""
    rows = measurements.seeds[label]
    name = (rows[-1].get("metrics") or {}).get("metric_name") or rows[-1].get("metric_name")
    mean, std, n = measurements.spread("metric", label, ())
    text = f"{name} {_mean_text(mean, std, n, accuracy=name == 'accuracy')}"
    unfinished = sum(1 for row in rows if row.get("status") != "finished")
    if unfinished:
        text += f", {unfinished} of {n} did not finish"
    return text + (", **at chance**" if measurements.at_chance(label) else "")


def cpu_minutes(measurements: Measurements) -> float:
    """Training minutes of every row shown (all labels, all seeds; evaluation excluded)."""
    return sum(row.get("train_time_s") or 0.0 for rows in measurements.seeds.values() for row in rows) / 60


def run_rows(claim: Claim, measurements: Measurements) -> List[List[str]]:
    header = [
        "run",
        "cell",
        "task",
        "budget used (latest seed)",
        "test metric, mean ± std over seeds",
        "trivial baseline",
        "params",
        "train s (all seeds)",
        "skip %",
        "analysis (mean over seeds)",
        "seeds",
        "command (latest seed)",
    ]
    out = [header]
    for spec in claim.runs:
        label = spec.label + (f" (other reading of {spec.reading_of})" if spec.reading_of else "")
        rows = measurements.seeds.get(spec.label)
        if not rows:
            out.append([label, "", "", "", "not run yet", "", "", "", "", "", "", ""])
            continue
        row = rows[-1]
        m, config = row.get("metrics") or {}, row.get("config") or {}
        skips = [
            r["metrics"]["skip_fraction"] for r in rows if (r.get("metrics") or {}).get("skip_fraction") is not None
        ]
        out.append(
            [
                label,
                row["cell"],
                _setting(config),
                _budget_text(row),
                _quality_text(measurements, spec.label),
                _metric_text(m.get("baseline"), m.get("metric_name")),
                str(row.get("params")),
                f"{sum(r.get('train_time_s') or 0 for r in rows):.1f}",
                f"{100 * math.fsum(skips) / len(skips):.1f}" if skips else "-",
                _analysis_text(measurements, spec.label),
                ", ".join(str(_seed(r)) for r in rows),
                f"`{_notes(row)[1]}`",
            ]
        )
    return out


def readings_text(claim: Claim, measurements: Measurements) -> str:
    """The runs of another reading beside their default, and which of them leaves chance."""
    pairs = [(spec.reading_of, spec.label) for spec in claim.runs if spec.reading_of]
    if not pairs:
        return ""
    lines = []
    for default, other in pairs:
        shown = [
            f"`{label}` " + (_quality_text(measurements, label) if label in measurements.seeds else "not run yet")
            for label in (default, other)
        ]
        learned = [
            label for label in (default, other) if label in measurements.seeds and measurements.at_chance(label) is None
        ]
        if len(learned) == 1:
            verdict = f"only `{learned[0]}` is clearly better than the trivial baseline, as the paper's numbers are"
        elif learned:
            verdict = "both are clearly better than the trivial baseline"
        else:
            verdict = "neither is clearly better than the trivial baseline (or one is not run yet)"
        lines.append(f"{shown[0]} (default reading) vs {shown[1]}: {verdict}.")
    return " ".join(lines)


def _notes(row: Dict[str, Any]) -> Tuple[str, str]:
    """``(reproduce command, train command)`` as kept in a run's notes by :func:`run_config`."""
    lines = ((row.get("config") or {}).get("notes") or "").splitlines()
    return (lines[0] if lines else "?"), (lines[1] if len(lines) > 1 else "?")


def _commands(measurements: Measurements) -> List[str]:
    seen: List[str] = []
    for rows in measurements.seeds.values():
        for row in rows:
            command = _notes(row)[0]
            if command not in seen:
                seen.append(command)
    return seen


def _ours(verdict: Verdict) -> str:
    values = _unique(
        [
            (call, _call_value(call, value, spread))
            for r in verdict.checks
            for (call, value), spread in zip(r.values, r.spreads)
        ]
        + [r.underflow for r in verdict.checks if r.underflow]
    )
    return "; ".join(f"{call} = {shown}" for call, shown in values) or "-"


def full_run_command(claim: Claim) -> str:
    words = ["ltdrnn", "reproduce", "run", claim.id, "--budget", "paper"]
    for item in claim.full_run.sets if claim.full_run else ():
        words += ["--set", item]
    return " ".join(shlex.quote(w) for w in words)


def render(
    store: str = DEFAULT_STORE,
    out: str = DEFAULT_DOC,
    plots_dir: str = DEFAULT_PLOTS,
    claims: Optional[Sequence[Claim]] = None,
    plots: bool = True,
) -> Path:
    """Write the reproduction document (and its plots) from the store; returns its path."""
    claims = list(claims if claims is not None else load_claims())
    stored = Store(store)
    out_path, plot_root = Path(out), Path(plots_dir)
    sections, minutes = [], 0.0
    summary = [["claim", "paper", "paper's numbers", "ours (mean ± std over seeds)", "verdict", "budget", "CPU min"]]
    for claim in claims:
        budget, measurements = stored.shown_budget(claim)
        verdict = judge(claim, measurements, budget)
        figures = make_plots(claim, measurements, plot_root) if plots and measurements.seeds else []
        numbers = "; ".join(f"{n['what']}: {n['value']}" for n in claim.paper_numbers)
        minutes += cpu_minutes(measurements)
        summary.append(
            [
                f"[{claim.id}](#{claim.id})",
                claim.paper,
                numbers,
                _ours(verdict),
                f"**{verdict.status}**",
                budget or "-",
                f"{cpu_minutes(measurements):.0f}",
            ]
        )
        sections.append(claim_section(claim, verdict, measurements, budget, figures, out_path.parent))
    counts = {s: sum(1 for row in summary[1:] if row[4] == f"**{s}**") for s in STATUSES}
    at_paper = sum(1 for row in summary[1:] if row[5] == "paper")
    doc = [
        "# Reproduction of the papers' headline claims",
        "",
        f"Generated by `ltdrnn reproduce report` from `{store}` (do not edit by hand; "
        "[docs/reproduction.md](docs/reproduction.md) explains how it works and how to re-run a line). "
        f"Claims: {len(claims)}; " + ", ".join(f"{s}: {n}" for s, n in counts.items()) + ".",
        "",
        "Every number of ours below comes from the results database and was produced by the command "
        f"shown with it. {at_paper} of {len(claims)} claims are shown at the paper budget, the others at the "
        "`quick` budget (stated per claim). Each run label is trained with several seeds (`ltdrnn reproduce "
        "run` uses seeds 1, 2, 3 by default); the rules read the mean over seeds and the tables show mean ± "
        "std and n. A run whose mean test metric does not close "
        f"{100 * CHANCE_MARGIN:.0f}% of the gap between the task's trivial baseline and a perfect score is "
        "**at chance**, and no rule that needs it to have learned passes; a gradient ratio that is exactly 0 "
        "is **underflow** and no rule passes against it. All rules hold -> reproduced; a rule about one "
        "of the papers' own cells holds -> partly; otherwise not reproduced; a run missing -> not run yet.",
        "",
        f"Training time of the rows shown: **{minutes:.0f} CPU minutes** (the sum of `train_s` over every "
        "row, all seeds; regenerating this page from scratch takes that much training plus evaluation). The "
        "machine was shared with other jobs, so times are noisy and only comparable within a claim.",
        "",
        "## Summary",
        "",
        markdown_table(summary),
        "",
    ]
    doc += sections
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text("\n".join(doc))
    return out_path


def _rule_text(check: Check) -> str:
    lets = f"; may fail: {', '.join(check.may_fail)}" if check.may_fail else ""
    return f"`{check.expr}` ({check.says}{lets})"


def claim_section(
    claim: Claim,
    verdict: Verdict,
    measurements: Measurements,
    budget: Optional[str],
    figures: List[Path],
    doc_dir: Path,
) -> str:
    lines = [
        f"## {claim.id}",
        "",
        f"**{claim.title}** ({claim.paper}). {claim.claim}",
        "",
        "Paper:",
        "",
        markdown_table(
            [["what", "paper's number", "source"]] + [[n["what"], n["value"], n["source"]] for n in claim.paper_numbers]
        ),
        "",
    ]
    shown = budget or "quick"
    lines += [
        f"Budgets: quick, `ltdrnn reproduce run {claim.id} --budget quick` ({claim.budgets['quick'].note}); "
        f"paper, `ltdrnn reproduce run {claim.id} --budget paper` ({claim.budgets['paper'].note}). "
        f"Training time of the rows below: {cpu_minutes(measurements):.1f} CPU minutes.",
        "",
    ]
    if claim.full_run:
        lines += [
            f"Full-data run: `{full_run_command(claim)}`, estimated {format_number(claim.full_run.hours)} h "
            f"on {claim.full_run.machine} ({claim.full_run.basis}).",
            "",
        ]
    if claim.deviation:
        lines += [f"Deviation: {claim.deviation}", ""]
    if measurements.seeds:
        commands = _commands(measurements)
        lines += [
            f"Ours ({shown} budget), produced by " + ", ".join(f"`{c}`" for c in commands) + ":",
            "",
            markdown_table(run_rows(claim, measurements)),
            "",
        ]
    if claim.readings or any(spec.reading_of for spec in claim.runs):
        lines += ["Readings: " + " ".join(t for t in (claim.readings, readings_text(claim, measurements)) if t), ""]
    lines += [
        "Verdict rules: " + "; ".join(_rule_text(c) for c in claim.checks) + ".",
        "",
        f"**Verdict: {verdict.status}.** {verdict.reason}",
        "",
    ]
    if verdict.status == "not run yet":
        lines += [
            f"Not run yet: `ltdrnn reproduce run {claim.id} --budget {shown} --skip-done` trains the missing runs.",
            "",
        ]
    for figure in figures:
        lines += [f"![{figure.stem}]({os.path.relpath(figure, doc_dir)})", ""]
    return "\n".join(lines)


def make_plots(claim: Claim, measurements: Measurements, root: Path) -> List[Path]:
    """Learning curves of the claim's runs, and the plots of its analyses."""
    import torch

    from .analysis import plots
    from .analysis.plots import cell_colour, gradient_lag_plot

    paths = []
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    drawn = False
    style = _line_styles(measurements.rows)
    for label, row in measurements.rows.items():
        points = [
            (h["step"], h["val_metric"])
            for h in row.get("history") or []
            if h.get("val_metric") is not None and math.isfinite(h["val_metric"])
        ]
        if points:
            ax.plot(
                *zip(*points),
                marker=".",
                label=label,
                color=cell_colour(row.get("cell") or label),
                linestyle=style[label],
            )
            drawn = True
    if drawn:
        first = next(iter(measurements.rows.values()))
        baseline = (first.get("metrics") or {}).get("baseline")
        if (
            baseline is not None
            and len({(r.get("metrics") or {}).get("baseline") for r in measurements.rows.values()}) == 1
        ):
            ax.axhline(baseline, color="grey", linestyle="--", linewidth=1, label="trivial baseline")
        ax.set_xlabel("optimiser step")
        ax.set_ylabel(f"validation {first.get('metric_name') or 'metric'}")
        ax.set_title(f"{claim.id}: validation curves")
        ax.legend(fontsize=7)
        paths.append(plots.save_figure(fig, root / f"{claim.id}-curves.png"))
    else:
        plt.close(fig)
    curves = {
        label: torch.tensor(a["gradient_vs_lag"]["curve"])
        for label, a in measurements.analyses.items()
        if "gradient_vs_lag" in a
    }
    if curves:
        paths.append(
            gradient_lag_plot(
                curves,
                root / f"{claim.id}-gradient-lag.png",
                title=f"{claim.id}: mean ||dL/dstate_(T-tau)|| (100 examples)",
            )
        )
    traces = {
        label: a["jacobian_ratio"]["trace"] for label, a in measurements.analyses.items() if "jacobian_ratio" in a
    }
    if traces:
        fig, ax = plt.subplots(figsize=(6, 3.4))
        for label, trace in traces.items():
            row = measurements.rows.get(label, {})
            ax.plot(
                [t["step"] for t in trace],
                [max(t["ratio"], 1e-30) for t in trace],
                marker=".",
                label=label,
                color=cell_colour(row.get("cell") or label),
                linestyle=style.get(label, "-"),
            )
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_yscale("log")
        ax.set_xlabel("iteration")
        ax.set_ylabel("||dh_T/dh_1|| / ||dh_T/dh_(T-1)||\n(float32 underflow drawn at 1e-30)", fontsize=8)
        ax.set_title(f"{claim.id}: gradient ratio during training")
        ax.legend(fontsize=7)
        paths.append(plots.save_figure(fig, root / f"{claim.id}-jacobian-ratio.png"))
    return paths


def _line_styles(rows: Dict[str, Dict[str, Any]]) -> Dict[str, str]:
    """A line style per run label: the runs of one cell share its colour (``cell_colour``), so the
    second, third, ... run of a cell (another reading, another K) gets a dashed, dotted, ... line."""
    cycle, seen, out = ("-", "--", ":", "-."), {}, {}
    for label, row in rows.items():
        cell = row.get("cell") or label
        out[label] = cycle[seen.get(cell, 0) % len(cycle)]
        seen[cell] = seen.get(cell, 0) + 1
    return out


# ---- command line ----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ltdrnn reproduce",
        description="Measure the papers' headline claims with ltdrnn and publish them in REPRODUCTION.md.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    listing = sub.add_parser("list", help="the claims and their verdicts so far")
    listing.add_argument("--store", default=DEFAULT_STORE)

    run = sub.add_parser("run", help="train the runs of one or more claims (or 'all') into the store")
    run.add_argument("claims", nargs="+", metavar="CLAIM", help="claim ids (ltdrnn reproduce list) or 'all'")
    run.add_argument("--budget", default="quick", choices=BUDGETS)
    run.add_argument("--store", default=DEFAULT_STORE, help=f"results database (default {DEFAULT_STORE})")
    run.add_argument("--runs", default=DEFAULT_RUNS, help=f"run directories (default {DEFAULT_RUNS})")
    run.add_argument(
        "--set",
        dest="extra",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override applied to every run after the budget, e.g. --set train.threads=1",
    )
    run.add_argument(
        "--seeds",
        help="comma-separated training seeds, one run of each label per seed "
        f"(default {','.join(str(s) for s in DEFAULT_SEEDS)})",
    )
    run.add_argument("--only", help="comma-separated run labels to train (default: all of the claim)")
    run.add_argument(
        "--skip-done", action="store_true", help="skip the label and seed pairs already stored for this budget"
    )
    run.add_argument("--report", action="store_true", help="regenerate the document afterwards")
    run.add_argument("--out", default=DEFAULT_DOC)
    run.add_argument("--plots", default=DEFAULT_PLOTS)
    run.add_argument("--progress", action="store_true", help="show a progress bar per run")

    report = sub.add_parser("report", help="write REPRODUCTION.md and its plots from the store")
    report.add_argument("--store", default=DEFAULT_STORE)
    report.add_argument("--out", default=DEFAULT_DOC)
    report.add_argument("--plots", default=DEFAULT_PLOTS)
    report.add_argument("--no-plots", action="store_true")

    sub.add_parser("check", help="validate the claims table (presets load, cells and tasks registered)")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if not args.command:
        build_parser().print_help()
        return 2
    from .config import ConfigError

    try:
        return {"list": _cmd_list, "run": _cmd_run, "report": _cmd_report, "check": _cmd_check}[args.command](args)
    except (ClaimError, ConfigError) as error:
        print(f"ltdrnn reproduce {args.command}: {error}", file=sys.stderr)
        return 2


def _cmd_list(args) -> int:
    claims = load_claims()
    stored = Store(args.store) if Path(args.store).exists() else None
    for claim in claims:
        status = "not run yet"
        if stored is not None:
            budget, measurements = stored.shown_budget(claim)
            verdict = judge(claim, measurements, budget)
            status = verdict.status + (f" ({budget})" if budget else "")
        print(f"{claim.id:24s} {claim.paper:26s} {len(claim.runs)} runs  {status:28s} {claim.title}")
    return 0


def _cmd_run(args) -> int:
    claims = load_claims()
    chosen = claims if args.claims == ["all"] else [find_claim(claims, cid) for cid in args.claims]
    only = [s for s in args.only.split(",") if s] if args.only else None
    seeds, extra = parse_seeds(args.seeds, args.extra)
    failed = []
    for claim in chosen:
        failed += [
            f"{claim.id}/{label}"
            for label in run_claim(
                claim,
                args.budget,
                args.store,
                args.runs,
                extra,
                only,
                args.skip_done,
                args.progress,
                log=lambda line: print(line, flush=True),
                seeds=seeds,
            )
        ]
    if args.report:
        print(f"written: {render(args.store, args.out, args.plots, claims)}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _cmd_report(args) -> int:
    path = render(args.store, args.out, args.plots, plots=not args.no_plots)
    print(f"written: {path}")
    return 0


def _cmd_check(args) -> int:
    problems = validate(load_claims())
    for line in problems:
        print(line)
    print(f"{len(load_claims())} claims, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
