"""The speed targets' verdicts and the markdown report of a benchmark result."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ..results import markdown_table
from .alone import seconds
from .subjects import GRU, LSTM, RATE_TARGETS, TRAIN_TARGETS, stream_targets
from .timing import REFERENCE_FIELDS, reference_time


def stream_subjects(subjects: Dict[str, Any]) -> Dict[str, str]:
    """Per source cell, the subject whose streaming step is held to nn.LSTMCell's: the cell's default
    subject when it was measured, else its first variant (a run of variants only, such as
    ``--cells 'srnn[relu],tarnn[K=1]'``, still checks every cell)."""
    chosen: Dict[str, str] = {}
    for name, info in subjects.items():
        if info["family"] == "source" and (info["cell"] == name or info["cell"] not in chosen):
            chosen[info["cell"]] = name
    return chosen


def evaluate_targets(result: Dict[str, Any]) -> List[Dict[str, Any]]:
    """One row per target and shape: the measured ratio, the limit, pass or miss and by how much. The
    baseline's value is its faster time, interleaved or alone (``baseline_reference`` says which)."""
    subjects = result["subjects"]
    sources = list(stream_subjects(subjects).values())
    alias = {a: name for name, info in subjects.items() for a in info["aliases"]}
    rows = []
    for target in TRAIN_TARGETS + RATE_TARGETS + stream_targets(sources):
        measured_as = alias.get(target.subject, target.subject)
        baseline_key = target.baseline_key or target.key
        records = {(r["subject"], r["shape"]): r for r in result.get(target.section, [])}
        for shape in result["settings"]["shapes"]:
            row = {
                "target": target.label,
                "subject": target.subject,
                "measured_as": measured_as,
                "section": target.section,
                "baseline": target.baseline,
                "shape": shape,
                "limit": target.limit,
                "at_least": target.at_least,
                "measured": None,
                "passed": None,
                "miss_percent": None,
                "note": None,
                "baseline_reference": None,
            }
            mine, base = records.get((measured_as, shape)), records.get((target.baseline, shape))
            if target.section not in result["settings"]["sections"]:
                row["note"] = f"section {target.section!r} not run"
            elif mine is None or base is None:
                missing = measured_as if mine is None else target.baseline
                row["note"] = f"{missing} not measured: " + subject_problem(result, missing, shape)
            elif not mine.get(target.key) or not base.get(baseline_key):
                row["note"] = f"no {target.key} measured"
            else:
                row["measured"] = mine[target.key] / reference_time(base, baseline_key)
                row["baseline_reference"] = base.get(REFERENCE_FIELDS.get(baseline_key, ""))
                row["passed"] = target.passes(row["measured"])
                if not row["passed"]:
                    row["miss_percent"] = 100.0 * abs(row["measured"] / target.limit - 1.0)
            rows.append(row)
    return rows


def subject_problem(result: Dict[str, Any], name: str, shape: str) -> str:
    info = result["subjects"].get(name)
    if info is None:
        return "not selected"
    if info.get("error"):
        return info["error"]
    for error in result["errors"]:
        if error.get("subject") == name and error.get("shape") in (shape, None):
            return error["error"]
    return "no measurement"


def fmt(value: Optional[float], digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}"


def ms(seconds: Optional[float]) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.4g}"


def us(seconds: Optional[float]) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.4g}"


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> List[str]:
    """A report section's table: the shared markdown table and the blank line after it."""
    return [markdown_table([header, *rows]), ""]


def subject_label(name: str, info: Dict[str, Any]) -> str:
    return name + (f" (= {', '.join(info['aliases'])})" if info.get("aliases") else "")


