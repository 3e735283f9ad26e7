"""``ltdrnn run | train | eval | report | plot | list``: the harness's commands."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import List

from .common import (
    STORE_HELP,
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
    run = sub.add_parser("run", help="train every preset of a group, print the comparison, write the report")
    run.add_argument(
        "--group", default="main", help="preset group (default: main, the README's main job; quick: smaller smoke runs)"
    )
    run.add_argument("--cells", help="comma-separated cells to keep (default: all in the group)")
    run.add_argument("--tasks", help="comma-separated tasks to keep (default: all in the group)")
    add_store(run)
    run.add_argument("--out", default="report", help="report directory (default: ./report)")
    run.add_argument("--runs", default="runs", help="directory for run directories (default: ./runs)")
    add_jobs(run, min(2, os.cpu_count() or 1), "min(2, CPUs)")
    add_set(run, "override applied to every preset, e.g. --set train.steps=50")
    add_seeds(run, "each preset's own seed")
    run.add_argument(
        "--study", help="study name of the runs (default: <group>-<UTC time>; name an earlier one to resume it)"
    )
    add_resume(run, default=True, what="finished: the study holds a finished row of the preset and seed")
    with_command(run, "run", cmd_run)

    train = sub.add_parser("train", help="train one configuration")
    train.add_argument("config", help="preset name (ltdrnn list presets) or YAML/JSON file")
    train.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="e.g. optim.lr=1e-3 train.steps=500")
    add_set(train, "override, the same as a KEY=VALUE word (repeatable)", dest="set_overrides")
    add_resume(train, default=False, what="the run is RUN_DIR's; a finished one stores its row if the store lacks it")
    train.add_argument("--run-dir", help="run directory (needed for --resume)")
    add_store(train, None, STORE_HELP.replace("(default: ", "(default: the config's results, else "))
    train.add_argument("--no-store", action="store_true", help="do not write a results row")
    add_progress(train, None, "the config's train.progress, on")
    with_command(train, "train", cmd_train)

    evaluate = sub.add_parser("eval", help="evaluate a saved checkpoint")
    evaluate.add_argument("path", help="run directory or checkpoint file")
    evaluate.add_argument("--split", default="test", choices=("train", "val", "test"))
    with_command(evaluate, "eval", cmd_eval)

    report = sub.add_parser("report", help="render the results store as markdown + HTML")
    add_store(report)
    report.add_argument("--out", default="report", help="report directory (default: ./report)")
    report.add_argument("--study", help="only runs of this study (and its sweep summary, if the store holds one)")
    report.add_argument("--no-plots", action="store_true")
    report.add_argument(
        "--export-jsonl",
        action="store_true",
        help="instead of the report, write the store's text export beside it (DB.jsonl: one sorted JSON row "
        "per line, for reviewing a change of results in a diff)",
    )
    with_command(report, "report", cmd_report)

    plot = sub.add_parser("plot", help="analysis plots of a finished run (PNG)")
    plot.add_argument("run_dir", help="run directory")
    plot.add_argument("--kinds", help="comma-separated: curves, lag, mask, beta, unshifted (default: all that apply)")
    plot.add_argument("--out", help="output directory (default: RUN_DIR/plots)")
    with_command(plot, "plot", cmd_plot)

    listing = sub.add_parser("list", help="list cells, tasks or presets")
    listing.add_argument("what", choices=("cells", "tasks", "presets"))
    listing.add_argument("--group", help="presets of one group only")
    with_command(listing, "list", cmd_list)


def after_parsing(args: argparse.Namespace, extra: List[str]) -> List[str]:
    """``train`` takes its KEY=VALUE overrides before or after the options and from ``--set``, in the
    order given; the words left over for the caller to refuse."""
    if getattr(args, "command_name", "") != "train":
        return extra
    late = [item for item in extra if "=" in item and not item.startswith("-")]
    args.overrides = [*args.overrides, *late, *args.set_overrides]
    return [item for item in extra if item not in late]


def _command(argv: List[str]) -> str:
    return next((word for word in argv if not word.startswith("-")), "")


# ---- commands ----------------------------------------------------------------------------------------
def cmd_train(args) -> int:
    from ..checkpoint import CHECKPOINT
    from ..config import load_config
    from ..studies import summary_line
    from ..train import train

    overrides = list(args.overrides)
    if args.run_dir:
        overrides.append(f"run_dir={args.run_dir}")
    if args.store:
        overrides.append(f"results={args.store}")
    if args.no_store:
        overrides.append("results=null")
    if args.progress is not None:
        overrides.append(f"train.progress={str(args.progress).lower()}")
    cfg = load_config(args.config, overrides)
    # under torchrun every rank runs this command; rank 0 speaks for all
    speaks = int(os.environ.get("RANK", "0")) == 0
    if speaks and args.resume and cfg.run_dir and not (Path(cfg.run_dir) / CHECKPOINT).is_file():
        print(f"ltdrnn train: no checkpoint in {cfg.run_dir} to continue; a new run starts there", file=sys.stderr)
    record = train(cfg, resume="auto" if args.resume else False)
    if speaks:
        print(f"{record['preset'] or record['cell']}: {summary_line(record)}")
        print(f"run dir: {record['run_dir']}" + (f"; stored in {cfg.results}" if cfg.results else ""))
    return 0 if record["status"] == "finished" else 1


def cmd_eval(args) -> int:
    from ..evaluation import evaluate_checkpoint

    print(json.dumps(evaluate_checkpoint(args.path, args.split), indent=2))
    return 0


def cmd_report(args) -> int:
    from ..results import database_exists, render_report

    if not database_exists(args.store):
        raise FileNotFoundError(
            f"--store {args.store}: no results database there (train or run something "
            "first, or name the database that holds the results)"
        )
    if args.export_jsonl:
        from ..results.export import write_export

        print(f"written: {write_export(args.store)}")
        return 0
    paths = render_report(args.store, args.out, study=args.study, plots=not args.no_plots)
    print(paths["markdown"].read_text())
    print(f"\nwritten: {paths['markdown']}, {paths['html']}")
    if args.study:
        from ..sweep import has_study, study_report

        if has_study(args.study, args.store):
            print(study_report(args.study, args.store, args.out, plots=not args.no_plots)["markdown"].read_text())
    return 0


def cmd_plot(args) -> int:
    from ..analysis.runs import plot_run

    for path in plot_run(args.run_dir, args.out, args.kinds.split(",") if args.kinds else None):
        print(path)
    return 0


def cmd_list(args) -> int:
    if args.what == "cells":
        from ..cells.registry import entry, list_cells

        for name in list_cells():
            e = entry(name)
            print(f"{name:14s} {e.family:9s} {e.paper}")
    elif args.what == "tasks":
        from ..tasks import list_tasks

        for name in list_tasks():
            print(name)
    else:
        from ..config import list_presets

        for name in list_presets(args.group):
            print(name)
    return 0


def cmd_run(args) -> int:
    """Train the group's presets (skipping unregistered cells/tasks), print the table, write the report."""
    from ..config import list_presets
    from ..results import ResultStore, markdown_table, marked_comparison_rows, render_report, summarise, utc_stamp
    from ..studies import finished_rows, preset_group, preset_key, run_study

    started = time.perf_counter()
    if not list_presets(args.group):
        print(f"ltdrnn run: no presets in group {args.group!r}", file=sys.stderr)
        return 2
    seeds, overrides = parse_seeds(args.seeds, args.overrides, ()) if args.seeds else (None, args.overrides)
    study = args.study or f"{args.group}-{utc_stamp()}"
    runs, missing = preset_group(
        args.group,
        study,
        args.store,
        args.runs,
        overrides,
        set(args.cells.split(",")) if args.cells else None,
        set(args.tasks.split(",")) if args.tasks else None,
        seeds,
        args.resume,
    )
    print(f"ltdrnn run: group {args.group!r}, {len(runs)} runs, {args.jobs} at a time, study {study}")
    for line in missing:
        print(f"  missing  {line}")
    outcome = run_study(runs, args.store, finished_rows(study, preset_key), args.jobs, args.resume)
    store = ResultStore(args.store)
    summary = summarise(store.rows(study=study))
    print()
    print(markdown_table(marked_comparison_rows(summary)) if summary["cells"] else "(no finished runs)")
    for line in missing:
        print(f"missing: {line}")
    for label, seed, message in outcome.failures:
        print(f"failed: {label} (seed {seed}): {message}")
    paths = render_report(store, args.out, study=study, title=f"ltdrnn run --group {args.group}")
    print(
        f"\nreport: {paths['markdown']} and {paths['html']}; store: {args.store} (study {study}); "
        f"{time.perf_counter() - started:.0f} s"
    )
    return 0 if not outcome.failures else 1
