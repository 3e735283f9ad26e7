"""``ltdrnn bench --device cuda``: the source cells' Triton paths against cuDNN's nn.LSTM and nn.GRU and against
the cells' own PyTorch loops, on one GPU.

Sections, in the order they run (a time budget stops the run between measurements, never inside one):

* ``train`` / ``inference``: one training step (forward + backward of the outputs' mean, batch first) and one
  forward pass under ``torch.no_grad``, at the pixel-MNIST shape (T = 784, d = 1, B = 128) for every hidden size
  of ``--hidden-sizes`` (default 128, 256, 512), with each step's peak GPU memory above the inputs and weights
  (``torch.cuda.max_memory_allocated``). Subjects: nn.LSTM and nn.GRU (cuDNN), and each source cell's
  ``backend="triton"``; each cell's own PyTorch loop (``backend="torch"``) at the hidden sizes of
  ``--loop-hidden-sizes`` (default 128: a loop over 784 steps launches thousands of kernels per step);
* ``amp``: the training step under ``torch.autocast("cuda", torch.bfloat16)`` at the first hidden size;
* ``stream``: ``Recurrent.step`` at batch 1, with the captured CUDA graph and eagerly, against a one-step
  ``nn.LSTM`` and ``nn.LSTMCell``.

Times are medians of ``--repeats`` runs after ``--warmup`` runs, each run closed by ``torch.cuda.synchronize``;
``first_call`` is the first warm-up run (it includes Triton's compilation of that kernel). Targets:
each Triton training step at least 10x faster than the cell's own loop, and no slower than cuDNN nn.LSTM for
SRNN, iRNN, MIST, TARNN K = 1 and SA-RNN, at H = 128.
"""

from __future__ import annotations

import platform
import statistics
import time
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import nn

from ..results import markdown_table
from .runner import int_list, parse_shapes, split_names

SCHEMA = "ltdrnn.bench.gpu/2"
#: (subject name, registry cell, options): the configurations the GPU targets name
CELLS = (
    ("srnn[relu]", "srnn", {"activation": "relu"}),
    ("irnn[K=1,lowrank]", "irnn", {"K": 1, "rank": 16}),
    ("mist", "mist", {}),
    ("tarnn[K=1]", "tarnn", {"K": 1}),
    ("tarnn[K=5]", "tarnn", {"K": 5}),
    ("sarnn[gru]", "sarnn", {"recurrence": "gru"}),
)
#: subjects whose Triton training step must be no slower than nn.LSTM's (their arithmetic per step is at most LSTM's)
AT_MOST_LSTM = ("srnn[relu]", "irnn[K=1,lowrank]", "mist", "tarnn[K=1]", "sarnn[gru]")
LOOP_SPEEDUP = 10.0
#: where the run happens; the tests run the same machinery on the CPU, with Triton's interpreter
DEVICE = "cuda"


def synchronize() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def gpu_settings(args: Any) -> Dict[str, Any]:
    """The GPU run's settings from the command's options (``ltdrnn bench --device cuda``); ValueError names
    the option at fault."""
    if DEVICE == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is visible to torch (torch.cuda.is_available() is False)")
    shape = parse_shapes(args.shapes or "pixel_mnist")[0]
    if args.batch <= 0:
        raise ValueError(f"--batch: expected a positive integer, got {args.batch}")
    if args.cells:
        wanted = split_names(args.cells)
        unknown = [n for n in wanted if n not in {name for name, _, _ in CELLS}]
        if unknown:
            raise ValueError(f"--cells: with --device cuda expected some of {', '.join(n for n, _, _ in CELLS)}")
    else:
        wanted = [name for name, _, _ in CELLS]
    return {
        "shape": {"name": shape.name, "steps": shape.steps, "input_size": shape.input_size},
        "batch": args.batch,
        "hidden_sizes": int_list("--hidden-sizes", args.hidden_sizes),
        "loop_hidden_sizes": int_list("--loop-hidden-sizes", args.loop_hidden_sizes),
        "repeats": 3 if args.repeats is None else args.repeats,
        "warmup": 1 if args.warmup is None else max(1, args.warmup),
        "stream_steps": args.stream_steps,
        "time_budget": args.time_budget,
        "cells": wanted,
        "tf32": bool(getattr(args, "tf32", False)),
    }


