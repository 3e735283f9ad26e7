"""The command line: ``ltdrnn reproduce list | run | report | check`` (also ``python -m ltdrnn.reproduce``)."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from ..cli import add_override_option, run_subcommand, subcommand_parser
from ..config import ConfigError
from ..results import database_exists
from .claims import BUDGETS, find_claim, load_claims, validate
from .expressions import ClaimError
from .page import DEFAULT_DOC, DEFAULT_PLOTS, render
from .running import DEFAULT_RUNS, DEFAULT_SEEDS, parse_seeds, run_claim
from .store import DEFAULT_STORE, Store, pick_budget
from .verdicts import judge


def build_parser() -> argparse.ArgumentParser:
    parser, sub = subcommand_parser(
        "ltdrnn reproduce", "Measure the papers' headline claims with ltdrnn and publish them in REPRODUCTION.md."
    )
    listing = sub.add_parser("list", help="the claims and their verdicts so far")
    listing.add_argument("--store", default=DEFAULT_STORE)
    _judged_with(listing)

    run = sub.add_parser("run", help="train the runs of one or more claims (or 'all') into the store")
    run.add_argument("claims", nargs="+", metavar="CLAIM", help="claim ids (ltdrnn reproduce list) or 'all'")
    run.add_argument("--budget", default="quick", choices=BUDGETS)
    run.add_argument("--store", default=DEFAULT_STORE, help=f"results database (default {DEFAULT_STORE})")
    run.add_argument("--runs", default=DEFAULT_RUNS, help=f"run directories (default {DEFAULT_RUNS})")
    add_override_option(
        run,
        "override applied to every run after the budget, e.g. --set train.threads=1 (--report and "
        "--skip-done then count only the rows trained with the same --set items)",
        dest="extra",
    )
    run.add_argument(
        "--seeds",
        help="comma-separated training seeds, one run of each label per seed "
        f"(default {','.join(str(s) for s in DEFAULT_SEEDS)})",
    )
    run.add_argument("--only", help="comma-separated run labels to train (default: all of the claim)")
    run.add_argument(
        "--skip-done",
        action="store_true",
        help="skip the label and seed pairs that have a current row for this budget (stale rows run again)",
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
    _judged_with(report)

    sub.add_parser("check", help="validate the claims table (presets load, cells and tasks registered)")
    return parser


def _judged_with(parser: argparse.ArgumentParser) -> None:
    add_override_option(
        parser,
        "judge the rows trained with this extra override (as given to run --set); other rows are stale",
        dest="extra",
    )


def main(argv: Optional[List[str]] = None) -> int:
    handlers = {"list": _cmd_list, "run": _cmd_run, "report": _cmd_report, "check": _cmd_check}
    return run_subcommand(build_parser(), argv, handlers, (ClaimError, ConfigError))


def _cmd_list(args) -> int:
    claims = load_claims()
    stored = Store(args.store) if database_exists(args.store) else None
    for claim in claims:
        status = "not run yet"
        if stored is not None:
            found = stored.by_budget(claim, args.extra)
            budget, measurements = pick_budget(claim, found)
            verdict = judge(claim, measurements, budget)
            stale = sum(len(m.stale) for m in found.values())
            status = verdict.status + (f" ({budget})" if budget else "") + (f", {stale} stale" if stale else "")
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
        print(f"written: {render(args.store, args.out, args.plots, claims, extra=extra)}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _cmd_report(args) -> int:
    path = render(args.store, args.out, args.plots, plots=not args.no_plots, extra=args.extra)
    Store(args.store).results.checkpoint()  # the committed database then holds every row the page shows
    print(f"written: {path}")
    return 0


def _cmd_check(args) -> int:
    problems = validate(load_claims())
    for line in problems:
        print(line)
    print(f"{len(load_claims())} claims, {len(problems)} problems")
    return 1 if problems else 0
