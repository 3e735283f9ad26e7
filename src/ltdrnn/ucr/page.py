"""The UCR/UEA benchmark's page, from the results database alone: per-set accuracy, average ranks with
aeon's critical-difference diagram, parameters and training time, the goal check and the recipe."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from ..config import preset_path
from .benchmark import (
    DEFAULT_CELLS,
    REFERENCE,
    SEEDS,
    SOURCE_CELLS,
    BenchmarkError,
    available_sets,
    default_study,
    preset_split_sizes,
    published_numbers,
)


# ---- the page ------------------------------------------------------------------------------------
def collect(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Finished rows -> ``{"sets", "methods", "acc": {(method, set): [values]}, "params", "train_s",
    "best_step": {method: [optimiser step of the kept (best-validation) checkpoint, per run]}}``."""
    acc: Dict[tuple, List[float]] = {}
    params: Dict[tuple, int] = {}
    train_s: Dict[tuple, List[float]] = {}
    best_step: Dict[str, List[float]] = {}
    tested: Dict[tuple, List[str]] = {}
    options: Dict[str, Dict[str, Any]] = {}
    from ..results import has_result

    for row in rows:
        if not has_result(row):
            continue
        key = (row["cell"], row["name"])
        acc.setdefault(key, []).append(row["metric"])
        if row["cell"] != REFERENCE:
            tested.setdefault(key, []).append(tested_checkpoint(row))
            options.setdefault(row["name"], ((row.get("config") or {}).get("task") or {}).get("options") or {})
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
        "tested": tested,
        "options": options,
    }


def tested_checkpoint(row: Dict[str, Any]) -> str:
    """Which weights a trained row's test metric is of: ``"last"`` (the final weights: ``train.select_on=last``,
    or no finite validation score to choose on), ``"best validation <key>"``, or ``"?"`` where the row does not
    say (neither its metrics nor its config)."""
    metrics = row.get("metrics") or {}
    said = metrics.get("checkpoint")
    if said is None and "val_best" in metrics and metrics["val_best"] is None:
        said = "last"  # rows from before the key: no validation score was kept, so nothing was chosen
    if said is None:
        said = ((row.get("config") or {}).get("train") or {}).get("select_on")
        said = None if said is None else "last" if said == "last" else f"best validation {said}"
    return said or "?"


def on_final_weights(data: Dict[str, Any], method: str, dataset: str) -> int:
    """How many of the runs of ``method`` on ``dataset`` were tested on their final weights."""
    return data["tested"].get((method, dataset), []).count("last")


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
            + (" †" if on_final_weights(data, m, s) else "")
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


def final_weights_note(data: Dict[str, Any]) -> List[str]:
    """The footnote of the marks (†) of :func:`accuracy_rows`, or nothing when no run was marked."""
    marked = [
        f"{m} on {s} ({on_final_weights(data, m, s)} of {len(data['acc'][(m, s)])} runs)"
        for s in data["sets"]
        for m in data["methods"]
        if on_final_weights(data, m, s)
    ]
    if not marked:
        return []
    return [
        "† tested on the final weights, not on a checkpoint chosen on validation (`train.select_on=last`, or "
        f"no finite validation score): {', '.join(marked)}.",
        "",
    ]


def split_rows(data: Dict[str, Any]) -> List[List[str]]:
    """Per set, the splits its cells trained on (:func:`~ltdrnn.ucr.benchmark.split_sizes`, read from the data
    where the page is rendered, with the task options of the study's runs) and the checkpoints they tested."""
    out = [["set", "fit", "validation", "test", "classes validated", "fewest per class in validation", "tested"]]
    for s in data["sets"]:
        tested = sorted({t for m in data["methods"] for t in data["tested"].get((m, s), [])})
        sizes = set_sizes(s, data["options"].get(s))
        if sizes is None:
            out.append([s, "data not found here", "-", "-", "-", "-", ", ".join(tested) or "-"])
            continue
        if sizes.val == 0:  # a choice on an empty split is a choice on nothing
            tested = [t if t == "last" else f"{t} (of an empty split: invalid)" for t in tested]
        out.append(
            [
                s,
                str(sizes.fit),
                str(sizes.val),
                str(sizes.test),
                f"{sizes.val_classes} of {sizes.classes}",
                str(sizes.fewest_val),
                ", ".join(tested) or "-",
            ]
        )
    return out


