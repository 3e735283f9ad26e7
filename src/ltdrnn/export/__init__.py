"""Deployment: a trained model's streaming step as ONNX, ``torch.export`` (pt2) or generated C, with a
measured parity and cost report. See ``docs/deployment.md``.

    export(RUN_DIR | CHECKPOINT | model, format="onnx" | "pt2" | "c", out=DIR, int8=False) -> report

The unit of every format is :class:`~ltdrnn.export.step.StreamingStep`: ``(x_t (B, d), state (B, S)) ->
(y_t (B, o), state)``. The export directory gets the format's files, ``report.json`` (parity on the
run's test split, sizes, memory, latencies, the input/output contract) and ``report.md`` (the same, for
people). The files are written in a private staging directory and moved into place at the end, so a
failed export leaves none of them behind.
The core package does not import this module; the onnx format needs the ``export`` extra.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np
import torch

from ..checkpoint import atomic_write
from .report import TARGETS, summary, targets
from .step import ExportError, StreamingStep, check_exportable

FORMATS = ("onnx", "pt2", "c")
MAX_LATENCY_STEPS = 100_000
CALIBRATION_SEQUENCES = 256

__all__ = ["FORMATS", "TARGETS", "ExportError", "StreamingStep", "export", "load_trained", "summary"]


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
    mcu: Optional[str] = None,
    adc: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """Export a trained model's streaming step and measure it; returns the report (also ``report.json``).

    Args:
        source: a run directory, a checkpoint file, or a :class:`~ltdrnn.models.SequenceModel`.
        format: ``"onnx"``, ``"pt2"`` or ``"c"``.
        out: export directory (default: ``<run dir>/export-<format>[-int8]``; required for a model).
        int8: C: the integer step (int8 weights, int16 values, no float), calibrated on the task's
            training split; ONNX: weight-only int8 per output channel. Not for pt2.
        name: base name of the files and, for C, the symbol prefix (default ``ltdrnn_<cell>``).
        task: the task whose ``split`` measures parity (default: the run's own; a model without one is
            exported but not measured).
        measure: measure parity, the long-stream probe and latencies (False: files and costs only).
        split: the task split for parity.
        latency_steps: timed steps per latency figure, 1 to :data:`MAX_LATENCY_STEPS`.
        mcu: a microcontroller of :data:`ltdrnn.export.devices.MCUS`: refuse a C step whose constants
            or RAM exceed it (the report lists the fit on every known one either way); C format only.
        adc: ``{"scale": s, "offset": o}``, the sensor's ``units = counts * scale + offset`` (one number or
            one per input channel; offset 0 if left out): the integer C step gets ``NAME_quantise_adc``,
            which turns ADC counts into its input without float. C with ``int8`` only.
    """
    from . import devices
    from .c_export import check_name
    from .cells_ir import check_c_supported

    _check_arguments(format, int8, latency_steps, mcu, devices.MCUS)
    if adc is not None and not (format == "c" and int8):
        raise ExportError(
            f"adc (--adc-scale): the ADC helper feeds the integer C step; export with --format c --int8, got "
            f"format {format!r}{' with --int8' if int8 else ' without --int8'}"
        )
    model, run_task, origin, run_dir = _source(source)
    check_finite(model)
    task = task or run_task
    if out is None and run_dir is None:
        raise ExportError("out: expected an export directory when exporting a model object, got None")
    out = Path(out) if out is not None else run_dir / f"export-{format}{'-int8' if int8 else ''}"
    step = StreamingStep(model)
    cells = [cell.registry_name for cell in step.cells]
    name = check_name(re.sub(r"\W", "_", f"ltdrnn_{cells[0]}") if name is None else name)
    if format == "pt2" and int8:
        raise ExportError(
            "--int8: not supported for the pt2 format (torch.export keeps the float weights); "
            "use --format onnx --int8 or --format c --int8"
        )
    if format == "c":
        for cell in step.cells:
            check_c_supported(cell)
    from .contract import contract as make_contract

    agreed = make_contract(step, task, split, measured=measure and task is not None)
    calibration = _calibration(task)
    if format == "c" and int8 and calibration is None:
        raise ExportError("int8: the integer C step is calibrated on the task's training split; pass task=")
    wanted = "int8" if int8 else "fp32"
    c_costs = _c_costs(step, name, calibration, agreed, format, wanted, adc)
    fits = devices.fits(c_costs)
    if mcu is not None:
        devices.require_fit(fits, mcu, wanted)
    written = _write(format, step, out, name, int8, cells, c_costs[wanted])
    report = _report(format, int8, name, origin, step, cells, written, task, c_costs, fits, agreed)
    if measure and task is not None:
        _measure(report, format, model, step, written, task, split, latency_steps, agreed)
    report["out"] = str(out)
    _save(report, out)
    return report


def _check_arguments(format, int8, latency_steps, mcu, mcus) -> None:
    if format not in FORMATS:
        raise ExportError(f"format: expected one of {', '.join(FORMATS)}, got {format!r}")
    if not isinstance(int8, bool):
        raise ExportError(f"int8: expected a bool, got {int8!r}")
    if (
        isinstance(latency_steps, bool)
        or not isinstance(latency_steps, int)
        or not 1 <= latency_steps <= MAX_LATENCY_STEPS
    ):
        raise ExportError(f"latency_steps: expected an integer from 1 to {MAX_LATENCY_STEPS:,}, got {latency_steps!r}")
    if mcu is not None and mcu not in mcus:
        raise ExportError(f"mcu: expected one of {', '.join(mcus)}, got {mcu!r}")
    if mcu is not None and format != "c":  # only the generated C runs on a microcontroller
        raise ExportError(
            f"mcu: applies to the C format only, got mcu {mcu!r} with format {format!r}; "
            "export with --format c, or leave out --mcu"
        )


def check_finite(model) -> None:
    """Refuse a model with a NaN or infinite parameter or buffer (a diverged run): every format would
    export it without complaint and predict nonsense."""
    for kind, items in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for key, tensor in items:
            if tensor.is_floating_point() and not torch.isfinite(tensor).all():
                bad = int((~torch.isfinite(tensor)).sum())
                raise ExportError(
                    f"model: {kind} {key!r} has {bad} non-finite value(s) (NaN or Inf): the run diverged; "
                    "export a checkpoint from before the divergence"
                )


def _source(source):
    """``(model, task or None, description, run directory or None)`` of a path or a model object."""
    if isinstance(source, (str, Path)):
        model, _, task = load_trained(source)
        path = Path(source)
        return model, task, str(source), path if path.is_dir() else path.parent
    check_exportable(source)
    return source.eval(), None, type(source).__name__, None


def _calibration(task) -> Optional[np.ndarray]:
    """The training split's inputs ``(B, T, d)`` (at most :data:`CALIBRATION_SEQUENCES`), or None."""
    if task is None or task.info.input_kind == "tokens":
        return None
    dataset = task.dataset("train")
    items = [dataset[i] for i in range(min(len(dataset), CALIBRATION_SEQUENCES))]
    x, _, lengths = task.collate(items)
    if lengths is not None:  # padding would only widen no range; the ranges read true steps only
        x = x[:, : int(lengths.max())]
    return x.detach().double().cpu().numpy()


