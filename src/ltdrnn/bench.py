"""Speed benchmarks: ``ltdrnn bench`` (also ``python -m ltdrnn.bench``).

Every registry entry (and the named variants the speed targets need) is built through
:class:`ltdrnn.Recurrent` and measured against ``nn.LSTM`` and ``nn.GRU`` in the same process:

* ``train``: one training step, forward + backward of the mean of the outputs, batch first;
* ``inference``: one forward pass under ``torch.no_grad``;
* ``stream``: one streaming step at batch 1, ``cell(x_t, state)`` against ``nn.LSTMCell`` and
  ``Recurrent.step`` against a one-step ``nn.LSTM``;
* ``memory``: peak resident memory of inference and of a training step, each subject in a fresh
  subprocess (peak RSS above the process's own baseline);
* ``scaling``: training step time at several sequence lengths and the log-log slope (1 = linear);
* ``flops``: achieved GFLOP/s against the FLOPs the cell needs and the machine's sgemm peak;
* ``skip``: SA-RNN's skipping inference path at forced skip fractions;
* ``malloc``: the effect of glibc's malloc settings on training steps (subprocesses).

Timings are medians over ``repeats`` runs after ``warmup`` runs; within a section the subjects are
interleaved (each round runs every subject once, in a freshly shuffled order), so machine load
affects all of them alike and the ratios stay meaningful on a busy machine. The results go to a
JSON file and a markdown table with the issue's speed targets (see ``docs/benchmarks.md``).
"""
from __future__ import annotations

import argparse
import ast
import faulthandler
import inspect
import io
import json
import math
import os
import platform
import random
import re
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from .scan import MALLOC_ENV, tune_malloc

SCHEMA = "ltdrnn.bench/1"
LSTM, GRU = "nn.LSTM", "nn.GRU"
TORCH_SUBJECTS = (LSTM, GRU)
SECTIONS = ("train", "inference", "stream", "memory", "scaling", "flops", "skip", "malloc")
DEFAULT_SECTIONS = ("train", "inference", "stream", "memory", "scaling", "flops", "skip")



# ---- what is measured ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    """A benchmark input: ``steps`` (T) time steps of ``input_size`` (d) features per sequence."""
    name: str
    steps: int
    input_size: int
    one_hot: bool = False

    def batch(self, batch_size: int, steps: int | None = None) -> Tensor:
        """``(B, T, d)`` float input; one-hot symbols for the copy task."""
        steps = self.steps if steps is None else steps
        if self.one_hot:
            symbols = torch.randint(0, self.input_size, (batch_size, steps))
            return nn.functional.one_hot(symbols, self.input_size).float()
        return torch.randn(batch_size, steps, self.input_size)


SHAPES = {
    "pixel_mnist": Shape("pixel_mnist", 784, 1),
    "noisy_mnist": Shape("noisy_mnist", 1000, 28),
    "adding": Shape("adding", 750, 2),
    "copy": Shape("copy", 520, 10, one_hot=True),
}


@dataclass(frozen=True)
class Variant:
    """A named configuration of a registered cell that a speed target needs."""
    cell: str
    label: str
    options: Dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.cell}[{self.label}]"


VARIANTS = (
    Variant("srnn", "relu", {"activation": "relu"}),
    Variant("irnn", "K=1,lowrank", {"K": 1, "rank": 16}),
    Variant("tarnn", "K=1", {"K": 1}),
    Variant("tarnn", "K=5", {"K": 5}),
    Variant("sarnn", "gru", {"recurrence": "gru"}),
)


@dataclass(frozen=True)
class Target:
    """``measured(subject) / measured(baseline) <= limit`` in ``section``, at every measured shape."""
    label: str
    subject: str
    section: str
    baseline: str
    limit: float


TRAIN_TARGETS = (
    Target("SRNN (relu) training step", "srnn[relu]", "train", LSTM, 0.10),
    Target("iRNN K=1 low-rank training step", "irnn[K=1,lowrank]", "train", LSTM, 0.35),
    Target("MIST training step", "mist", "train", LSTM, 0.7),
    Target("TARNN K=1 training step", "tarnn[K=1]", "train", LSTM, 0.9),
    Target("TARNN K=5 training step", "tarnn[K=5]", "train", LSTM, 2.0),
    Target("SA-RNN (GRU) training step", "sarnn[gru]", "train", GRU, 1.3),
)


def stream_targets(source_cells: Iterable[str]) -> Tuple[Target, ...]:
    """Every source-paper cell's streaming step at batch 1 is no slower than nn.LSTMCell's."""
    return tuple(Target(f"{name} streaming step, batch 1", name, "stream", LSTM, 1.0)
                 for name in source_cells)


@dataclass
class Subject:
    """One thing to time: a registry cell with options (through Recurrent), or a torch.nn baseline.

    ``aliases`` are variant names whose options equal this subject's, so they share its numbers.
    """
    name: str
    cell: Optional[str]
    options: Dict[str, Any] = field(default_factory=dict)
    family: str = "torch"
    aliases: List[str] = field(default_factory=list)
    error: Optional[str] = None

    def layer(self, input_size: int, hidden_size: int) -> nn.Module:
        """A batch-first layer ``(B, T, d) -> ((B, T, H), state)``."""
        if self.cell is None:
            return getattr(nn, self.name.split(".")[1])(input_size, hidden_size, batch_first=True)
        from .layers import Recurrent
        return Recurrent(self.cell, input_size, hidden_size, batch_first=True, **self.options)

    def describe(self, input_size: int, hidden_size: int) -> Dict[str, Any]:
        """Registry metadata, parameter count and the scan implementation in use."""
        info: Dict[str, Any] = {"cell": self.cell, "options": self.options, "family": self.family,
                                "aliases": self.aliases, "error": self.error}
        if self.error is None:
            layer = self.layer(input_size, hidden_size)
            info["parameters"] = sum(p.numel() for p in layer.parameters())
            info["impl"] = layer.cells[0].resolved_impl() if self.cell else "torch"
        return info


