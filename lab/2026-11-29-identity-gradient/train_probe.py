"""iRNN on adding T=200 (preset reproduce/irnn-adding200-k): train with the library's trainer and log, per step,
the loss, the gradient norm before clipping, max |h_T| and mean ||h_T|| on a fixed batch of 128 training
sequences (first 30 steps, then every 25), and every 50 steps the ratio ||dh_T/dh_1|| / ||dh_T/dh_{T-1}||
(iRNN Fig. 3b; float64, 32 validation sequences, reproduce.jacobian_ratio) and ||P U||_2.

    python lab/2026-11-29-identity-gradient/train_probe.py OUT.jsonl LABEL [KEY=VALUE ...] [--init-only]

The last line of OUT.jsonl is a summary: the first step whose validation MSE is <= 0.01 (evaluations every
25 steps), the test MSE (best validation weights), the first non-finite step, the largest loss.
``--init-only``: only the measurements at init (step 0).
"""

from __future__ import annotations

import argparse
import json
import math

import torch
from ltdrnn.cells.fused.irnn import dense_operator
from torch import nn

from ltdrnn import train as trainer
from ltdrnn.analysis.gradients import cell_inputs
from ltdrnn.reproduce import jacobian_ratio

EVERY = 25
RATIO_EVERY = 50


def irnn_of(model: nn.Module) -> nn.Module:
    return next(m for m in model.modules() if m.__class__.__name__ == "IRNN")


@torch.no_grad()
def state_record(model: nn.Module, x: torch.Tensor) -> dict:
    cell = irnn_of(model)
    was = model.training
    model.eval()
    states, _ = cell.scan(cell_inputs(model, x))
    model.train(was)
    h_t = states[-1].double()
    first, second = cell.recurrent_operator()
    m = (first if second is None else dense_operator(first, second)).double()
    return {
        "max_abs_hT": float(h_t.abs().max()),
        "mean_norm_hT": float(h_t.norm(dim=-1).mean()),
        "M_norm": float(torch.linalg.matrix_norm(m, 2)),
        "eta": float(cell.steps.values().mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("label")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--init-only", action="store_true")
    parser.add_argument("--run-dir", default=None)
    args = parser.parse_args()

    norms: list = []
    clip = nn.utils.clip_grad_norm_

    def recording_clip(params, max_norm, *rest, **options):
        norm = clip(params, max_norm, *rest, **options)
        norms.append(float(norm))
        return norm

    nn.utils.clip_grad_norm_ = recording_clip
    cfg = trainer.load_config("reproduce/irnn-adding200-k", args.overrides + ["train.progress=false"])
    cfg.results = None
    if args.run_dir:
        cfg.run_dir = args.run_dir
    log = open(args.out, "w")
    probe: dict = {}
    summary = {"label": args.label, "overrides": args.overrides, "max_loss": -math.inf, "max_step": None}

    def measure(model: nn.Module, step: int, loss: float | None) -> None:
        if "x" not in probe:
            from ltdrnn.tasks.base import build_task

            task = build_task(cfg.task.name, **cfg.task.options)
            train_set, val = task.dataset("train"), task.dataset("val")
            probe["x"] = task.collate([train_set[i] for i in range(128)])[0]
            order = torch.randperm(len(val), generator=torch.Generator().manual_seed(0))[:32]
            probe["val"] = task.collate([val[i] for i in order.tolist()])[0]
        record = {"step": step, "loss": loss, "grad_norm": norms[-1] if norms else None}
        if step <= 30 or step % EVERY == 0:
            record.update(state_record(model, probe["x"]))
        if step % RATIO_EVERY == 0:
            record["ratio"] = jacobian_ratio(model, probe["val"])["ratio"]
        log.write(json.dumps(record) + "\n")
        log.flush()

    def on_step(state: dict) -> None:
        step, loss = state["step"], state["loss"]
        if loss > summary["max_loss"]:
            summary["max_loss"], summary["max_step"] = loss, step
        measure(state["model"], step, loss)

    if args.init_only:
        from ltdrnn.checkpoint import build_task_and_model

        trainer.seed_everything(cfg.train.seed)
        _, model = build_task_and_model(cfg)
        measure(model, 0, None)
        log.close()
        return
    record = trainer.train(cfg, callbacks=[on_step])
    history = record.get("history") or []
    reached = next((h["step"] for h in history if h.get("val_loss", math.inf) <= 0.01), None)
    summary.update(
        status=record["status"], steps=record["timings"]["steps"], test=record["metrics"]["metric"], reached_001=reached
    )
    log.write(json.dumps({"summary": summary}) + "\n")
    log.close()
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