def _c_costs(step, name, calibration, agreed, format, wanted, adc=None) -> Dict[str, Any]:
    """The fp32 and (with calibration data) int8 C steps, generated once per export: their flash, RAM and
    stack go into the report and the fits, and the one being exported is what :func:`_write` writes and
    compiles. None where the C generator does not handle the model (an error only for the C step being
    exported)."""
    from .c_export import generate_c

    costs: Dict[str, Any] = {"fp32": None, "int8": None}
    for kind in ("fp32", "int8"):
        if kind == "int8" and calibration is None:
            continue
        try:
            costs[kind] = generate_c(step, name, kind == "int8", calibration, agreed, adc if kind == "int8" else None)
        except ExportError:
            if format == "c" and kind == wanted:
                raise
    return costs


def _write(format: str, step: StreamingStep, out: Path, name: str, int8: bool, cells, generated):
    """The format's files, written in a staging directory inside ``out`` and moved in when all succeeded;
    for C, ``generated``, the step :func:`_c_costs` made."""
    from . import c_build, onnx_export, pt2_export

    try:
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=out))
    except OSError as error:
        raise ExportError(f"out: cannot create the export directory {str(out)!r}: {error.strerror or error}") from None
    try:
        if format == "c":
            written = c_build.write(step, generated, staging)
        else:
            written = {"onnx": onnx_export.write, "pt2": pt2_export.write}[format](step, staging, name, int8)
        written["files"] = [_move(f, out) for f in written["files"]]
        return written
    except ExportError:
        raise
    except OSError as error:
        raise ExportError(
            f"out: writing the export to {str(out)!r} failed: {error.strerror or error}; no file was written"
        ) from None
    except Exception as error:  # the exporter's own limits for this cell: say which cell and format
        first = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
        raise ExportError(
            f"cell {'+'.join(cells)!r}: export to {format} is not supported ({type(error).__name__}: {first})"
        ) from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _move(path: Path, out: Path) -> Path:
    target = out / Path(path).name
    Path(path).replace(target)
    return target