def registry_subjects(cells: Sequence[str] | None, options: Dict[str, Dict[str, Any]]) -> List[Subject]:
    """Subjects for the chosen registry entries and the target variants, plus nn.LSTM and nn.GRU.

    ``cells`` holds registry names and variant names (None: every entry and every variant).
    ``options`` maps a cell or subject name to constructor options (``--option``); a variant's own
    options win over cell-wide ones. A variant whose options are the cell's defaults becomes an alias
    of the plain subject. A name that is neither a registry entry nor a variant raises ValueError; a
    variant whose cell is not registered, or an option its constructor does not take, is recorded in
    the subject's ``error`` instead, so one missing cell cannot stop the benchmark.
    """
    from .cells.registry import entry, list_cells
    known = list_cells()
    variants = {v.name: v for v in VARIANTS}
    wanted = list(known) + list(variants) if cells is None else list(dict.fromkeys(cells))
    unknown = [n for n in wanted if n not in known and n not in variants]
    if unknown:
        raise ValueError(f"--cells: unknown name(s) {', '.join(unknown)}; expected registry names "
                         f"({', '.join(known)}) or variants ({', '.join(variants)})")
    subjects: Dict[str, Subject] = {}
    # plain cells first, so that a variant equal to a plain cell becomes the alias, not the reverse
    for name in sorted(wanted, key=lambda n: n in variants):
        variant = variants.get(name)
        cell = variant.cell if variant else name
        if cell not in known:
            subjects[name] = Subject(name, cell, dict(variant.options), "source",
                                     error=f"cell {cell!r} is not registered")
            continue
        chosen = {**options.get(cell, {}), **(variant.options if variant else {}), **options.get(name, {})}
        subject = Subject(name, cell, chosen, entry(cell).family, error=unaccepted_options(cell, chosen))
        same = next((s for s in subjects.values() if s.cell == cell and s.error is None
                     and subject.error is None and same_options(cell, s.options, chosen)), None)
        if same is not None:
            same.aliases.append(name)
        else:
            subjects[name] = subject
    return [Subject(LSTM, None), Subject(GRU, None)] + list(subjects.values())


def constructor_defaults(cell: str) -> Dict[str, Any]:
    from .cells.registry import entry
    signature = inspect.signature(entry(cell).cls.__init__)
    return {k: p.default for k, p in signature.parameters.items() if p.default is not inspect.Parameter.empty}


def same_options(cell: str, a: Dict[str, Any], b: Dict[str, Any]) -> bool:
    defaults = constructor_defaults(cell)
    return {**defaults, **a} == {**defaults, **b}


