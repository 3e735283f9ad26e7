"""``ltdrnn reproduce list | run | recall | report | check`` (also ``python -m ltdrnn.reproduce``): the papers' claims
measured with ltdrnn and published in REPRODUCTION.md."""

from __future__ import annotations

import argparse
import sys

from ..reproduce.claims import BUDGETS
from ..reproduce.page import DEFAULT_DOC, DEFAULT_PLOTS
from ..reproduce.running import DEFAULT_RUNS, DEFAULT_SEEDS
from .common import (
    add_group,
    add_jobs,
    add_progress,
    add_resume,
    add_seeds,
    add_set,
    add_store,
    parse_seeds,
    with_command,
)


def add_commands(sub) -> None:
    sub = add_group(
        sub,
        "reproduce",
        "the papers' claims -> REPRODUCTION.md",
        "Measure the papers' headline claims with ltdrnn and publish them in REPRODUCTION.md.",
    )
    listing = sub.add_parser("list", help="the claims and their verdicts so far")
    add_store(listing)
    _judged_with(listing)
    with_command(listing, "reproduce list", _cmd_list)

    run = sub.add_parser("run", help="train the runs of one or more claims (or 'all') into the store")
    run.add_argument("claims", nargs="+", metavar="CLAIM", help="claim ids (ltdrnn reproduce list) or 'all'")
    run.add_argument("--budget", default="quick", choices=BUDGETS)
    add_store(run)
    run.add_argument("--runs", default=DEFAULT_RUNS, help=f"run directories (default {DEFAULT_RUNS})")
    add_set(
        run,
        "override applied to every run after the budget, e.g. --set train.threads=1 (--report and "
        "--resume then count only the rows trained with the same --set items)",
        dest="extra",
    )
    add_seeds(run, ",".join(str(s) for s in DEFAULT_SEEDS))
    run.add_argument("--only", help="comma-separated run labels to train (default: all of the claim)")
    add_jobs(run, 1)
    add_resume(run, default=False, what="finished: a current row of the label and seed with its analyses")
    run.add_argument("--report", action="store_true", help="regenerate the document afterwards")
    run.add_argument("--out", default=DEFAULT_DOC, help=f"the document (default: {DEFAULT_DOC})")
    run.add_argument("--plots", default=DEFAULT_PLOTS, help=f"its plots' directory (default: {DEFAULT_PLOTS})")
    add_progress(run, False)
    with_command(run, "reproduce run", _cmd_run)

    recall = sub.add_parser(
        "recall",
        help="measure the recall-step accuracy of finished copy runs from their checkpoints",
        description="For each current copy-task row of the claims whose test metrics lack recall_accuracy "
        "(trained before it was measured), evaluate the checkpoint its test numbers came from (best.pt or "
        "last.pt in its run directory, the one that gives its test cross entropy again) and store the "
        "accuracy on the recall steps as the row's 'recall' analysis. Run it where the claims were run: "
        "run directories are stored relative to it.",
    )
    recall.add_argument("claims", nargs="+", metavar="CLAIM", help="claim ids (ltdrnn reproduce list) or 'all'")
    add_store(recall)
    _judged_with(recall)
    with_command(recall, "reproduce recall", _cmd_recall)

    report = sub.add_parser("report", help="write REPRODUCTION.md, the per-claim notes and the plots from the store")
    add_store(report)
    report.add_argument("--out", default=DEFAULT_DOC, help=f"the document (default: {DEFAULT_DOC})")
    report.add_argument("--plots", default=DEFAULT_PLOTS, help=f"its plots' directory (default: {DEFAULT_PLOTS})")
    report.add_argument("--no-plots", action="store_true")
    _judged_with(report)
    with_command(report, "reproduce report", _cmd_report)

    check = sub.add_parser("check", help="validate the claims table (presets load, cells and tasks registered)")
    with_command(check, "reproduce check", _cmd_check)


def _judged_with(parser: argparse.ArgumentParser) -> None:
    add_set(
        parser,
        "judge the rows trained with this extra override (as given to run --set); other rows are stale",
        dest="extra",
    )


def _cmd_list(args) -> int:
    from ..reproduce import Store, judge, load_claims
    from ..reproduce.notes import budget_label
    from ..reproduce.store import judged_rows
    from ..results import database_exists

    claims = load_claims()
    stored = Store(args.store) if database_exists(args.store) else None
    for claim in claims:
        status = "not run yet"
        if stored is not None:
            found = stored.by_budget(claim, args.extra)
            judged, budget, measurements = judged_rows(claim, found, stored.full_rows(claim, args.extra))
            verdict = judge(judged, measurements, budget)
            stale = sum(len(m.stale) for m in found.values())
            data = ", full data" if judged is not claim else ""
            shown = f" ({budget_label(judged, budget)}{data})" if budget and verdict.status != "proxy" else ""
            status = verdict.status + shown + (f", {stale} stale" if stale else "")
        print(f"{claim.id:24s} {claim.paper:26s} {len(claim.runs)} runs  {status:28s} {claim.title}")
    return 0


def _cmd_run(args) -> int:
    from ..reproduce import find_claim, load_claims, render, run_claim

    claims = load_claims()
    chosen = claims if args.claims == ["all"] else [find_claim(claims, cid) for cid in args.claims]
    only = [s for s in args.only.split(",") if s] if args.only else None
    seeds, extra = parse_seeds(args.seeds, args.extra, DEFAULT_SEEDS)
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
                args.resume,
                args.progress,
                log=lambda line: print(line, flush=True),
                seeds=seeds,
                jobs=args.jobs,
            )
        ]
    if args.report:
        print(f"written: {render(args.store, args.out, args.plots, claims, extra=extra)}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _cmd_recall(args) -> int:
    from ..reproduce import find_claim, load_claims
    from ..reproduce.running import measure_recall
    from ..results import database_exists

    if not database_exists(args.store):
        raise FileNotFoundError(f"--store: expected an existing results database, got {args.store!r}")
    claims = load_claims()
    chosen = claims if args.claims == ["all"] else [find_claim(claims, cid) for cid in args.claims]
    missing = sum(
        measure_recall(claim, args.store, args.extra, log=lambda line: print(line, flush=True)) for claim in chosen
    )
    if missing:  # rows of runs trained elsewhere, whose directories are gone: their recall stays a bound
        print(f"{missing} rows not measured; the page shows their recall as a lower bound")
    return 0


def _cmd_report(args) -> int:
    from ..reproduce import Store, render
    from ..results.export import refresh_export

    path = render(args.store, args.out, args.plots, plots=not args.no_plots, extra=args.extra)
    Store(args.store).results.checkpoint()  # the committed database then holds every row the page shows
    print(f"written: {path}")
    exported = refresh_export(args.store)  # and its text export, when one lies beside it
    if exported is not None:
        print(f"written: {exported}")
    return 0


def _cmd_check(args) -> int:
    from ..reproduce import load_claims, validate

    problems = validate(load_claims())
    for line in problems:
        print(line)
    print(f"{len(load_claims())} claims, {len(problems)} problems")
    return 1 if problems else 0
