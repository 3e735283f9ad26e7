"""The UCR/UEA benchmark's runs: the sets found offline, the published numbers, the config of each run,
the study runs (:mod:`ltdrnn.studies`) and MiniRocket."""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from ..config import DEFAULT_STORE, preset_path

PRESET = "ucr/default"
SOURCE_CELLS = ("tarnn", "srnn", "mist", "irnn", "sarnn")
DEFAULT_CELLS = ("lstm",) + SOURCE_CELLS
REFERENCE = "minirocket"
BUDGETS = {"default": [], "quick": ["train.steps=100"]}
SEEDS = 3
DEFAULT_PAGE = "benchmarks-ucr.md"
DEFAULT_RUNS = "runs/ucr"
# aeon's own test fixture (a 48-series cut of Chinatown), not a set of the archive
NOT_ARCHIVE_SETS = ("UnitTest",)


class BenchmarkError(ValueError):
    """A user mistake in the benchmark's arguments; the message names the argument."""


@dataclass
class BenchmarkOutcome:
    """What :func:`run_benchmark` did: ``failed`` runs (``<cell>/<set>/seed<n>: <error>``) and the ``skipped``
    sets, ``{set: what is wrong}``, found unusable before any training."""

    failed: List[str] = field(default_factory=list)
    skipped: Dict[str, str] = field(default_factory=dict)


# ---- the sets ------------------------------------------------------------------------------------
def available_sets(data_dir: Optional[str] = None) -> List[str]:
    """Names of the classification sets with a ``<Name>_TRAIN.ts`` / ``<Name>_TEST.ts`` pair in the places
    :func:`~ltdrnn.tasks.uea_ucr.find_ts_pair` searches (the data directory and aeon's folder)."""
    return sorted((name for name, train in _set_pairs(data_dir) if _is_classification(train)), key=str.lower)


def unlabelled_sets(data_dir: Optional[str] = None) -> List[str]:
    """Names of the sets found as :func:`available_sets` finds them but without class labels (``@classLabel
    false`` or none: regression sets): named, so that asking for one says why it cannot run."""
    return sorted((name for name, train in _set_pairs(data_dir) if not _is_classification(train)), key=str.lower)


def _set_pairs(data_dir: Optional[str]):
    """``(name, TRAIN file)`` of every set with both files in the searched places (a name found twice,
    once)."""
    from ..data import data_dir as resolve_data_dir
    from ..tasks.uea_ucr import aeon_data_dir

    root = resolve_data_dir(data_dir)
    seen = set()
    for folder in (root / "ucr_uea", root, aeon_data_dir()):
        if folder is None or not folder.is_dir():
            continue
        for place in folder.iterdir():
            name = place.name
            train = place / f"{name}_TRAIN.ts"
            if name in NOT_ARCHIVE_SETS or name in seen or not train.is_file():
                continue
            if (place / f"{name}_TEST.ts").is_file():
                seen.add(name)
                yield name, train


def _is_classification(path: Path) -> bool:
    with open(path, errors="replace") as handle:
        for line in handle:
            text = line.strip().lower()
            if text.startswith("@classlabel"):
                return text.split()[1:2] == ["true"]
            if text.startswith("@data"):
                return False
    return False


def published_numbers() -> Dict[str, Dict[str, float]]:
    """``{set: {"rocket": acc, "inceptiontime": acc}}`` from ``presets/ucr/published.csv`` (sources in its
    header)."""
    text = preset_path("ucr", "published.csv").read_text()
    rows = csv.DictReader(io.StringIO("\n".join(line for line in text.splitlines() if not line.startswith("#"))))
    return {row["dataset"]: {k: float(v) for k, v in row.items() if k != "dataset" and v} for row in rows}


# ---- running -------------------------------------------------------------------------------------
def default_study(budget: str, overrides: Sequence[str]) -> str:
    """``ucr/<budget>``, plus the overrides when there are any (a variant of the recipe is its own study)."""
    return f"ucr/{budget}" + (f"/{','.join(overrides)}" if overrides else "")


def run_config(
    cell: str,
    dataset: str,
    seed: int,
    budget: str,
    overrides: Sequence[str],
    study: str,
    store: str,
    runs_dir: str,
    data_dir: Optional[str] = None,
):
    """The RunConfig of one benchmark run: the preset, the budget, the user's overrides, then the run's own
    cell, set and seed (which the overrides cannot change)."""
    from ..config import load_config
    from ..results import file_slug

    own = [
        f"model.cell={cell}",
        f"task.options.dataset={dataset}",
        f"train.seed={seed}",
        f"study={study}",
        f"name={dataset}",
        f"results={store}",
        "train.threads=1",
        "train.progress=false",
        f"run_dir={Path(runs_dir) / file_slug(study, keep='-_.') / f'{cell}-{dataset}-s{seed}'}",
    ]
    if data_dir is not None:
        own.append(f"task.options.data_dir={data_dir}")
    return load_config(PRESET, [*BUDGETS[budget], *overrides, *own])