def render_markdown(result: Dict[str, Any]) -> str:
    """The report: machine, command, targets with pass/miss, then one table per section."""
    machine, settings = result["machine"], result["settings"]
    subjects = result["subjects"]
    lines = [
        f"# ltdrnn bench — {result['created']}",
        "",
        f"Command: `{result['command']}`",
        "",
        f"Machine: {machine['cpu']}, {machine['logical_cpus']} logical CPUs, torch {machine['torch']}, "
        f"{machine['torch_threads']} torch thread(s), sgemm peak "
        f"{machine['matmul_peak']['gflops']:.1f} GFLOP/s, malloc tuning "
        f"{'on' if machine['malloc_tuning'] else 'off'}, load average at start "
        f"{', '.join(f'{v:.1f}' for v in machine['load_average'] or [])}.",
        "",
        f"Batch {settings['batch']}, hidden {settings['hidden']}, medians of {settings['repeats']} runs "
        f"after {settings['warmup']} warm-up run(s), subjects interleaved"
        + (
            "; nn.LSTM and nn.GRU also each alone in a fresh process, and every ratio divides by the faster time."
            if settings.get("alone_reference")
            else "."
        ),
        "",
    ]
    lines += health_lines(result)
    lines += ["## Targets", ""]
    lines += table(
        ["target", "shape", "measured", "limit", "result"],
        (
            [
                r["target"] + ("" if r["subject"] == r["measured_as"] else f" ({r['measured_as']})"),
                r["shape"],
                fmt(r["measured"]),
                target_limit(r),
                target_verdict(r),
            ]
            for r in result["targets"]
        ),
    )
    for section, title in (
        ("train", "Training step (forward + backward)"),
        ("inference", "Inference (no_grad forward)"),
    ):
        if not result.get(section):
            continue
        lines += [f"## {title}", ""]
        flops = {(r["subject"], r["shape"]): r for r in result.get("flops", [])}
        memory = {(r["subject"], r["shape"]): r for r in result.get("memory", [])}
        peak_key = "train_peak_mb" if section == "train" else "inference_peak_mb"
        for shape in settings["shapes"]:
            rows = [r for r in result[section] if r["shape"] == shape]
            if not rows:
                continue
            lines += [f"### {shape} (T={rows[0]['steps']}, d={rows[0]['input_size']}, B={rows[0]['batch']})", ""]
            lines += table(
                [
                    "subject",
                    "backend",
                    "params",
                    "ms",
                    "x nn.LSTM",
                    "FLOPs x nn.LSTM",
                    "x nn.GRU",
                    "GFLOP/s",
                    "% peak",
                    "peak MB",
                ],
                (
                    [
                        subject_label(r["subject"], subjects[r["subject"]]),
                        subjects[r["subject"]].get("backend", "-"),
                        subjects[r["subject"]].get("parameters", "-"),
                        ms(r["median"]),
                        fmt(r["ratio_lstm"]),
                        fmt(flops.get((r["subject"], shape), {}).get("ratio_lstm_flops")),
                        fmt(r["ratio_gru"]),
                        fmt(flops.get((r["subject"], shape), {}).get(f"{section}_gflops")),
                        percent(flops.get((r["subject"], shape), {}).get(f"{section}_peak_fraction")),
                        fmt(memory.get((r["subject"], shape), {}).get(peak_key), 4),
                    ]
                    for r in sorted(rows, key=lambda r: r["median"])
                ),
            )
            baselines = {r["subject"]: r for r in rows}
            lines += reference_note(
                [("x nn.LSTM", LSTM, baselines.get(LSTM), "median"), ("x nn.GRU", GRU, baselines.get(GRU), "median")]
            )
    if result.get("stream"):
        lines += ["## Streaming step, batch 1 (µs per step)", ""]
        lines += table(
            ["subject", "shape", "cell µs", "x nn.LSTMCell", "layer.step µs", "x nn.LSTM step"],
            (
                [
                    subject_label(r["subject"], subjects[r["subject"]]),
                    r["shape"],
                    us(r["cell_median"]),
                    fmt(r["ratio_lstmcell"]),
                    us(r["layer_median"]),
                    fmt(r["ratio_lstm_layer"]),
                ]
                for r in result["stream"]
            ),
        )
        for shape in settings["shapes"]:
            lstm = next((r for r in result["stream"] if r["subject"] == LSTM and r["shape"] == shape), None)
            lines += reference_note(
                [
                    ("x nn.LSTMCell", f"{LSTM}Cell at {shape}", lstm, "cell_median"),
                    ("x nn.LSTM step", f"the one-step {LSTM} at {shape}", lstm, "layer_median"),
                ]
            )
    if result.get("scaling"):
        lengths = settings["lengths"]
        lines += [f"## Scaling in T (training step ms, {settings['scaling_shape']}; slope 1 = linear)", ""]
        lines += table(
            ["subject"]
            + [f"ms T={t}" for t in lengths]
            + [f"µs/step T={t}" for t in lengths]
            + [f"x nn.LSTM T={t}" for t in lengths]
            + ["log-log slope"],
            (
                [subject_label(r["subject"], subjects[r["subject"]])]
                + [ms(s) for s in r["medians"]]
                + [us(s) for s in r["per_step"]]
                + [fmt(v) for v in r["ratio_lstm"] or [None] * len(lengths)]
                + [fmt(r["slope"])]
                for r in result["scaling"]
            ),
        )
        lines += scaling_note(next((r for r in result["scaling"] if r["subject"] == LSTM), None))
    if result.get("profile"):
        lines += ["## Where a training step's time goes (torch.profiler, one step; ms)", ""]
        lines += table(
            [
                "subject",
                "shape",
                "wall",
                "matmul",
                "compiled",
                "other ops",
                "outside ops",
                "dispatches/step",
                "costliest op",
            ],
            (
                [
                    subject_label(r["subject"], subjects[r["subject"]]),
                    r["shape"],
                    fmt(r["wall_ms"], 4),
                    fmt(r["matmul_ms"], 3),
                    fmt(r["compiled_ms"], 3),
                    fmt(r["other_ops_ms"], 3),
                    fmt(r["outside_ops_ms"], 3),
                    fmt(r["dispatches_per_step"], 3),
                    "{op} {ms:.0f}".format(**r["costliest_ops"][0]) if r["costliest_ops"] else "-",
                ]
                for r in result["profile"]
            ),
        )
    if result.get("skip"):
        lines += [f"## SA-RNN skipping inference ({settings['scaling_shape']})", ""]
        lines += table(
            ["backend", "batch", "skip (forced)", "skip (measured)", "ms", "x dense (cpp)", "x nn.GRU"],
            (
                [
                    r["backend"],
                    r["batch"],
                    f"{r['target_skip']:g}",
                    fmt(r["measured_skip"]),
                    ms(r["median"]),
                    fmt(r["ratio_dense"]),
                    fmt(r["ratio_gru"]),
                ]
                for r in sorted(result["skip"], key=lambda r: (-r["batch"], r["backend"], r["target_skip"]))
            ),
        )
    if result.get("malloc"):
        malloc = result["malloc"]
        lines += [f"## glibc malloc settings ({malloc['shape']}; speed-up of the training step over defaults)", ""]
        names = sorted(malloc["medians"].get("default", {}))
        lines += table(
            ["subject", "default ms"] + [f"x faster: {m}" for m in malloc["speedup"]],
            (
                [n, ms(malloc["medians"]["default"][n])] + [fmt(malloc["speedup"][m].get(n)) for m in malloc["speedup"]]
                for n in names
            ),
        )
    if result["errors"]:
        lines += ["## Not measured", ""]
        lines += table(
            ["subject", "section", "shape", "error"],
            ([e.get("subject"), e.get("section", "-"), e.get("shape", "-"), e["error"]] for e in result["errors"]),
        )
    return "\n".join(lines)


