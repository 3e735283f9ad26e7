"""iRNN's ratio ||dh_T/dh_1|| / ||dh_T/dh_{T-1}|| (iRNN Fig. 3b) in float64, at init and after training.

    python lab/2026-11-23-readings/irnn_ratio.py [RUN_DIR ...] [--init K=1,5,10] [--seeds 1,2,3]

``--init``: for each K and seed, the preset irnn/adding-750 at T=200 (paper settings, default reading)
right after initialisation (seeded as ``ltdrnn train ... train.seed=S`` seeds it). Each RUN_DIR: the
weights the run was tested with (``best.pt``, the best validation loss). Printed as one JSON line per
model; the batch is 32 validation sequences of the run's task (reproduce.jacobian_ratio).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from ltdrnn.config import load_config
from ltdrnn.models import build_model
from ltdrnn.reproduce import jacobian_ratio
from ltdrnn.tasks.base import build_task
from ltdrnn.train import seed_everything


def ratio_of(cfg, state=None) -> dict:
    task = build_task(cfg.task.name, **cfg.task.options)
    model = build_model(cfg.model, task.info)
    if state is not None:
        model.load_state_dict(state)
    model.double()
    dataset = task.dataset("val")
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))[:32]
    x = task.collate([dataset[i] for i in order.tolist()])[0].double()
    return jacobian_ratio(model, x)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="*")
    parser.add_argument("--init", default="", help="comma-separated K values to measure at init")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--set", nargs="*", default=[], help="extra KEY=VALUE overrides at init")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for k in [int(v) for v in args.init.split(",") if v]:
        for seed in [int(v) for v in args.seeds.split(",")]:
            overrides = ["task.options.T=200", "task.options.n_train=128", "task.options.n_val=256",
                         "task.options.n_test=128", f"model.options.K={k}", f"train.seed={seed}", *args.set]
            cfg = load_config("irnn/adding-750", overrides)
            seed_everything(seed)
            print(json.dumps({"at": "init", "K": k, "seed": seed, "options": args.set, **ratio_of(cfg)}),
                  flush=True)
    for run in args.runs:
        checkpoint = torch.load(Path(run) / "best.pt", map_location="cpu", weights_only=True)
        cfg = load_config(checkpoint["config"])
        print(json.dumps({"at": "trained", "run": run, "step": checkpoint.get("step"),
                          "K": cfg.model.options.get("K"), "seed": cfg.train.seed,
                          "options": cfg.model.options, **ratio_of(cfg, checkpoint["model"])}), flush=True)


if __name__ == "__main__":
    main()