def device_description() -> Dict[str, Any]:
    """The card and the software, for the JSON."""
    if DEVICE != "cuda":
        return {"name": DEVICE, "capability": [], "memory_gib": None, "cuda": None, "cudnn": None,
                "torch": torch.__version__, "triton": None, "tf32_matmul": None, "tf32_cudnn": None}  # fmt: skip
    properties = torch.cuda.get_device_properties(0)
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "name": torch.cuda.get_device_name(0),
        "capability": list(torch.cuda.get_device_capability(0)),
        "memory_gib": round(properties.total_memory / 2**30, 1),
        "multiprocessors": properties.multi_processor_count,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "torch": torch.__version__,
        "triton": triton_version,
        "python": platform.python_version(),
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
    }


# ---- timing ---------------------------------------------------------------------------------------------
def timed_cuda(run: Callable[[], Any], repeats: int, warmup: int) -> Dict[str, Any]:
    """Median seconds of ``repeats`` synchronised calls after ``warmup``; the first call's seconds; peak memory."""
    first = None
    for index in range(warmup):
        synchronize()
        start = time.perf_counter()
        run()
        synchronize()
        if index == 0:
            first = time.perf_counter() - start
    samples = []
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        run()
        synchronize()
        samples.append(time.perf_counter() - start)
    return {"median": statistics.median(samples), "samples": samples, "first_call": first, "peak_bytes": peak(run)}


def peak(run: Callable[[], Any]) -> Optional[int]:
    """Bytes allocated at the peak of one more call, above what was allocated before it (None off CUDA)."""
    if DEVICE != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    run()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def layer_for(subject: str, cell: Optional[str], options: Dict[str, Any], input_size: int, hidden: int):
    if cell is None:
        return getattr(nn, subject.split(".")[1])(input_size, hidden, batch_first=True).to(DEVICE)
    from ..layers import Recurrent

    return Recurrent(cell, input_size, hidden, batch_first=True, **options).to(DEVICE)


def training_step(layer, x, amp: bool = False) -> Callable[[], None]:
    def run() -> None:
        layer.zero_grad(set_to_none=True)
        with torch.autocast(DEVICE, torch.bfloat16, enabled=amp):
            outputs, _ = layer(x)
        outputs.float().mean().backward()

    return run


def inference_pass(layer, x) -> Callable[[], None]:
    def run() -> None:
        with torch.no_grad():
            layer(x)

    return run


def stream_loop(layer, input_size: int, steps: int, cell_level: bool) -> Callable[[], None]:
    """``steps`` streamed steps at batch 1 (``cell_level``: an ``nn.LSTMCell``-style cell)."""
    xs = torch.randn(steps, 1, input_size, device=DEVICE)

    def run() -> None:
        with torch.no_grad():
            state = None
            for x in xs:
                if cell_level:
                    state = layer(x, state)
                elif isinstance(layer, nn.LSTM):
                    _, state = layer(x.unsqueeze(1), state)
                else:
                    _, state = layer.step(x, state)

    return run


def graphed_only(layer, run: Callable[[], None]) -> Callable[[], None]:
    """``run``, failing where the layer's capture failed: a "graph" row must not time the eager fallback."""

    def checked() -> None:
        run()
        if layer.__dict__.get("_graph_failed"):
            raise RuntimeError("the CUDA graph capture failed, so the layer streamed eagerly")

    return checked


# ---- the run ---------------------------------------------------------------------------------------------
class Budget:
    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> bool:
        return time.monotonic() < self.deadline


def subjects_at(settings: Dict[str, Any], hidden: int) -> List[Tuple[str, Optional[str], Dict[str, Any], str]]:
    """``(subject, cell, options, path)`` for one hidden size: cuDNN first, then Triton, then the loops."""
    chosen = [c for c in CELLS if c[0] in settings["cells"]]
    rows = [("nn.LSTM", None, {}, "cudnn"), ("nn.GRU", None, {}, "cudnn")]
    rows += [(name, cell, {**options, "backend": "triton"}, "triton") for name, cell, options in chosen]
    if hidden in settings["loop_hidden_sizes"]:
        rows += [(name, cell, {**options, "backend": "torch"}, "loop") for name, cell, options in chosen]
    return rows


