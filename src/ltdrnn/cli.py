"""The ``ltdrnn`` command.

ltdrnn run [--group main]                  the comparison: every preset of a group, table + report
ltdrnn train PRESET|FILE [key.sub=value ...] [--resume[=auto] --run-dir DIR]
ltdrnn eval RUN_DIR|CHECKPOINT [--split test]
ltdrnn report [--store results.db] [--out report] [--study NAME]
ltdrnn plot RUN_DIR [--kinds curves,lag,mask,beta,unshifted]
ltdrnn list cells|tasks|presets
ltdrnn export RUN_DIR|CHECKPOINT --format onnx|pt2|c [--int8] [--out DIR] [--mcu atmega328p|cortex-m4]
ltdrnn bench / sweep / reproduce ...       handed to ltdrnn.bench / ltdrnn.sweep / ltdrnn.reproduce
ltdrnn ucr sets|run|report ...             the UCR/UEA benchmark, handed to ltdrnn.ucr
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type

DELEGATED = {"bench": "ltdrnn.bench", "sweep": "ltdrnn.sweep", "reproduce": "ltdrnn.reproduce", "ucr": "ltdrnn.ucr"}


def main(argv: Optional[List[str]] = None) -> int:
    """Run one command; a user mistake ends as one line on stderr and exit code 2, Ctrl-C as 130."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and not argv[0].startswith("-") else ""
    try:
        if command in DELEGATED:
            return _delegate(command, argv[1:])
        args = parse(argv)
        if not getattr(args, "handler", None):
            build_parser().print_help()
            return 2
        return args.handler(args) or 0
    except KeyboardInterrupt:
        print(f"ltdrnn {command}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        if not is_user_error(error):
            raise
        message = " ".join(str(error).split()) or type(error).__name__
        print(f"ltdrnn {command}: {message}", file=sys.stderr)
        return 2


def is_user_error(error: BaseException) -> bool:
    """Whether ``error`` reports bad input or a bad environment rather than a bug: value errors (which
    name the parameter), files that cannot be read or written, missing optional extras, and the
    package's own errors (a stored run, an unwritable results store). Bugs keep their traceback."""
    return isinstance(error, (ValueError, OSError, ImportError)) or type(error).__module__.split(".")[0] == "ltdrnn"


def subcommand_parser(prog: str, description: str) -> Tuple[argparse.ArgumentParser, Any]:
    """A command's parser and the group its subcommands are added to; the chosen one lands in
    ``args.command``, which :func:`run_subcommand` dispatches on."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    return parser, parser.add_subparsers(dest="command", metavar="COMMAND")


def add_override_option(parser: argparse.ArgumentParser, help: str, dest: str = "overrides") -> None:
    """``--set KEY=VALUE``, repeatable: the config overrides of every command that trains or judges runs."""
    parser.add_argument("--set", dest=dest, action="append", default=[], metavar="KEY=VALUE", help=help)


def run_subcommand(
    parser: argparse.ArgumentParser,
    argv: Optional[Sequence[str]],
    handlers: Dict[str, Callable[[argparse.Namespace], int]],
    errors: Tuple[Type[BaseException], ...],
) -> int:
    """The ``main`` of a delegated command (``ltdrnn sweep``, ...): run the handler of the subcommand
    in ``argv`` (``dest="command"``). No subcommand prints the help; one of ``errors`` ends as one line
    on stderr; both exit 2."""
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if not args.command:
        parser.print_help()
        return 2
    try:
        return handlers[args.command](args)
    except errors as error:
        print(f"{parser.prog} {args.command}: {error}", file=sys.stderr)
        return 2


def parse(argv: List[str]) -> argparse.Namespace:
    """Parse a command line; ``train`` takes its KEY=VALUE overrides before or after the options
    (argparse alone stops collecting a positional list at the first option)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "command", None) == "train":
        late = [item for item in extra if "=" in item and not item.startswith("-")]
        args.overrides = [*args.overrides, *late]
        extra = [item for item in extra if item not in late]
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def build_parser() -> argparse.ArgumentParser:
    parser, sub = subcommand_parser(
        "ltdrnn", "Recurrent cells for long-term dependencies: train, evaluate, compare and report."
    )

    run = sub.add_parser("run", help="train every preset of a group, print the comparison, write the report")
    run.add_argument(
        "--group", default="main", help="preset group (default: main, the README's main job; quick: smaller smoke runs)"
    )
    run.add_argument("--cells", help="comma-separated cells to keep (default: all in the group)")
    run.add_argument("--tasks", help="comma-separated tasks to keep (default: all in the group)")
    run.add_argument("--store", default="results.db", help="results database: SQLite path or URL")
    run.add_argument("--out", default="report", help="report directory (default: ./report)")
    run.add_argument("--runs", default="runs", help="directory for run directories (default: ./runs)")
    run.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="runs trained at once, one process each (default: min(2, CPUs))",
    )
    add_override_option(run, "override applied to every preset, e.g. --set train.steps=50")
    run.set_defaults(handler=cmd_run)

    train = sub.add_parser("train", help="train one configuration")
    train.add_argument("config", help="preset name (ltdrnn list presets) or YAML/JSON file")
    train.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="e.g. optim.lr=1e-3 train.steps=500")
    train.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        choices=(True, "auto"),
        type=lambda value: value if value == "auto" else _bad_resume(value),
        help="continue from RUN_DIR/last.pt (an error if there is none); --resume=auto "
        "starts a new run when there is no checkpoint; a finished run stores its row "
        "if the store lacks it",
    )
    train.add_argument("--run-dir", help="run directory (needed for --resume)")
    train.add_argument("--store", help="results database (overrides the config's results)")
    train.add_argument("--no-store", action="store_true", help="do not write a results row")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(handler=cmd_train)

    evaluate = sub.add_parser("eval", help="evaluate a saved checkpoint")
    evaluate.add_argument("path", help="run directory or checkpoint file")
    evaluate.add_argument("--split", default="test", choices=("train", "val", "test"))
    evaluate.set_defaults(handler=cmd_eval)

    report = sub.add_parser("report", help="render the results store as markdown + HTML")
    report.add_argument("--store", default="results.db")
    report.add_argument("--out", default="report")
    report.add_argument("--study", help="only runs of this study (and its sweep summary, if any)")
    report.add_argument(
        "--sweeps",
        default="sweeps.db",
        help="Optuna storage of sweep studies (SQLite path or database URL; default: sweeps.db)",
    )
    report.add_argument("--no-plots", action="store_true")
    report.set_defaults(handler=cmd_report)

    plot = sub.add_parser("plot", help="analysis plots of a finished run (PNG)")
    plot.add_argument("run_dir", help="run directory")
    plot.add_argument("--kinds", help="comma-separated: curves, lag, mask, beta, unshifted (default: all that apply)")
    plot.add_argument("--out", help="output directory (default: RUN_DIR/plots)")
    plot.set_defaults(handler=cmd_plot)

    listing = sub.add_parser("list", help="list cells, tasks or presets")
    listing.add_argument("what", choices=("cells", "tasks", "presets"))
    listing.add_argument("--group", help="presets of one group only")
    listing.set_defaults(handler=cmd_list)

    export = sub.add_parser(
        "export",
        help="export a trained run's streaming step (ONNX, torch.export, C) and measure its parity and latency",
    )
    export.add_argument("path", help="run directory or checkpoint file")
    export.add_argument("--format", required=True, choices=("onnx", "pt2", "c"))
    export.add_argument(
        "--int8", action="store_true", help="c: integer step (int8 weights, int16 values); onnx: int8 weights"
    )
    export.add_argument("--out", help="export directory (default: RUN_DIR/export-FORMAT[-int8])")
    export.add_argument("--name", help="file base name and C symbol prefix (default: ltdrnn_CELL)")
    export.add_argument("--no-measure", action="store_true", help="write the files only (no parity/latency)")
    export.add_argument("--latency-steps", type=int, default=20000, help="timed steps per latency figure")
    export.add_argument(
        "--mcu", choices=("atmega328p", "cortex-m4"), help="c: refuse a step that does not fit this microcontroller"
    )
    export.set_defaults(handler=cmd_export)

    for name in DELEGATED:
        sub.add_parser(name, help=f"handed to {DELEGATED[name]}.main (see ltdrnn {name} --help)")
    return parser