def _report(format, int8, name, origin, step, cells, written, task, c_costs, fits, agreed) -> Dict[str, Any]:
    model = step.model
    fp32, quantised = c_costs["fp32"], c_costs["int8"]
    parameters = sum(p.numel() for p in model.parameters())
    generated = written.get("generated")
    initial = step.init_state(1)[0]
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
        # the generated C's constants (what a device stores); without C support, 4 bytes per parameter
        "weight_bytes": {
            "fp32": fp32.weight_bytes if fp32 else 4 * parameters,
            "int8": quantised.weight_bytes if quantised else None,
        },
        "c": {kind: _costs(c) for kind, c in c_costs.items()},
        "fits": fits,
        "formats": {"input_frac": generated.input_frac, "output_frac": generated.output_frac, "adc": generated.adc}
        if generated is not None and generated.int8
        else None,
        # the state to start every sequence from; null means zeros (the C init function sets it either way)
        "initial_state": [v if math.isfinite(v) else str(v) for v in initial.tolist()] if initial.any() else None,
        "memory_bytes": {"state": 4 * step.state_size, "scratch": fp32.scratch_bytes if fp32 else None},
        "contract": agreed,
        "parity": None,
        "latency_us": None,
        "targets": None,
        "notes": list(written["notes"]),
        "environment": {"torch": torch.__version__, "threads": 1},
    }


def _costs(generated) -> Optional[Dict[str, int]]:
    if generated is None:
        return None
    keys = ("weight_bytes", "flash_bytes", "state_bytes", "scratch_bytes", "stack_bytes", "ram_bytes")
    return {key: getattr(generated, key) for key in keys}


def _measure(report, format, model, step, written, task, split, latency_steps, agreed) -> None:
    from . import measure

    run = written["step"]
    if run is not None:
        channel = agreed["input"]["channel"] if format == "c" else None
        if channel is not None:  # the C step standardises its input itself: feed it the raw series
            mean, std = (np.asarray(channel[k], np.float32) for k in ("mean", "std"))
            normalised = run
            run = lambda x_t, state: normalised(x_t * std + mean, state)  # noqa: E731
        report["parity"] = measure.parity(model, step, run, task, split, init=written.get("init"))
        report["parity"]["split"] = split
    latency = measure.torch_step_latencies(model, latency_steps)
    if run is not None and format != "c":
        latency[f"{format}_step"] = measure.runner_latency_us(run, step, max(1, latency_steps // 10))
    if format == "c" and run is not None:
        from .c_build import step_latency_ns

        files = written["files"]
        latency["c_step"] = step_latency_ns(files[1], files[0], report["name"], latency_steps) / 1000
        latency["c_speedup_vs_torch_step"] = latency["torch_recurrent_step"] / latency["c_step"]
    report["latency_us"] = latency
    report["targets"] = targets(report)


def _save(report: Dict[str, Any], out: Path) -> None:
    """``report.json`` and ``report.md``, each written atomically."""
    try:
        for file, text in (("report.json", json.dumps(report, indent=2)), ("report.md", summary(report))):
            atomic_write(out / file, text.encode())
    except OSError as error:
        raise ExportError(f"out: writing the report to {str(out)!r} failed: {error.strerror or error}") from None
