"""Reports from the results store: models x tasks tables with the papers' numbers beside ours, details,
the papers' own numbers, and learning curves, as markdown and HTML (``ltdrnn report``).

:func:`markdown_table` is the project's one markdown-table writer; the benchmark, sweep, reproduction
and UCR pages use it too.
"""

from __future__ import annotations

import html
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from ..config import preset_path
from .store import ResultStore


# ---- paper numbers ---------------------------------------------------------------------------------
def paper_numbers() -> List[Dict[str, Any]]:
    """The packaged table of numbers the papers report (``presets/paper_numbers.yaml``)."""
    import yaml

    text = preset_path("paper_numbers.yaml").read_text()
    return yaml.safe_load(text)["numbers"]


# ---- report ----------------------------------------------------------------------------------------
#: Task options that set the splits' sizes or how the data is drawn or found, not the problem posed.
DATA_OPTIONS = ("n_train", "n_val", "n_test", "seed", "data_dir", "download", "fresh_train")


def setting_label(task: str, options: Dict[str, Any]) -> str:
    """A column label for a task and the options that change the problem (not the splits' sizes, seeds
    or whether training items are drawn afresh each epoch)."""
    shown = {k: v for k, v in sorted(options.items()) if k not in DATA_OPTIONS}
    if not shown:
        return task
    return f"{task}(" + ", ".join(f"{k}={v}" for k, v in shown.items()) + ")"


LABEL_OPTIONS = ("reading", "eta")  # cell options that make a different model of the same cell


def model_label(row: Dict[str, Any]) -> str:
    """The row's cell, with the options of :data:`LABEL_OPTIONS` its config sets (the Euler cells'
    reading and initial step size): ``"tarnn[reading=code, eta=0.01]"``."""
    options = (row.get("config") or {}).get("model", {}).get("options", {})
    shown = [f"{k}={options[k]}" for k in LABEL_OPTIONS if k in options]
    return f"{row['cell']}[{', '.join(shown)}]" if shown else row["cell"]


def _matches(number: Dict[str, Any], cell: str, task: str, options: Dict[str, Any]) -> bool:
    if number["cell"] != cell or number["task"] != task:
        return False
    return all(options.get(k) == v for k, v in (number.get("setting") or {}).items())


def _task_options(row: Dict[str, Any]) -> Dict[str, Any]:
    return (row["config"] or {}).get("task", {}).get("options", {})


def seed_of(row: Dict[str, Any]) -> Any:
    """The training seed of a stored row (``train.seed`` of its resolved config)."""
    return ((row.get("config") or {}).get("train") or {}).get("seed")


def has_result(row: Dict[str, Any]) -> bool:
    """Whether a stored run enters the tables: it finished and has a metric."""
    return row["status"] == "finished" and row["metric"] is not None