# ---- commands ----------------------------------------------------------------------------------------
def _bad_resume(value: str):
    raise argparse.ArgumentTypeError(f"expected nothing or 'auto' (--resume or --resume=auto), got {value!r}")


def cmd_train(args) -> int:
    from .config import load_config
    from .train import train

    overrides = list(args.overrides)
    if args.run_dir:
        overrides.append(f"run_dir={args.run_dir}")
    if args.store:
        overrides.append(f"results={args.store}")
    if args.no_store:
        overrides.append("results=null")
    if args.quiet:
        overrides.append("train.progress=false")
    cfg = load_config(args.config, overrides)
    record = train(cfg, resume=args.resume)
    # Under torchrun every rank returns here after the process group is gone; rank 0 speaks for all.
    if int(os.environ.get("RANK", "0")) == 0:
        print(_one_line(record))
        print(f"run dir: {record['run_dir']}" + (f"; stored in {cfg.results}" if cfg.results else ""))
    return 0 if record["status"] == "finished" else 1


def cmd_eval(args) -> int:
    from .train import evaluate_checkpoint

    print(json.dumps(evaluate_checkpoint(args.path, args.split), indent=2))
    return 0


def cmd_report(args) -> int:
    from .results import database_exists, render_report

    if not database_exists(args.store):
        raise FileNotFoundError(
            f"--store {args.store}: no results database there (train or run something "
            "first, or name the database that holds the results)"
        )
    paths = render_report(args.store, args.out, study=args.study, plots=not args.no_plots)
    print(paths["markdown"].read_text())
    print(f"\nwritten: {paths['markdown']}, {paths['html']}")
    if args.study:
        from .sweep import has_study, study_report

        if has_study(args.study, args.sweeps):
            print(study_report(args.study, args.sweeps, args.out, plots=not args.no_plots)["markdown"].read_text())
    return 0


