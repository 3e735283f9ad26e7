"""Time a training step of the copy presets on a GPU: the Triton kernels against the cell's PyTorch loop.

    python benchmarks/copy_presets_gpu.py [--out FILE.json] [--repeats N] [--time-budget S]

Each preset (``reproduce/copy200-*``, ``reproduce/copy500-*``: per-time-step step sizes, TARNN's exp form,
iRNN's projected form and gate) is built at its own sizes (H = 128, batch 128, the task's sequence length)
and timed as ``zero_grad; model(x).mean().backward()`` with ``backend="triton"`` and ``backend="torch"``
(``"torch"`` is the PyTorch loop a GPU ran before the kernels took per-time-step step sizes and iRNN's K > 1),
float32 with TF32 products, after two warm-up steps (the first includes Triton's compilation). Prints a
Markdown table; ``--out`` writes the rows as JSON. Run from the repository root with ``src`` on PYTHONPATH
(benchmarks/gpu_check.sh does).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from ltdrnn.cells.base import Cell
from ltdrnn.checkpoint import build_task_and_model
from ltdrnn.config import load_config

PRESETS = ["reproduce/copy200-tarnn", "reproduce/copy200-irnn", "reproduce/copy500-tarnn", "reproduce/copy500-irnn"]


def _step_times(model, x: torch.Tensor, repeats: int) -> tuple:
    """``(first call, median, fastest)`` seconds of one training step."""

    def step() -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        model.zero_grad(set_to_none=True)
        model(x).float().mean().backward()
        torch.cuda.synchronize()
        return time.perf_counter() - start

    first = step()
    step()
    seconds = [step() for _ in range(repeats)]
    return first, statistics.median(seconds), min(seconds)


def _input(task, model, batch: int) -> torch.Tensor:
    info = task.info
    cell = next(m for m in model.modules() if isinstance(m, Cell))
    steps = cell.steps.max_length if getattr(cell, "per_time_step", False) else info.seq_len
    if info.input_kind == "tokens":
        return torch.randint(0, info.input_size, (batch, steps), device="cuda")
    return torch.randn(batch, steps, info.input_size, device="cuda")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--time-budget", type=float, default=100.0, help="start no new measurement after this")
    args = parser.parse_args()
    assert torch.cuda.is_available(), "copy_presets_gpu: no CUDA device"
    torch.backends.cuda.matmul.allow_tf32 = True
    began, rows = time.perf_counter(), []
    print("| preset | backend | first call (s) | median (ms) | fastest (ms) |\n|---|---|---|---|---|")
    for preset in PRESETS:
        for backend in ("triton", "torch"):
            if time.perf_counter() - began > args.time_budget:
                print(f"| {preset} | {backend} | skipped: past --time-budget | | |")
                continue
            torch.manual_seed(0)
            task, model = build_task_and_model(load_config(preset, [f"model.options.backend={backend}"]))
            model = model.cuda()
            batch = load_config(preset).train.batch_size
            first, median, fastest = _step_times(model, _input(task, model, batch), args.repeats)
            rows.append(dict(preset=preset, backend=backend, batch=batch, first_s=first, median_s=median,
                             fastest_s=fastest))  # fmt: skip
            print(f"| {preset} | {backend} | {first:.1f} | {median * 1e3:.1f} | {fastest * 1e3:.1f} |", flush=True)
    if args.out:
        device = torch.cuda.get_device_name(0)
        with open(args.out, "w") as handle:
            json.dump({"device": device, "torch": torch.__version__, "tf32": True, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
