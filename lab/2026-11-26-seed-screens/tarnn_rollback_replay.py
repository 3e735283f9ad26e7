"""Continue a copy-200 TARNN claim run from its step-3,500 checkpoint with ``train.rollbacks`` on.

    python lab/2026-11-26-seed-screens/tarnn_rollback_replay.py RUN_DIR COPY_DIR ROLLBACKS STORE >> OUT.jsonl

The claim runs of 2026-11-26 went non-finite after step 3,500 in every seed, so a run with rollbacks on is
the same run up to there: only the rest is trained here, on a copy of the run directory whose checkpoint
config gains ``train.rollbacks`` (and one thread, no latency, no progress bar). The original runs kept no
full checkpoint of their best validation, so the starting checkpoint is the copy's first rollback point
(``rollback.pt``); a run trained from step 0 would go back to its best validation instead. Prints one JSON
line: status, steps, test metric, the rollbacks and the validation curve from step 3,400.
"""

import json
import shutil
import sys
from pathlib import Path

import torch

from ltdrnn.config import load_config
from ltdrnn.train import train


def main(source: Path, copy: Path, rollbacks: int, store: str) -> None:
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(source, copy)
    checkpoint = torch.load(copy / "last.pt", weights_only=True)
    if checkpoint["step"] != 3500:
        raise SystemExit(f"{source}: expected the step-3,500 checkpoint, found step {checkpoint['step']}")
    cfg = checkpoint["config"]
    cfg["train"].update(rollbacks=rollbacks, threads=1, latency=False, progress=False)
    cfg.update(run_dir=str(copy), results=store, study="seed-screens/tarnn-copy200-rollbacks")
    cfg["name"] = f"tarnn-rollbacks{rollbacks}"
    torch.save(checkpoint, copy / "last.pt")
    torch.save(checkpoint, copy / "rollback.pt")
    record = train(load_config(cfg, []), resume=True)
    history = [(h["step"], h["val_metric"]) for h in record["history"] if h["step"] >= 3400]
    line = {
        "seed": cfg["train"]["seed"],
        "status": record["status"],
        "steps": record["timings"]["steps"],
        "test": record["metrics"]["metric"],
        "best_step": record["metrics"]["best_step"],
        "rollbacks": record["metrics"]["rollbacks"],
        "val": history,
    }
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
