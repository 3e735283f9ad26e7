"""Measure trained runs on the simulated microcontrollers: the table of docs/deployment.md.

    ltdrnn device-table RUN_DIR [RUN_DIR ...] [--sequences N] [--json FILE]     (ltdrnn.cli.export)

For every run: the float and the integer C step (``generate_c`` with the run's contract, so the float step
standardises its raw input itself and the integer step takes ``NAME_quantise``'s int16 input), each on the
ATmega328P (simavr, 16 MHz) and the Cortex-M4F (QEMU mps2-an386) over the first N test sequences (all by
default) from their raw series. Per device: flash, static RAM, stack, cycles (AVR) or instructions (QEMU)
per step, and the outputs scored against the test labels and against eager float32 PyTorch on the same
sequences (:func:`scores`): a classifier's accuracy and agreement, a regressor's MSE and largest output
difference. Prints a markdown table; ``--json`` keeps every number.
"""

from __future__ import annotations

import ctypes
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import torch

from . import c_build, devices, load_trained
from .c_export import generate_c
from .contract import contract
from .step import ExportError, StreamingStep


def test_inputs(task, sequences: int | None):
    """``(x normalised (N, T, d), labels (N,), lengths or None)`` of the first ``sequences`` test items."""
    dataset = task.dataset("test")
    count = len(dataset) if sequences is None else min(sequences, len(dataset))
    x, y, lengths = task.collate([dataset[i] for i in range(count)])
    return x, y.numpy(), None if lengths is None else lengths.tolist()


def raw(x: torch.Tensor, agreed) -> np.ndarray:
    """The series as the sensor gives them: the task's per-channel standardisation undone."""
    channel = agreed["input"]["channel"]
    x = x.numpy().astype(np.float32)
    if channel is None:
        return x
    return x * np.asarray(channel["std"], np.float32) + np.asarray(channel["mean"], np.float32)


def quantised(generated, x_raw: np.ndarray, work: Path) -> np.ndarray:
    """``NAME_quantise`` of every sample, by the generated C compiled for the host."""
    (work / f"{generated.name}.h").write_text(generated.header)
    (work / f"{generated.name}.c").write_text(generated.source)
    library = c_build.load_library(work / f"{generated.name}.c", generated.name)
    quantise = getattr(library, f"{generated.name}_quantise")
    flat = np.ascontiguousarray(x_raw.reshape(-1, x_raw.shape[-1]), dtype=np.float32)
    out = np.empty(flat.shape, dtype=np.int16)
    for row in range(flat.shape[0]):
        quantise(ctypes.c_void_p(flat[row].ctypes.data), ctypes.c_void_p(out[row].ctypes.data))
    return out.reshape(x_raw.shape)


def scores(outputs: np.ndarray, eager: np.ndarray, labels: np.ndarray, loss: str) -> Dict[str, float]:
    """A device's outputs ``(N, o)`` scored on the test labels and against eager PyTorch's outputs.

    A classifier (``loss`` cross_entropy): ``accuracy`` and ``agreement``, the fraction of predictions
    that eager PyTorch makes too. A regressor (``mse``): ``mse`` (over every output, as training reports
    it) and ``max_abs_difference``, the largest ``|device - eager|``: an argmax of regression outputs
    would score nothing meaningful.
    """
    if loss == "cross_entropy":
        predicted = outputs.argmax(-1)
        return {
            "accuracy": float((predicted == labels).mean()),
            "agreement": float((predicted == eager.argmax(-1)).mean()),
        }
    return {
        "mse": float(((outputs - labels.reshape(outputs.shape)) ** 2).mean()),
        "max_abs_difference": float(np.abs(outputs - eager).max()),
    }