def measure(result, section, subject, path, hidden, budget, errors, make_run, repeats, warmup) -> None:
    if not budget.left():
        errors.append({"section": section, "subject": subject, "path": path, "hidden": hidden, "error": "time budget"})
        return
    try:
        timing = timed_cuda(make_run(), repeats, warmup)
    except Exception as error:  # one subject's failure (a compile error, out of memory) must not stop the rest
        errors.append({"section": section, "subject": subject, "path": path, "hidden": hidden,
                       "error": f"{type(error).__name__}: {str(error)[:500]}"})  # fmt: skip
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
        return
    result.setdefault(section, []).append({"subject": subject, "path": path, "hidden": hidden, **timing})
    print(f"[bench {DEVICE}] {section} H={hidden} {subject} ({path}): {timing['median'] * 1e3:.3f} ms", flush=True)


def run_gpu(settings: Dict[str, Any], command: str) -> Dict[str, Any]:
    torch.manual_seed(0)
    if settings["tf32"]:  # float32 products on TF32 tensor cores, as cuDNN's RNNs use them by default
        torch.backends.cuda.matmul.allow_tf32 = True
    budget, errors = Budget(settings["time_budget"]), []  # type: ignore[var-annotated]
    result: Dict[str, Any] = {
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "device": device_description(),
        "settings": settings,
        "errors": errors,
    }
    shape, batch = settings["shape"], settings["batch"]
    x = torch.randn(batch, shape["steps"], shape["input_size"], device=DEVICE)
    for index, hidden in enumerate(settings["hidden_sizes"]):
        for subject, cell, options, path in subjects_at(settings, hidden):
            sections = ("train", "inference", "amp") if index == 0 and path != "loop" else ("train", "inference")
            measure_subject(result, subject, cell, options, path, hidden, x, sections, budget)
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
        if index == 0:
            measure_streaming(result, settings, budget)
    result["targets"] = evaluate(result)
    return result


def measure_subject(result, subject, cell, options, path, hidden, x, sections, budget) -> None:
    """The chosen sections of one subject at one hidden size."""
    settings, errors = result["settings"], result["errors"]
    try:
        layer = layer_for(subject, cell, options, x.shape[-1], hidden)
    except Exception as error:
        errors.append({"subject": subject, "path": path, "hidden": hidden, "error": f"{type(error).__name__}: {error}"})
        return
    makers = {
        "train": lambda: training_step(layer, x),
        "inference": lambda: inference_pass(layer, x),
        "amp": lambda: training_step(layer, x, amp=True),
    }
    for section in sections:
        measure(result, section, subject, path, hidden, budget, errors, makers[section], settings["repeats"],
                settings["warmup"])  # fmt: skip


def measure_streaming(result, settings, budget) -> None:
    """Batch-1 step latency at the first hidden size: each source cell with and without the CUDA graph."""
    hidden, d, steps = settings["hidden_sizes"][0], settings["shape"]["input_size"], settings["stream_steps"]
    per_step = max(1, steps)
    runs = [
        ("nn.LSTM", "cudnn", lambda: stream_loop(layer_for("nn.LSTM", None, {}, d, hidden), d, steps, False)),
        ("nn.LSTMCell", "cudnn", lambda: stream_loop(nn.LSTMCell(d, hidden).to(DEVICE), d, steps, True)),
    ]
    for name, cell, options in CELLS:
        if name not in settings["cells"]:
            continue
        for graphs in (True, False):

            def make(name=name, cell=cell, options=options, graphs=graphs):
                layer = layer_for(name, cell, options, d, hidden).eval()
                layer.cuda_graph_steps = graphs
                run = stream_loop(layer, d, steps, False)
                return graphed_only(layer, run) if graphs else run

            runs.append((name, "graph" if graphs else "eager", make))
    for name, path, make in runs:
        measure(result, "stream", name, path, hidden, budget, result["errors"], make, settings["repeats"],
                settings["warmup"])  # fmt: skip
    for record in result.get("stream", []):
        for key in ("median", "first_call"):
            if record[key] is not None:
                record[key] /= per_step
        record["samples"] = [s / per_step for s in record["samples"]]
        record["per"] = "step"


