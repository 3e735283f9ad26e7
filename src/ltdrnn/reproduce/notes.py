"""The per-claim notes: one generated page per claim (``reproduction/notes/<claim>.md``) with what
the summary page leaves out: the paper's numbers with their sources (tested or not), every rule with its
numbers, the machinery's notes and the claim's long explanation, the runs with the commands that
produced them, the budgets, the full-data run, the deviation, the readings and the stale rows."""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..results import markdown_table, seed_of
from .claims import Claim
from .expressions import Underflow, Unmeasured
from .measurements import Measurements, format_number, mean_text, rollbacks, seed_key, stabilisers
from .staleness import StaleRow, Tried
from .verdicts import HELD_OUT_SEEDS, CheckResult, Verdict, deciding_seeds, held_out_command, unique


@dataclass
class ClaimReport:
    """Everything the pages show of one claim: its verdict, the rows that decide it (``measurements``: a
    tuned claim's held-out seeds, else every row of the shown budget) and the development rows shown beside
    them (``development``, tuned claims only), the stale rows of every budget, the configs its rows were
    trained with (``configurations``), today's config hash per run (``hashes``) and its figures. Where the
    claim has a full-data run: its rows stored so far (``full_rows``) and their configs' hashes
    (``full_hashes``); once they decide, the report of the subset or proxy rows shown beside them,
    deciding nothing (``beside``)."""

    claim: Claim
    budget: Optional[str]
    measurements: Measurements
    verdict: Verdict
    stale: Dict[str, List[StaleRow]] = field(default_factory=dict)
    figures: List[Path] = field(default_factory=list)
    development: Optional[Measurements] = None
    configurations: Dict[str, List[Tried]] = field(default_factory=dict)
    hashes: Dict[str, str] = field(default_factory=dict)
    all_rows: Optional[Measurements] = None
    full_rows: Optional[Measurements] = None
    full_hashes: Dict[str, str] = field(default_factory=dict)
    beside: Optional["ClaimReport"] = None

    @property
    def every_row(self) -> Measurements:
        """The rows the pages show, deciding or not (for the training minutes, the rollbacks, the plots)."""
        return self.all_rows if self.all_rows is not None else self.measurements

    def minutes(self) -> Tuple[float, float]:
        """``(CPU, GPU)`` training minutes of every row shown, the rows shown beside included."""
        shown = [self.every_row] + ([self.beside.every_row] if self.beside else [])
        return sum(cpu_minutes(found) for found in shown), sum(gpu_minutes(found) for found in shown)

    def tried(self, label: str) -> int:
        """How many configurations were tried for run ``label``: the distinct configs of the claim's rows
        (today's counted whether stored or not) and the lab screens the table lists."""
        hashes = {t.hash for t in self.configurations.get(label, [])} | {self.hashes.get(label)}
        return len(hashes - {None}) + len(self.claim.tuning.screens.get(label, []))


def tried_text(report: ClaimReport) -> str:
    """``"tarnn 13, irnn 12, srnn 1, lstm 2"``, or ``"1 each"``."""
    counts = {spec.label: report.tried(spec.label) for spec in report.claim.runs}
    if len(set(counts.values())) == 1:
        return f"{next(iter(counts.values()))} each"
    return ", ".join(f"{label} {n}" for label, n in counts.items())


def seeds_text(seeds) -> str:
    return ", ".join(str(seed) for seed in seeds)


def selection_text(report: ClaimReport, tried: bool = True) -> str:
    """Which seeds decide: a tuned claim's held-out seeds (the development seeds' verdict beside, and while
    they are missing the command that trains them), or an untuned claim's seeds; then, with ``tried``, the
    configurations tried per run (the page's summary gives their total)."""
    claim = report.claim
    if not claim.tuning.tuned:
        head = "*Untuned*: seeds 1-3 decide."
    else:
        runs = ", ".join(claim.tuning.runs)
        head = f"*Tuned* ({runs}): seeds {seeds_text(HELD_OUT_SEEDS)} decide{development_text(report)}"
    return f"{head} Configurations tried: {tried_text(report)}." if tried else head


