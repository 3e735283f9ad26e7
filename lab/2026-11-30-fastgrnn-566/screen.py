"""FastGRNN on GunPoint inside EdgeML's 566 B of int8 weights: width, rank and training through int8.

    PYTHONPATH=src python lab/2026-11-30-fastgrnn-566/screen.py NAME SEEDS [KEY=VALUE ...] \
        >> lab/2026-11-30-fastgrnn-566/runs.jsonl

``SEEDS``: e.g. 0-9. Per seed: train deploy/tiny-fastgrnn with the overrides, one thread, run directory
/tmp/fg566/<NAME>/s<SEED>; generate its int8 C step (its constants' bytes: the 566 B budget) and measure,
over all 150 test series, eager PyTorch's accuracy, the int8 step's and their agreement (the parity
function of lab/2026-11-30-int8-snap/snap.py). One JSON line per run.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-30-int8-snap"))


def int8_weight_bytes(model, task) -> int:
    from ltdrnn.export import StreamingStep, _calibration
    from ltdrnn.export.c_export import generate_c
    from ltdrnn.export.contract import contract

    step = StreamingStep(model)
    return generate_c(step, "model", True, _calibration(task), contract(step, task, measured=False)).weight_bytes


def seeds_of(text: str) -> list:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def measured_run(preset: str, extra: list, seed: int, run_dir: Path) -> dict:
    """Train ``preset`` with the overrides at ``seed`` (one thread, into ``run_dir``), then its test accuracy,
    the int8 C step's, their agreement over the 150 test series and the int8 step's constant bytes."""
    import torch
    from snap import parity

    from ltdrnn.config import load_config
    from ltdrnn.export import load_trained
    from ltdrnn.train import train

    torch.set_num_threads(1)
    overrides = [*extra, f"train.seed={seed}", "train.progress=false", "train.latency=false"]
    cfg = load_config(preset, overrides)
    cfg.run_dir, cfg.results = str(run_dir), None
    started = time.perf_counter()
    record = train(cfg)
    seconds = time.perf_counter() - started
    model, _, task = load_trained(str(run_dir))
    found = parity(model, task, False)
    return {
        "overrides": extra,
        "seed": seed,
        "test_accuracy": record["metrics"]["metric"],
        "eager": found["as_trained_eager"],
        "int8": found["as_trained_int8"],
        "agreement": found["as_trained_agreement"],
        "int8_weight_bytes": int8_weight_bytes(model, task),
        "train_s": round(seconds, 1),
    }


def main() -> None:
    name, seeds, extra = sys.argv[1], seeds_of(sys.argv[2]), sys.argv[3:]
    for seed in seeds:
        row = measured_run("deploy/tiny-fastgrnn", extra, seed, Path("/tmp/fg566") / name / f"s{seed}")
        print(json.dumps({"name": name, **row}), flush=True)


if __name__ == "__main__":
    main()
