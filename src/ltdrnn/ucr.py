"""The UCR/UEA benchmark: one recipe, every offline set, every chosen cell, beside MiniRocket.

    ltdrnn ucr sets                                    the classification sets found offline
    ltdrnn ucr run [--sets A,B] [--cells lstm,srnn] [--seeds 3] [--budget default|quick]
                   [--set KEY=VALUE ...] [--study NAME] [--store DB] [--no-minirocket]
    ltdrnn ucr report [--store DB] [--study NAME] [--page benchmarks-ucr.md]

This repository's benchmark keeps its database and page in docs/ (``--store docs/ucr/results.db --page
docs/benchmarks-ucr.md --notes docs/ucr/notes.md``); the command line is :mod:`ltdrnn.cli.ucr`.

Protocol (fixed): each set's official TRAIN file is split into a stratified 80 % that trains and 20 %
that validates (``split_seed`` 0); the checkpoint with the best validation accuracy is tested on the
official TEST file; every (cell, set) runs with seeds 0, 1, 2 and is reported as mean ± std. Every run
is a normal ``train(cfg)`` run of the preset ``ucr/default`` (plus the budget's and the user's
overrides), stored in the results database under ``study``. MiniRocket (aeon's ``MiniRocketClassifier``,
10,000 kernels, ridge classifier) is fitted on the whole official TRAIN file with the same seeds and
stored in the same study as cell ``minirocket``. A run already in the store is not run again, so an
interrupted benchmark continues where it stopped.

``report`` reads only the database (and the packaged published numbers,
``presets/ucr/published.csv``) and writes the page: per-set accuracy, average ranks with aeon's
critical-difference diagram, parameters and training time, and the goal check.
"""

from __future__ import annotations

import csv
import io
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from .config import DEFAULT_STORE, preset_path

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


# ---- the sets ------------------------------------------------------------------------------------
def available_sets(data_dir: Optional[str] = None) -> List[str]:
    """Names of the classification sets with a ``<Name>_TRAIN.ts`` / ``<Name>_TEST.ts`` pair in the places
    :func:`~ltdrnn.tasks.uea_ucr.find_ts_pair` searches (the data directory and aeon's folder)."""
    from .data import data_dir as resolve_data_dir
    from .tasks.uea_ucr import aeon_data_dir

    root = resolve_data_dir(data_dir)
    folders = [root / "ucr_uea", root, aeon_data_dir()]
    names = set()
    for folder in folders:
        if folder is None or not folder.is_dir():
            continue
        for place in folder.iterdir():
            name = place.name
            if (
                name in NOT_ARCHIVE_SETS
                or not (place / f"{name}_TRAIN.ts").is_file()
                or not (place / f"{name}_TEST.ts").is_file()
            ):
                continue
            if _is_classification(place / f"{name}_TRAIN.ts"):
                names.add(name)
    return sorted(names, key=str.lower)


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
    from .config import load_config
    from .results import file_slug

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
    from .results import seed_of

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

    from .studies import StudyRun, training_run

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
) -> List[str]:
    """Per set, fit MiniRocket, then train every (cell, seed), ``jobs`` at a time, skipping (with ``resume``)
    what the store already holds; returns the failed runs."""
    from .studies import finished_rows, run_study

    study = study or default_study(budget, overrides)
    runs = benchmark_runs(sets, cells, seeds, budget, overrides, study, store, runs_dir, minirocket, data_dir, resume)
    outcome = run_study(runs, store, finished_rows(study, benchmark_key), jobs, resume, log)
    return [f"{label}/seed{seed}: {error}" for label, seed, error in outcome.failures]