def benchmark_key(row: Dict[str, Any]) -> tuple:
    """The ``(label, seed)`` of a benchmark row: ``("<cell>/<set>", seed)``."""
    from ..results import seed_of

    return f"{row['cell']}/{row['name']}", seed_of(row)


def benchmark_runs(
    sets: Sequence[str],
    cells: Sequence[str],
    seeds: Sequence[int],
    budget: str,
    overrides: Sequence[str],
    study: str,
    store: str,
    runs_dir: str = DEFAULT_RUNS,
    minirocket: bool = True,
    data_dir: Optional[str] = None,
    resume: bool = True,
) -> list:
    """The benchmark as study runs (:mod:`ltdrnn.studies`), per set MiniRocket's seeds first, then every
    (cell, seed); labels ``<cell>/<set>``."""
    from functools import partial

    from ..studies import StudyRun, training_run

    runs = []
    for dataset in sets:
        if minirocket:
            runs += [
                StudyRun(f"{REFERENCE}/{dataset}", seed, partial(fit_minirocket, dataset, seed, study, store, data_dir))
                for seed in seeds
            ]
        for cell in cells:
            for seed in seeds:
                cfg = run_config(cell, dataset, seed, budget, overrides, study, store, runs_dir, data_dir)
                runs.append(training_run(f"{cell}/{dataset}", cfg, resume))
    return runs


@dataclass(frozen=True)
class SplitSizes:
    """Series in each split of a set as its runs read it: ``fit`` (trains), ``val``, ``test``; the
    ``classes`` with TRAIN series, how many of them have a validation series (``val_classes``), the
    fewest validation series of any of them (``fewest_val``, 0 when one has none) and each class's
    TRAIN count (``train_per_class``, ``{class name: series}``)."""

    fit: int
    val: int
    test: int
    classes: int
    val_classes: int
    fewest_val: int
    train_per_class: Dict[str, int]


def split_sizes(task) -> SplitSizes:
    """The :class:`SplitSizes` of a built UCR/UEA task."""
    import numpy as np

    fit, val = task.splits["train"][1], task.splits["val"][1]
    names = task.info.extra["classes"]
    present = np.unique(np.concatenate([fit, val]))
    per_class = [int((val == c).sum()) for c in present]
    return SplitSizes(
        fit=len(fit),
        val=len(val),
        test=len(task.splits["test"][1]),
        classes=len(present),
        val_classes=sum(n > 0 for n in per_class),
        fewest_val=min(per_class, default=0),
        train_per_class={names[c]: int((fit == c).sum() + (val == c).sum()) for c in present},
    )


def preset_split_sizes(
    dataset: str, options: Optional[Dict[str, Any]] = None, data_dir: Optional[str] = None
) -> SplitSizes:
    """The :class:`SplitSizes` of ``dataset`` read with a run's task ``options`` (a stored row's) or, when
    None, with those of the preset ``ucr/default`` (and ``data_dir``)."""
    from ..config import load_config
    from ..tasks import build_task

    if options is None:
        options = dict(load_config(PRESET).task.options)
        options.update({} if data_dir is None else {"data_dir": data_dir})
    return split_sizes(build_task("uea_ucr", **dict(options, dataset=dataset)))


def empty_validation(dataset: str, sizes: SplitSizes, val_fraction: float) -> str:
    """Why a set with an empty validation split is skipped, and the one override that runs it."""
    counts = ", ".join(f"{name!r} {n}" for name, n in sizes.train_per_class.items())
    return (
        f"dataset {dataset!r}: its validation split is empty (val_fraction {val_fraction} of TRAIN series per "
        f"class: {counts}; a class needs 3 for one to validate), so no checkpoint can be chosen on validation "
        "as the protocol asks; to run it tested on its final weights instead, in a study of its own, add "
        "--set train.select_on=last"
    )


def set_problem(cfg, validates: bool = True) -> Optional[str]:
    """What makes the set of the run config ``cfg`` unusable, in words that name it, or None: the set is
    read and split as its runs will read it (both files, scaling, classes), and with ``validates`` its
    validation split is checked as training checks it (:func:`ltdrnn.evaluation.validation_size`): an empty
    one is a problem unless ``train.select_on`` is ``last``, and the message gives that override."""
    from ..config import ConfigError
    from ..data import DataFileError, DataNotFoundError
    from ..tasks import build_task

    try:
        task = build_task(cfg.task.name, **cfg.task.options)
    except (DataFileError, DataNotFoundError, ConfigError, ValueError) as error:
        return str(error)
    if validates and cfg.train.select_on != "last":
        sizes = split_sizes(task)
        if sizes.val == 0:
            return empty_validation(cfg.task.options["dataset"], sizes, task.info.extra["val_fraction"])
    return None


