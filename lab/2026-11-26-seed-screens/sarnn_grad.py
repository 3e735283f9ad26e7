"""SA-RNN on one adding batch (T=500, B=128): the gradient of the MSE with the straight-through
surrogate as implemented (the coordinator reads h_{t-1} inside autograd, as in the authors' code) against
the same with that read detached (the surrogate kept for the gate itself): norms per parameter group and
the cosine of the two whole gradients. At init (seeds 1-3), or for the weights of a checkpoint (a run
directory or a .pt file; its config's seed, T and a few of its training batches).

    python lab/2026-11-26-seed-screens/sarnn_grad.py [T]
    python lab/2026-11-26-seed-screens/sarnn_grad.py --checkpoint RUN_DIR [BATCHES]
"""

import sys

import torch

from ltdrnn.cells.sarnn import SARNN
from ltdrnn.checkpoint import build_task_and_model, restore_model
from ltdrnn.config import load_config
from ltdrnn.train import seed_everything

GROUPS = {"all": (), "gru": (".weight_hh", ".weight_ih", ".bias_hh", ".bias_ih"), "coordinator": ("coord_",)}


def gradient(model, x, y, detach: bool) -> dict:
    cell = next(m for m in model.modules() if isinstance(m, SARNN))
    coordinate = cell.coordinate
    if detach:
        cell.coordinate = lambda c, h: coordinate(c, h.detach())
    model.zero_grad()
    ((model(x, None).reshape(-1) - y.reshape(-1)) ** 2).mean().backward()
    cell.coordinate = coordinate
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def norm(grads: dict, keys) -> float:
    return float(sum((g**2).sum() for n, g in grads.items() if not keys or any(k in n for k in keys)) ** 0.5)


def compare(label: str, model, x, y) -> None:
    full, detached = gradient(model, x, y, False), gradient(model, x, y, True)
    flat = [torch.cat([g.flatten() for g in grads.values()]) for grads in (full, detached)]
    cosine = float(torch.nn.functional.cosine_similarity(*flat, dim=0))
    norms = ", ".join(f"{name} {norm(full, k):.3g} / {norm(detached, k):.3g}" for name, k in GROUPS.items())
    print(f"{label}: cos {cosine:.3f}; |g| full / detached: {norms}")


def at_init(steps: int) -> None:
    for seed in (1, 2, 3):
        overrides = [f"train.seed={seed}", f"task.options.T={steps}", "model.options.backend=reference"]
        seed_everything(seed)
        task, model = build_task_and_model(load_config("reproduce/sarnn-adding500", overrides))
        x, y, _ = task.collate([task.dataset("train")[i] for i in range(128)])
        compare(f"T={steps} seed {seed}", model, x, y)


def trained(checkpoint: str, batches: int) -> None:
    cfg, task, model = restore_model(checkpoint, ["model.options.backend=reference"])
    items = task.dataset("train")
    for b in range(batches):
        x, y, _ = task.collate([items[i] for i in range(128 * b, 128 * (b + 1))])
        compare(f"{checkpoint}, training batch {b}", model, x, y)


if __name__ == "__main__":
    torch.set_num_threads(1)
    if len(sys.argv) > 2 and sys.argv[1] == "--checkpoint":
        trained(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 3)
    else:
        at_init(int(sys.argv[1]) if len(sys.argv) > 1 else 500)