def set_sizes(dataset: str, options: Optional[Dict[str, Any]]):
    """The :class:`~ltdrnn.ucr.benchmark.SplitSizes` of ``dataset`` read with ``options`` (a run's task options;
    the preset's when None), or None when the set cannot be read here."""
    from ..data import DataFileError, DataNotFoundError

    try:
        return preset_split_sizes(dataset, options)
    except (DataFileError, DataNotFoundError, ValueError):
        return None


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
    """The benchmark's goal, checked on the sets every method ran: best source cell within 5 points of
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
    from ..analysis.plots import pyplot, save_figure

    pyplot()  # the Agg backend, chosen before aeon imports pyplot
    from aeon.visualisation import plot_critical_difference

    scores = np.array([[statistics.fmean(data["acc"][(m, s)]) for m in data["methods"]] for s in sets])
    figure, _ = plot_critical_difference(scores, list(data["methods"]))
    return save_figure(figure, path, dpi=120, crop=True)


def recipe_rows(recipe: List[Dict[str, Any]], default: List[Dict[str, Any]]) -> List[List[str]]:
    """One row per recipe study and cell, then one for all its cells: mean test accuracy of the study's
    runs beside the default recipe's on the same (cell, set, seed), and in how many of those pairs the
    variant was better / worse. A study's runs without a default twin count in its own mean only."""
    from ..results import has_result, seed_of

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


def absent_sets(data: Dict[str, Any], skipped: Dict[str, str]) -> str:
    """The offline sets without runs in the study, each skipped one marked with why (or ``none``)."""
    absent = [s for s in available_sets() if s not in data["sets"]]
    absent += [s for s in skipped if s not in absent and s not in data["sets"]]
    return ", ".join(f"{s} (skipped: {skipped[s]})" if s in skipped else s for s in absent) or "none"


def render_page(
    store: str,
    study: str,
    page: Path,
    recipe_prefix: Optional[str] = "ucr-recipe/",
    notes: Optional[Path] = None,
    skipped: Optional[Dict[str, str]] = None,
) -> Path:
    """Write the benchmark page (and its CD diagram next to the store) from the database alone, plus the
    hand-written ``notes`` (markdown) if given; the sets in ``skipped`` (``{set: what is wrong}``, from the
    run that writes the page) are marked among the sets not in the study."""
    from ..results import ResultStore, file_slug, markdown_table

    results = ResultStore(store, read_only=True)  # a report never writes to the store it reads
    rows = results.rows(study=study)
    for row in rows:
        if not row["name"]:  # a row of the study that names no set cannot be placed on the page
            raise BenchmarkError(f"--store {store}: run {row['id']!r} of study {study} names no set (empty name)")
    data = collect(rows)
    if not data["sets"]:
        raise BenchmarkError(f"--study {study}: no finished runs of this study in {store}")
    figure = cd_diagram(data, Path(store).parent / f"cd-{file_slug(study, keep='-_.')}.png")
    published = published_numbers()
    lines = [
        "# UCR/UEA benchmark: the default recipe against MiniRocket",
        "",
        f"Generated by `ltdrnn ucr report --store {store} --study {study} --page {page}"
        f"{'' if notes is None else f' --notes {notes}'}` from the results database "
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
        *final_weights_note(data),
        f"Offline sets not in this study (found where the page was rendered): {absent_sets(data, skipped or {})}.",
        "",
        "## Splits",
        "",
        "Series per split as the cells trained on them, read from the data where this page was rendered "
        "(`ltdrnn ucr sets --splits` prints them): fit (trains), validation (chooses the tested checkpoint), "
        "test; the classes with a validation series, the fewest validation series of a class, and the "
        "checkpoint the runs tested. A set whose validation split would be empty is skipped by `ucr run`, "
        "which names the override that runs it on its final weights (`--set train.select_on=last`, a study "
        "of its own).",
        "",
        markdown_table(split_rows(data)),
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