def measure_run(run_dir: str, sequences: int | None, work: Path) -> Dict[str, Any]:
    model, cfg, task = load_trained(run_dir)
    loss = task.info.loss
    metric = "accuracy" if loss == "cross_entropy" else "mse"
    step = StreamingStep(model)
    agreed = contract(step, task, measured=False)
    dataset = task.dataset("train")
    calibration_x, _, _ = task.collate([dataset[i] for i in range(len(dataset))])
    x, labels, lengths = test_inputs(task, sequences)
    with torch.no_grad():
        eager = model(x, None if lengths is None else torch.tensor(lengths)).numpy()
    row: Dict[str, Any] = {
        "run": run_dir,
        "cell": cfg.model.cell,
        "hidden": cfg.model.hidden_size,
        "options": dict(cfg.model.options),
        "parameters": sum(p.numel() for p in model.parameters()),
        "sequences": int(x.shape[0]),
        "metric": metric,
        f"{metric}_eager": scores(eager, eager, labels, loss)[metric],
    }
    x_raw = raw(x, agreed)
    for kind in ("fp32", "int8"):
        generated = generate_c(step, "model", kind == "int8", calibration_x.double().numpy(), agreed)
        inputs = quantised(generated, x_raw, work) if kind == "int8" else x_raw
        row[kind] = {"weight_bytes": generated.weight_bytes, "flash_constants": generated.flash_bytes}
        for target, run in (("atmega328p", devices.run_avr), ("cortex-m4", devices.run_cortex_m4)):
            started = time.perf_counter()
            try:
                result = run(generated, inputs, lengths)
            except ExportError as error:  # does not fit, or a tool is missing: say so in the table
                row[kind][target] = {"error": str(error)}
                continue
            result.update(scores(result.pop("outputs"), eager, labels, loss))
            result["simulated_in_s"] = time.perf_counter() - started
            row[kind][target] = result
            print(f"{row['cell']} {kind} {target}: {_brief(result)}", file=sys.stderr, flush=True)
    return row


def _brief(result: Dict[str, Any]) -> str:
    keys = ("flash", "ram", "stack", "cycles_per_step", "instructions_per_step")
    keys += ("accuracy", "agreement", "mse", "max_abs_difference")
    return ", ".join(f"{k} {result[k]:.4g}" for k in keys if k in result)


def _config(row) -> str:
    options = ", ".join(f"{k}={v}" for k, v in row["options"].items())
    return f"{row['cell']} H={row['hidden']}" + (f" ({options})" if options else "")


def markdown(rows: List[Dict[str, Any]]) -> str:
    """cell x {ATmega328P, Cortex-M4} x {fp32, int8}: flash, RAM, stack, cycles or instructions per step,
    accuracy and agreement (a regressor: MSE and the largest output difference from eager PyTorch)."""
    head = (
        "| cell | C step | weights | AVR flash | AVR RAM (stack) | AVR cycles/step (us at 16 MHz) | "
        "M4 flash | M4 RAM (stack) | M4 instructions/step | accuracy (MSE) eager -> device | "
        "agreement (max abs difference) |"
    )
    lines = [head, "|" + "---|" * 11]
    for row in rows:
        for kind in ("fp32", "int8"):
            avr, m4 = row[kind].get("atmega328p", {}), row[kind].get("cortex-m4", {})
            cells = [_config(row) if kind == "fp32" else "", kind, f"{row[kind]['weight_bytes']:,} B"]
            cells += _device(avr, "cycles_per_step") + _device(m4, "instructions_per_step")
            cells += _quality(row, avr if row["metric"] in avr else m4)
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _quality(row: Dict[str, Any], measured: Dict[str, Any]) -> List[str]:
    """The last two columns: the test metric eager -> device and the agreement with eager PyTorch."""
    if row["metric"] not in measured:
        return ["-", "-"]
    if row["metric"] == "accuracy":
        return [
            f"{100 * row['accuracy_eager']:.1f}% -> {100 * measured['accuracy']:.1f}%",
            f"{100 * measured['agreement']:.1f}%",
        ]
    return [f"MSE {row['mse_eager']:.4g} -> {measured['mse']:.4g}", f"{measured['max_abs_difference']:.2g}"]


def _device(result: Dict[str, Any], speed: str) -> List[str]:
    if "error" in result:
        return ["does not fit" if "more than LTDRNN_" in result["error"] else "failed", "-", "-"]
    if not result:
        return ["-", "-", "-"]
    pace = f"{result[speed]:,.0f}"
    if speed == "cycles_per_step":
        pace += f" ({result['us_per_step_16mhz']:,.0f})"
    return [f"{result['flash']:,} B", f"{result['ram']:,} B ({result['stack']})", pace]


def measure_runs(runs: List[str], sequences: int | None = None) -> List[Dict[str, Any]]:
    """:func:`measure_run` for every run directory, built in one temporary directory."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ltdrnn-table-") as work:
        return [measure_run(run, sequences, Path(work)) for run in runs]
