"""The one study runner: runs keyed by (label, seed) -> rows in a results store, in order or in parallel
processes, skipping what the store already holds, one summary line per run.

A study is a list of :class:`StudyRun` items. Each names its ``(label, seed)`` and carries its ``work``: a
picklable callable (a top-level function, or a ``functools.partial`` of one) that trains or fits the run,
stores its row and returns the row's record. The commands that run grids are providers of these items:

- ``ltdrnn run``: every preset of a group (:func:`preset_group`, here), label the preset;
- ``ltdrnn ucr run``: every (cell, set, seed) and MiniRocket (:func:`ltdrnn.ucr.run_benchmark`), label
  ``<cell>/<set>``;
- ``ltdrnn reproduce run``: every run of a claim (:func:`ltdrnn.reproduce.running.run_claim`), label the
  run's label, with the claim's analyses stored after training.

:func:`run_study` runs them ``jobs`` at a time (one spawned process each, ``cpu_count // jobs`` threads
each unless the config names its own, no progress bars), in order with ``jobs=1``. With ``resume`` it
first asks the provider's ``finished(store)`` for the pairs already done and skips them; a training run
then continues its run directory's last checkpoint if it has one (``train(cfg, resume="auto")``). A run
that raises is reported (``FAILED``) and the others go on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

Pair = Tuple[str, Any]


@dataclass(frozen=True)
class StudyRun:
    """One run of a study: ``work(threads=..., progress=...)`` trains or fits it, stores its row and returns
    the record (``threads``/``progress`` None: as its config says). ``start_line`` is printed before it."""

    label: str
    seed: Any
    work: Callable[..., Dict[str, Any]]
    start_line: str = ""


@dataclass
class StudyOutcome:
    """What :func:`run_study` did: the records of the runs that ended, and ``(label, seed, error)`` of the
    runs that raised; ``skipped`` counts the pairs the store already held."""

    records: List[Dict[str, Any]] = field(default_factory=list)
    failures: List[Tuple[str, Any, str]] = field(default_factory=list)
    skipped: int = 0


def run_study(
    runs: Sequence[StudyRun],
    store: Optional[str] = None,
    finished: Optional[Callable[[str], Set[Pair]]] = None,
    jobs: int = 1,
    resume: bool = True,
    log: Callable[[str], None] = print,
    prefix: str = "  ",
    on_record: Optional[Callable[[StudyRun, Dict[str, Any]], None]] = None,
) -> StudyOutcome:
    """Run every item of ``runs`` whose ``(label, seed)`` is not in ``finished(store)`` (asked only with
    ``resume``), ``jobs`` at a time; log one line per run (``prefix`` first) and return the outcome."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs: expected a positive number of processes, got {jobs!r}")
    keys = [(run.label, run.seed) for run in runs]
    if len(set(keys)) != len(keys):
        twice = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"runs: expected each (label, seed) once, got {twice} twice")
    done = finished(store) if resume and finished is not None else set()
    todo = [run for run in runs if (run.label, run.seed) not in done]
    outcome = StudyOutcome(skipped=len(runs) - len(todo))

    def report(run: StudyRun, result: Dict[str, Any]) -> None:
        where = f"{prefix}{run.label} (seed {run.seed})"
        if result["ok"]:
            outcome.records.append(result["record"])
            log(f"{where}: {summary_line(result['record'])}")
            if on_record is not None:
                on_record(run, result["record"])
        else:
            outcome.failures.append((run.label, run.seed, result["error"]))
            log(f"{where}: FAILED {result['error']}")

    if jobs == 1 or len(todo) <= 1:
        for run in todo:
            if run.start_line:
                log(f"{prefix}{run.label} (seed {run.seed}): {run.start_line}")
            report(run, _do(run.work, None, None))
        return outcome
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    threads = max(1, (os.cpu_count() or 1) // jobs)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {}
        for run in todo:
            if run.start_line:
                log(f"{prefix}{run.label} (seed {run.seed}): {run.start_line}")
            futures[pool.submit(_do, run.work, threads, False)] = run
        for future in as_completed(futures):
            report(futures[future], future.result())
    return outcome


def _do(work: Callable[..., Dict[str, Any]], threads: Optional[int], progress: Optional[bool]) -> Dict[str, Any]:
    """Run one work item (in this process or a worker); its error comes back as text, never raised, so
    that one failing run does not stop the study."""
    try:
        return {"ok": True, "record": work(threads=threads, progress=progress)}
    except Exception as error:
        return {"ok": False, "error": f"{type(error).__name__}: {error}"}


def summary_line(record: Dict[str, Any]) -> str:
    """``finished, test accuracy 95.0% (baseline 0.1), 1234 params, 3.2 s, 500 steps`` of a record (the
    parts it has)."""
    m, t = record.get("metrics") or {}, record.get("timings") or {}
    value = m.get("metric")
    shown = "-" if value is None else f"{100 * value:.1f}%" if m.get("metric_name") == "accuracy" else f"{value:.4g}"
    parts = [f"{record.get('status')}, test {m.get('metric_name', 'metric')} {shown}"]
    if m.get("baseline") is not None:
        parts[0] += f" (baseline {m['baseline']:.4g})"
    if m.get("params") is not None:
        parts.append(f"{m['params']} params")
    if t.get("train_s") is not None:
        parts.append(f"{t['train_s']:.1f} s")
    if t.get("steps") is not None:
        parts.append(f"{t['steps']} steps")
    return ", ".join(parts)


# ---- training runs ---------------------------------------------------------------------------------
def configured(config: Dict[str, Any], threads: Optional[int] = None, progress: Optional[bool] = None):
    """The RunConfig of ``config`` (plain data, as sent to a worker) with the runner's threads (unless the
    config names its own) and progress setting."""
    from .config import load_config

    overrides = [] if progress is None else [f"train.progress={str(progress).lower()}"]
    if threads and not (config.get("train") or {}).get("threads"):
        overrides.append(f"train.threads={threads}")
    return load_config(config, overrides)


def train_config(
    config: Dict[str, Any],
    threads: Optional[int] = None,
    progress: Optional[bool] = None,
    resume: bool | str = "auto",
    callbacks: Iterable[Any] = (),
) -> Dict[str, Any]:
    """The work of a training run: ``train`` the config (it stores its own row) and return the record."""
    from .train import train

    return train(configured(config, threads, progress), resume=resume, callbacks=callbacks)


def training_run(label: str, cfg, resume: bool = True, start_line: str = "") -> StudyRun:
    """A :class:`StudyRun` that trains ``cfg`` (a RunConfig); with ``resume`` a half-finished run directory
    continues from its last checkpoint."""
    from functools import partial

    work = partial(train_config, cfg.to_dict(), resume="auto" if resume else False)
    return StudyRun(label, cfg.train.seed, work, start_line)


def finished_rows(study: str, key: Callable[[Dict[str, Any]], Pair]) -> Callable[[str], Set[Pair]]:
    """A ``finished`` for :func:`run_study`: ``key(row)`` of every finished row of ``study`` in the store."""

    def finished(store: str) -> Set[Pair]:
        from .results import ResultStore, database_exists

        if not database_exists(store):
            return set()
        return {key(row) for row in ResultStore(store).rows(study=study, status="finished")}

    return finished


# ---- ltdrnn run: the presets of a group --------------------------------------------------------------
def preset_group(
    group: str,
    study: str,
    store: str,
    runs_dir: str,
    overrides: Sequence[str] = (),
    cells: Optional[Set[str]] = None,
    tasks: Optional[Set[str]] = None,
    seeds: Optional[Sequence[int]] = None,
    resume: bool = True,
) -> Tuple[List[StudyRun], List[str]]:
    """The runs of ``ltdrnn run``: every preset of ``group`` (those whose cell and task are kept), each at
    its own seed or at every one of ``seeds``, stored as ``study``; and a line for each preset whose cell or
    task is not registered (it is left out)."""
    from .cells.registry import list_cells
    from .config import list_presets, load_config
    from .tasks import list_tasks

    known_cells, known_tasks = set(list_cells()), set(list_tasks())
    runs, missing = [], []
    for name in list_presets(group):
        for seed in seeds or [None]:
            folder = name.replace("/", "_") + ("" if seed is None else f"-s{seed}")
            own = [f"study={study}", f"results={store}", f"run_dir={Path(runs_dir) / study / folder}"]
            cfg = load_config(name, [*overrides, *([] if seed is None else [f"train.seed={seed}"]), *own])
            if (cells is not None and cfg.model.cell not in cells) or (
                tasks is not None and cfg.task.name not in tasks
            ):
                break
            if cfg.model.cell not in known_cells or cfg.task.name not in known_tasks:
                what, value = ("cell", cfg.model.cell) if cfg.model.cell not in known_cells else ("task", cfg.task.name)
                missing.append(f"{name}: {what} {value!r} not registered")
                break
            runs.append(training_run(name, cfg, resume))
    return runs, missing


def preset_key(row: Dict[str, Any]) -> Pair:
    """The ``(label, seed)`` of a row of ``ltdrnn run``: its preset and training seed."""
    from .results import seed_of

    return row["preset"], seed_of(row)
