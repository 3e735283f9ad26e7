"""The sections measured in fresh subprocesses: peak memory (``memory``) and glibc's malloc settings
(``malloc``). ``python -m ltdrnn.bench --memory-probe SPEC`` / ``--timing-probe SPEC`` is the child."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from typing import Any, Dict, List, Sequence

from ..ops.memory import MALLOC_ENV, tune_malloc
from .subjects import LSTM, Shape, Subject
from .timing import (
    Settings,
    attach_ratios,
    inference_pass,
    interleaved_samples,
    median,
    prepare_process,
    progress,
    train_step,
)


def resident_mb(field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak since the last reset) of this process, from /proc (Linux)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak_rss() -> None:
    """Set this process's ``VmHWM`` back to its current RSS (Linux 4.0+)."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def memory_probe(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Run inside a fresh process: peak RSS above the process's baseline for inference and training.

    The baseline is the RSS after the libraries, the layer and the input exist and after a two-step
    forward + backward has loaded every kernel; the peaks therefore count the memory a pass itself
    needs (activations kept for backward, gradients, temporaries) plus allocator overhead. The peak
    (``VmHWM``) is reset before each pass. ``ru_maxrss`` would not do: a child starts with its
    parent's maximum. Memory freed by the inference pass may stay in the heap and be reused by the
    training step, so the training figure is max(inference, training) — training is the larger for
    every cell we have.
    """
    prepare_process(spec["threads"], spec["malloc_tuning"])
    subject = Subject(**spec["subject"])
    shape = Shape(**spec["shape"])
    layer = subject.layer(shape.input_size, spec["hidden"])
    x = shape.batch(spec["batch"])
    train_step(layer, x[:, :2].contiguous())()
    baseline = resident_mb("VmRSS")
    peaks = {}
    for label, run in (("inference", inference_pass(layer, x)), ("train", train_step(layer, x))):
        reset_peak_rss()
        run()
        peaks[f"{label}_peak_mb"] = resident_mb("VmHWM") - baseline
    return {"baseline_mb": baseline, **peaks}


def timing_probe(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Run inside a fresh process: median training step seconds of each subject (interleaved)."""
    if spec["mode"] == "mallopt":
        tune_malloc()
    prepare_process(spec["threads"], False)
    shape = Shape(**spec["shape"])
    x = shape.batch(spec["batch"])
    subjects = [Subject(**s) for s in spec["subjects"]]
    layers = {s.name: s.layer(shape.input_size, spec["hidden"]) for s in subjects}
    samples = interleaved_samples(
        {n: train_step(layer, x) for n, layer in layers.items()}, spec["repeats"], spec["warmup"], [], {}
    )
    return {name: median(s) for name, s in samples.items()}


def run_probe(kind: str, spec: Dict[str, Any], env: Dict[str, str] | None = None) -> Dict[str, Any]:
    """Run :func:`memory_probe` or :func:`timing_probe` in a new interpreter (environment ``env``,
    default this process's); returns its JSON."""
    command = [sys.executable, "-m", "ltdrnn.bench", f"--{kind}-probe", json.dumps(spec)]
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ if env is None else env)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"probe exited with {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def subject_spec(subject: Subject) -> Dict[str, Any]:
    return {"name": subject.name, "cell": subject.cell, "options": subject.options, "family": subject.family}


def measure_memory(
    subjects: Sequence[Subject], settings: Settings, errors: List[Dict[str, Any]]
) -> List[Dict[str, Any]]:
    records = []
    for shape in settings.shapes:
        progress(f"memory {shape.name}: one subprocess per subject")
        for subject in subjects:
            if subject.error is not None:
                continue
            spec = {
                "subject": subject_spec(subject),
                "shape": asdict(shape),
                "batch": settings.batch,
                "hidden": settings.hidden,
                "threads": settings.threads,
                "malloc_tuning": settings.malloc_tuning,
            }
            try:
                result = run_probe("memory", spec)
            except Exception as error:
                errors.append(
                    {
                        "section": "memory",
                        "shape": shape.name,
                        "subject": subject.name,
                        "error": f"{type(error).__name__}: {error}",
                    }
                )
                continue
            records.append(
                {"subject": subject.name, "shape": shape.name, "steps": shape.steps, "batch": settings.batch, **result}
            )
    attach_ratios(records, "train_peak_mb", {"lstm": LSTM})
    return records


MALLOC_MODES = ("default", "env", "mallopt")


def measure_malloc(subjects: Sequence[Subject], settings: Settings, errors: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Training step medians with glibc's defaults, with the environment variables, and with the same
    settings applied by ``mallopt`` at start-up; each mode in its own process, modes alternating."""
    chosen = [s for s in subjects if s.error is None and (s.cell is None or s.family == "source")]
    shape = settings.shapes[0]
    spec = {
        "subjects": [subject_spec(s) for s in chosen],
        "shape": asdict(shape),
        "batch": settings.batch,
        "hidden": settings.hidden,
        "threads": settings.threads,
        "repeats": settings.repeats,
        "warmup": settings.warmup,
    }
    clean_env = {k: v for k, v in os.environ.items() if k not in MALLOC_ENV}
    rounds: Dict[str, List[Dict[str, float]]] = {mode: [] for mode in MALLOC_MODES}
    for round_index in range(2):
        for mode in MALLOC_MODES:
            progress(f"malloc round {round_index + 1}: {mode}")
            env = {**clean_env, **(MALLOC_ENV if mode == "env" else {})}
            try:
                rounds[mode].append(run_probe("timing", {**spec, "mode": mode}, env))
            except Exception as error:
                errors.append(
                    {
                        "section": "malloc",
                        "shape": shape.name,
                        "subject": mode,
                        "error": f"{type(error).__name__}: {error}",
                    }
                )
    medians = {
        mode: {name: median([r[name] for r in results if name in r]) for name in (results[0] if results else {})}
        for mode, results in rounds.items()
    }
    speedups = {
        mode: {
            name: medians["default"][name] / seconds
            for name, seconds in medians[mode].items()
            if name in medians["default"]
        }
        for mode in MALLOC_MODES
        if mode != "default"
    }
    return {"shape": shape.name, "env": MALLOC_ENV, "medians": medians, "speedup": speedups}
