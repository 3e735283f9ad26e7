"""The sections measured in this process: training step and inference (``train``, ``inference``), the
batch-1 streaming step (``stream``), scaling in T (``scaling``), achieved GFLOP/s (``flops``) and
SA-RNN's skipping inference (``skip``)."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch import nn

from .alone import attach_alone, measure_alone
from .subjects import GRU, LSTM, Shape, Subject
from .timing import (
    INPUT_SEED,
    Settings,
    attach_ratios,
    built_layers,
    inference_pass,
    interleaved_samples,
    median,
    progress,
    reference_time,
    stream_runs,
    train_step,
)


def measure_sequences(
    subjects: Sequence[Subject], settings: Settings, errors: List[Dict[str, Any]]
) -> Dict[str, List[Dict[str, Any]]]:
    """``train`` and ``inference`` records for every subject at every shape; nn.LSTM's and nn.GRU's also
    timed alone (``bench/alone.py``)."""
    out: Dict[str, List[Dict[str, Any]]] = {"train": [], "inference": []}
    for shape in settings.shapes:
        context = {"shape": shape.name}
        layers = built_layers(subjects, shape.input_size, settings.hidden, errors, context)
        x = shape.batch(settings.batch, seed=INPUT_SEED)
        for section, make in (("train", train_step), ("inference", inference_pass)):
            if section not in settings.sections:
                continue
            progress(f"{section} {shape.name} (T={shape.steps}, d={shape.input_size}): {len(layers)} subjects")
            runs = {name: make(layer, x) for name, layer in layers.items()}
            samples = interleaved_samples(
                runs, settings.repeats, settings.warmup, errors, {**context, "section": section}
            )
            records = [
                {
                    "subject": name,
                    "shape": shape.name,
                    "steps": shape.steps,
                    "input_size": shape.input_size,
                    "batch": settings.batch,
                    "samples": s,
                    "median": median(s),
                }
                for name, s in samples.items()
            ]
            alone = measure_alone(subjects, section, shape, settings, errors)
            for record in records:
                if record["subject"] in alone:
                    attach_alone(record, "median", alone[record["subject"]]["run"])
            out[section] += records
    for section in out:
        attach_ratios(out[section], "median", {"lstm": LSTM, "gru": GRU})
    return out


def measure_stream(
    subjects: Sequence[Subject], settings: Settings, errors: List[Dict[str, Any]]
) -> List[Dict[str, Any]]:
    """Seconds per streaming step at batch 1 (``cell_median``: bare cell, ``layer_median``: layer); nn.LSTM's
    and nn.GRU's also alone (``bench/alone.py``)."""
    records = []
    for shape in settings.shapes:
        context = {"shape": shape.name, "section": "stream"}
        progress(f"stream {shape.name} (d={shape.input_size})")
        layers = built_layers(subjects, shape.input_size, settings.hidden, errors, context)
        runs = {}
        for subject in subjects:
            if subject.name in layers:
                cell_loop, layer_loop = stream_runs(
                    subject, layers[subject.name], shape.input_size, settings.hidden, settings.stream_steps
                )
                runs[(subject.name, "cell")] = cell_loop
                runs[(subject.name, "layer")] = layer_loop
        samples = interleaved_samples(runs, settings.repeats, settings.warmup, errors, context)
        alone = measure_alone(subjects, "stream", shape, settings, errors)
        for subject in subjects:
            pair = samples.get((subject.name, "cell")), samples.get((subject.name, "layer"))
            if None in pair:
                continue
            per_step = [[s / settings.stream_steps for s in part] for part in pair]
            records.append(
                {
                    "subject": subject.name,
                    "shape": shape.name,
                    "input_size": shape.input_size,
                    "batch": 1,
                    "steps_per_sample": settings.stream_steps,
                    "cell_samples": per_step[0],
                    "cell_median": median(per_step[0]),
                    "layer_samples": per_step[1],
                    "layer_median": median(per_step[1]),
                }
            )
            for part in ("cell", "layer") if subject.name in alone else ():
                per_step = [s / settings.stream_steps for s in alone[subject.name][part]]
                attach_alone(records[-1], f"{part}_median", per_step)
    attach_ratios(records, "cell_median", {"lstmcell": LSTM})
    attach_ratios(records, "layer_median", {"lstm_layer": LSTM})
    return records


