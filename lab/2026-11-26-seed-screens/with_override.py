"""Copy a run directory and set config keys in its checkpoints, so that ``--resume`` continues the run under
a setting it was not started with (the trainer refuses a resume whose config differs from the checkpoint's).

    python lab/2026-11-26-seed-screens/with_override.py RUN_DIR COPY_DIR KEY=VALUE [KEY=VALUE ...]

Used to replay the last steps of a long run with a remedy switched on, e.g. the step-2,700 checkpoint of a
TARNN copy T = 500 run with ``optim.skip_spikes=10``, each step logged:
``python lab/2026-11-26-seed-screens/step_probe.py COPY_DIR/config.yaml OUT.jsonl optim.skip_spikes=10
train.device=cpu --run-dir COPY_DIR --resume``. Values are parsed as the config loader parses overrides.

A lab tool, not part of the package: it gets past the trainer's resume check on purpose (on the copy only;
the original run directory is left as it was). A run continued this way is a replay, not the run its config
names, so its rows are screens, never a claim's evidence.
"""

import shutil
import sys
from pathlib import Path

import torch

from ltdrnn.config import load_config


def main(source: Path, copy: Path, overrides: list) -> None:
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(source, copy)
    for path in sorted(copy.glob("*.pt")):
        checkpoint = torch.load(path, weights_only=True, map_location="cpu")
        if not isinstance(checkpoint.get("config"), dict):
            continue
        checkpoint["config"] = load_config(checkpoint["config"], overrides).to_dict()
        torch.save(checkpoint, path)
        print(f"{path}: step {checkpoint['step']}, {', '.join(overrides)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
