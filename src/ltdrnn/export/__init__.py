"""Deployment: a trained model's streaming step as ONNX, ``torch.export`` (pt2) or generated C, with a
measured parity and cost report. See ``docs/deployment.md``.

    export(RUN_DIR | CHECKPOINT | model, format="onnx" | "pt2" | "c", out=DIR, int8=False) -> report

The unit of every format is :class:`~ltdrnn.export.step.StreamingStep`: ``(x_t (B, d), state (B, S)) ->
(y_t (B, o), state)``. The export directory gets the format's files, ``report.json`` (parity on the
run's test split, sizes, memory, latencies) and ``report.md`` (the same, for people).
The core package does not import this module; the onnx format needs the ``export`` extra.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, Optional

import torch

from ..checkpoint import atomic_write
from ..results.report import markdown_table
from .step import ExportError, StreamingStep, check_exportable

FORMATS = ("onnx", "pt2", "c")
TARGETS = {"max_abs_error": 1e-5, "agreement": 1.0, "int8_agreement": 0.99, "c_speedup": 10.0}

__all__ = ["FORMATS", "ExportError", "StreamingStep", "export", "load_trained"]


def load_trained(path: str | Path):
    """``(model, config, task)`` of a run directory or checkpoint, read with ``weights_only=True``
    (:func:`ltdrnn.checkpoint.load_checkpoint`).

    The model is in eval mode; the task is built from the run's own config (for its test split).
    """
    from ..checkpoint import CheckpointError, restore_model

    try:
        cfg, task, model = restore_model(path)
    except CheckpointError as error:
        raise ExportError(f"{error}; pass a run directory or its best.pt") from None
    return model.eval(), cfg, task


def export(
    source,
    format: str,
    out: str | Path | None = None,
    *,
    int8: bool = False,
    name: Optional[str] = None,
    task=None,
    measure: bool = True,
    split: str = "test",
    latency_steps: int = 20000,
) -> Dict[str, Any]:
    """Export a trained model's streaming step and measure it; returns the report (also ``report.json``).

    Args:
        source: a run directory, a checkpoint file, or a :class:`~ltdrnn.models.SequenceModel`.
        format: ``"onnx"``, ``"pt2"`` or ``"c"``.
        out: export directory (default: ``<run dir>/export-<format>[-int8]``; required for a model).
        int8: weight-only int8, symmetric per output channel; activations and state stay float.
        name: base name of the files and, for C, the symbol prefix (default ``ltdrnn_<cell>``).
        task: the task whose ``split`` measures parity (default: the run's own; a model without one is
            exported but not measured).
        measure: measure parity and latencies (False: write the files and a report without them).
        split: the task split for parity.
        latency_steps: timed steps per latency figure.
    """
    if format not in FORMATS:
        raise ExportError(f"format: expected one of {', '.join(FORMATS)}, got {format!r}")
    if not isinstance(int8, bool):
        raise ExportError(f"int8: expected a bool, got {int8!r}")
    if isinstance(latency_steps, bool) or not isinstance(latency_steps, int) or latency_steps < 1:
        raise ExportError(f"latency_steps: expected a positive integer, got {latency_steps!r}")
    model, run_task, origin, run_dir = _source(source)
    task = task or run_task
    if out is None and run_dir is None:
        raise ExportError("out: expected an export directory when exporting a model object, got None")
    out = Path(out) if out is not None else run_dir / f"export-{format}{'-int8' if int8 else ''}"
    step = StreamingStep(model)
    cells = [cell.registry_name for cell in step.cells]
    from .c_export import check_c_supported, check_name

    name = check_name(name or re.sub(r"\W", "_", f"ltdrnn_{cells[0]}"))
    if format == "c":
        for cell in step.cells:
            check_c_supported(cell)
    out.mkdir(parents=True, exist_ok=True)
    written = _write(format, step, out, name, int8, cells)
    report = _report(format, int8, name, origin, step, cells, written, task)
    if measure and task is not None:
        _measure(report, format, model, step, written, task, split, latency_steps)
    report["out"] = str(out)
    _save(report, out)
    return report


def _source(source):
    """``(model, task or None, description, run directory or None)`` of a path or a model object."""
    if isinstance(source, (str, Path)):
        model, _, task = load_trained(source)
        path = Path(source)
        return model, task, str(source), path if path.is_dir() else path.parent
    check_exportable(source)
    return source.eval(), None, type(source).__name__, None


def _write(format: str, step: StreamingStep, out: Path, name: str, int8: bool, cells) -> Dict[str, Any]:
    from . import c_export, onnx_export, pt2_export

    writer = {"onnx": onnx_export.write, "pt2": pt2_export.write, "c": c_export.write}[format]
    try:
        return writer(step, out, name, int8)
    except ExportError:
        raise
    except Exception as error:  # the exporter's own limits for this cell: say which cell and format
        first = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
        raise ExportError(
            f"cell {'+'.join(cells)!r}: export to {format} is not supported ({type(error).__name__}: {first})"
        ) from error


def _report(format, int8, name, origin, step, cells, written, task) -> Dict[str, Any]:
    from .c_export import generate_c

    model = step.model
    try:
        fp32, quantised = generate_c(step, name, False), generate_c(step, name, True)
    except ExportError:  # a cell the C generator does not handle: no C costs to report
        fp32 = quantised = None
    parameters = sum(p.numel() for p in model.parameters())
    return {
        "format": format,
        "int8": int8,
        "name": name,
        "source": origin,
        "cells": cells,
        "task": task.info.name if task is not None else None,
        "sizes": {
            "input": step.input_size,
            "hidden": step.cells[-1].hidden_size,
            "layers": len(cells),
            "outputs": step.output_size,
            "state": step.state_size,
            "parameters": parameters,
        },
        "files": {Path(f).name: Path(f).stat().st_size for f in written["files"]},
        # the generated C's const arrays (what a device stores); without C support, 4 bytes per parameter
        "weight_bytes": {
            "fp32": fp32.weight_bytes if fp32 else 4 * parameters,
            "int8": quantised.weight_bytes if quantised else None,
        },
        # the state to start every sequence from; null means zeros (the C init function sets it either way)
        "initial_state": step.init_state(1)[0].tolist() if step.init_state(1).any() else None,
        "memory_bytes": {"state": 4 * step.state_size, "scratch": fp32.scratch_bytes if fp32 else None},
        "parity": None,
        "latency_us": None,
        "targets": None,
        "notes": list(written["notes"]),
        "environment": {"torch": torch.__version__, "threads": 1},
    }


def _measure(report, format, model, step, written, task, split, latency_steps) -> None:
    from . import measure

    if written["step"] is not None:
        report["parity"] = measure.parity(model, step, written["step"], task, split)
        report["parity"]["split"] = split
    latency = measure.torch_step_latencies(model, latency_steps)
    if written["step"] is not None and format != "c":
        latency[f"{format}_step"] = measure.runner_latency_us(written["step"], step, max(1, latency_steps // 10))
    if format == "c" and written["step"] is not None:
        from .c_export import step_latency_ns

        files = written["files"]
        latency["c_step"] = step_latency_ns(files[1], files[0], report["name"], latency_steps) / 1000
        latency["c_speedup_vs_torch_step"] = latency["torch_recurrent_step"] / latency["c_step"]
    report["latency_us"] = latency
    report["targets"] = _targets(report)


def _targets(report) -> Dict[str, Optional[bool]]:
    """Which of issue 17's targets this export meets (None: not measured or not applicable)."""
    parity, latency = report["parity"] or {}, report["latency_us"] or {}
    error, agreement = parity.get("max_abs_error"), parity.get("agreement")
    relative = parity.get("max_rel_error")
    speedup = latency.get("c_speedup_vs_torch_step")
    return {
        "fp32_max_abs_error<=1e-5": None if report["int8"] or error is None else error <= TARGETS["max_abs_error"],
        "fp32_max_rel_error<=1e-5": None
        if report["int8"] or relative is None
        else relative <= TARGETS["max_abs_error"],
        "fp32_agreement=100%": None if report["int8"] or agreement is None else agreement >= TARGETS["agreement"],
        "int8_agreement>=99%": None
        if not report["int8"] or agreement is None
        else agreement >= TARGETS["int8_agreement"],
        "c_step>=10x_faster": None if speedup is None else speedup >= TARGETS["c_speedup"],
    }


