"""Quantisation-aware fine-tuning (train.qat_steps) of the tiny GunPoint presets: int8 agreement and accuracy.

    PYTHONPATH=src python lab/2026-11-30-qat/qat.py PRESET QAT_STEPS SEED [SEED ...] >> lab/2026-11-30-qat/runs.jsonl

Per seed: train ``PRESET`` (e.g. deploy/tiny-mist) with ``train.qat_steps=QAT_STEPS`` (0: the preset as it is),
one thread, run directory /tmp/qat/<preset>/q<QAT_STEPS>/s<SEED>; export its int8 C step and measure, over
all 150 test series, eager PyTorch's accuracy, the int8 step's and their agreement (the parity function of
lab/2026-11-30-int8-snap/snap.py). One JSON line per run.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-30-int8-snap"))


def main() -> None:
    import torch
    from snap import parity

    from ltdrnn.config import load_config
    from ltdrnn.export import load_trained
    from ltdrnn.train import train

    torch.set_num_threads(1)
    preset, qat = sys.argv[1], int(sys.argv[2])
    for seed in (int(s) for s in sys.argv[3:]):
        run_dir = Path("/tmp/qat") / preset.replace("/", "-") / f"q{qat}" / f"s{seed}"
        overrides = [f"train.qat_steps={qat}", f"train.seed={seed}", "train.progress=false", "train.latency=false"]
        cfg = load_config(preset, overrides)
        cfg.run_dir, cfg.results = str(run_dir), None
        started = time.perf_counter()
        record = train(cfg)
        seconds = time.perf_counter() - started
        model, _, task = load_trained(str(run_dir))
        found = parity(model, task, False)
        row = {
            "preset": preset,
            "qat_steps": qat,
            "seed": seed,
            "test_accuracy": record["metrics"]["metric"],
            "eager": found["as_trained_eager"],
            "int8": found["as_trained_int8"],
            "agreement": found["as_trained_agreement"],
            "train_s": round(seconds, 1),
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