def check_sets(
    sets: Sequence[str], cells: Sequence[str], budget: str, overrides: Sequence[str], **where
) -> Dict[str, str]:
    """``{set: what is wrong}`` for the sets that cannot run, found before any training (``where``: the
    ``study``, ``store``, ``runs_dir`` and ``data_dir`` of :func:`run_config`)."""
    problems = {}
    for dataset in sets:
        cfg = run_config(cells[0] if cells else DEFAULT_CELLS[0], dataset, 0, budget, overrides, **where)
        problem = set_problem(cfg, validates=bool(cells))
        if problem is not None:
            problems[dataset] = problem
    return problems


def run_benchmark(
    sets: Sequence[str],
    cells: Sequence[str],
    seeds: Sequence[int] = tuple(range(SEEDS)),
    budget: str = "default",
    overrides: Sequence[str] = (),
    study: Optional[str] = None,
    store: str = DEFAULT_STORE,
    runs_dir: str = DEFAULT_RUNS,
    minirocket: bool = True,
    data_dir: Optional[str] = None,
    log=print,
    resume: bool = True,
    jobs: int = 1,
) -> BenchmarkOutcome:
    """Check every set (:func:`check_sets`) and log each bad one by name; then per good set fit MiniRocket
    and train every (cell, seed), ``jobs`` at a time, skipping (with ``resume``) what the store already
    holds. Returns the failed runs and the skipped sets (``{set: what is wrong}``)."""
    from ..studies import finished_rows, run_study

    study = study or default_study(budget, overrides)
    where = dict(study=study, store=store, runs_dir=runs_dir, data_dir=data_dir)
    skipped = check_sets(sets, cells, budget, overrides, **where)
    for dataset, problem in skipped.items():
        log(f"  skipped set {dataset}: {problem}")
    good = [s for s in sets if s not in skipped]
    runs = benchmark_runs(good, cells, seeds, budget, overrides, study, store, runs_dir, minirocket, data_dir, resume)
    outcome = run_study(runs, store, finished_rows(study, benchmark_key), jobs, resume, log)
    return BenchmarkOutcome([f"{label}/seed{seed}: {error}" for label, seed, error in outcome.failures], skipped)


def fit_minirocket(
    dataset: str, seed: int, study: str, store: str, data_dir: Optional[str] = None, threads=None, progress=None
) -> Dict[str, Any]:
    """The work of a MiniRocket run (:func:`minirocket_record`), stored in ``store``; it runs on one thread
    whatever ``threads`` says (``n_jobs=1``)."""
    from ..results import ResultStore

    record = minirocket_record(dataset, seed, study, data_dir)
    ResultStore(store).add(record)
    return record


def padded_array(series: Sequence[Any], length: int):
    """``[(T_i, d)] -> (N, d, length)`` float32, zero-padded at the end (aeon's channels-first layout)."""
    import numpy as np

    out = np.zeros((len(series), series[0].shape[1], length), dtype=np.float32)
    for i, s in enumerate(series):
        out[i, :, : len(s)] = s.T
    return out


def minirocket_record(dataset: str, seed: int, study: str, data_dir: Optional[str] = None) -> Dict[str, Any]:
    """Fit aeon's MiniRocket on the whole official TRAIN file, test on TEST; a results-store record.

    Unequal-length sets are zero-padded to the longest series (aeon's MiniRocket needs equal lengths).
    The timed fit is the second of two identical fits: the first compiles aeon's numba kernels (up to a
    minute and a half, once per process), which is not the method's cost."""
    from aeon.classification.convolution_based import MiniRocketClassifier

    from ..results import new_run_id, version_info
    from ..results.record import run_record
    from ..tasks.uea_ucr import UeaUcrTask

    task = UeaUcrTask(dataset, data_dir=data_dir, val_fraction=0.0)
    (x_train, y_train), (x_test, y_test) = task.splits["train"], task.splits["test"]
    length = max(len(s) for s in [*x_train, *x_test])
    classifier = MiniRocketClassifier(random_state=seed, n_jobs=1)
    classifier.fit(padded_array(x_train, length), y_train)
    started = time.perf_counter()
    classifier.fit(padded_array(x_train, length), y_train)
    train_s = time.perf_counter() - started
    accuracy = float((classifier.predict(padded_array(x_test, length)) == y_test).mean())
    return run_record(
        new_run_id(REFERENCE, dataset),
        status="finished",
        cell=REFERENCE,
        task="uea_ucr",
        study=study,
        name=dataset,
        config={
            "model": {"cell": REFERENCE, "n_kernels": 10000},
            "task": {"name": "uea_ucr", "options": {"dataset": dataset, "val_fraction": 0.0}},
            "train": {"seed": seed},
        },
        metrics={
            "metric_name": "accuracy",
            "metric": accuracy,
            "higher_is_better": True,
            "baseline": task.info.baseline,
            "params": None,
        },
        timings={"train_s": train_s},
        history=[],
        version=version_info(),
    )
