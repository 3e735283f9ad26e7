"""``ltdrnn ucr sets | run | report``: the UCR/UEA benchmark, the default recipe over every offline set
beside MiniRocket (:mod:`ltdrnn.ucr`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..ucr import BUDGETS, DEFAULT_CELLS, DEFAULT_PAGE, DEFAULT_RUNS, SEEDS, default_study
from .common import add_group, add_jobs, add_resume, add_seeds, add_set, add_store, names, parse_seeds, with_command

DATA_DIR_HELP = "data directory (default: $LTDRNN_DATA or ~/.cache/ltdrnn)"


def add_commands(sub) -> None:
    sub = add_group(
        sub,
        "ucr",
        "the UCR/UEA benchmark against MiniRocket",
        "The UCR/UEA benchmark: the default recipe over every offline set, beside MiniRocket.",
    )
    sets = sub.add_parser("sets", help="list the classification sets found offline")
    sets.add_argument("--data-dir", help=DATA_DIR_HELP)
    sets.add_argument(
        "--splits",
        action="store_true",
        help="also the series per split as the preset ucr/default reads them (fit, validation, test, classes)",
    )
    with_command(sets, "ucr sets", _cmd_sets)

    run = sub.add_parser("run", help="train the cells over the sets (skipping runs already stored)")
    run.add_argument("--sets", help="comma-separated set names (default: every set found offline)")
    run.add_argument(
        "--cells",
        default=",".join(DEFAULT_CELLS),
        help=f"comma-separated cells, or none for MiniRocket only (default: {','.join(DEFAULT_CELLS)})",
    )
    add_seeds(run, f"{SEEDS}, seeds 0..{SEEDS - 1}")
    run.add_argument(
        "--budget",
        default="default",
        choices=tuple(BUDGETS),
        help="default: the preset as it is; quick: 100 optimiser steps (minutes, not the protocol)",
    )
    add_set(run, "override applied to every run (a recipe variant; it gets its own study)")
    run.add_argument("--study", help="study name in the store (default: ucr/<budget>[/<overrides>])")
    add_store(run)
    run.add_argument("--runs", default=DEFAULT_RUNS, help=f"run directories (default: {DEFAULT_RUNS})")
    run.add_argument("--data-dir", help=DATA_DIR_HELP)
    run.add_argument("--no-minirocket", action="store_true", help="do not fit MiniRocket")
    run.add_argument("--page", help="also write the page here when done (e.g. benchmarks-ucr.md)")
    add_jobs(run, 1)
    add_resume(run, default=True, what="finished: the study holds a finished row of the cell, set and seed")
    with_command(run, "ucr run", _cmd_run)

    report = sub.add_parser("report", help="write the page from the results database")
    add_store(report)
    report.add_argument(
        "--study",
        default=default_study("default", []),
        help=f"the study shown (default: {default_study('default', [])})",
    )
    report.add_argument("--page", default=DEFAULT_PAGE, help=f"page to write (default: {DEFAULT_PAGE})")
    report.add_argument(
        "--notes",
        type=Path,
        help="markdown file inserted after the goal check (the discussion of the numbers; e.g. docs/ucr/notes.md)",
    )
    with_command(report, "ucr report", _cmd_report)


def _cmd_sets(args) -> int:
    from ..ucr import available_sets, unlabelled_sets

    if args.splits:
        _print_splits(args.data_dir)
    else:
        for name in available_sets(args.data_dir):
            print(name)
    unlabelled = unlabelled_sets(args.data_dir)
    if unlabelled:  # on stderr: stdout stays the list of sets that run
        print(f"not listed, without class labels (regression sets): {', '.join(unlabelled)}", file=sys.stderr)
    return 0


def _print_splits(data_dir) -> None:
    from ..data import DataFileError
    from ..results import markdown_table
    from ..ucr import available_sets, preset_split_sizes

    rows = [["set", "fit", "validation", "test", "classes validated", "fewest per class in validation"]]
    unreadable = []
    for name in available_sets(data_dir):
        try:
            sizes = preset_split_sizes(name, data_dir=data_dir)
        except (DataFileError, ValueError) as error:
            rows.append([name, "unreadable", "-", "-", "-", "-"])
            unreadable.append(f"{name}: {error}")
            continue
        rows.append(
            [name, sizes.fit, sizes.val, sizes.test, f"{sizes.val_classes} of {sizes.classes}", sizes.fewest_val]
        )
    print("\n".join([markdown_table(rows), *unreadable]))


def _cmd_run(args) -> int:
    from ..cells.registry import list_cells
    from ..ucr import render_page, run_benchmark, run_config

    seeds, overrides = parse_seeds(args.seeds, args.overrides, range(SEEDS))
    sets = _chosen_sets(args.sets, args.data_dir)
    cells = [] if args.cells == "none" else names(args.cells, list_cells(), "--cells")
    study = args.study or default_study(args.budget, overrides)
    # check the overrides once before any training (a bad key fails here, not after an hour)
    first = (cells[0] if cells else DEFAULT_CELLS[0], sets[0] if sets else "-", seeds[0])
    run_config(*first, args.budget, overrides, study, args.store, args.runs, args.data_dir)
    started = time.perf_counter()
    print(
        f"ltdrnn ucr run: {len(sets)} sets x {len(cells)} cells x {len(seeds)} seeds, budget {args.budget}, "
        f"study {study}, store {args.store}",
        flush=True,
    )
    outcome = run_benchmark(
        sets,
        cells,
        seeds,
        args.budget,
        overrides,
        study,
        args.store,
        args.runs,
        not args.no_minirocket,
        args.data_dir,
        log=lambda line: print(line, flush=True),
        resume=args.resume,
        jobs=args.jobs,
    )
    skipped = outcome.skipped
    print(
        f"done in {time.perf_counter() - started:.0f} s; {len(outcome.failed)} failed; {len(skipped)} sets skipped"
        + "".join(f"\n  skipped {name}: {why}" for name, why in skipped.items())
    )
    if args.page:
        print(f"written: {render_page(args.store, study, Path(args.page), skipped=skipped)}")
    return 1 if outcome.failed or skipped else 0


def _chosen_sets(text, data_dir):
    """The sets ``--sets`` names (default: every classification set found). A set found without class
    labels passes here: the run skips it by name and says why, where an unknown name is refused."""
    from ..ucr import available_sets, unlabelled_sets

    found = available_sets(data_dir)
    if text is None:
        return found
    unlabelled = unlabelled_sets(data_dir)
    chosen = [n.strip() for n in text.split(",") if n.strip()]
    if not chosen or any(n not in unlabelled for n in chosen):
        names(",".join(n for n in chosen if n not in unlabelled) or text, found, "--sets")
    return chosen


def _cmd_report(args) -> int:
    from ..results import database_exists, fold_write_ahead_log
    from ..results.export import refresh_export
    from ..ucr import BenchmarkError, render_page

    if not database_exists(args.store):
        raise BenchmarkError(f"--store {args.store}: no results database there (run `ltdrnn ucr run` first)")
    if args.notes is not None and not args.notes.is_file():
        raise BenchmarkError(f"--notes {args.notes}: no such file")
    page = render_page(args.store, args.study, Path(args.page), notes=args.notes)
    fold_write_ahead_log(args.store)  # the committed database then holds every row the page shows
    print(f"written: {page}")
    exported = refresh_export(args.store)  # and its text export, when one lies beside it
    if exported is not None:
        print(f"written: {exported}")
    return 0