def development_text(report: ClaimReport) -> str:
    """A tuned claim's development verdict in brackets, and while its held-out rows are missing the command
    that trains them ("." closes it); "" for an untuned claim."""
    claim, verdict = report.claim, report.verdict
    if not claim.tuning.tuned:
        return ""
    development = verdict.development.status if verdict.development else "not run yet"
    unrun = [label for label in claim.checked_labels if not (report.development and label in report.development.seeds)]
    if development == "not run yet" and len(unrun) < len(claim.checked_labels):
        development = f"not judged, {', '.join(unrun)} not run on them"  # e.g. a competitor changed after tuning
    text = f" (development seeds 1-3: {development})."
    if verdict.pending:
        text += f" To measure the held-out seeds: `{held_out_command(claim, report.budget)}`."
    return text


def frozen_text(report: ClaimReport) -> str:
    """Each run's config hash at the budget shown, and where it is not the one the table froze, that one."""
    parts = []
    for label, found in report.hashes.items():
        frozen = report.claim.frozen.get(label)
        if report.budget == "paper" and frozen != found:
            found += f" (frozen: {frozen}; changed since)" if frozen else " (not frozen)"
        parts.append(f"{label} `{found}`")
    return "; ".join(parts)


def budget_label(claim: Claim, budget: Optional[str]) -> str:
    """What the page calls the budget shown: "proxy" on proxy data (never "paper"), "quick (ours)", or
    who gave the paper budget's length ("paper", "ours", "paper; SRNN ours", ...)."""
    if budget is None:
        return "-"
    if claim.data == "proxy":
        return "proxy"
    if budget == "quick":
        return "quick (ours)"
    return claim.budgets[budget].given_by


def cpu_minutes(measurements: Measurements) -> float:
    """Training minutes of every row shown that trained on a CPU (all labels, all seeds; evaluation
    excluded)."""
    return _minutes(measurements, on_gpu=False)


def gpu_minutes(measurements: Measurements) -> float:
    """Training minutes of every row shown that trained on a GPU (``train.device`` other than cpu)."""
    return _minutes(measurements, on_gpu=True)


def _minutes(measurements: Measurements, on_gpu: bool) -> float:
    rows = [row for found in measurements.seeds.values() for row in found]
    devices = [str(((row.get("config") or {}).get("train") or {}).get("device") or "cpu") for row in rows]
    return sum(row.get("train_time_s") or 0.0 for row, d in zip(rows, devices) if d.startswith("cpu") != on_gpu) / 60


def minutes_text(cpu: float, gpu: float, decimals: int = 0) -> str:
    """``"2,610 CPU minutes and 11 GPU minutes"`` (the GPU part only where there is one)."""
    return f"{cpu:,.{decimals}f} CPU minutes" + (f" and {gpu:,.{decimals}f} GPU minutes" if gpu else "")


def conditions_rows(report: "ClaimReport") -> List[List[str]]:
    """The conditions of the claim as a table: the settings, the runs, the source, where, the variant."""
    labels = report.claim.labels
    rows = [["settings", "runs", "source", "where", "variant (at most partly)"]]
    for c in report.claim.conditions:
        runs = ", ".join(c.runs) if c.runs and c.runs != labels else "all"
        rows.append([c.what, runs, c.source, c.where or "-", c.variant or "-"])
    return rows


def rollbacks_text(report: "ClaimReport") -> str:
    """Per judged run trained with rollbacks, their count and the steps replayed, seed by seed (every seed
    shown, held-out or not): ``"rollbacks per seed (steps replayed): tarnn 0, 2, 1 (0, 591, 300)"``; empty
    if none had them."""
    found = report.every_row
    parts = []
    for label in report.claim.checked_labels:
        rows = sorted(found.seeds.get(label, []), key=lambda row: seed_key(seed_of(row)))
        if not any(stabilisers(row).get("train.rollbacks") for row in rows):
            continue
        counts = [rollbacks(row) for row in rows]
        parts.append(f"{label} {', '.join(str(n) for n, _ in counts)} ({', '.join(str(k) for _, k in counts)})")
    return "rollbacks per seed (steps replayed): " + "; ".join(parts) if parts else ""


METRIC_NAMES = {"mse": "MSE", "cross_entropy": "cross entropy"}


def metric_name(row: Dict[str, Any]) -> str:
    name = (row.get("metrics") or {}).get("metric_name") or row.get("metric_name") or "metric"
    return METRIC_NAMES.get(name, name)


