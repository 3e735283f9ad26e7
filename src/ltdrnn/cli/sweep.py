"""``ltdrnn sweep run | report | list``: Optuna sweeps whose workers share one study through a database."""

from __future__ import annotations

import time

from .common import STORE_DEFAULT_TEXT, STORE_HELP, add_group, add_jobs, add_progress, add_set, add_store, with_command

STUDY_STORE_HELP = (
    "database of the study (Optuna's tables) and of its runs' rows, a SQLite path or a database URL such as "
    "postgresql://user:pass@host/db to share the study between machines"
)


def add_commands(sub) -> None:
    sub = add_group(
        sub,
        "sweep",
        "hyperparameter sweeps on Optuna",
        "Hyperparameter sweeps on Optuna: many workers share one study through a database.",
    )
    run = sub.add_parser("run", help="run trials of a study (creating it if needed)")
    run.add_argument("spec", help="packaged sweep (ltdrnn sweep list) or a sweep YAML file")
    add_store(run, None, f"{STUDY_STORE_HELP} (default: the base config's results, else {STORE_DEFAULT_TEXT})")
    run.add_argument("--study", help="study name (default: the spec's)")
    run.add_argument("--trials", type=int, help="trials in the whole study (default: the spec's)")
    add_jobs(run, 1)
    run.add_argument(
        "--first-worker",
        type=int,
        default=0,
        help="index of this machine's first worker: "
        "workers on different machines need different indices for different sampler seeds",
    )
    run.add_argument("--runs", default="runs", help="directory of run directories (default ./runs)")
    add_set(run, "override for every trial's config, e.g. --set train.epochs=2")
    run.add_argument(
        "--heartbeat",
        type=int,
        default=30,
        help="seconds between heartbeats (default 30); a trial without one for twice as long is failed and retried",
    )
    add_progress(run, True, "on, for the first worker's runs")
    with_command(run, "sweep run", _cmd_run)
    report = sub.add_parser("report", help="best trials, top-k summary, importance, sensitivity plot")
    report.add_argument("--study", required=True)
    add_store(report, help=STORE_HELP.replace("results database", "database of the study"))
    report.add_argument("--out", default="report")
    report.add_argument("--no-plots", action="store_true")
    with_command(report, "sweep report", _cmd_report)
    with_command(sub.add_parser("list", help="packaged sweep specs"), "sweep list", _cmd_list)


def _cmd_run(args) -> int:
    from ..config import DEFAULT_STORE
    from ..sweep import base_config, load_spec, run_workers

    spec = load_spec(args.spec)
    study = args.study or spec.study
    store = args.store or base_config(spec, args.overrides).results or DEFAULT_STORE
    started = time.perf_counter()
    counts = run_workers(
        spec,
        args.jobs,
        store,
        study,
        args.trials,
        args.first_worker,
        args.overrides,
        args.runs,
        args.store,
        args.heartbeat,
        args.progress,
    )
    total = {k: sum(c[k] for c in counts) for k in ("complete", "pruned", "failed", "given_back")}
    print(
        f"sweep {study}: this machine {total}; {time.perf_counter() - started:.0f} s. "
        f"Report: ltdrnn sweep report --study {study} --store {store}"
    )
    return 0 if len(counts) == args.jobs else 1


def _cmd_report(args) -> int:
    from ..sweep import study_report

    paths = study_report(args.study, args.store, args.out, plots=not args.no_plots)
    print(paths["markdown"].read_text())
    print("written: " + ", ".join(str(p) for p in paths.values()))
    return 0


def _cmd_list(args) -> int:
    from ..sweep import list_sweeps

    for name in list_sweeps():
        print(name)
    return 0
