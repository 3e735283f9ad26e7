"""Time, and optionally profile, one training step of one layer at the pixel-MNIST shape.

    python benchmarks/train_step.py CELL [OPTIONS] [--repeats N] [--profile]

``CELL`` a registry name, ``OPTIONS`` a Python dict literal of cell options (``"{'K': 1, 'rank': 16}"``).
The step is `ltdrnn bench`'s: ``zero_grad; out, _ = layer(x); out.mean().backward()`` on x (128, 784, 1),
H = 128, 2 threads, denormals flushed, malloc tuning on. Prints the median and the fastest of the timed
steps; with ``--profile`` also torch.profiler's table of three more steps, grouped by input shape. For
A/B comparisons run it alternately from two checkouts: one number from a loaded machine means little.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import time

import torch

from ltdrnn import Recurrent
from ltdrnn.bench.timing import tune_malloc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cell")
    parser.add_argument("options", nargs="?", default="{}")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    torch.set_flush_denormal(True)
    torch.set_num_threads(args.threads)
    tune_malloc()
    torch.manual_seed(0)
    layer = Recurrent(args.cell, 1, 128, **ast.literal_eval(args.options))
    x = torch.randn(128, 784, 1)

    def step() -> None:
        layer.zero_grad(set_to_none=True)
        out, _ = layer(x)
        out.mean().backward()

    for _ in range(2):
        step()
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    print(
        f"{args.cell} {args.options}: median {statistics.median(seconds) * 1e3:.1f} ms, "
        f"fastest {min(seconds) * 1e3:.1f} ms ({args.repeats} steps, {args.threads} threads)"
    )
    if args.profile:
        from torch.profiler import profile

        with profile(record_shapes=True) as prof:
            for _ in range(3):
                step()
        print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=30))


if __name__ == "__main__":
    main()