def measure_scaling(
    subjects: Sequence[Subject], settings: Settings, errors: List[Dict[str, Any]]
) -> List[Dict[str, Any]]:
    """Training step time at each length of ``settings.lengths``; the log-log slope tests linearity.
    nn.LSTM, the baseline of ``ratio_lstm``, is also timed alone at each length (``bench/alone.py``)."""
    shape = settings.scaling_shape
    context = {"shape": shape.name, "section": "scaling"}
    layers = built_layers(subjects, shape.input_size, settings.hidden, errors, context)
    medians: Dict[str, Dict[int, float]] = {name: {} for name in layers}
    alone: Dict[int, float] = {}
    for steps in settings.lengths:
        progress(f"scaling {shape.name} T={steps}")
        x = shape.batch(settings.batch, steps, seed=INPUT_SEED)
        runs = {name: train_step(layer, x) for name, layer in layers.items()}
        for name, s in interleaved_samples(
            runs, settings.repeats, settings.warmup, errors, {**context, "steps": steps}
        ).items():
            medians[name][steps] = median(s)
        lstm = [s for s in subjects if s.name == LSTM]
        probe = measure_alone(lstm, "train", replace(shape, steps=steps), settings, errors).get(LSTM)
        if probe is not None:
            alone[steps] = median(probe["run"])
    records = []
    for name, by_length in medians.items():
        lengths = [t for t in settings.lengths if t in by_length]
        if len(lengths) != len(settings.lengths):
            continue
        seconds = [by_length[t] for t in lengths]
        records.append(
            {
                "subject": name,
                "shape": shape.name,
                "input_size": shape.input_size,
                "batch": settings.batch,
                "lengths": lengths,
                "medians": seconds,
                "per_step": [s / t for s, t in zip(seconds, lengths)],
                "slope": loglog_slope(lengths, seconds),
            }
        )
    lstm = next((r for r in records if r["subject"] == LSTM), None)
    if lstm is not None and alone:
        lstm["alone_medians"] = [alone.get(t) for t in lstm["lengths"]]
        lstm["references"] = [
            "alone" if a is not None and a < m else "interleaved"
            for m, a in zip(lstm["medians"], lstm["alone_medians"])
        ]
    best = None
    if lstm is not None:  # nn.LSTM at its best: the faster of interleaved and alone at each length
        alone_medians = lstm.get("alone_medians") or [None] * len(lstm["medians"])
        best = [m if a is None else min(m, a) for m, a in zip(lstm["medians"], alone_medians)]
    for record in records:
        record["ratio_lstm"] = [s / b for s, b in zip(record["medians"], best)] if best else None
    return records


def loglog_slope(lengths: Sequence[int], seconds: Sequence[float]) -> Optional[float]:
    """Least-squares slope of log(seconds) against log(T): 1 for cost linear in T."""
    if len(lengths) < 2:
        return None
    xs, ys = [math.log(t) for t in lengths], [math.log(s) for s in seconds]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def forward_flops_per_sequence(subject: Subject, layer: nn.Module, shape: Shape) -> float:
    """FLOPs of one forward pass of one sequence: twice :func:`ltdrnn.flops.flops_per_sequence`.

    That function counts multiplications (matrix-vector products and elementwise products); a
    multiply-add is two FLOPs, as in the sgemm peak it is compared with. For nn.LSTM / nn.GRU it
    applies its generic rule (one multiplication per weight per step).
    """
    from ..flops import flops_per_sequence  # imported here: the benchmark's only use of it

    module = layer if subject.cell is None else layer.cells[0]
    return 2.0 * flops_per_sequence(module, shape.steps)


def flops_records(
    subjects: Sequence[Subject],
    settings: Settings,
    timings: Dict[str, List[Dict[str, Any]]],
    peak: float,
    errors: List[Dict[str, Any]],
) -> List[Dict[str, Any]]:
    """Achieved GFLOP/s: forward FLOPs x B per inference pass, 3x that per training step (the usual
    convention that a backward pass costs two forward passes); its fraction of the sgemm ``peak``; and
    the arithmetic-limit ratio ``ratio_lstm_flops`` = the subject's FLOPs / nn.LSTM's at the same
    shape: the time ratio to nn.LSTM the subject would have if both ran at the same GFLOP/s. nn.LSTM's and
    nn.GRU's rates come from their faster time, interleaved or alone (``train_reference`` says which)."""
    timed = {(s, r["subject"], r["shape"]): r for s in ("train", "inference") for r in timings[s]}
    records = []
    for shape in settings.shapes:
        layers = built_layers(
            subjects, shape.input_size, settings.hidden, errors, {"shape": shape.name, "section": "flops"}
        )
        for subject in subjects:
            if subject.name not in layers:
                continue
            try:
                flops = forward_flops_per_sequence(subject, layers[subject.name], shape)
            except Exception as error:
                errors.append(
                    {
                        "shape": shape.name,
                        "section": "flops",
                        "subject": subject.name,
                        "error": f"{type(error).__name__}: {error}",
                    }
                )
                continue
            record = {
                "subject": subject.name,
                "shape": shape.name,
                "steps": shape.steps,
                "batch": settings.batch,
                "forward_flops_per_sequence": flops,
            }
            for section, factor in (("train", 3.0), ("inference", 1.0)):
                timing = timed.get((section, subject.name, shape.name))
                seconds = None if timing is None else reference_time(timing, "median")
                if timing is not None and "reference" in timing:  # a baseline: its rate at its faster time
                    record[f"{section}_reference"] = timing["reference"]
                gflops = factor * flops * settings.batch / seconds / 1e9 if seconds else None
                record[f"{section}_gflops"] = gflops
                record[f"{section}_peak_fraction"] = gflops / peak if gflops and peak else None
            records.append(record)
    attach_ratios(records, "forward_flops_per_sequence", {"lstm_flops": LSTM})
    return records


