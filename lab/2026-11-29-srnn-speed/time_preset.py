"""Times the trainer's own training step (data, forward, loss, backward, RMSprop) of a preset, at the
preset's one thread, with the trainer's process settings (glibc malloc tuning, flush denormals), in a
temporary run directory. Usage (from the repository root):

    nice -n 5 .venv/bin/python lab/2026-11-29-srnn-speed/time_preset.py [PRESET] [--steps 40]

PRESET defaults to reproduce/adding200-srnn. Prints the median and min CPU ms of this thread per step after 5
warm-up steps (CPU time: on a loaded machine wall time swings with the time slices this process gets).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from ltdrnn.config import load_config
from ltdrnn.ops.memory import tune_malloc
from ltdrnn.train import Run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("preset", nargs="?", default="reproduce/adding200-srnn")
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = load_config(args.preset, [f"run_dir={run_dir}", "train.threads=1"])
        # as ltdrnn.train.train sets the process up
        torch.set_flush_denormal(True)
        torch.set_num_threads(1)
        if cfg.train.malloc_tuning:
            tune_malloc()
        run = Run(cfg, False)
        indices = list(range(cfg.train.batch_size))
        times = []
        for step in range(args.steps + 5):
            start = time.thread_time()
            run.train_step(indices)
            if step >= 5:
                times.append((time.thread_time() - start) * 1e3)
    print(f"{args.preset}: median {statistics.median(times):.1f} ms, min {min(times):.1f} ms per step")


if __name__ == "__main__":
    main()