def fit_minirocket(
    dataset: str, seed: int, study: str, store: str, data_dir: Optional[str] = None, threads=None, progress=None
) -> Dict[str, Any]:
    """The work of a MiniRocket run (:func:`minirocket_record`), stored in ``store``; it runs on one thread
    whatever ``threads`` says (``n_jobs=1``)."""
    from .results import ResultStore

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

    from .tasks.uea_ucr import UeaUcrTask
    from .train import new_run_id, version_info

    task = UeaUcrTask(dataset, data_dir=data_dir, val_fraction=0.0)
    (x_train, y_train), (x_test, y_test) = task.splits["train"], task.splits["test"]
    length = max(len(s) for s in [*x_train, *x_test])
    classifier = MiniRocketClassifier(random_state=seed, n_jobs=1)
    classifier.fit(padded_array(x_train, length), y_train)
    started = time.perf_counter()
    classifier.fit(padded_array(x_train, length), y_train)
    train_s = time.perf_counter() - started
    accuracy = float((classifier.predict(padded_array(x_test, length)) == y_test).mean())
    return {
        "id": new_run_id(REFERENCE, dataset),
        "status": "finished",
        "created": datetime.now(timezone.utc).isoformat(),
        "cell": REFERENCE,
        "task": "uea_ucr",
        "preset": None,
        "study": study,
        "name": dataset,
        "config": {
            "model": {"cell": REFERENCE, "n_kernels": 10000},
            "task": {"name": "uea_ucr", "options": {"dataset": dataset, "val_fraction": 0.0}},
            "train": {"seed": seed},
        },
        "metrics": {
            "metric_name": "accuracy",
            "metric": accuracy,
            "higher_is_better": True,
            "baseline": task.info.baseline,
            "params": None,
        },
        "timings": {"train_s": train_s},
        "history": [],
        "run_dir": None,
        "version": version_info(),
    }