# ---- SA-RNN's skipping inference ---------------------------------------------------------------------
SKIP_CELL = "sarnn"
SKIP_BACKEND, DENSE_BACKEND = "sparse", "cpp"


def force_skip_fraction(cell: nn.Module, fraction: float) -> None:
    """Make SA-RNN's coordinator skip a fixed set of ``round(fraction * H)`` units at every step.

    The coordinator weights become zero and its bias a large negative (skipped units) or positive
    (updated units) value, so ``u~`` is 0 or 1 whatever the input.
    """
    skipped = round(fraction * cell.hidden_size)
    with torch.no_grad():
        cell.coord_weight_ih.zero_()
        cell.coord_weight_hh.zero_()
        cell.coord_bias.fill_(10.0 / cell.slope)
        cell.coord_bias[:skipped] = -10.0 / cell.slope


def measure_skip(settings: Settings, errors: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Inference time of SA-RNN's skipping path (``sparse``) and its dense path (``cpp``) at forced
    skip fractions, against nn.GRU, at the benchmark batch and at batch 1."""
    from ..cells.registry import list_cells
    from ..layers import Recurrent

    if SKIP_CELL not in list_cells():
        errors.append({"section": "skip", "subject": SKIP_CELL, "error": "cell 'sarnn' is not registered"})
        return []
    records = []
    shape = settings.scaling_shape
    for batch in sorted({settings.batch, 1}, reverse=True):
        x = shape.batch(batch)
        gru = nn.GRU(shape.input_size, settings.hidden, batch_first=True)
        runs: Dict[Any, Callable[[], None]] = {(GRU, None, None): inference_pass(gru, x)}
        layers = {}
        for fraction in settings.skip_fractions:
            for backend in (SKIP_BACKEND, DENSE_BACKEND):
                try:
                    layer = Recurrent(SKIP_CELL, shape.input_size, settings.hidden, backend=backend)
                    force_skip_fraction(layer.cells[0], fraction)
                except Exception as error:
                    errors.append(
                        {
                            "section": "skip",
                            "subject": f"{SKIP_CELL}[backend={backend}]",
                            "error": f"{type(error).__name__}: {error}",
                        }
                    )
                    continue
                layers[(SKIP_CELL, backend, fraction)] = layer
                runs[(SKIP_CELL, backend, fraction)] = inference_pass(layer, x)
        progress(f"skip {shape.name} batch {batch}: {len(runs)} runs")
        samples = interleaved_samples(
            runs, settings.repeats, settings.warmup, errors, {"section": "skip", "shape": shape.name, "batch": batch}
        )
        gru_median = median(samples[(GRU, None, None)]) if (GRU, None, None) in samples else None
        for (name, backend, fraction), s in samples.items():
            if name == GRU:
                continue
            mask = layers[(name, backend, fraction)].cells[0].aux.get("update_mask")
            dense = samples.get((name, DENSE_BACKEND, fraction))
            records.append(
                {
                    "subject": f"{name}[backend={backend}]",
                    "backend": backend,
                    "shape": shape.name,
                    "steps": shape.steps,
                    "batch": batch,
                    "target_skip": fraction,
                    "measured_skip": None if mask is None else 1.0 - float(mask.mean()),
                    "samples": s,
                    "median": median(s),
                    "ratio_dense": median(s) / median(dense) if dense else None,
                    "ratio_gru": median(s) / gru_median if gru_median else None,
                }
            )
    return records
