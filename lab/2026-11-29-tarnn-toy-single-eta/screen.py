"""TARNN toy task (TARNN sec. 3, Fig. 1) with the printed single eta (Eq. 6: one eta per Euler step, shared over
time): the preset reproduce/toy-tarnn with eta_per_time_step=false, plus the given overrides, on the given seeds.

    python lab/2026-11-29-tarnn-toy-single-eta/screen.py OUT.jsonl LABEL [KEY=VALUE ...] [--seeds 1,2,3]
                                                        [--beta-bias B]

Appends one JSON line per seed to OUT.jsonl: test accuracy (best validation weights; 10,000 sequences), the
best validation accuracy and its step, the validation accuracy at each evaluation, and the learned state of
the cell at the end: eta per Euler step, b_beta, and the mean beta per position on 512 test sequences (the
time constants the paper's Fig. 3b plots). ``--beta-bias``: b_beta at init (the cell fixes it at -3, paper
A.4; the paper's Eq. of beta, sec. 2, prints no bias), set here by patching TARNN.beta_bias_init.
"""

from __future__ import annotations

import argparse
import json

import torch

from ltdrnn import train as trainer
from ltdrnn.cells.tarnn import TARNN
from ltdrnn.tasks.base import build_task

SINGLE_ETA = ["model.options.eta_per_time_step=false", "model.options.max_length=null"]


@torch.no_grad()
def cell_state(model, cfg) -> dict:
    cell = next(m for m in model.modules() if isinstance(m, TARNN))
    task = build_task(cfg.task.name, **cfg.task.options)
    test = task.dataset("test")
    x = task.collate([test[i] for i in range(512)])[0]
    model.eval()
    model(x)
    beta = cell.aux["beta"]  # (T, B, H)
    return {
        "eta": [round(float(v), 5) for v in cell.steps.values().reshape(-1)],
        "b_beta": [round(float(v), 3) for v in cell.bias_beta],
        "beta_by_position": [[round(float(v), 3) for v in row] for row in beta.mean(1)],
    }


def run(label: str, overrides: list, seed: int, beta_bias: float | None) -> dict:
    if beta_bias is not None:
        TARNN.beta_bias_init = lambda self: float(beta_bias)
    cfg = trainer.load_config(
        "reproduce/toy-tarnn",
        SINGLE_ETA
        + overrides
        + [f"train.seed={seed}", "train.threads=1", "train.latency=false", "train.progress=false"],
    )
    cfg.results = None
    holder: dict = {}
    record = trainer.train(cfg, callbacks=[lambda state: holder.__setitem__("model", state["model"])])
    history = record.get("history") or []
    curve = [[h["step"], round(h.get("val_metric", float("nan")), 4)] for h in history]
    best = max(curve, key=lambda c: c[1]) if curve else [None, None]
    return {
        "label": label,
        "overrides": overrides,
        "beta_bias": beta_bias,
        "seed": seed,
        "status": record["status"],
        "steps": record["timings"]["steps"],
        "test_accuracy": record["metrics"]["metric"],
        "best_val": best[1],
        "best_val_step": best[0],
        "val_curve": curve,
        **cell_state(holder["model"], cfg),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("label")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--beta-bias", type=float, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for seed in (int(s) for s in args.seeds.split(",")):
        row = run(args.label, args.overrides, seed, args.beta_bias)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(label_line(row), flush=True)


def label_line(row: dict) -> str:
    best = f"best val {row['best_val']} at {row['best_val_step']}"
    return f"{row['label']} seed {row['seed']}: test {row['test_accuracy']:.4f} ({best})"


if __name__ == "__main__":
    main()
