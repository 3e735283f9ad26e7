"""Wider tiny presets for the source cells on GunPoint: does width steady them across seeds, as it did FastGRNN?

    PYTHONPATH=src python lab/2026-11-30-tiny-widths/widths.py CELL NAME SEEDS [KEY=VALUE ...] \
        >> lab/2026-11-30-tiny-widths/runs.jsonl

Per seed: train deploy/tiny-CELL with the overrides (one thread, run directory /tmp/tinywidths/CELL/NAME/sSEED),
then the FastGRNN screen's measures (lab/2026-11-30-fastgrnn-566/screen.py, imported): eager and int8 C step
accuracy over the 150 test series, their agreement, the int8 step's constant bytes. One JSON line per run.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

LAB = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(LAB / "2026-11-30-fastgrnn-566"), str(LAB / "2026-11-30-int8-snap")]


def main() -> None:
    import torch
    from screen import int8_weight_bytes, seeds_of
    from snap import parity

    from ltdrnn.config import load_config
    from ltdrnn.export import load_trained
    from ltdrnn.train import train

    torch.set_num_threads(1)
    cell, name, seeds, extra = sys.argv[1], sys.argv[2], seeds_of(sys.argv[3]), sys.argv[4:]
    for seed in seeds:
        run_dir = Path("/tmp/tinywidths") / cell / name / f"s{seed}"
        overrides = [*extra, f"train.seed={seed}", "train.progress=false", "train.latency=false"]
        cfg = load_config(f"deploy/tiny-{cell}", overrides)
        cfg.run_dir, cfg.results = str(run_dir), None
        started = time.perf_counter()
        record = train(cfg)
        seconds = time.perf_counter() - started
        model, _, task = load_trained(str(run_dir))
        found = parity(model, task, False)
        row = {
            "cell": cell,
            "name": name,
            "overrides": extra,
            "seed": seed,
            "test_accuracy": record["metrics"]["metric"],
            "eager": found["as_trained_eager"],
            "int8": found["as_trained_int8"],
            "agreement": found["as_trained_agreement"],
            "int8_weight_bytes": int8_weight_bytes(model, task),
            "train_s": round(seconds, 1),
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
