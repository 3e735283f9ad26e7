"""How the benchmark times: interleaved rounds, medians, ratios against a baseline, the settings of a
run, the steps it times, and the process settings and machine description every measurement shares."""

from __future__ import annotations

import os
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from ..ops.memory import MALLOC_ENV, tune_malloc
from .subjects import LSTM, Shape, Subject


def interleaved_samples(
    runs: Dict[Any, Callable[[], Any]], repeats: int, warmup: int, errors: List[Dict[str, Any]], context: Dict[str, Any]
) -> Dict[Any, List[float]]:
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


#: Per timed key of a baseline's record, the key naming the time its ratios divide by (``alone`` or
#: ``interleaved``; see :func:`reference_time`); ``*_gflops`` of the flops records follow the time they came from.
REFERENCE_FIELDS = {
    "median": "reference",
    "cell_median": "cell_reference",
    "layer_median": "layer_reference",
    "train_gflops": "train_reference",
    "inference_gflops": "inference_reference",
}


def reference_time(record: Dict[str, Any], key: str) -> Optional[float]:
    """A baseline's value of ``key`` at its best: the faster of ``record[key]`` (interleaved with the other
    subjects) and ``record["alone_" + key]`` (alone in a fresh process, ``bench/alone.py``) when measured."""
    alone = record.get("alone_" + key)
    return record[key] if alone is None or record[key] is None else min(record[key], alone)


def attach_ratios(records: List[Dict[str, Any]], key: str, baselines: Dict[str, str]) -> None:
    """Add ``ratio_<label>`` = ``record[key] / baseline's reference_time(key)`` within each group of records
    that share everything but the subject (same section, shape, batch ...)."""

    def group(r: Dict[str, Any]) -> Tuple:
        return tuple(sorted((k, str(v)) for k, v in r.items() if k in ("shape", "steps", "batch", "input_size")))

    index = {(group(r), r["subject"]): r for r in records}
    for record in records:
        for label, baseline in baselines.items():
            reference = index.get((group(record), baseline))
            value = reference_time(reference, key) if reference is not None else None
            record[f"ratio_{label}"] = record[key] / value if value else None


# ---- the settings and the timed steps -------------------------------------------------------------
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
    alone_reference: bool = True


#: The seed of every timed input, here and in the fresh processes that time the references alone.
INPUT_SEED = 0


def built_layers(
    subjects: Sequence[Subject], input_size: int, hidden: int, errors: List[Dict[str, Any]], context: Dict[str, Any]
) -> Dict[str, nn.Module]:
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


def stream_runs(
    subject: Subject, layer: nn.Module, input_size: int, hidden: int, steps: int
) -> Tuple[Callable[[], None], Callable[[], None]]:
    """Two no-grad loops of ``steps`` batch-1 steps: the bare cell and the layer's ``step``.

    For nn.LSTM / nn.GRU the bare cell is nn.LSTMCell / nn.GRUCell and the layer step is the layer
    on a one-step sequence.
    """
    x_t = torch.randn(1, input_size, generator=torch.Generator().manual_seed(INPUT_SEED))
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
    return {"gflops": 2.0 * size**3 / best / 1e9, "size": size, "threads": threads}


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def machine_description(threads: int, peak: Dict[str, Any], malloc_active: bool) -> Dict[str, Any]:
    from .host import host_description  # the ISA flags and library versions (bench/host.py)

    return {
        "cpu": cpu_model(),
        **host_description(),
        "logical_cpus": os.cpu_count(),
        "torch_threads": threads,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "matmul_peak": peak,
        "flush_denormal": True,
        "malloc_tuning": malloc_active,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def progress(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