# ---- the page ------------------------------------------------------------------------------------
def collect(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Finished rows -> ``{"sets", "methods", "acc": {(method, set): [values]}, "params", "train_s",
    "best_step": {method: [optimiser step of the kept (best-validation) checkpoint, per run]}}``."""
    acc: Dict[tuple, List[float]] = {}
    params: Dict[tuple, int] = {}
    train_s: Dict[tuple, List[float]] = {}
    best_step: Dict[str, List[float]] = {}
    from .results import has_result

    for row in rows:
        if not has_result(row):
            continue
        key = (row["cell"], row["name"])
        acc.setdefault(key, []).append(row["metric"])
        train_s.setdefault(key, []).append(row["train_time_s"] or 0.0)
        if row["params"] is not None:
            params[key] = row["params"]
        if row["metrics"].get("best_step") is not None:
            best_step.setdefault(row["cell"], []).append(row["metrics"]["best_step"])
    sets = sorted({s for _, s in acc}, key=str.lower)
    cells = sorted({c for c, _ in acc})
    methods = [c for c in DEFAULT_CELLS if c in cells] + sorted(
        c for c in cells if c not in DEFAULT_CELLS + (REFERENCE,)
    )
    methods += [REFERENCE] if REFERENCE in cells else []
    return {
        "sets": sets,
        "methods": methods,
        "acc": acc,
        "params": params,
        "train_s": train_s,
        "best_step": best_step,
    }


def mean_std(values: Sequence[float]) -> str:
    """``"mean ± sample std"`` in %; a single value has no spread to show."""
    if len(values) == 1:
        return f"{100 * values[0]:.1f}"
    return f"{100 * statistics.fmean(values):.1f} ± {100 * statistics.stdev(values):.1f}"


def complete_sets(data: Dict[str, Any]) -> List[str]:
    """The sets on which every method has at least one result (ranks and means are taken over these)."""
    return [s for s in data["sets"] if all((m, s) in data["acc"] for m in data["methods"])]


def average_ranks(data: Dict[str, Any], sets: Sequence[str]) -> Dict[str, float]:
    """Mean over ``sets`` of each method's rank (1 = best; ties share the mean rank) by mean accuracy."""
    from scipy.stats import rankdata

    ranks = {m: [] for m in data["methods"]}
    for s in sets:
        means = [statistics.fmean(data["acc"][(m, s)]) for m in data["methods"]]
        for m, r in zip(data["methods"], rankdata([-v for v in means])):
            ranks[m].append(float(r))
    return {m: statistics.fmean(r) for m, r in ranks.items() if r}


def accuracy_rows(data: Dict[str, Any], published: Dict[str, Dict[str, float]]) -> List[List[str]]:
    header = ["set"] + data["methods"] + ["ROCKET (published)", "InceptionTime (published)"]
    out = [header]
    for s in data["sets"]:
        row = [s] + [
            mean_std(data["acc"][(m, s)])
            + (f" (n={len(data['acc'][(m, s)])})" if len(data["acc"][(m, s)]) != SEEDS else "")
            if (m, s) in data["acc"]
            else "-"
            for m in data["methods"]
        ]
        row += [
            f"{100 * published[s][k]:.1f}" if k in published.get(s, {}) else "-" for k in ("rocket", "inceptiontime")
        ]
        out.append(row)
    sets = complete_sets(data)
    mean_row = [f"mean over {len(sets)} sets"] + [
        f"{100 * statistics.fmean(statistics.fmean(data['acc'][(m, s)]) for s in sets):.1f}" if sets else "-"
        for m in data["methods"]
    ]
    out.append(mean_row + ["-", "-"])
    return out


def rank_rows(data: Dict[str, Any]) -> List[List[str]]:
    sets = complete_sets(data)
    ranks = average_ranks(data, sets) if sets else {}
    out = [["method", f"average rank over {len(sets)} sets", "mean accuracy %"]]
    for m in sorted(ranks, key=ranks.get):
        mean = statistics.fmean(statistics.fmean(data["acc"][(m, s)]) for s in sets)
        out.append([m, f"{ranks[m]:.2f}", f"{100 * mean:.1f}"])
    return out


def cost_rows(data: Dict[str, Any]) -> List[List[str]]:
    out = [
        [
            "method",
            "parameters (min-max over sets)",
            "training s per run (mean over sets)",
            "training s per run (max set)",
            "optimiser step of the kept checkpoint (median, max)",
        ]
    ]
    for m in data["methods"]:
        counts = [data["params"][(m, s)] for s in data["sets"] if (m, s) in data["params"]]
        times = {s: statistics.fmean(data["train_s"][(m, s)]) for s in data["sets"] if (m, s) in data["train_s"]}
        slowest = max(times, key=times.get)
        kept = data["best_step"].get(m)
        out.append(
            [
                m,
                f"{min(counts)}-{max(counts)}" if counts else "-",
                f"{statistics.fmean(times.values()):.1f}",
                f"{times[slowest]:.1f} ({slowest})",
                f"{statistics.median(kept):.0f}, {max(kept):.0f}" if kept else "-",
            ]
        )
    return out


def goal_lines(data: Dict[str, Any]) -> List[str]:
    """The issue's goal, checked on the sets every method ran: best source cell within 5 points of
    MiniRocket; every source cell above LSTM."""
    sets = complete_sets(data)
    if not sets:
        return ["No set has results for every method yet."]
    mean = {m: statistics.fmean(statistics.fmean(data["acc"][(m, s)]) for s in sets) for m in data["methods"]}
    lines = []
    sources = [c for c in SOURCE_CELLS if c in mean]
    if sources and REFERENCE in mean:
        best = max(sources, key=mean.get)
        gap = 100 * (mean[REFERENCE] - mean[best])
        lines.append(
            f"- Best source cell {best}: {100 * mean[best]:.1f} % against MiniRocket's "
            f"{100 * mean[REFERENCE]:.1f} %, a gap of {gap:.1f} points: goal (within 5 points) "
            f"{'reached' if gap <= 5 else 'not reached'}."
        )
    if sources and "lstm" in mean:
        below = [c for c in sources if mean[c] <= mean["lstm"]]
        lines.append(
            f"- Same-recipe LSTM: {100 * mean['lstm']:.1f} %. Source cells above it: "
            f"{', '.join(c for c in sources if c not in below) or 'none'}; at or below it: "
            f"{', '.join(below) or 'none'}: goal (every source cell above LSTM) "
            f"{'reached' if not below else 'not reached'}."
        )
    return lines


def cd_diagram(data: Dict[str, Any], path: Path) -> Optional[Path]:
    """aeon's critical-difference diagram of the methods over the complete sets (PNG), if it can be drawn."""
    import numpy as np

    sets = complete_sets(data)
    if len(sets) < 2 or len(data["methods"]) < 2:
        return None
    from .analysis.plots import pyplot, save_figure

    pyplot()  # the Agg backend, chosen before aeon imports pyplot
    from aeon.visualisation import plot_critical_difference

    scores = np.array([[statistics.fmean(data["acc"][(m, s)]) for m in data["methods"]] for s in sets])
    figure, _ = plot_critical_difference(scores, list(data["methods"]))
    return save_figure(figure, path, dpi=120, crop=True)


def recipe_rows(recipe: List[Dict[str, Any]], default: List[Dict[str, Any]]) -> List[List[str]]:
    """One row per recipe study and cell, then one for all its cells: mean test accuracy of the study's
    runs beside the default recipe's on the same (cell, set, seed), and in how many of those pairs the
    variant was better / worse. A study's runs without a default twin count in its own mean only."""
    from .results import has_result, seed_of

    def accuracies(rows):  # MiniRocket's rows do not depend on the recipe
        return {
            (r["cell"], r["name"], seed_of(r)): r["metric"] for r in rows if has_result(r) and r["cell"] != REFERENCE
        }

    base = accuracies(default)
    by_study: Dict[str, List[Dict[str, Any]]] = {}
    for row in recipe:
        by_study.setdefault(row["study"], []).append(row)
    out = [
        [
            "study (recipe variant)",
            "cell",
            "sets",
            "runs",
            "mean accuracy %",
            "default on the same runs %",
            "variant better / worse",
        ]
    ]
    for study in sorted(by_study):
        runs = accuracies(by_study[study])
        cells = [c for c in DEFAULT_CELLS if any(k[0] == c for k in runs)]
        cells += sorted({k[0] for k in runs} - set(cells))
        pairs_of_study = []
        for cell in cells:
            mine = {k: v for k, v in runs.items() if k[0] == cell}
            pairs = [(v, base[k]) for k, v in mine.items() if k in base]
            pairs_of_study += pairs
            out.append(
                [
                    study,
                    cell,
                    ",".join(sorted({k[1] for k in mine}, key=str.lower)),
                    str(len(mine)),
                    f"{100 * statistics.fmean(mine.values()):.1f}",
                    *paired_columns(pairs),
                ]
            )
        if len(cells) > 1:
            out.append(
                [
                    study,
                    "all (over the pairs)",
                    "",
                    str(len(runs)),
                    f"{100 * statistics.fmean(runs.values()):.1f}",
                    *paired_columns(pairs_of_study),
                ]
            )
    return out


def paired_columns(pairs: Sequence[tuple]) -> List[str]:
    """``[(variant, default)]`` -> the default's mean over the pairs (with the variant's mean over the same
    pairs when that differs from the study's mean) and the better / worse count."""
    if not pairs:
        return ["-", "-"]
    variant, default = (statistics.fmean(p[i] for p in pairs) for i in (0, 1))
    better, worse = sum(v > d for v, d in pairs), sum(v < d for v, d in pairs)
    count = f"{len(pairs)} pair{'s' if len(pairs) > 1 else ''}"
    return [f"{100 * default:.1f} (variant {100 * variant:.1f}, {count})", f"{better} / {worse}"]


def commits(rows: List[Dict[str, Any]]) -> List[str]:
    found = {((r.get("version") or {}).get("git_commit") or "unknown")[:10] for r in rows}
    return sorted(found)


def render_page(
    store: str, study: str, page: Path, recipe_prefix: Optional[str] = "ucr-recipe/", notes: Optional[Path] = None
) -> Path:
    """Write the benchmark page (and its CD diagram next to the store) from the database alone, plus the
    hand-written ``notes`` (markdown) if given."""
    from .results import ResultStore, file_slug, markdown_table

    results = ResultStore(store)
    rows = results.rows(study=study)
    data = collect(rows)
    if not data["sets"]:
        raise BenchmarkError(f"--study {study}: no finished runs of this study in {store}")
    figure = cd_diagram(data, Path(store).parent / f"cd-{file_slug(study, keep='-_.')}.png")
    published = published_numbers()
    lines = [
        "# UCR/UEA benchmark: the default recipe against MiniRocket",
        "",
        f"Generated by `ltdrnn ucr report --store {store} --study {study}` from the results database "
        f"`{store}` (committed beside this page); do not edit by hand. Runs: {len(rows)}; code commits of "
        f"the runs: {', '.join(commits(rows))}. To reproduce the runs: `ltdrnn ucr run --sets "
        f"{','.join(data['sets'])} --cells {','.join(m for m in data['methods'] if m != REFERENCE) or 'none'}"
        f"{'' if study == default_study('default', []) else f' --study {study}'} --store {store}` (runs already "
        "in the store are skipped).",
        "",
        "Protocol: official TEST split for testing; a stratified 20 % of the official TRAIN split validates "
        "(the best-validation checkpoint is tested) and the other 80 % trains; seeds 0, 1, 2; accuracy in % as "
        "mean ± sample std over the seeds. Every cell uses the preset `ucr/default` unchanged (the section "
        "*The recipe* below). MiniRocket is aeon's `MiniRocketClassifier` (10,000 kernels), fitted on the "
        "whole TRAIN split with the same seeds; unequal-length sets are zero-padded to the longest series for "
        "it. ROCKET and InceptionTime are the published numbers of the archive's result files (sources "
        "below), not run here.",
        "",
        "## Accuracy per set",
        "",
        markdown_table(accuracy_rows(data, published)),
        "",
        f"Offline sets not in this study (found where the page was rendered): "
        f"{', '.join(s for s in available_sets() if s not in data['sets']) or 'none'}.",
        "",
        "## Average rank",
        "",
        "Ranks by mean accuracy per set (1 = best), over the sets every method ran.",
        "",
        markdown_table(rank_rows(data)),
        "",
    ]
    if figure is not None:
        lines += [
            f"![critical-difference diagram]({_relative(figure, page)})",
            "",
            "Critical-difference diagram drawn with `aeon.visualisation.plot_critical_difference` "
            "(one-sided Wilcoxon signed-rank tests, Holm correction, alpha 0.1): methods joined by a bar "
            "are not significantly different. With this few sets the test has little power.",
            "",
        ]
    lines += ["## Goal", ""] + goal_lines(data) + [""]
    if notes is not None:
        lines += [notes.read_text().rstrip(), ""]
    lines += [
        "## Parameters and training time",
        "",
        "Training time is the optimiser's wall time of one run (one thread, on a machine shared with "
        "other jobs, so compare within a column with care); for MiniRocket it is the fit time.",
        "",
        markdown_table(cost_rows(data)),
        "",
    ]
    if recipe_prefix:
        recipe = [r for r in results.rows() if (r["study"] or "").startswith(recipe_prefix)]
        if recipe:
            lines += [
                "## The recipe",
                "",
                "The preset `ucr/default` (its comments say why each choice was made):",
                "",
                "```yaml",
                _preset_text().rstrip(),
                "```",
                "",
                f"Measurements it was chosen on (studies `{recipe_prefix}*` of the same database; one "
                "factor changed at a time; each variant's mean test accuracy beside the default recipe's "
                "(this page's study) on the same cell, set and seed):",
                "",
                markdown_table(recipe_rows(recipe, rows)),
                "",
            ]
    lines += ["## Sources of the published numbers", "", "From `src/ltdrnn/presets/ucr/published.csv`:", ""]
    lines += [f"- {line.lstrip('# ').strip()}" for line in _published_header()]
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text("\n".join(lines) + "\n")
    return page


def _preset_text() -> str:
    return preset_path("ucr", "default.yaml").read_text()


def _published_header() -> List[str]:
    """The comment lines of ``published.csv``, an indented line joined to the one before it."""
    text = preset_path("ucr", "published.csv").read_text()
    lines: List[str] = []
    for line in text.splitlines():
        if line.startswith("#   ") and lines:
            lines[-1] += " " + line[1:].strip()
        elif line.startswith("#"):
            lines.append(line)
    return lines


def _relative(target: Path, page: Path) -> str:
    import os

    return os.path.relpath(target.resolve(), page.resolve().parent)