def evaluate(result: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The GPU targets at the first hidden size."""
    hidden = result["settings"]["hidden_sizes"][0]
    train = {(r["subject"], r["path"]): r["median"] for r in result.get("train", []) if r["hidden"] == hidden}
    lstm = train.get(("nn.LSTM", "cudnn"))
    rows = []
    for name in result["settings"]["cells"]:
        triton_time, loop_time = train.get((name, "triton")), train.get((name, "loop"))
        speedup = loop_time / triton_time if triton_time and loop_time else None
        rows.append({"target": f"{name}: triton training step >= {LOOP_SPEEDUP:g}x its PyTorch loop",
                     "hidden": hidden, "measured": speedup,
                     "passed": None if speedup is None else speedup >= LOOP_SPEEDUP})  # fmt: skip
        if name in AT_MOST_LSTM:
            ratio = triton_time / lstm if triton_time and lstm else None
            rows.append({"target": f"{name}: triton training step <= cuDNN nn.LSTM's", "hidden": hidden,
                         "measured": ratio, "passed": None if ratio is None else ratio <= 1.0})  # fmt: skip
    return rows


def render(result: Dict[str, Any]) -> str:
    device = result["device"]
    lines = [
        f"GPU benchmark, {result['created']}: {device['name']} (sm_{''.join(map(str, device['capability']))}, "
        f"{device['memory_gib']} GiB), CUDA {device['cuda']}, cuDNN {device['cudnn']}, torch {device['torch']}, "
        f"Triton {device['triton']}; TF32 matmul {device['tf32_matmul']}, cuDNN TF32 {device['tf32_cudnn']}.",
        f"`{result['command']}`",
        "",
    ]
    shape = result["settings"]["shape"]
    for section, title in (("train", "training step (fwd+bwd)"), ("inference", "inference (forward)"),
                           ("amp", "training step under autocast bf16")):  # fmt: skip
        records = result.get(section, [])
        if not records:
            continue
        lines.append(f"**{title}**, T={shape['steps']}, d={shape['input_size']}, B={result['settings']['batch']}: "
                     "median ms, x nn.LSTM (same H), peak MiB")  # fmt: skip
        lstm = {r["hidden"]: r["median"] for r in records if r["subject"] == "nn.LSTM"}
        rows = [["subject", "path", "H", "ms", "x LSTM", "peak MiB", "first call s"]]
        for r in records:
            ratio = r["median"] / lstm[r["hidden"]] if r["hidden"] in lstm else None
            rows.append([r["subject"], r["path"], r["hidden"], f"{r['median'] * 1e3:.3f}",
                         "-" if ratio is None else f"{ratio:.2f}",
                         "-" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 2**20:.0f}",
                         f"{r['first_call']:.2f}"])  # fmt: skip
        lines += [markdown_table(rows), ""]
    if result.get("stream"):
        lines.append("**streaming step, batch 1** (median us per step)")
        rows = [["subject", "path", "us/step"]]
        rows += [[r["subject"], r["path"], f"{r['median'] * 1e6:.1f}"] for r in result["stream"]]
        lines += [markdown_table(rows), ""]
    if result.get("targets"):
        rows = [["target", "H", "measured", "passed"]]
        rows += [[t["target"], t["hidden"], "-" if t["measured"] is None else f"{t['measured']:.2f}",
                  {True: "yes", False: "no", None: "-"}[t["passed"]]] for t in result["targets"]]  # fmt: skip
        lines += ["**targets**", markdown_table(rows), ""]
    if result["errors"]:
        lines.append("**errors**: " + "; ".join(f"{e.get('subject')} {e.get('path', '')} H={e.get('hidden')}: "
                                               f"{e['error'][:200]}" for e in result["errors"]))  # fmt: skip
    return "\n".join(lines)