def quality_text(measurements: Measurements, label: str) -> str:
    """``"accuracy 83.4% ± 1.2% (n=3)"``, marked when at chance or when a seed did not finish."""
    rows = measurements.seeds[label]
    name = metric_name(rows[-1])
    text = f"{name} {measurements.summary('metric', label).text(accuracy=name == 'accuracy')}"
    unfinished = sum(1 for row in rows if row.get("status") != "finished")
    if unfinished:
        text += f", {unfinished} of {len(rows)} did not finish"
    return text + (", **at chance**" if measurements.at_chance(label) else "")


def seed_counts(claim: Claim, measurements: Measurements, wanted: int = 3) -> List[str]:
    """A sentence for each judged run whose number of seeds is not ``wanted``: which seeds count."""
    out = []
    for label in claim.checked_labels:
        rows = measurements.seeds.get(label, [])
        if rows and len(rows) != wanted:
            seeds = ", ".join(str(seed_of(r)) for r in sorted(rows, key=lambda r: str(seed_of(r))))
            why = "every current row counts, an extra seed too" if len(rows) > wanted else "seeds missing"
            out.append(f"`{label}`: n = {len(rows)} (seeds {seeds}; {why})")
    return out


def rule_line(result: CheckResult, long: bool = False) -> str:
    """One rule as a list item: mark, what it says, the numbers, the seeds it holds in, and (``long``)
    the machinery's notes, its structural reason, the runs the paper reports at chance and the claim's
    explanation."""
    check = result.check
    shown = ", ".join(f"{call} = {value}" for call, value in result.values)
    seeds = f" ({result.seeds_text})" if result.seeds_text else ""
    line = f"- {result.mark} **{check.says}**{' (' + check.paper + ')' if check.paper else ''}: {shown}{seeds}."
    if check.structural:
        line += f" *Structural*: {check.structural}."
    if not long:
        return line.replace(" (n=3)", "")
    if result.notes:
        line += f" Machinery: {'; '.join(result.notes)}."
    if check.may_fail:
        line += " Reported at chance by the paper: " + "; ".join(f"{k} ({v})" for k, v in check.may_fail.items()) + "."
    if not result.passed and check.if_fails:
        line += f" Why: {check.if_fails}"
    return line


def run_rows(claim: Claim, measurements: Measurements) -> List[List[str]]:
    out = [
        [
            "run",
            "cell",
            "budget used (latest seed)",
            "test metric",
            "baseline",
            "params",
            "train s",
            "skip %",
            "analysis",
            "seeds",
            "command (latest seed)",
        ]
    ]
    for spec in claim.runs:
        label = spec.label + (f" (reading of {spec.reading_of})" if spec.reading_of else "")
        rows = measurements.seeds.get(spec.label)
        if not rows:
            out.append([label] + [""] * 2 + ["not run yet"] + [""] * 7)
            continue
        row = rows[-1]
        metrics = row.get("metrics") or {}
        skips = [(r.get("metrics") or {}).get("skip_fraction") for r in rows]
        skips = [s for s in skips if s is not None]
        baseline = metrics.get("baseline")
        out.append(
            [
                label,
                row["cell"],
                _budget_text(row),
                quality_text(measurements, spec.label),
                "n/a" if baseline is None else format_number(baseline),
                str(row.get("params")),
                f"{sum(r.get('train_time_s') or 0 for r in rows):.0f}",
                f"{100 * math.fsum(skips) / len(skips):.1f}" if skips else "-",
                _analysis_text(measurements, spec.label),
                ", ".join(str(seed_of(r)) for r in rows),
                f"`{_notes(row)[1]}`",
            ]
        )
    return out


def _budget_text(row: Dict[str, Any]) -> str:
    config, timings = row.get("config") or {}, row.get("timings") or {}
    options = config.get("task", {}).get("options", {})
    parts = [f"{timings.get('steps')} steps", f"batch {config.get('train', {}).get('batch_size')}"]
    data = options.get("n_train") or options.get("n")
    if data:
        parts.append(f"{data:,} train seqs")
    elif options.get("source"):
        parts.append(f"data {options['source']}")
    return ", ".join(parts)


