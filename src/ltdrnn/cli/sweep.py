"""``ltdrnn sweep run | report | list``: Optuna sweeps whose workers share one study through a database."""

from __future__ import annotations

import time

from ..sweep import DEFAULT_STORAGE
from .common import STORE_HELP, add_group, add_jobs, add_set, add_store, with_command


def add_commands(sub) -> None:
    sub = add_group(
        sub,
        "sweep",
        "hyperparameter sweeps on Optuna",
        "Hyperparameter sweeps on Optuna: many workers share one study through a database.",
    )
    run = sub.add_parser("run", help="run trials of a study (creating it if needed)")
    run.add_argument("spec", help="packaged sweep (ltdrnn sweep list) or a sweep YAML file")
    run.add_argument(
        "--storage",
        default=DEFAULT_STORAGE,
        help=f"Optuna storage URL (default {DEFAULT_STORAGE}); "
        "e.g. postgresql://user:pass@host/db to share the study between machines",
    )
    run.add_argument("--study", help="study name (default: the spec's)")
    run.add_argument("--trials", type=int, help="trials in the whole study (default: the spec's)")
    add_jobs(run, 1, old="--workers")
    run.add_argument(
        "--first-worker",
        type=int,
        default=0,
        help="index of this machine's first worker: "
        "workers on different machines need different indices for different sampler seeds",
    )
    add_store(run, None, STORE_HELP.replace("(default: ", "(default: the base config's results, else "))
    run.add_argument("--runs", default="runs", help="directory of run directories (default ./runs)")
    add_set(run, "override for every trial's config, e.g. --set train.epochs=2")
    run.add_argument(
        "--heartbeat",
        type=int,
        default=30,
        help="seconds between heartbeats (default 30); a trial without one for twice as long is failed and retried",
    )
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    with_command(run, "sweep run", _cmd_run)
    report = sub.add_parser("report", help="best trials, top-k summary, importance, sensitivity plot")
    report.add_argument("--study", required=True)
    report.add_argument("--storage", default=DEFAULT_STORAGE)
    report.add_argument("--out", default="report")
    report.add_argument("--no-plots", action="store_true")
    with_command(report, "sweep report", _cmd_report)
    with_command(sub.add_parser("list", help="packaged sweep specs"), "sweep list", _cmd_list)


def _cmd_run(args) -> int:
    from ..sweep import load_spec, run_workers

    spec = load_spec(args.spec)
    study = args.study or spec.study
    started = time.perf_counter()
    counts = run_workers(
        spec,
        args.jobs,
        args.storage,
        study,
        args.trials,
        args.first_worker,
        args.overrides,
        args.runs,
        args.store,
        args.heartbeat,
        args.quiet,
    )
    total = {k: sum(c[k] for c in counts) for k in ("complete", "pruned", "failed", "given_back")}
    print(
        f"sweep {study}: this machine {total}; {time.perf_counter() - started:.0f} s. "
        f"Report: ltdrnn sweep report --study {study} --storage {args.storage}"
    )
    return 0 if len(counts) == args.jobs else 1


def _cmd_report(args) -> int:
    from ..sweep import study_report

    paths = study_report(args.study, args.storage, args.out, plots=not args.no_plots)
    print(paths["markdown"].read_text())
    print("written: " + ", ".join(str(p) for p in paths.values()))
    return 0


def _cmd_list(args) -> int:
    from ..sweep import list_sweeps

    for name in list_sweeps():
        print(name)
    return 0