def unaccepted_options(cell: str, options: Dict[str, Any]) -> Optional[str]:
    from .cells.registry import entry
    parameters = inspect.signature(entry(cell).cls.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return None
    missing = sorted(k for k in options if k not in parameters)
    if missing:
        return f"{cell} does not take option(s) {', '.join(missing)}"
    return None


# ---- timing --------------------------------------------------------------------------------------
def interleaved_samples(runs: Dict[Any, Callable[[], Any]], repeats: int, warmup: int,
                        errors: List[Dict[str, Any]], context: Dict[str, Any]) -> Dict[Any, List[float]]:
    """Seconds per call of each run: ``warmup`` untimed rounds, then ``repeats`` timed rounds.

    Each round calls every run once, in an order shuffled afresh each round (seeded, so runs are
    repeatable), so that neither a position in the round nor a neighbour favours any run when the
    load of the machine drifts. A run that raises is dropped and recorded in ``errors``.
    """
    alive = dict(runs)

    def call(name: Any) -> Optional[float]:
        start = time.perf_counter()
        try:
            alive[name]()
        except Exception as error:  # a broken cell must not stop the others
            subject = name if isinstance(name, str) else name[0]  # keys may be (subject, detail...)
            errors.append({**context, "subject": subject, "error": f"{type(error).__name__}: {error}"})
            del alive[name]
            return None
        return time.perf_counter() - start

    samples: Dict[Any, List[float]] = {name: [] for name in runs}
    for round_index in range(warmup + repeats):
        order = list(alive)
        random.Random(round_index).shuffle(order)
        for name in order:
            seconds = call(name)
            if seconds is not None and round_index >= warmup:
                samples[name].append(seconds)
    return {name: s for name, s in samples.items() if name in alive and s}


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def attach_ratios(records: List[Dict[str, Any]], key: str, baselines: Dict[str, str]) -> None:
    """Add ``ratio_<label>`` = ``record[key] / baseline's record[key]`` within each group of records
    that share everything but the subject (same section, shape, batch ...)."""
    def group(r: Dict[str, Any]) -> Tuple:
        return tuple(sorted((k, str(v)) for k, v in r.items() if k in ("shape", "steps", "batch", "input_size")))

    index = {(group(r), r["subject"]): r for r in records}
    for record in records:
        for label, baseline in baselines.items():
            reference = index.get((group(record), baseline))
            value = reference[key] if reference is not None else None
            record[f"ratio_{label}"] = record[key] / value if value else None


# ---- sections ----------------------------------------------------------------------------------------
@dataclass
class Settings:
    shapes: List[Shape]
    batch: int
    hidden: int
    repeats: int
    warmup: int
    lengths: List[int]
    scaling_shape: Shape
    stream_steps: int
    skip_fractions: List[float]
    sections: List[str]
    threads: int
    malloc_tuning: bool


def built_layers(subjects: Sequence[Subject], input_size: int, hidden: int, errors: List[Dict[str, Any]],
                 context: Dict[str, Any]) -> Dict[str, nn.Module]:
    layers = {}
    for subject in subjects:
        if subject.error is not None:
            continue
        try:
            layers[subject.name] = subject.layer(input_size, hidden)
        except Exception as error:
            errors.append({**context, "subject": subject.name, "error": f"{type(error).__name__}: {error}"})
    return layers


def train_step(layer: nn.Module, x: Tensor) -> Callable[[], None]:
    def run() -> None:
        layer.zero_grad(set_to_none=True)
        outputs, _ = layer(x)
        outputs.mean().backward()
    return run


def inference_pass(layer: nn.Module, x: Tensor) -> Callable[[], None]:
    def run() -> None:
        with torch.no_grad():
            layer(x)
    return run


def measure_sequences(subjects: Sequence[Subject], settings: Settings, errors: List[Dict[str, Any]]
                      ) -> Dict[str, List[Dict[str, Any]]]:
    """``train`` and ``inference`` records for every subject at every shape."""
    out: Dict[str, List[Dict[str, Any]]] = {"train": [], "inference": []}
    for shape in settings.shapes:
        context = {"shape": shape.name}
        layers = built_layers(subjects, shape.input_size, settings.hidden, errors, context)
        x = shape.batch(settings.batch)
        for section, make in (("train", train_step), ("inference", inference_pass)):
            if section not in settings.sections:
                continue
            progress(f"{section} {shape.name} (T={shape.steps}, d={shape.input_size}): {len(layers)} subjects")
            runs = {name: make(layer, x) for name, layer in layers.items()}
            samples = interleaved_samples(runs, settings.repeats, settings.warmup, errors,
                                          {**context, "section": section})
            out[section] += [{"subject": name, "shape": shape.name, "steps": shape.steps,
                              "input_size": shape.input_size, "batch": settings.batch,
                              "samples": s, "median": median(s)} for name, s in samples.items()]
    for section in out:
        attach_ratios(out[section], "median", {"lstm": LSTM, "gru": GRU})
    return out


def stream_runs(subject: Subject, layer: nn.Module, input_size: int, hidden: int, steps: int
                ) -> Tuple[Callable[[], None], Callable[[], None]]:
    """Two no-grad loops of ``steps`` batch-1 steps: the bare cell and the layer's ``step``.

    For nn.LSTM / nn.GRU the bare cell is nn.LSTMCell / nn.GRUCell and the layer step is the layer
    on a one-step sequence.
    """
    x_t = torch.randn(1, input_size)
    if subject.cell is None:
        cell = getattr(nn, subject.name.split(".")[1] + "Cell")(input_size, hidden)
        zero = torch.zeros(1, hidden)
        cell_state = (zero, zero) if subject.name == LSTM else zero

        def cell_loop() -> None:
            with torch.no_grad():
                state = cell_state
                for _ in range(steps):
                    state = cell(x_t, state)

        def layer_loop() -> None:
            with torch.no_grad():
                state = None
                x = x_t.unsqueeze(1)
                for _ in range(steps):
                    _, state = layer(x, state)
        return cell_loop, layer_loop

    cell = layer.cells[0]

    def cell_loop() -> None:
        with torch.no_grad():
            state = cell.init_state(1)
            for _ in range(steps):
                _, state = cell(x_t, state)

    def layer_loop() -> None:
        with torch.no_grad():
            state = None
            for _ in range(steps):
                _, state = layer.step(x_t, state)
    return cell_loop, layer_loop


def measure_stream(subjects: Sequence[Subject], settings: Settings, errors: List[Dict[str, Any]]
                   ) -> List[Dict[str, Any]]:
    """Seconds per streaming step at batch 1 (``cell_median``: bare cell, ``layer_median``: layer)."""
    records = []
    for shape in settings.shapes:
        context = {"shape": shape.name, "section": "stream"}
        progress(f"stream {shape.name} (d={shape.input_size})")
        layers = built_layers(subjects, shape.input_size, settings.hidden, errors, context)
        runs = {}
        for subject in subjects:
            if subject.name in layers:
                cell_loop, layer_loop = stream_runs(subject, layers[subject.name], shape.input_size,
                                                    settings.hidden, settings.stream_steps)
                runs[(subject.name, "cell")] = cell_loop
                runs[(subject.name, "layer")] = layer_loop
        samples = interleaved_samples(runs, settings.repeats, settings.warmup, errors, context)
        for subject in subjects:
            pair = samples.get((subject.name, "cell")), samples.get((subject.name, "layer"))
            if None in pair:
                continue
            per_step = [[s / settings.stream_steps for s in part] for part in pair]
            records.append({"subject": subject.name, "shape": shape.name, "input_size": shape.input_size,
                            "batch": 1, "steps_per_sample": settings.stream_steps,
                            "cell_samples": per_step[0], "cell_median": median(per_step[0]),
                            "layer_samples": per_step[1], "layer_median": median(per_step[1])})
    attach_ratios(records, "cell_median", {"lstmcell": LSTM})
    attach_ratios(records, "layer_median", {"lstm_layer": LSTM})
    return records


def measure_scaling(subjects: Sequence[Subject], settings: Settings, errors: List[Dict[str, Any]]
                    ) -> List[Dict[str, Any]]:
    """Training step time at each length of ``settings.lengths``; the log-log slope tests linearity."""
    shape = settings.scaling_shape
    context = {"shape": shape.name, "section": "scaling"}
    layers = built_layers(subjects, shape.input_size, settings.hidden, errors, context)
    medians: Dict[str, Dict[int, float]] = {name: {} for name in layers}
    for steps in settings.lengths:
        progress(f"scaling {shape.name} T={steps}")
        x = shape.batch(settings.batch, steps)
        runs = {name: train_step(layer, x) for name, layer in layers.items()}
        for name, s in interleaved_samples(runs, settings.repeats, settings.warmup, errors,
                                           {**context, "steps": steps}).items():
            medians[name][steps] = median(s)
    records = []
    for name, by_length in medians.items():
        lengths = [t for t in settings.lengths if t in by_length]
        if len(lengths) != len(settings.lengths):
            continue
        seconds = [by_length[t] for t in lengths]
        records.append({"subject": name, "shape": shape.name, "input_size": shape.input_size,
                        "batch": settings.batch, "lengths": lengths, "medians": seconds,
                        "per_step": [s / t for s, t in zip(seconds, lengths)],
                        "slope": loglog_slope(lengths, seconds)})
    lstm = next((r["medians"] for r in records if r["subject"] == LSTM), None)
    for record in records:
        record["ratio_lstm"] = [s / b for s, b in zip(record["medians"], lstm)] if lstm else None
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
    from .flops import flops_per_sequence  # imported here: the benchmark's only use of it
    module = layer if subject.cell is None else layer.cells[0]
    return 2.0 * flops_per_sequence(module, shape.steps)


def flops_records(subjects: Sequence[Subject], settings: Settings, timings: Dict[str, List[Dict[str, Any]]],
                  peak: float, errors: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Achieved GFLOP/s: forward FLOPs x B per inference pass, 3x that per training step (the usual
    convention that a backward pass costs two forward passes)."""
    medians = {(s, r["subject"], r["shape"]): r["median"] for s in ("train", "inference") for r in timings[s]}
    records = []
    for shape in settings.shapes:
        layers = built_layers(subjects, shape.input_size, settings.hidden, errors,
                              {"shape": shape.name, "section": "flops"})
        for subject in subjects:
            if subject.name not in layers:
                continue
            try:
                flops = forward_flops_per_sequence(subject, layers[subject.name], shape)
            except Exception as error:
                errors.append({"shape": shape.name, "section": "flops", "subject": subject.name,
                               "error": f"{type(error).__name__}: {error}"})
                continue
            record = {"subject": subject.name, "shape": shape.name, "steps": shape.steps,
                      "batch": settings.batch, "forward_flops_per_sequence": flops}
            for section, factor in (("train", 3.0), ("inference", 1.0)):
                seconds = medians.get((section, subject.name, shape.name))
                gflops = factor * flops * settings.batch / seconds / 1e9 if seconds else None
                record[f"{section}_gflops"] = gflops
                record[f"{section}_peak_fraction"] = gflops / peak if gflops and peak else None
            records.append(record)
    return records


# ---- SA-RNN's skipping inference ---------------------------------------------------------------------
SKIP_CELL = "sarnn"
SKIP_IMPL, DENSE_IMPL = "sparse", "fused"


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
    """Inference time of SA-RNN's skipping path (``sparse``) and its dense path (``fused``) at forced
    skip fractions, against nn.GRU, at the benchmark batch and at batch 1."""
    from .cells.registry import list_cells
    from .layers import Recurrent
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
            for impl in (SKIP_IMPL, DENSE_IMPL):
                try:
                    layer = Recurrent(SKIP_CELL, shape.input_size, settings.hidden, impl=impl)
                    force_skip_fraction(layer.cells[0], fraction)
                except Exception as error:
                    errors.append({"section": "skip", "subject": f"{SKIP_CELL}[impl={impl}]",
                                   "error": f"{type(error).__name__}: {error}"})
                    continue
                layers[(SKIP_CELL, impl, fraction)] = layer
                runs[(SKIP_CELL, impl, fraction)] = inference_pass(layer, x)
        progress(f"skip {shape.name} batch {batch}: {len(runs)} runs")
        samples = interleaved_samples(runs, settings.repeats, settings.warmup, errors,
                                      {"section": "skip", "shape": shape.name, "batch": batch})
        gru_median = median(samples[(GRU, None, None)]) if (GRU, None, None) in samples else None
        for (name, impl, fraction), s in samples.items():
            if name == GRU:
                continue
            mask = layers[(name, impl, fraction)].cells[0].aux.get("update_mask")
            dense = samples.get((name, DENSE_IMPL, fraction))
            records.append({"subject": f"{name}[impl={impl}]", "impl": impl, "shape": shape.name,
                            "steps": shape.steps, "batch": batch, "target_skip": fraction,
                            "measured_skip": None if mask is None else 1.0 - float(mask.mean()),
                            "samples": s, "median": median(s),
                            "ratio_dense": median(s) / median(dense) if dense else None,
                            "ratio_gru": median(s) / gru_median if gru_median else None})
    return records


# ---- memory and malloc: measured in fresh subprocesses ---------------------------------------------------
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
    samples = interleaved_samples({n: train_step(l, x) for n, l in layers.items()}, spec["repeats"],
                                  spec["warmup"], [], {})
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


def measure_memory(subjects: Sequence[Subject], settings: Settings, errors: List[Dict[str, Any]]
                   ) -> List[Dict[str, Any]]:
    records = []
    for shape in settings.shapes:
        progress(f"memory {shape.name}: one subprocess per subject")
        for subject in subjects:
            if subject.error is not None:
                continue
            spec = {"subject": subject_spec(subject), "shape": asdict(shape), "batch": settings.batch,
                    "hidden": settings.hidden, "threads": settings.threads,
                    "malloc_tuning": settings.malloc_tuning}
            try:
                result = run_probe("memory", spec)
            except Exception as error:
                errors.append({"section": "memory", "shape": shape.name, "subject": subject.name,
                               "error": f"{type(error).__name__}: {error}"})
                continue
            records.append({"subject": subject.name, "shape": shape.name, "steps": shape.steps,
                            "batch": settings.batch, **result})
    attach_ratios(records, "train_peak_mb", {"lstm": LSTM})
    return records


MALLOC_MODES = ("default", "env", "mallopt")


def measure_malloc(subjects: Sequence[Subject], settings: Settings, errors: List[Dict[str, Any]]
                   ) -> Dict[str, Any]:
    """Training step medians with glibc's defaults, with the environment variables, and with the same
    settings applied by ``mallopt`` at start-up; each mode in its own process, modes alternating."""
    chosen = [s for s in subjects if s.error is None and (s.cell is None or s.family == "source")]
    shape = settings.shapes[0]
    spec = {"subjects": [subject_spec(s) for s in chosen], "shape": asdict(shape), "batch": settings.batch,
            "hidden": settings.hidden, "threads": settings.threads, "repeats": settings.repeats,
            "warmup": settings.warmup}
    clean_env = {k: v for k, v in os.environ.items() if k not in MALLOC_ENV}
    rounds: Dict[str, List[Dict[str, float]]] = {mode: [] for mode in MALLOC_MODES}
    for round_index in range(2):
        for mode in MALLOC_MODES:
            progress(f"malloc round {round_index + 1}: {mode}")
            env = {**clean_env, **(MALLOC_ENV if mode == "env" else {})}
            try:
                rounds[mode].append(run_probe("timing", {**spec, "mode": mode}, env))
            except Exception as error:
                errors.append({"section": "malloc", "shape": shape.name, "subject": mode,
                               "error": f"{type(error).__name__}: {error}"})
    medians = {mode: {name: median([r[name] for r in results if name in r])
                      for name in (results[0] if results else {})} for mode, results in rounds.items()}
    speedups = {mode: {name: medians["default"][name] / seconds for name, seconds in medians[mode].items()
                       if name in medians["default"]} for mode in MALLOC_MODES if mode != "default"}
    return {"shape": shape.name, "env": MALLOC_ENV, "medians": medians, "speedup": speedups}


# ---- the machine -------------------------------------------------------------------------------------
def prepare_process(threads: int, malloc_tuning: bool) -> bool:
    """Settings every measuring process shares; returns whether the malloc tuning is active."""
    torch.set_flush_denormal(True)
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    tuned = tune_malloc() if malloc_tuning else False
    return tuned or all(os.environ.get(k) == v for k, v in MALLOC_ENV.items())


def matmul_peak(threads: int, size: int = 1024, repeats: int = 10) -> Dict[str, Any]:
    """The best sgemm rate of ``size x size`` float32 matrices in GFLOP/s (2 n^3 FLOPs per product)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = min(timed(lambda: torch.mm(a, b)) for _ in range(repeats))
    return {"gflops": 2.0 * size ** 3 / best / 1e9, "size": size, "threads": threads}


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def machine_description(threads: int, peak: Dict[str, Any], malloc_active: bool) -> Dict[str, Any]:
    return {"cpu": cpu_model(), "logical_cpus": os.cpu_count(), "torch_threads": threads,
            "torch": torch.__version__, "python": platform.python_version(), "platform": platform.platform(),
            "matmul_peak": peak, "flush_denormal": True, "malloc_tuning": malloc_active,
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# ---- targets and the report ----------------------------------------------------------------------------
def evaluate_targets(result: Dict[str, Any]) -> List[Dict[str, Any]]:
    """One row per target and shape: the measured ratio, the limit, pass or miss and by how much."""
    subjects = result["subjects"]
    sources = [name for name, info in subjects.items()
               if info["family"] == "source" and info["cell"] == name]
    alias = {a: name for name, info in subjects.items() for a in info["aliases"]}
    rows = []
    for target in TRAIN_TARGETS + stream_targets(sources):
        measured_as = alias.get(target.subject, target.subject)
        key = "cell_median" if target.section == "stream" else "median"
        records = {(r["subject"], r["shape"]): r for r in result.get(target.section, [])}
        for shape in result["settings"]["shapes"]:
            row = {"target": target.label, "subject": target.subject, "measured_as": measured_as,
                   "section": target.section, "baseline": target.baseline, "shape": shape,
                   "limit": target.limit, "measured": None, "passed": None, "miss_percent": None,
                   "note": None}
            mine, base = records.get((measured_as, shape)), records.get((target.baseline, shape))
            if target.section not in result["settings"]["sections"]:
                row["note"] = f"section {target.section!r} not run"
            elif mine is None or base is None:
                missing = measured_as if mine is None else target.baseline
                row["note"] = f"{missing} not measured: " + subject_problem(result, missing, shape)
            else:
                row["measured"] = mine[key] / base[key]
                row["passed"] = row["measured"] <= target.limit
                if not row["passed"]:
                    row["miss_percent"] = 100.0 * (row["measured"] / target.limit - 1.0)
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
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines + [""]


def subject_label(name: str, info: Dict[str, Any]) -> str:
    return name + (f" (= {', '.join(info['aliases'])})" if info.get("aliases") else "")


def render_markdown(result: Dict[str, Any]) -> str:
    """The report: machine, command, targets with pass/miss, then one table per section."""
    machine, settings = result["machine"], result["settings"]
    subjects = result["subjects"]
    lines = [f"# ltdrnn bench — {result['created']}", "",
             f"Command: `{result['command']}`", "",
             f"Machine: {machine['cpu']}, {machine['logical_cpus']} logical CPUs, torch {machine['torch']}, "
             f"{machine['torch_threads']} torch thread(s), sgemm peak "
             f"{machine['matmul_peak']['gflops']:.1f} GFLOP/s, malloc tuning "
             f"{'on' if machine['malloc_tuning'] else 'off'}, load average at start "
             f"{', '.join(f'{v:.1f}' for v in machine['load_average'] or [])}.", "",
             f"Batch {settings['batch']}, hidden {settings['hidden']}, medians of {settings['repeats']} runs "
             f"after {settings['warmup']} warm-up run(s), subjects interleaved.", ""]
    lines += ["## Targets", ""]
    lines += table(["target", "shape", "measured", "limit", "result"],
                   ([r["target"] + ("" if r["subject"] == r["measured_as"] else f" ({r['measured_as']})"),
                     r["shape"], fmt(r["measured"]), f"<= {r['limit']:g} x {r['baseline']}"
                     + ("Cell" if r["section"] == "stream" else ""), target_verdict(r)]
                    for r in result["targets"]))
    for section, title in (("train", "Training step (forward + backward)"),
                           ("inference", "Inference (no_grad forward)")):
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
            lines += table(["subject", "impl", "params", "ms", "x nn.LSTM", "x nn.GRU", "GFLOP/s",
                            "% peak", "peak MB"],
                           ([subject_label(r["subject"], subjects[r["subject"]]),
                             subjects[r["subject"]].get("impl", "-"), subjects[r["subject"]].get("parameters", "-"),
                             ms(r["median"]), fmt(r["ratio_lstm"]), fmt(r["ratio_gru"]),
                             fmt(flops.get((r["subject"], shape), {}).get(f"{section}_gflops")),
                             percent(flops.get((r["subject"], shape), {}).get(f"{section}_peak_fraction")),
                             fmt(memory.get((r["subject"], shape), {}).get(peak_key), 4)]
                            for r in sorted(rows, key=lambda r: r["median"])))
    if result.get("stream"):
        lines += ["## Streaming step, batch 1 (µs per step)", ""]
        lines += table(["subject", "shape", "cell µs", "x nn.LSTMCell", "layer.step µs", "x nn.LSTM step"],
                       ([subject_label(r["subject"], subjects[r["subject"]]), r["shape"], us(r["cell_median"]),
                         fmt(r["ratio_lstmcell"]), us(r["layer_median"]), fmt(r["ratio_lstm_layer"])]
                        for r in result["stream"]))
    if result.get("scaling"):
        lengths = settings["lengths"]
        lines += [f"## Scaling in T (training step ms, {settings['scaling_shape']}; slope 1 = linear)", ""]
        lines += table(["subject"] + [f"ms T={t}" for t in lengths] + [f"µs/step T={t}" for t in lengths]
                       + [f"x nn.LSTM T={t}" for t in lengths] + ["log-log slope"],
                       ([subject_label(r["subject"], subjects[r["subject"]])] + [ms(s) for s in r["medians"]]
                        + [us(s) for s in r["per_step"]] + [fmt(v) for v in r["ratio_lstm"] or [None] * len(lengths)]
                        + [fmt(r["slope"])] for r in result["scaling"]))
    if result.get("skip"):
        lines += [f"## SA-RNN skipping inference ({settings['scaling_shape']})", ""]
        lines += table(["impl", "batch", "skip (forced)", "skip (measured)", "ms", "x dense (fused)", "x nn.GRU"],
                       ([r["impl"], r["batch"], f"{r['target_skip']:g}", fmt(r["measured_skip"]), ms(r["median"]),
                         fmt(r["ratio_dense"]), fmt(r["ratio_gru"])]
                        for r in sorted(result["skip"], key=lambda r: (-r["batch"], r["impl"], r["target_skip"]))))
    if result.get("malloc"):
        malloc = result["malloc"]
        lines += [f"## glibc malloc settings ({malloc['shape']}; speed-up of the training step over defaults)", ""]
        names = sorted(malloc["medians"].get("default", {}))
        lines += table(["subject", "default ms"] + [f"x faster: {m}" for m in malloc["speedup"]],
                       ([n, ms(malloc["medians"]["default"][n])]
                        + [fmt(malloc["speedup"][m].get(n)) for m in malloc["speedup"]] for n in names))
    if result["errors"]:
        lines += ["## Not measured", ""]
        lines += table(["subject", "section", "shape", "error"],
                       ([e.get("subject"), e.get("section", "-"), e.get("shape", "-"), e["error"]]
                        for e in result["errors"]))
    return "\n".join(lines)


def target_verdict(row: Dict[str, Any]) -> str:
    if row["passed"] is None:
        return f"not measured ({row['note']})"
    if row["passed"]:
        return "pass"
    return f"**miss** by {row['miss_percent']:.0f}% ({row['measured'] / row['limit']:.2f}x the limit)"


def percent(fraction: Optional[float]) -> str:
    return "-" if fraction is None else f"{100 * fraction:.2g}%"


# ---- command line --------------------------------------------------------------------------------------
QUICK = {"shapes": "adding", "repeats": 3, "warmup": 2, "lengths": "250,1000", "skip_fractions": "0,0.5,0.9"}
FULL = {"shapes": ",".join(SHAPES), "repeats": 5, "warmup": 2, "lengths": "250,1000,4000",
        "skip_fractions": "0,0.25,0.5,0.75,0.9"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ltdrnn bench", description="Speed of every registered cell against nn.LSTM / nn.GRU: training "
        "step, inference, streaming latency, memory, scaling in T, achieved GFLOP/s, SA-RNN skipping.")
    parser.add_argument("--cells", help="comma-separated registry names and/or variants "
                        f"({', '.join(v.name for v in VARIANTS)}); default: all. nn.LSTM and nn.GRU always run")
    parser.add_argument("--shapes", help="comma-separated shapes: " + ", ".join(
        f"{s.name} (T={s.steps}, d={s.input_size})" for s in SHAPES.values())
        + ", or TxD (e.g. 100x3); default: all four (--quick: adding)")
    parser.add_argument("--quick", action="store_true", help="fast subset: adding shape, 3 repeats, 2 warm-ups, "
                        "T in 250,1000 for scaling, skip fractions 0,0.5,0.9")
    parser.add_argument("--batch", type=int, default=128, help="batch size B (default 128)")
    parser.add_argument("--hidden", type=int, default=128, help="hidden size H (default 128)")
    parser.add_argument("--repeats", type=int, help="timed runs per measurement (default 5; --quick 3)")
    parser.add_argument("--warmup", type=int, help="untimed runs first (default 2, also with --quick)")
    parser.add_argument("--lengths", help="T values of the scaling section (default 250,1000,4000)")
    parser.add_argument("--scaling-shape", default="adding", help="shape whose d the scaling and skip sections "
                        "use (default adding)")
    parser.add_argument("--stream-steps", type=int, default=100, help="steps per streaming sample (default 100)")
    parser.add_argument("--skip-fractions", help="SA-RNN forced skip fractions (default 0,0.25,0.5,0.75,0.9)")
    parser.add_argument("--sections", default=",".join(DEFAULT_SECTIONS),
                        help=f"comma-separated subset of {', '.join(SECTIONS)} (default: all but malloc)")
    parser.add_argument("--option", action="append", default=[], metavar="NAME.KEY=VALUE",
                        help="constructor option for a cell (all its subjects) or one subject, e.g. "
                        "--option tarnn.K=1 or --option 'tarnn[K=1].impl=reference'; repeatable")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help=f"torch threads (default {torch.get_num_threads()})")
    parser.add_argument("--no-malloc-tuning", dest="malloc_tuning", action="store_false",
                        help="keep glibc's default malloc settings (default: apply MALLOC_MMAP_MAX_=0 and a "
                        "large MALLOC_TRIM_THRESHOLD_ through mallopt at start-up)")
    parser.add_argument("--out", default="bench.json", help="JSON output path (default bench.json)")
    parser.add_argument("--markdown", help="markdown output path (default: printed only)")
    parser.add_argument("--render", metavar="JSON", help="measure nothing: render the markdown of an earlier "
                        "run's JSON (with --markdown to write it)")
    return parser


def parse_options(items: Sequence[str]) -> Dict[str, Dict[str, Any]]:
    """``["tarnn.K=1", "tarnn[K=1].impl=reference"]`` -> ``{"tarnn": {"K": 1}, "tarnn[K=1]": {...}}``."""
    options: Dict[str, Dict[str, Any]] = {}
    for item in items:
        match = re.fullmatch(r"(?P<name>[\w.]+?(\[[^\]]*\])?)\.(?P<key>\w+)=(?P<value>.*)", item)
        if match is None:
            raise ValueError(f"--option: expected NAME.KEY=VALUE (e.g. tarnn.K=1), got {item!r}")
        options.setdefault(match["name"], {})[match["key"]] = literal(match["value"])
    return options


def split_names(text: str) -> List[str]:
    """``"srnn,irnn[K=1,lowrank]"`` -> ``["srnn", "irnn[K=1,lowrank]"]``: commas inside brackets stay."""
    return [name.strip() for name in re.split(r",(?![^\[]*\])", text) if name.strip()]


def literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_shapes(text: str) -> List[Shape]:
    shapes = []
    for name in filter(None, (part.strip() for part in text.split(","))):
        custom = re.fullmatch(r"(\d+)x(\d+)", name)
        if name in SHAPES:
            shapes.append(SHAPES[name])
        elif custom:
            shapes.append(Shape(name, int(custom[1]), int(custom[2])))
        else:
            raise ValueError(f"--shapes: unknown shape {name!r}; expected {', '.join(SHAPES)} or TxD (e.g. 100x3)")
    return shapes


def int_list(flag: str, text: str) -> List[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise ValueError(f"{flag}: expected positive integers, got {text!r}")
    return values


def fraction_list(text: str) -> List[float]:
    values = [float(v) for v in text.split(",") if v.strip()]
    if not values or not all(0.0 <= v <= 1.0 for v in values):
        raise ValueError(f"--skip-fractions: expected numbers in [0, 1], got {text!r}")
    return values


def settings_from(args: argparse.Namespace) -> Settings:
    preset = QUICK if args.quick else FULL
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        raise ValueError(f"--sections: unknown {', '.join(unknown)}; expected some of {', '.join(SECTIONS)}")
    for flag, value in (("--batch", args.batch), ("--hidden", args.hidden), ("--threads", args.threads),
                        ("--stream-steps", args.stream_steps)):
        if value <= 0:
            raise ValueError(f"{flag}: expected a positive integer, got {value}")
    repeats = preset["repeats"] if args.repeats is None else args.repeats
    warmup = preset["warmup"] if args.warmup is None else args.warmup
    if repeats <= 0 or warmup < 0:
        raise ValueError(f"--repeats/--warmup: expected repeats >= 1 and warmup >= 0, got {repeats}, {warmup}")
    return Settings(shapes=parse_shapes(args.shapes or preset["shapes"]), batch=args.batch, hidden=args.hidden,
                    repeats=repeats, warmup=warmup, lengths=int_list("--lengths", args.lengths or preset["lengths"]),
                    scaling_shape=parse_shapes(args.scaling_shape)[0], stream_steps=args.stream_steps,
                    skip_fractions=fraction_list(args.skip_fractions or preset["skip_fractions"]),
                    sections=sections, threads=args.threads, malloc_tuning=args.malloc_tuning)


def run(settings: Settings, subjects: Sequence[Subject], command: str) -> Dict[str, Any]:
    """Every selected section; returns the JSON-ready result (see docs/benchmarks.md for the schema)."""
    malloc_active = prepare_process(settings.threads, settings.malloc_tuning)
    errors: List[Dict[str, Any]] = []
    peak = matmul_peak(settings.threads)
    described = {}
    for subject in subjects:
        try:
            described[subject.name] = subject.describe(settings.shapes[0].input_size, settings.hidden)
        except Exception as error:
            subject.error = f"{type(error).__name__}: {error}"
            described[subject.name] = {"cell": subject.cell, "options": subject.options, "family": subject.family,
                                       "aliases": subject.aliases, "error": subject.error}
    result: Dict[str, Any] = {
        "schema": SCHEMA, "created": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command, "machine": machine_description(settings.threads, peak, malloc_active),
        "settings": {**asdict(settings), "shapes": [s.name for s in settings.shapes],
                     "shape_sizes": {s.name: asdict(s) for s in settings.shapes},
                     "scaling_shape": settings.scaling_shape.name},
        "subjects": described, "errors": errors}
    timings = measure_sequences(subjects, settings, errors)
    result.update(timings)
    if "stream" in settings.sections:
        result["stream"] = measure_stream(subjects, settings, errors)
    if "memory" in settings.sections:
        result["memory"] = measure_memory(subjects, settings, errors)
    if "scaling" in settings.sections:
        result["scaling"] = measure_scaling(subjects, settings, errors)
    if "flops" in settings.sections:
        result["flops"] = flops_records(subjects, settings, timings, peak["gflops"], errors)
    if "skip" in settings.sections:
        result["skip"] = measure_skip(settings, errors)
    if "malloc" in settings.sections:
        result["malloc"] = measure_malloc(subjects, settings, errors)
    for subject in subjects:
        if subject.error is not None:
            errors.append({"subject": subject.name, "section": "all", "shape": "-", "error": subject.error})
    result["targets"] = evaluate_targets(result)
    return result


def enable_crash_traceback() -> None:
    """A crash inside a cell's native kernel cannot be caught; at least print where it happened."""
    try:
        faulthandler.enable()
    except io.UnsupportedOperation:  # stderr without a file descriptor (captured, e.g. by pytest)
        pass


def progress(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for kind, probe in (("memory", memory_probe), ("timing", timing_probe)):
        if argv[:1] == [f"--{kind}-probe"]:
            print(json.dumps(probe(json.loads(argv[1]))))
            return 0
    parser = build_parser()
    args = parser.parse_args(argv)
    enable_crash_traceback()
    if args.render:
        with open(args.render) as handle:
            result = json.load(handle)
    else:
        try:
            settings = settings_from(args)
            cells = split_names(args.cells) if args.cells else None
            subjects = registry_subjects(cells, parse_options(args.option))
        except ValueError as error:
            parser.error(str(error))
        result = run(settings, subjects, "ltdrnn bench " + shlex.join(argv))
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)
    markdown = render_markdown(result)
    if args.markdown:
        with open(args.markdown, "w") as handle:
            handle.write(markdown + "\n")
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