def _analysis_text(measurements: Measurements, label: str) -> str:
    parts = []
    for name, what in (("lag_ratio", "grad at lag T-1 / peak"), ("jac_ratio", "‖dh_T/dh_1‖ / ‖dh_T/dh_T-1‖")):
        try:
            found = measurements.summary(name, label)
        except Underflow as error:
            parts.append(f"{what} = {error.shown}")
        except Unmeasured:
            continue
        else:
            parts.append(f"{what} = {found.text()}")
    return "; ".join(parts)


def _notes(row: Dict[str, Any]) -> Tuple[str, str]:
    """``(reproduce command, train command)`` as kept in a run's notes by ``run_config``."""
    lines = ((row.get("config") or {}).get("notes") or "").splitlines()
    return (lines[0] if lines else "?"), (lines[1] if len(lines) > 1 else "?")


def commands(measurements: Measurements) -> List[str]:
    return unique([_notes(row)[0] for rows in measurements.seeds.values() for row in rows], key=str)


def readings_text(claim: Claim, measurements: Measurements) -> str:
    """The runs of another reading beside their default, and which of them leaves chance."""
    lines = []
    for default, other in [(spec.reading_of, spec.label) for spec in claim.runs if spec.reading_of]:
        shown = [
            f"`{label}` " + (quality_text(measurements, label) if label in measurements.seeds else "not run yet")
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


def full_rows_text(report: ClaimReport) -> str:
    """Which full-data rows decide or exist: ``"they decide (every judged run has seeds 1, 2, 3); the
    subset rows are shown beside"``, or those stored so far per judged run and the seeds that would let
    them decide; empty where the claim has no full-data run."""
    if report.full_rows is None:
        return ""
    claim = report.beside.claim if report.beside else report.claim
    wanted = seeds_text(deciding_seeds(claim))
    if report.beside is not None:
        return f"they decide (every judged run has seeds {wanted}); the {claim.data} rows are shown beside them"
    stored = [
        f"{label} ({_seeds_named(sorted(seeds, key=seed_key))})"
        for label in claim.checked_labels
        for seeds in [{seed_of(row) for row in report.full_rows.seeds.get(label, [])}]
    ]
    shown = f"stored so far: {', '.join(stored)}" if report.full_rows.seeds else "none stored yet"
    return f"{shown}; they decide once every judged run has seeds {wanted}, until then the {claim.data} rows do"


def _seeds_named(seeds) -> str:
    """``"none"``, ``"seed 1"``, ``"seeds 1, 2"``."""
    return f"seed{'s' if len(seeds) > 1 else ''} {seeds_text(seeds)}" if seeds else "none"


def full_run_command(claim: Claim) -> str:
    """The command that trains the full-data rows, with the seeds that decide where they are not 1-3 (a
    claim without full-data items: the paper budget, whose held-out seeds the verdict names)."""
    items = claim.full_run.set if claim.full_run else []
    words = ["ltdrnn", "reproduce", "run", claim.id, "--budget", "paper"]
    for item in items:
        words += ["--set", item]
    if items and claim.tuning.tuned:
        words += ["--seeds", ",".join(str(seed) for seed in HELD_OUT_SEEDS)]
    return " ".join(shlex.quote(w) for w in words)


def stale_text(stale: Dict[str, List[StaleRow]]) -> str:
    """The stale rows of each budget, grouped by label and what differs (stored value -> today's, at most
    three differences per group), with their seeds and dates."""
    parts = []
    for budget, rows in stale.items():
        groups: Dict[Tuple[str, Tuple[str, ...]], List[StaleRow]] = {}
        for row in rows:
            groups.setdefault((row.label, row.differences), []).append(row)
        shown = []
        for (label, why), found in groups.items():
            seeds = ", ".join(unique([str(r.seed) for r in found], key=str))
            dates = ", ".join(sorted({r.created for r in found if r.created})) or "undated"
            rows_of = f"{len(found)} rows, " if len(found) > 1 else ""
            more = f", and {len(why) - 3} more" if len(why) > 3 else ""
            shown.append(f"`{label}` ({rows_of}seed {seeds}; {dates}): {', '.join(why[:3])}{more}")
        parts.append(f"{budget} budget, {len(rows)}: " + "; ".join(shown) + ".")
    return "Stale rows, left out of the verdict (stored value -> today's): " + " ".join(parts)


def note_page(report: ClaimReport, path: Path, summary_page: Path) -> str:
    """The claim's notes page (written at ``path``; links are relative to it)."""
    claim, verdict = report.claim, report.verdict
    back = os.path.relpath(summary_page, path.parent)
    lines = [
        f"# {claim.id}: {claim.title}",
        "",
        f"Generated with [REPRODUCTION.md]({back}#{claim.id}) by `ltdrnn reproduce report`; do not edit by hand.",
        "",
        f"**Claim** ({claim.paper}): {claim.claim}",
        "",
        markdown_table(
            [["what", "paper's number", "source", "tested"]]
            + [
                [n.what, n.value, n.source, f"not tested: {n.not_tested}" if n.not_tested else "yes"]
                for n in claim.paper_numbers
            ]
        ),
        "",
        f"## Verdict: {verdict.status}",
        "",
    ]
    if claim.data == "proxy":
        lines += [
            "Proxy data: the rules are evaluated and shown, and the claim is not judged against the paper "
            "(see Deviation).",
            "",
        ]
    lines += _verdict_part(report)
    lines += _runs_part(report)
    lines += _conditions_part(report)
    lines += _configurations_part(report)
    lines += _beside_part(report)
    lines += _budget_part(claim, report.every_row, full_rows_text(report))
    if report.stale:
        lines += [stale_text(report.stale), ""]
    for figure in report.figures:
        lines += [f"![{figure.stem}]({os.path.relpath(figure, path.parent)})", ""]
    return "\n".join(lines)


def _verdict_part(report: ClaimReport) -> List[str]:
    """Which seeds decide, the rules on them (for a tuned claim not measured on its held-out seeds, why
    and the command that measures them), and a tuned claim's rules on its development seeds."""
    claim, verdict = report.claim, report.verdict
    lines = [selection_text(report), ""]
    development = verdict.development
    if development is not None:
        lines += [f"### Held-out seeds {seeds_text(HELD_OUT_SEEDS)}", ""]
    if verdict.pending:
        lines += [verdict.reason, ""]
    else:
        lines += [rule_line(result, long=True) for result in verdict.checks] + [""]
    if verdict.status == "not run yet":
        lines += [
            f"{verdict.reason} `ltdrnn reproduce run {claim.id} --budget {report.budget or 'quick'} --resume` "
            "trains the missing runs.",
            "",
        ]
    if development is not None:
        lines += [f"### Development seeds (tuned on; shown, deciding nothing): {development.status}", ""]
        lines += [rule_line(result, long=True) for result in development.checks] + [""]
    return lines


def _beside_part(report: ClaimReport) -> List[str]:
    """The rules and runs of the subset or proxy rows, shown beside the full-data rows that decide."""
    beside = report.beside
    if beside is None:
        return []
    lines = [
        f"## The {beside.claim.data} rows (shown beside the full-data rows, deciding nothing): {beside.verdict.status}",
        "",
    ]
    lines += [rule_line(result, long=True) for result in beside.verdict.checks] + [""]
    return lines + _runs_part(beside)


def _runs_part(report: ClaimReport) -> List[str]:
    """The table of the runs that decide, and of a tuned claim's development runs."""
    label = budget_label(report.claim, report.budget)
    if report.development is None:
        return _runs_table(report.claim, report.measurements, f"Runs (budget: {label})")
    held = seeds_text(HELD_OUT_SEEDS)
    return _runs_table(report.claim, report.measurements, f"Runs on the held-out seeds {held} (budget: {label})") + (
        _runs_table(report.claim, report.development, "Runs on the development seeds (tuned on; deciding nothing)")
    )


def _runs_table(claim: Claim, found: Measurements, heading: str) -> List[str]:
    if not found.seeds:
        return []
    lines = [
        f"## {heading}",
        "",
        "Produced by " + ", ".join(f"`{c}`" for c in commands(found)) + ". Mean ± sample std over seeds.",
        "",
        markdown_table(run_rows(claim, found)),
        "",
    ]
    counts = seed_counts(claim, found)
    if counts:
        lines += ["Seeds: " + "; ".join(counts) + ".", ""]
    diverged = [
        f"{name} (seed {seed_of(row)})"
        for name, rows in found.seeds.items()
        for row in rows
        if row.get("status") != "finished"
    ]
    if diverged:
        lines += [f"Did not finish (their numbers are from the best-validation weights): {', '.join(diverged)}.", ""]
    return lines


def _configurations_part(report: ClaimReport) -> List[str]:
    """How the settings were chosen, each run's frozen config hash, and every configuration tried: the
    distinct configs of the claim's rows (what differs from today's) and the lab screens."""
    claim = report.claim
    budget = report.budget or "paper"
    lines = [
        "## Configurations tried",
        "",
        f"{'Tuned' if claim.tuning.tuned else 'Untuned'}: {claim.tuning.how}",
        "",
        f"Config hashes ({budget} budget; the table freezes the paper budget's): {frozen_text(report)}.",
        "",
    ]
    if report.full_hashes:
        hashes = "; ".join(f"{label} `{found}`" for label, found in report.full_hashes.items())
        lines += [f"Full-data rows' config hashes (`{full_run_command(claim)}`): {hashes}.", ""]
    for spec in claim.runs:
        stored = report.configurations.get(spec.label, [])
        screens = claim.tuning.screens.get(spec.label, [])
        lines.append(f"- `{spec.label}`: {report.tried(spec.label)}")
        lines += [f"  - {_tried_line(tried)}" for tried in stored]
        if report.hashes.get(spec.label) not in {t.hash for t in stored}:
            lines.append(f"  - `{report.hashes.get(spec.label)}` (today's config): not stored yet")
        lines += [f"  - screen: {text}" for text in screens]
    return lines + [""]


def _tried_line(tried: Tried) -> str:
    rows = f"seed{'s' if len(tried.seeds) > 1 else ''} {seeds_text(tried.seeds)}; {', '.join(tried.dates)}"
    what = "today's config" if not tried.differences else "stored -> today's: " + ", ".join(tried.differences)
    return f"`{tried.hash}` ({rows}): {what}"


def _conditions_part(report: ClaimReport) -> List[str]:
    """Where every setting of the runs comes from, the variants that cap the verdict, the rollbacks."""
    if not report.claim.conditions:
        return []
    lines = ["## Conditions", "", markdown_table(conditions_rows(report)), ""]
    rolled = rollbacks_text(report)
    return lines + ([rolled[0].upper() + rolled[1:] + ".", ""] if rolled else [])


def _budget_part(claim: Claim, found: Measurements, full: str = "") -> List[str]:
    quick, paper = claim.budgets["quick"], claim.budgets["paper"]
    paper_name = "proxy" if claim.data == "proxy" else f"paper (length given by: {paper.given_by})"
    lines = [
        "## Budgets, data and readings",
        "",
        f"- quick (ours): `ltdrnn reproduce run {claim.id} --budget quick` ({quick.note}).",
        f"- {paper_name}: `ltdrnn reproduce run {claim.id} --budget paper` ({paper.note}).",
        f"- Training time of the rows shown: {minutes_text(cpu_minutes(found), gpu_minutes(found), 1)}.",
    ]
    if claim.success is not None:
        lines.append(
            f"- Success threshold: test metric {format_number(claim.success)} (skip fractions and training "
            "times count only for runs that reach it)."
        )
    if claim.full_run:
        lines.append(
            f"- Full-data run: `{full_run_command(claim)}`, estimated {format_number(claim.full_run.hours)} h on "
            f"{claim.full_run.machine} ({claim.full_run.basis})."
        )
    if full:
        lines.append(f"- Full-data rows: {full}.")
    if claim.deviation:
        lines.append(f"- Deviation: {claim.deviation}")
    readings = " ".join(t for t in (claim.readings, readings_text(claim, found)) if t)
    lines.append(f"- Readings ({claim.reading_used}): {readings}" if readings else f"- Readings: {claim.reading_used}.")
    return lines + [""]


def spread_text(measurements: Measurements, label: str) -> str:
    """The test metric of a run for the summary: mean ± std, n when it is not 3."""
    row = measurements.seeds[label][-1]
    mean, std, n = measurements.spread("metric", label)
    accuracy = metric_name(row) == "accuracy"
    text = mean_text(mean, std, n, accuracy)
    return text.replace(" (n=3)", "")