def cmd_plot(args) -> int:
    from .analysis.runs import plot_run

    for path in plot_run(args.run_dir, args.out, args.kinds.split(",") if args.kinds else None):
        print(path)
    return 0


def cmd_list(args) -> int:
    if args.what == "cells":
        from .cells.registry import entry, list_cells

        for name in list_cells():
            e = entry(name)
            print(f"{name:14s} {e.family:9s} {e.paper}")
    elif args.what == "tasks":
        from .tasks import list_tasks

        for name in list_tasks():
            print(name)
    else:
        from .config import list_presets

        for name in list_presets(args.group):
            print(name)
    return 0


def cmd_export(args) -> int:
    from .export import ExportError, export, summary

    try:
        report = export(
            args.path,
            args.format,
            args.out,
            int8=args.int8,
            name=args.name,
            measure=not args.no_measure,
            latency_steps=args.latency_steps,
            mcu=args.mcu,
        )
    except ExportError as error:
        print(f"ltdrnn export: {error}", file=sys.stderr)
        return 2
    print(summary(report))
    print(f"written: {report['out']} (report.json, report.md)")
    return 0


def cmd_run(args) -> int:
    """Train the group's presets (skipping unregistered cells/tasks), print the table, write the report."""
    from .cells.registry import list_cells
    from .config import list_presets, load_config
    from .results import ResultStore, markdown_table, marked_comparison_rows, render_report, summarise
    from .tasks import list_tasks
    from .train import utc_stamp

    started = time.perf_counter()
    presets = list_presets(args.group)
    if not presets:
        print(f"ltdrnn run: no presets in group {args.group!r}", file=sys.stderr)
        return 2
    wanted = set(args.cells.split(",")) if args.cells else None
    wanted_tasks = set(args.tasks.split(",")) if args.tasks else None
    study = f"{args.group}-{utc_stamp()}"
    cells, tasks = set(list_cells()), set(list_tasks())
    jobs, missing = [], []
    for name in presets:
        cfg = load_config(
            name,
            args.overrides
            + [
                f"study={study}",
                f"results={args.store}",
                f"run_dir={Path(args.runs) / study / name.replace('/', '_')}",
            ],
        )
        if (wanted is not None and cfg.model.cell not in wanted) or (
            wanted_tasks is not None and cfg.task.name not in wanted_tasks
        ):
            continue
        if cfg.model.cell not in cells or cfg.task.name not in tasks:
            what = "cell" if cfg.model.cell not in cells else "task"
            missing.append(f"{name}: {what} {cfg.model.cell if what == 'cell' else cfg.task.name!r} not registered")
            continue
        jobs.append(cfg)
    print(f"ltdrnn run: group {args.group!r}, {len(jobs)} runs, {args.jobs} at a time, study {study}")
    for line in missing:
        print(f"  missing  {line}")
    failures = _run_all(jobs, args.jobs)
    store = ResultStore(args.store)
    summary = summarise(store.rows(study=study))
    print()
    print(markdown_table(marked_comparison_rows(summary)) if summary["cells"] else "(no finished runs)")
    for line in missing:
        print(f"missing: {line}")
    for name, message in failures:
        print(f"failed: {name}: {message}")
    paths = render_report(store, args.out, study=study, title=f"ltdrnn run --group {args.group}")
    print(
        f"\nreport: {paths['markdown']} and {paths['html']}; store: {args.store} (study {study}); "
        f"{time.perf_counter() - started:.0f} s"
    )
    return 0 if not failures else 1


