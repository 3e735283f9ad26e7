"""Does int8 weight rounding explain the int8 C step's disagreements with eager PyTorch?

    python lab/2026-11-30-int8-snap/snap.py RUN_DIR [RUN_DIR ...]   (runs of lab/2026-11-29-tiny-recipes-5)

Per run: the int8 C step's agreement with eager PyTorch as exported today, and again after every 2-D
parameter of the model is snapped to its int8 grid per output row (symmetric, the exporter's
``quantize_rows``), so that eager PyTorch runs the weights the C step stores (less derived matrices,
which the exporter quantises again). Prints one JSON line per run: accuracies and agreements.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch


def parity(model, task, snapped: bool) -> dict:
    import tempfile

    from ltdrnn.export import StreamingStep, _calibration, c_build, measure
    from ltdrnn.export.c_export import generate_c
    from ltdrnn.export.contract import contract

    step = StreamingStep(model)
    agreed = contract(step, task, measured=False)
    from pathlib import Path

    out = Path(tempfile.mkdtemp(prefix="snap-"))
    generated = generate_c(step, "model", True, _calibration(task), agreed)
    written = c_build.write(step, generated, out)
    run, channel = written["step"], agreed["input"]["channel"]
    if channel is not None:
        mean, std = (np.asarray(channel[k], np.float32) for k in ("mean", "std"))
        run = lambda x_t, state, normalised=run: normalised(x_t * std + mean, state)  # noqa: E731
    found = measure.parity(model, step, run, task, "test", init=written["init"])
    key = "snapped" if snapped else "as_trained"
    return {
        f"{key}_eager": found["accuracy_eager"],
        f"{key}_int8": found["accuracy_export"],
        f"{key}_agreement": found["agreement"],
    }


def snap_rows(model) -> int:
    from ltdrnn.export.c_fixed import quantize_rows

    count = 0
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 2:
                q, scale = quantize_rows(parameter.detach().double())
                parameter.copy_(torch.from_numpy(q.astype(np.float64) * scale[:, None].astype(np.float64)))
                count += 1
    return count


def main() -> None:
    from ltdrnn.export import load_trained

    for run_dir in sys.argv[1:]:
        model, _, task = load_trained(run_dir)
        row = {"run": run_dir, **parity(model, task, False)}
        row["matrices_snapped"] = snap_rows(model)
        row.update(parity(model, task, True))
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
