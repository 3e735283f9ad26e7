"""The float C step's agreement with eager PyTorch for trained runs (the fp32 rows of docs/deployment.md's table).

    PYTHONPATH=src python lab/2026-11-30-qat/fp32.py RUN_DIR [RUN_DIR ...] >> lab/2026-11-30-qat/fp32.jsonl

As lab/2026-11-30-int8-snap/snap.py's parity, for the float32 export: one JSON line per run with eager
PyTorch's accuracy, the host-compiled float C step's and their agreement over all 150 test series.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np


def main() -> None:
    from ltdrnn.export import StreamingStep, c_build, load_trained, measure
    from ltdrnn.export.c_export import generate_c
    from ltdrnn.export.contract import contract

    for run_dir in sys.argv[1:]:
        model, _, task = load_trained(run_dir)
        step = StreamingStep(model)
        agreed = contract(step, task, measured=False)
        generated = generate_c(step, "model", False, None, agreed)
        written = c_build.write(step, generated, Path(tempfile.mkdtemp(prefix="fp32-")))
        run, channel = written["step"], agreed["input"]["channel"]
        if channel is not None:
            mean, std = (np.asarray(channel[k], np.float32) for k in ("mean", "std"))
            run = lambda x_t, state, normalised=run: normalised(x_t * std + mean, state)  # noqa: E731
        found = measure.parity(model, step, run, task, "test", init=written["init"])
        keys = ("accuracy_eager", "accuracy_export", "agreement", "max_abs_error")
        print(json.dumps({"run": run_dir, **{k: found[k] for k in keys}}), flush=True)


if __name__ == "__main__":
    main()