def reference_note(parts: Sequence[Tuple[str, str, Optional[Dict[str, Any]], str]]) -> List[str]:
    """The line under a table that names the time each ratio column divided by: per (column, baseline,
    baseline's record, timed key), the faster of its interleaved and alone times. Nothing for a run without
    the alone pass (or a JSON from before it)."""
    said = []
    for column, baseline, record, key in parts:
        used = (record or {}).get(REFERENCE_FIELDS[key])
        if used is None:
            continue
        times = {"interleaved": record[key], "alone": record["alone_" + key]}
        other = "interleaved" if used == "alone" else "alone"
        said.append(
            f"`{column}` divides by {baseline} {used}, {seconds(times[used])} ({other} {seconds(times[other])})"
        )
    return ["; ".join(said) + ".", ""] if said else []


def scaling_note(lstm: Optional[Dict[str, Any]]) -> List[str]:
    """:func:`reference_note` of the scaling table: nn.LSTM's time at each length."""
    if lstm is None or not lstm.get("references"):
        return []
    said = []
    for steps, interleaved, alone, used in zip(
        lstm["lengths"], lstm["medians"], lstm["alone_medians"], lstm["references"]
    ):
        times = {"interleaved": interleaved, "alone": alone}
        other = "interleaved" if used == "alone" else "alone"
        said.append(f"T={steps} {used}, {seconds(times[used])} ({other} {seconds(times[other])})")
    return [f"`x nn.LSTM` divides by {LSTM} at " + "; ".join(said) + ".", ""]