def _save(report: Dict[str, Any], out: Path) -> None:
    """``report.json`` and ``report.md``, each written atomically."""
    for file, text in (("report.json", json.dumps(report, indent=2)), ("report.md", summary(report))):
        atomic_write(out / file, text.encode())


def summary(report: Dict[str, Any]) -> str:
    """The report as a short markdown page."""
    sizes, weights, memory = report["sizes"], report["weight_bytes"], report["memory_bytes"]
    lines = [
        f"# Export of {'+'.join(report['cells'])} ({report['format']}{', int8' if report['int8'] else ''})",
        "",
        f"Source: `{report['source']}`; task: {report['task']}; "
        f"d={sizes['input']}, H={sizes['hidden']}, outputs={sizes['outputs']}, state={sizes['state']} floats.",
        "",
        "Files: " + ", ".join(f"`{name}` ({size:,} B)" for name, size in report["files"].items()),
        "",
        f"Weights: {weights['fp32']:,} B fp32"
        + (f", {weights['int8']:,} B int8" if weights["int8"] else "")
        + f"; state {memory['state']:,} B"
        + (f", scratch {memory['scratch']:,} B" if memory["scratch"] else ""),
        "",
    ]
    parity, measures = report["parity"], []
    if parity:
        measures += [
            ["test sequences", parity["sequences"]],
            [
                "max abs error vs eager",
                f"{parity['max_abs_error']:.3g} (largest output "
                f"{parity['output_scale']:.3g}; relative {parity['max_rel_error']:.2g})",
            ],
            ["max abs error vs eager on the reference path", f"{parity['max_abs_error_vs_reference']:.3g}"],
            ["eager float32 vs float64 (rounding)", f"{parity['eager_rounding_error']:.3g}"],
        ]
        if parity["agreement"] is not None:
            measures += [
                ["prediction agreement", f"{100 * parity['agreement']:.2f}%"],
                [
                    "accuracy eager / export",
                    f"{100 * parity['accuracy_eager']:.2f}% / "
                    f"{100 * parity['accuracy_export']:.2f}% (delta {100 * parity['accuracy_delta']:+.2f} pt)",
                ],
            ]
    for key, value in (report["latency_us"] or {}).items():
        if key.endswith("speedup_vs_torch_step"):
            measures.append(["C step speed-up over Recurrent.step", f"{value:.1f}x"])
        else:
            measures.append([f"latency per step, batch 1: {key}", f"{value:.2f} us"])
    if measures:
        lines.append(markdown_table([["measure", "value"], *measures]))
    targets = report["targets"] or {}
    met = [f"{k}: {'yes' if v else 'NO'}" for k, v in targets.items() if v is not None]
    if met:
        lines += ["", "Targets: " + "; ".join(met)]
    if report["notes"]:
        lines += ["", "Notes: " + "; ".join(report["notes"])]
    return "\n".join(lines) + "\n"
