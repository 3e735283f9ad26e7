"""iRNN at init on adding T=200 (preset reproduce/irnn-adding200-k) for given K and eta_0: the loss and
the largest |h_T| on 128 training sequences, and the Jacobian ratio ||dh_T/dh_1|| / ||dh_T/dh_{T-1}||
(float64, 32 validation sequences), seeds 1-3.

    python lab/2026-11-26-seed-screens/irnn_init.py K:ETA [K:ETA ...]     e.g. 10:0.01 10:0.001
"""

import json
import sys

import torch

from ltdrnn.checkpoint import build_task_and_model
from ltdrnn.config import load_config
from ltdrnn.reproduce import jacobian_ratio
from ltdrnn.train import seed_everything


def at_init(k: str, eta: str, seed: int) -> dict:
    overrides = [f"model.options.K={k}", f"model.options.eta={eta}", f"train.seed={seed}"]
    seed_everything(seed)
    task, model = build_task_and_model(load_config("reproduce/irnn-adding200-k", overrides))
    x, y, _ = task.collate([task.dataset("train")[i] for i in range(128)])
    cell = next(m for m in model.modules() if m.__class__.__name__ == "IRNN")
    with torch.no_grad():
        loss = float(((model(x, None).reshape(-1) - y.reshape(-1)) ** 2).mean())
        states, _ = cell.scan(x.transpose(0, 1))
    val = task.dataset("val")
    order = torch.randperm(len(val), generator=torch.Generator().manual_seed(0))[:32]
    ratio = jacobian_ratio(model, task.collate([val[i] for i in order.tolist()])[0])
    return {"K": int(k), "eta": float(eta), "seed": seed, "loss": round(loss, 4),
            "max_abs_hT": round(float(states[-1].abs().max()), 3), "ratio": round(ratio["ratio"], 3)}  # fmt: skip


if __name__ == "__main__":
    torch.set_num_threads(1)
    for spec in sys.argv[1:]:
        for seed in (1, 2, 3):
            print(json.dumps(at_init(*spec.split(":"), seed)))