def target_limit(row: Dict[str, Any]) -> str:
    """The limit, and which time of the baseline the ratio divided by when the run also timed it alone."""
    if row.get("at_least"):
        text = f">= {row['limit']:g} x {row['baseline']}'s GFLOP/s"
    else:
        text = f"<= {row['limit']:g} x {row['baseline']}" + ("Cell" if row["section"] == "stream" else "")
    return text + (f" ({row['baseline_reference']})" if row.get("baseline_reference") else "")


def target_verdict(row: Dict[str, Any]) -> str:
    if row["passed"] is None:
        return f"not measured ({row['note']})"
    if row["passed"]:
        return "pass"
    return f"**miss** by {row['miss_percent']:.0f}% ({row['measured'] / row['limit']:.2f}x the limit)"


def health_lines(result: Dict[str, Any]) -> List[str]:
    """The host line and the run's warnings (bench/host.py); nothing for a JSON from before them."""
    machine, health = result["machine"], result.get("health")
    if health is None:
        return []
    lstm = ", ".join(
        f"{r['shape']} {percent(r['train_peak_fraction'])}"
        + (f" (usual {percent(r['usual_peak_fraction'])})" if r["usual_peak_fraction"] else "")
        for r in health["lstm"]
    )
    lines = [
        f"Host: {machine.get('isa', '?')} ({' '.join(machine.get('isa_flags', []))}){limited(machine)}; BLAS "
        f"{machine.get('blas_version') or machine.get('blas')}; oneDNN {machine.get('onednn')}; load average "
        f"{fmt_load(machine.get('load_average'))} at the start, {fmt_load(machine.get('load_average_end'))} at the end "
        f"(quiet up to {health['quiet_load_limit']:g}); nn.LSTM's training step at {lstm or '-'} of the sgemm peak.",
        "",
    ]
    if health["warnings"]:
        lines += ["## Warnings", ""] + [f"- **{w}**" for w in health["warnings"]] + [""]
    return lines


def limited(machine: Dict[str, Any]) -> str:
    """``, limited by NAME=VALUE ...`` for a run kept below its CPU's instruction set; else nothing."""
    limits = machine.get("isa_limits") or {}
    return ", limited by " + " ".join(f"{k}={v}" for k, v in limits.items()) if limits else ""


def fmt_load(values: Optional[Sequence[float]]) -> str:
    return "-" if not values else "/".join(f"{v:.1f}" for v in values)


def percent(fraction: Optional[float]) -> str:
    return "-" if fraction is None else f"{100 * fraction:.2g}%"
