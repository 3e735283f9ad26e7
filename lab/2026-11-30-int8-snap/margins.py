"""The misses that remain once the weights sit on the int8 grid: near-ties, or errors of the integer step?

    python lab/2026-11-30-int8-snap/margins.py RUN_DIR [RUN_DIR ...]

Per run (weights snapped as in snap.py): for every test series where the int8 C step's class differs from
eager PyTorch's, the eager and the int8 logit margin (class 1 minus class 0: GunPoint has two classes), and
over all series the largest and the median absolute logit error of the int8 step. One JSON line per run.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from snap import snap_rows


def logits(model, task):
    from ltdrnn.export import StreamingStep, _calibration, c_build
    from ltdrnn.export.c_export import generate_c
    from ltdrnn.export.contract import contract
    from ltdrnn.export.measure import _numpy_step, as_numpy, run_sequences

    step = StreamingStep(model)
    agreed = contract(step, task, measured=False)
    generated = generate_c(step, "model", True, _calibration(task), agreed)
    written = c_build.write(step, generated, Path(tempfile.mkdtemp(prefix="margins-")))
    run, channel = written["step"], agreed["input"]["channel"]
    if channel is not None:
        mean, std = (np.asarray(channel[k], np.float32) for k in ("mean", "std"))
        run = lambda x_t, state, normalised=run: normalised(x_t * std + mean, state)  # noqa: E731
    dataset = task.dataset("test")
    x, y, lengths = task.collate([dataset[i] for i in range(len(dataset))])
    model.eval()
    with torch.no_grad():
        eager = as_numpy(model(x, lengths))
    exported = run_sequences(_numpy_step(run), written["init"](x.shape[0]), as_numpy(x).astype(np.float32), None)
    return eager, exported


def main() -> None:
    from ltdrnn.export import load_trained

    for run_dir in sys.argv[1:]:
        model, _, task = load_trained(run_dir)
        snap_rows(model)
        eager, exported = logits(model, task)
        missed = np.nonzero(eager.argmax(-1) != exported.argmax(-1))[0]
        error = np.abs(eager - exported)
        print(
            json.dumps(
                {
                    "run": run_dir,
                    "missed": [
                        {
                            "series": int(i),
                            "eager_margin": float(eager[i, 1] - eager[i, 0]),
                            "int8_margin": float(exported[i, 1] - exported[i, 0]),
                        }
                        for i in missed
                    ],
                    "max_logit_error": float(error.max()),
                    "median_logit_error": float(np.median(error)),
                    "median_abs_margin": float(np.median(np.abs(eager[:, 1] - eager[:, 0]))),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
