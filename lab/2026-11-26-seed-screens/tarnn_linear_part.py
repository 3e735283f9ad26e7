"""TARNN's linear part from saved checkpoints: per run, the step, ||B2||_2, ||A + B2||_2 and the largest real
part of an eigenvalue of A + B2. Within one time step the Euler rounds move the state by eta beta (A z + B2 s
+ bounded terms), so an eigenvalue of A + B2 with positive real part is a direction the state grows in
wherever eta beta is not small, and nothing in the vector field bounds it (phi is).

    python lab/2026-11-26-seed-screens/tarnn_linear_part.py CHECKPOINT.pt [CHECKPOINT.pt ...]
"""

import json
import sys

import torch

from ltdrnn.checkpoint import build_task_and_model
from ltdrnn.config import from_dict


def linear_part(path: str) -> dict:
    saved = torch.load(path, weights_only=True, map_location="cpu")
    _, model = build_task_and_model(from_dict(saved["config"]))
    model.load_state_dict(saved["model"])
    cell = next(m for m in model.modules() if m.__class__.__name__ == "TARNN")
    with torch.no_grad():
        b2 = cell.weight_B2.double()
        moved = cell.A.double() + b2
        return {
            "checkpoint": path,
            "step": saved["step"],
            "B2_norm": float(torch.linalg.matrix_norm(b2, 2)),
            "A_plus_B2_norm": float(torch.linalg.matrix_norm(moved, 2)),
            "A_plus_B2_abscissa": float(torch.linalg.eigvals(moved).real.max()),
        }


if __name__ == "__main__":
    for path in sys.argv[1:]:
        print(json.dumps(linear_part(path)))