def summarise(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Group finished runs by cell and task setting: ``{"columns", "cells", "cells_x_columns"}``."""
    groups: Dict[tuple, List[Dict[str, Any]]] = {}
    options_of: Dict[str, tuple] = {}
    for row in rows:
        if not has_result(row):
            continue
        options = _task_options(row)
        column = setting_label(row["task"], options)
        options_of[column] = (row["task"], options)
        groups.setdefault((model_label(row), column), []).append(row)
    columns = sorted(options_of)
    cells = sorted({cell for cell, _ in groups})
    table: Dict[tuple, Dict[str, Any]] = {}
    numbers = paper_numbers()
    for (cell, column), members in groups.items():
        values = [r["metric"] for r in members]
        task, options = options_of[column]
        paper = [n for n in numbers if _matches(n, members[-1]["cell"], task, options)]
        table[(cell, column)] = {
            "mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else None,
            "n": len(values),
            "metric_name": members[-1]["metric_name"],
            "params": members[-1]["params"],
            "train_s": statistics.fmean(r["train_time_s"] or 0 for r in members),
            "skip": members[-1]["metrics"].get("skip_fraction"),
            "flops": members[-1]["metrics"].get("flops_per_sequence"),
            "paper": paper[0] if paper else None,
            "higher_is_better": members[-1]["metrics"].get("higher_is_better"),
            "baseline": members[-1]["metrics"].get("baseline"),
        }
    return {"columns": columns, "cells": cells, "table": table, "options": options_of}


def _format_value(value: Optional[float], metric: str) -> str:
    if value is None:
        return "-"
    if metric == "accuracy":
        return f"{100 * value:.1f}%"
    return f"{value:.4g}"


def comparison_rows(summary: Dict[str, Any]) -> List[List[str]]:
    """Header + one row per cell: ``ours [paper]`` per task column."""
    header = ["cell"] + summary["columns"]
    out = [header]
    for cell in summary["cells"]:
        row = [cell]
        for column in summary["columns"]:
            item = summary["table"].get((cell, column))
            if item is None:
                row.append("")
                continue
            text = _format_value(item["mean"], item["metric_name"])
            if item["std"] is not None:
                text += f" ± {_format_value(item['std'], item['metric_name'])} (n={item['n']})"
            if item["paper"]:
                text += f" [paper: {_format_value(item['paper']['value'], item['paper']['metric'])}]"
            row.append(text)
        out.append(row)
    return out


def detail_rows(summary: Dict[str, Any]) -> List[List[str]]:
    """One row per cell and task: metric, trivial baseline, params, train time, skip fraction, FLOPs."""
    out = [["task", "cell", "metric", "value", "baseline", "params", "train s", "skip %", "mult/seq"]]
    for column in summary["columns"]:
        for cell in summary["cells"]:
            item = summary["table"].get((cell, column))
            if item is None:
                continue
            out.append(
                [
                    column,
                    cell,
                    item["metric_name"],
                    _format_value(item["mean"], item["metric_name"]),
                    _format_value(item["baseline"], item["metric_name"]),
                    str(item["params"]),
                    f"{item['train_s']:.1f}",
                    "-" if item["skip"] is None else f"{100 * item['skip']:.1f}",
                    "-" if item["flops"] is None else f"{item['flops']:.3g}",
                ]
            )
    return out


def paper_rows(summary: Dict[str, Any]) -> List[List[str]]:
    """The papers' numbers for the tasks in the report, with their sources."""
    tasks = {task for task, _ in summary["options"].values()}
    out = [["task", "setting", "cell", "metric", "paper value", "source"]]
    for n in paper_numbers():
        if n["task"] in tasks:
            setting = ", ".join(f"{k}={v}" for k, v in (n.get("setting") or {}).items()) or "-"
            out.append(
                [n["task"], setting, n["cell"], n["metric"], _format_value(n["value"], n["metric"]), n["source"]]
            )
    return out


def marked_comparison_rows(summary: Dict[str, Any]) -> List[List[str]]:
    """The comparison table with each column's best mean in bold and a last row of the trivial baselines,
    so the table alone shows which cells beat the baseline and by how much."""
    marked = [list(row) for row in comparison_rows(summary)]
    baselines = ["trivial baseline"]
    for j, column in enumerate(summary["columns"], start=1):
        items = {
            i: summary["table"][(cell, column)]
            for i, cell in enumerate(summary["cells"], start=1)
            if (cell, column) in summary["table"]
        }
        first = next(iter(items.values()))  # a column is one task setting: one metric, one direction
        sign = 1 if first["higher_is_better"] else -1
        best = max(items, key=lambda i: sign * items[i]["mean"])
        marked[best][j] = f"**{marked[best][j]}**"
        baseline = next((item["baseline"] for item in items.values() if item["baseline"] is not None), None)
        baselines.append(_format_value(baseline, first["metric_name"]))
    return marked + [baselines]


def markdown_table(rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table, the first row as header: each cell ``str()``-ed, ``|`` escaped and line breaks
    folded to spaces, so no value can break the table's layout."""

    def cells(row: Sequence[Any]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in row) + " |"

    return "\n".join([cells(rows[0]), "|" + "---|" * len(rows[0])] + [cells(r) for r in rows[1:]])


def html_table(rows: List[List[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows[1:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_report(
    store: ResultStore | str,
    out_dir: str | Path,
    study: Optional[str] = None,
    plots: bool = True,
    title: str = "ltdrnn report",
) -> Dict[str, Path]:
    """Write ``report.md``, ``report.html`` and PNG plots into ``out_dir``; returns their paths."""
    store = ResultStore(store, read_only=True) if isinstance(store, str) else store  # a report never writes to it
    rows = store.rows(study=study)  # read before anything is written
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarise(rows)
    figures: List[Path] = []
    if plots and summary["columns"]:
        from ..analysis.plots import learning_curves

        for column in summary["columns"]:
            members = [r for r in rows if has_result(r) and setting_label(r["task"], _task_options(r)) == column]
            path = out_dir / f"curves_{file_slug(column)}.png"
            if learning_curves(members, path, title=column):
                figures.append(path)
    failed = [r for r in rows if r["status"] != "finished"]
    sections = [
        (
            "Comparison (test metric of the best-validation checkpoint; [paper: value] where a paper reports "
            "the same setting)",
            comparison_rows(summary),
        ),
        ("Details", detail_rows(summary)),
        ("Numbers reported by the papers", paper_rows(summary)),
    ]
    intro = (
        f"{len(rows)} runs in the store{f' for study {study!r}' if study else ''}, "
        f"{len(failed)} not finished (diverged or failed)."
    )
    md = [f"# {title}", "", intro, ""]
    page = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto}table{border-collapse:collapse;"
        "margin:1em 0}td,th{border:1px solid #bbb;padding:4px 8px;text-align:left}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><p>{html.escape(intro)}</p>",
    ]
    for heading, table in sections:
        md += [f"## {heading}", "", markdown_table(table), ""]
        page.append(f"<h2>{html.escape(heading)}</h2>{html_table(table)}")
    if figures:
        md += ["## Learning curves", ""] + [f"![{f.stem}]({f.name})" for f in figures] + [""]
        page.append("<h2>Learning curves</h2>" + "".join(f"<img src='{f.name}' width='560'>" for f in figures))
    page.append("</body></html>")
    paths = {"markdown": out_dir / "report.md", "html": out_dir / "report.html"}
    paths["markdown"].write_text("\n".join(md))
    paths["html"].write_text("\n".join(page))
    return {**paths, **{f.stem: f for f in figures}}


def file_slug(text: str, keep: str = "-_") -> str:
    """``text`` made safe as part of a file name: every character but letters, digits and ``keep``
    becomes ``_``, and none is left at either end."""
    return "".join(c if c.isalnum() or c in keep else "_" for c in text).strip("_")
