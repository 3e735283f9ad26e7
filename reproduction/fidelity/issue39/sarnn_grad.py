"""SA-RNN at init on one adding batch (T=500, B=128), seeds 1-3: the gradient of the MSE with the
straight-through surrogate as implemented (the coordinator reads h_{t-1} inside autograd, as in the
authors' code) against the same with that read detached (the surrogate kept for the gate itself):
norms per parameter group and the cosine of the two whole gradients.

    python reproduction/fidelity/issue39/sarnn_grad.py [T]
"""

import sys

import torch

from ltdrnn.cells.sarnn import SARNN
from ltdrnn.checkpoint import build_task_and_model
from ltdrnn.config import load_config
from ltdrnn.train import seed_everything

GROUPS = {"all": (), "gru": ("weight_hh", "weight_ih", "bias_hh", "bias_ih"), "coordinator": ("coord_",)}


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


def main(steps: int) -> None:
    torch.set_num_threads(1)
    for seed in (1, 2, 3):
        overrides = [f"train.seed={seed}", f"task.options.T={steps}", "model.options.impl=reference"]
        seed_everything(seed)
        task, model = build_task_and_model(load_config("reproduce/sarnn-adding500", overrides))
        x, y, _ = task.collate([task.dataset("train")[i] for i in range(128)])
        full, detached = gradient(model, x, y, False), gradient(model, x, y, True)
        flat = [torch.cat([g.flatten() for g in grads.values()]) for grads in (full, detached)]
        cosine = float(torch.nn.functional.cosine_similarity(*flat, dim=0))
        norms = ", ".join(f"{name} {norm(full, k):.3g} / {norm(detached, k):.3g}" for name, k in GROUPS.items())
        print(f"T={steps} seed {seed}: cos {cosine:.3f}; |g| full / detached: {norms}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500)
