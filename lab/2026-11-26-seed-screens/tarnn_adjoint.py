"""Where a TARNN runaway's gradient comes from: replay a run to the step whose backward pass exploded and
split the adjoint ``dL/ds_t`` by the paths through which ``s_{t-1}`` reaches ``s_t``.

    python lab/2026-11-26-seed-screens/tarnn_adjoint.py RUN_DIR STEP

RUN_DIR is a copy of a run directory whose ``last.pt`` is before STEP (the replay writes into it; use
``with_override.py RUN_DIR COPY`` with no override to copy it). The trainer resumes it bit for bit on the CPU,
keeps the weights after step STEP - 1 and the batch of step STEP, and stops. On that batch it recomputes
TARNN's forward pass with the reference loop of the paper's equations, step by step, and prints, for each
reading of the same forward function with some paths of ``s_{t-1}`` detached:

- the global gradient norm and the largest per-sequence adjoint ``||dL/ds_t||`` (its time step and sequence),
  against the median sequence's largest;
- ``all paths`` (as trained); ``beta cut`` (the time constant ``beta = sigmoid(U_s s + W_x x + b)`` reads
  ``s`` detached); ``input cut`` (the composite input's state half, ``B2 s`` and ``W2 s``, reads it detached:
  what Theorem 1's ``A + B2 = 0``, ``U + W2 = 0`` are about); both cut.

It also prints ``||U||_2``, ``||A + B2||_2`` and ``||U + W2||_2`` against Theorem 1's ``||U|| < 1``.
"""

from __future__ import annotations

import copy
import sys

import torch
import torch.nn.functional as F

from ltdrnn import metrics as M
from ltdrnn import train as trainer
from ltdrnn.cells.euler import join_counter, split_counter

PATHS = {"all paths": (), "beta cut": ("beta",), "input cut": ("input",), "both cut": ("beta", "input")}


class Captured(Exception):
    pass


def capture(run_dir: str, target: int):
    """The weights after step ``target - 1`` and the batch of step ``target``, by replaying ``run_dir``."""
    found: dict = {}
    batch_of = trainer._batch

    def recording_batch(*args, **kwargs):
        out = batch_of(*args, **kwargs)
        found["batch"] = tuple(t.detach().clone() if torch.is_tensor(t) else t for t in out)
        return out

    def on_step(state: dict) -> None:
        if state["step"] == target - 1:
            found["weights"] = copy.deepcopy(state["model"].state_dict())
        if state["step"] == target:
            raise Captured

    start = torch.load(f"{run_dir}/last.pt", weights_only=True, map_location="cpu")
    if start["step"] == target - 1:  # the checkpoint holds the weights; no callback runs for its step
        found["weights"] = start["model"]
    overrides = ["train.device=cpu", "train.threads=2", "train.progress=false", f"run_dir={run_dir}"]
    cfg = trainer.load_config(f"{run_dir}/config.yaml", overrides)
    cfg.results = None
    trainer._batch = recording_batch  # the trainer draws each batch through this module-level function
    try:
        trainer.train(cfg, callbacks=[on_step], resume=True)
    except Captured:
        pass
    finally:
        trainer._batch = batch_of
    if "weights" not in found:
        raise SystemExit(f"STEP: the run ended before step {target}")
    return cfg, found["weights"], found["batch"]


def step(cell, p_t, state, cut):
    """TARNN's step as in ``TARNN.step`` (gate inside, per-time-step eta), with the paths in ``cut`` detached."""
    s, counter = split_counter(cell.per_time_step, state)
    bx, wx, gx = p_t.chunk(3, dim=-1)
    beta = torch.sigmoid(F.linear(s.detach() if "beta" in cut else s, cell.weight_Us) + gx)
    s_in = s.detach() if "input" in cut else s
    linear_u, inside_u = bx + F.linear(s_in, cell.weight_B2), wx + F.linear(s_in, cell.weight_W2)
    eta = cell.steps.at(counter)
    z = s
    for k in range(cell.K):
        g = F.linear(z, cell.A) + linear_u + cell.phi(F.linear(z, cell.weight_U) + inside_u)
        z = z + (eta[k] if counter is None else eta[:, k : k + 1]) * (beta * g)
    return z, join_counter(z, None if counter is None else counter + 1)


def main(run_dir: str, target: int) -> None:
    cfg, weights, (x, y, lengths) = capture(run_dir, target)  # the trainer has set flush-denormal
    task, model = trainer.build_task_and_model(cfg)
    model.load_state_dict(weights)
    model.train()
    cell = next(m for m in model.modules() if type(m).__name__ == "TARNN")
    if cell.gate != "inside" or cell.damping:
        raise SystemExit("RUN_DIR: this tool covers TARNN with gate='inside' and no damping term")
    norm = lambda w: float(torch.linalg.matrix_norm(w.detach().double(), 2))  # noqa: E731
    print(
        f"||U||_2 {norm(cell.weight_U):.3g}, ||A + B2||_2 {norm(cell.A + cell.weight_B2):.3g}, "
        f"||U + W2||_2 {norm(cell.weight_U + cell.weight_W2):.3g} (Theorem 1: ||U|| < 1, A + B2 = U + W2 = 0)"
    )
    for name, cut in PATHS.items():
        model.zero_grad()
        p = cell.precompute(x.transpose(0, 1))
        state, states = cell.init_state(x.shape[0]), []
        for t in range(p.shape[0]):
            z, state = step(cell, p[t], state, cut)
            z.retain_grad()
            states.append(z)
        loss = M.task_loss(model.output(torch.stack(states, 1)), y, task.info, lengths)
        loss.backward()
        adjoint = torch.stack([z.grad for z in states]).norm(dim=2)  # (T, B)
        largest = adjoint.max(0).values
        grads = [q.grad.double().square().sum() for q in model.parameters() if q.grad is not None]
        print(
            f"{name:10s} loss {loss.item():.5f}  gradient {float(torch.stack(grads).sum().sqrt()):.3g}  "
            f"largest adjoint {float(largest.max()):.3g} (t = {int(adjoint.max(1).values.argmax())}, "
            f"sequence {int(largest.argmax())})  median sequence's largest {float(largest.median()):.3g}"
        )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], int(sys.argv[2]))
