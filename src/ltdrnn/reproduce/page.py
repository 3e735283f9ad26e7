"""The reproduction document: REPRODUCTION.md from the store, with per claim the paper's numbers, our
runs (mean ± std over seeds), the verdict and its reason, the stale rows left out, and the plots."""

from __future__ import annotations

import math
import os
import shlex
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..results import markdown_table, seed_of
from .claims import Check, Claim, load_claims
from .expressions import Underflow, Unmeasured
from .measurements import CHANCE_MARGIN, Measurements, format_number, mean_text
from .plots import make_plots
from .staleness import StaleRow
from .store import DEFAULT_STORE, Store, pick_budget
from .verdicts import STATUSES, Verdict, call_value, judge, unique

DEFAULT_DOC = "REPRODUCTION.md"
DEFAULT_PLOTS = "reproduction"


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
            parts.append(f"{what} = {mean_text(mean, std, n)}")
    return "; ".join(parts)


def _quality_text(measurements: Measurements, label: str) -> str:
    """``"accuracy 83.4% ± 1.2% (n=3)"``, marked when at chance or when a seed did not finish."""
    rows = measurements.seeds[label]
    name = (rows[-1].get("metrics") or {}).get("metric_name") or rows[-1].get("metric_name")
    mean, std, n = measurements.spread("metric", label, ())
    text = f"{name} {mean_text(mean, std, n, accuracy=name == 'accuracy')}"
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
                ", ".join(str(seed_of(r)) for r in rows),
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


def ours_text(verdict: Verdict) -> str:
    values = unique(
        [
            (call, call_value(call, value, spread))
            for r in verdict.checks
            for (call, value), spread in zip(r.values, r.spreads)
        ]
        + [r.underflow for r in verdict.checks if r.underflow]
    )
    return "; ".join(f"{call} = {shown}" for call, shown in values) or "-"


def full_run_command(claim: Claim) -> str:
    words = ["ltdrnn", "reproduce", "run", claim.id, "--budget", "paper"]
    for item in claim.full_run.set if claim.full_run else ():
        words += ["--set", item]
    return " ".join(shlex.quote(w) for w in words)


SUMMARY_HEADER = [
    "claim",
    "paper",
    "paper's numbers",
    "ours (mean ± std over seeds)",
    "verdict",
    "budget",
    "CPU min",
    "stale rows",
]


def render(
    store: str = DEFAULT_STORE,
    out: str = DEFAULT_DOC,
    plots_dir: str = DEFAULT_PLOTS,
    claims: Optional[Sequence[Claim]] = None,
    plots: bool = True,
    extra: Sequence[str] = (),
) -> Path:
    """Write the reproduction document (and its plots) from the store; returns its path. Only the rows
    trained with the claims' configs of today plus the ``--set`` items ``extra`` are judged; the others
    are listed as stale."""
    claims = list(claims if claims is not None else load_claims())
    stored = Store(store)
    out_path, plot_root = Path(out), Path(plots_dir)
    summary, sections, minutes, stale_count = [SUMMARY_HEADER], [], 0.0, 0
    for claim in claims:
        found = stored.by_budget(claim, extra)
        budget, measurements = pick_budget(claim, found)
        stale = {b: m.stale for b, m in found.items() if m.stale}
        verdict = judge(claim, measurements, budget)
        figures = make_plots(claim, measurements, plot_root) if plots and measurements.seeds else []
        summary.append(_summary_row(claim, verdict, measurements, budget, stale))
        sections.append(claim_section(claim, verdict, measurements, budget, figures, out_path.parent, stale))
        minutes += cpu_minutes(measurements)
        stale_count += sum(len(rows) for rows in stale.values())
    doc = _preamble(store, summary, minutes, stale_count, extra) + sections
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text("\n".join(doc))
    return out_path


def _summary_row(
    claim: Claim,
    verdict: Verdict,
    measurements: Measurements,
    budget: Optional[str],
    stale: Dict[str, List[StaleRow]],
) -> List[str]:
    return [
        f"[{claim.id}](#{claim.id})",
        claim.paper,
        "; ".join(f"{n.what}: {n.value}" for n in claim.paper_numbers),
        ours_text(verdict),
        f"**{verdict.status}**",
        budget or "-",
        f"{cpu_minutes(measurements):.0f}",
        str(sum(len(rows) for rows in stale.values())),
    ]


def _budget_sentence(at_paper: int, claims: int) -> str:
    if at_paper == claims:
        return "Every claim is shown at the paper budget."
    return (
        f"{at_paper} of {claims} claims are shown at the paper budget, the others at the `quick` budget "
        "(stated per claim)."
    )


def _preamble(
    store: str, summary: List[List[str]], minutes: float, stale_count: int, extra: Sequence[str]
) -> List[str]:
    """The page's title, how to read it, and the summary table."""
    claims = len(summary) - 1
    counts = {s: sum(1 for row in summary[1:] if row[4] == f"**{s}**") for s in STATUSES}
    at_paper = sum(1 for row in summary[1:] if row[5] == "paper")
    judged_with = f" with {' '.join(f'`--set {item}`' for item in extra)}" if extra else ""
    return [
        "# Reproduction of the papers' headline claims",
        "",
        f"Generated by `ltdrnn reproduce report` from `{store}` (do not edit by hand; "
        "[docs/reproduction.md](docs/reproduction.md) explains how it works and how to re-run a line). "
        f"Claims: {claims}; " + ", ".join(f"{s}: {n}" for s, n in counts.items()) + ".",
        "",
        "Every number of ours below comes from the results database and was produced by the command "
        f"shown with it. {_budget_sentence(at_paper, claims)} Each run label is trained with several seeds "
        "(`ltdrnn reproduce run` uses seeds 1, 2, 3 by default); the rules read the mean over seeds and the "
        "tables show mean ± std and n. A run whose mean test metric does not close "
        f"{100 * CHANCE_MARGIN:.0f}% of the gap between the task's trivial baseline and a perfect score is "
        "**at chance**, and no rule that needs it to have learned passes; a gradient ratio that is exactly 0 "
        "is **underflow** and no rule passes against it. All rules hold -> reproduced; a rule about one "
        "of the papers' own cells holds -> partly; otherwise not reproduced; a run missing -> not run yet.",
        "",
        f"A stored row counts only if the config it was trained with is the config its claim trains today{judged_with} "
        "(the seed, threads, device and other settings that change no number aside; "
        "[docs/reproduction.md](docs/reproduction.md#stale-rows)). "
        f"{stale_count} stale rows are left out of the verdicts and listed under their claims.",
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
    stale: Optional[Dict[str, List[StaleRow]]] = None,
) -> str:
    lines = [
        f"## {claim.id}",
        "",
        f"**{claim.title}** ({claim.paper}). {claim.claim}",
        "",
        "Paper:",
        "",
        markdown_table(
            [["what", "paper's number", "source"]] + [[n.what, n.value, n.source] for n in claim.paper_numbers]
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
    if stale:
        lines += [stale_text(stale), ""]
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
            f"Not run yet: `ltdrnn reproduce run {claim.id} --budget {shown} --resume` trains the missing runs.",
            "",
        ]
    for figure in figures:
        lines += [f"![{figure.stem}]({os.path.relpath(figure, doc_dir)})", ""]
    return "\n".join(lines)


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
