"""Why iRNN at its equilibrium cannot add: the state alternates sign from one time step to the next.

    python lab/2026-11-23-readings/irnn_equilibrium.py RUN_DIR [RUN_DIR ...] [--n 512]

At Eq. 8's equilibrium ``h_k + h_{k-1} = y*(x_k)``, a function of the input alone, so
``dh_k/dh_{k-1} = -I`` (Theorem 1) and ``h_T = sum_t (-1)^(T-t) y*(x_t) + (-1)^T h_0``: every input enters the
last state with a sign set by the parity of its distance from the end. On adding, the two marked values then
reach a linear head as ``s1 Y(a) + s2 Y(b)`` with random signs s1, s2, and no linear head gives ``a + b``
for all four sign pairs. For each RUN_DIR (its ``best.pt``, an iRNN on the adding task) this prints one
JSON line, in float64 on ``--n`` test sequences:

- ``one_step_plus_identity``: ``||dh_{T}/dh_{T-1} + I||_F / ||I||_F`` (0 at the equilibrium; about 2 for
  a state that carries itself, ``dh_k/dh_{k-1}`` near ``+I``);
- ``corr_sum`` and ``corr_signed``: the correlation of the model's prediction with ``a + b`` and with
  ``s1 a + s2 b`` (s = (-1)^(T-t) for the marked steps t);
- ``mse_by_parity``: the test MSE for each pair (s1, s2).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from ltdrnn.analysis.gradients import cell_inputs, single_cell
from ltdrnn.cells.base import time_slices
from ltdrnn.checkpoint import restore_model


def one_step_plus_identity(model, x: torch.Tensor) -> float:
    """``||J + I||_F / sqrt(H)`` for the last step's Jacobian ``J = dh_T/dh_{T-1}``, mean over the batch."""
    cell = single_cell(model, "irnn_equilibrium")
    slices = time_slices(cell.precompute(cell_inputs(model, x).detach()))
    state = cell.init_state(x.shape[0], x.device, x.dtype)
    with torch.no_grad():
        for p_t in slices[:-1]:
            _, state = cell.step(p_t, state)
    last = slices[-1]
    values = []
    for b in range(x.shape[0]):
        h_prev = state[b : b + 1].clone()

        def step(h, b=b):
            return cell.step(last[b : b + 1], h)[1]

        jac = torch.autograd.functional.jacobian(step, h_prev).reshape(h_prev.numel(), h_prev.numel())
        eye = torch.eye(jac.shape[0], dtype=jac.dtype)
        values.append(float(torch.linalg.norm(jac + eye) / torch.linalg.norm(eye)))
    return sum(values) / len(values)


def marked(x: torch.Tensor):
    """Values and parity signs of the two marked steps of adding sequences ``x (B, T, 2)``."""
    T = x.shape[1]
    steps = x[..., 1].nonzero()  # (2B, 2): rows (b, t), two per sequence, in order
    t = steps[:, 1].reshape(-1, 2)
    values = x[..., 0].gather(1, t)
    signs = 1.0 - 2.0 * ((T - 1 - t) % 2).to(x.dtype)
    return values, signs


def correlation(u: torch.Tensor, v: torch.Tensor) -> float:
    u, v = u - u.mean(), v - v.mean()
    return float((u * v).sum() / (u.norm() * v.norm()))


def analyse(run: str, n: int) -> dict:
    cfg, task, model = restore_model(Path(run) / "best.pt")
    model = model.double().eval()
    dataset = task.dataset("test")
    x, y = task.collate([dataset[i] for i in range(min(n, len(dataset)))])[:2]
    x, y = x.double(), y.double().reshape(-1)
    with torch.no_grad():
        prediction = model(x).reshape(-1)
    values, signs = marked(x)
    by_parity = {}
    for s1 in (1.0, -1.0):
        for s2 in (1.0, -1.0):
            rows = (signs[:, 0] == s1) & (signs[:, 1] == s2)
            by_parity[f"{s1:+.0f}{s2:+.0f}"] = float(((prediction[rows] - y[rows]) ** 2).mean())
    return {
        "run": run,
        "K": cfg.model.options.get("K"),
        "reading": cfg.model.options.get("reading"),
        "eta": cfg.model.options.get("eta"),
        "one_step_plus_identity": one_step_plus_identity(model, x[:8]),
        "corr_sum": correlation(prediction, values.sum(1)),
        "corr_signed": correlation(prediction, (signs * values).sum(1)),
        "mse": float(((prediction - y) ** 2).mean()),
        "mse_by_parity": by_parity,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--n", type=int, default=512)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for run in args.runs:
        print(json.dumps(analyse(run, args.n)), flush=True)


if __name__ == "__main__":
    main()