def _run_all(configs, jobs: int):
    """Train configs, ``jobs`` processes at a time; returns ``[(preset, error message)]`` of failures."""
    failures = []
    if jobs <= 1 or len(configs) <= 1:
        for cfg in configs:
            outcome = _train_one(cfg.to_dict(), threads=None, progress=True)
            _report_outcome(cfg, outcome, failures)
        return failures
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    threads = max(1, (os.cpu_count() or 1) // jobs)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {pool.submit(_train_one, cfg.to_dict(), threads, False): cfg for cfg in configs}
        for future in as_completed(futures):
            _report_outcome(futures[future], future.result(), failures)
    return failures


def _train_one(data: Dict[str, Any], threads: Optional[int], progress: bool) -> Dict[str, Any]:
    """Runs in a worker: train and return a small summary, or the error as text (never raises)."""
    from .config import load_config
    from .train import train

    try:
        cfg = load_config(
            data, [f"train.progress={str(progress).lower()}"] + ([f"train.threads={threads}"] if threads else [])
        )
        record = train(cfg)
        return {"ok": True, "line": _one_line(record), "status": record["status"]}
    except Exception as error:  # a failing cell must not stop the comparison
        return {"ok": False, "error": f"{type(error).__name__}: {error}"}


def _report_outcome(cfg, outcome: Dict[str, Any], failures) -> None:
    if outcome["ok"]:
        print(f"  done     {outcome['line']}", flush=True)
    else:
        failures.append((cfg.preset, outcome["error"]))
        print(f"  FAILED   {cfg.preset}: {outcome['error']}", flush=True)


def _one_line(record: Dict[str, Any]) -> str:
    m, t = record["metrics"], record["timings"]
    value = m["metric"]
    shown = f"{100 * value:.1f}%" if m["metric_name"] == "accuracy" else f"{value:.4g}"
    return (
        f"{record['preset'] or record['cell']}: {record['status']}, test {m['metric_name']} {shown} "
        f"(baseline {m['baseline']:.4g}), {m['params']} params, {t['train_s']:.1f} s, {t['steps']} steps"
    )


def _delegate(name: str, argv: List[str]) -> int:
    try:
        module = importlib.import_module(DELEGATED[name])
    except ModuleNotFoundError as error:
        if error.name != DELEGATED[name]:
            raise
        print(
            f"ltdrnn {name}: {DELEGATED[name]} is not available in this installation (module not found)",
            file=sys.stderr,
        )
        return 2
    result = module.main(argv)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
