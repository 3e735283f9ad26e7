"""SA-RNN with the authors' gradient on adding T = 500: which factor makes the coordinator's gradient grow.

For one factor varied at a time (``FACTORS``), trains ``reproduce/sarnn-adding500`` with the coordinator's
straight-through path into ``h_{t-1}`` (``coordinator_state_grad=true``, the authors' code) and the
trainer's own protocol (Adam 1e-3, batch 128, clipping at 1, the preset's λ unless the factor sets it), and at
init and after each of ``--steps`` measures, on ``--probe`` fixed training batches of 128, the gradient of the
training objective (MSE + λ · budget) twice at the same weights: with the path and with it cut
(``coordinator_state_grad`` flipped for the measurement only). Per point: the coordinator's and the GRU's
gradient norms both ways, their ratios, the cosine of the two whole gradients, the probe batches' skip
and in-band fractions, and the median global norm (before clipping) the trainer saw over the last 50 steps.
One JSON line per point in OUT.

    nice -n 10 .venv/bin/python lab/2026-11-29-sarnn-authors-gradient/factors.py OUT.jsonl FACTOR[:SEEDS] ...
        [--steps 100,200] [--probe 2] [--set KEY=VALUE ...]

    .venv/bin/python lab/2026-11-29-sarnn-authors-gradient/factors.py --table OUT.jsonl   # the README's table

FACTOR is a name of ``FACTORS``; SEEDS a comma list (default 1). ``--set`` adds overrides to every run
(a smoke test: ``--set task.options.T=20 --steps 2``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time

import torch
from torch import nn

from ltdrnn import train as trainer
from ltdrnn.cells.sarnn import SARNN
from ltdrnn.checkpoint import build_task_and_model

PRESET = "reproduce/sarnn-adding500"
AUTHORS_PATH = ["model.options.coordinator_state_grad=true", "train.threads=1", "train.latency=false"]
# λ = 1e-4 is the base: the paper's largest (Table 4) and the setting of the earlier gradient measurement.
BASE = ["train.loss_weights.budget=1.0e-4"]
# name -> (overrides on top of BASE, the coordinator's initial bias or None for the preset's uniform init)
FACTORS = {
    "base": ([], None),  # α = 1 annealed (paper; 1.00 throughout 200 steps), λ 1e-4 (authors' code's mean)
    "alpha0.1": (["model.options.anneal_slope=false", "model.options.slope=0.1"], None),  # authors' code
    "alpha0.3": (["model.options.anneal_slope=false", "model.options.slope=0.3"], None),  # ours, in between
    "bias+0.5": ([], 0.5),  # every unit starts updating (ũ ≈ 0.75 at α = 1)
    "bias-0.5": ([], -0.5),  # every unit starts skipping (ũ ≈ 0.25): the GRU's gradient is 0
    "bias+0.1": ([], 0.1),  # most units start updating
    "bias-0.1": ([], -0.1),  # most units start skipping
    "lambda0": (["train.loss_weights.budget=0.0"], None),
    "lambda1e-5": (["train.loss_weights.budget=1.0e-5"], None),
    "lambda_sum1e-4": (["train.loss_weights.budget=0.0128"], None),  # Eq. 9's sum over units: H · 1e-4
}
COORDINATOR = ("coord_",)
GRU = (".weight_hh", ".weight_ih", ".bias_hh", ".bias_ih")


UNIFORM_INIT = SARNN.reset_parameters


class Done(Exception):
    pass


def with_initial_bias(bias: float | None):
    """Make every SARNN built from now on start with the coordinator's bias ``bias`` (the uniform draws of the
    other weights unchanged, so the run is the preset's but for the bias)."""

    def reset(cell: SARNN) -> None:
        UNIFORM_INIT(cell)
        if bias is not None:
            with torch.no_grad():
                cell.coord_bias.fill_(bias)

    SARNN.reset_parameters = reset


def sarnn_of(model: nn.Module) -> SARNN:
    return next(m for m in model.modules() if isinstance(m, SARNN))


def gradients(model, batches, budget: float, path: bool) -> dict:
    cell = sarnn_of(model)
    kept = cell.coordinator_state_grad
    cell.coordinator_state_grad = path
    model.zero_grad(set_to_none=True)
    for x, y in batches:
        pred = model(x, None).reshape(-1)
        loss = ((pred - y.reshape(-1)) ** 2).mean() + budget * model.losses()["budget"]
        (loss / len(batches)).backward()
    cell.coordinator_state_grad = kept
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def norm(grads: dict, keys) -> float:
    return float(sum((g**2).sum() for n, g in grads.items() if any(k in n for k in keys)) ** 0.5)


@torch.no_grad()
def decisions(model, batches) -> dict:
    skip, band = [], []
    for x, _ in batches:
        model(x, None)
        aux = sarnn_of(model).aux
        skip.append(float(1 - aux["update_mask"].mean()))
        prob = aux["update_prob"]
        band.append(float(((prob > 0) & (prob < 1)).float().mean()))
    return {"skip": statistics.mean(skip), "in_band": statistics.mean(band)}


def measure(model, batches, budget: float) -> dict:
    was_training = model.training
    model.train()
    path, cut = gradients(model, batches, budget, True), gradients(model, batches, budget, False)
    flat = [torch.cat([g.flatten() for g in grads.values()]) for grads in (path, cut)]
    row = {
        "coord_path": norm(path, COORDINATOR),
        "coord_cut": norm(cut, COORDINATOR),
        "gru_path": norm(path, GRU),
        "gru_cut": norm(cut, GRU),
        "cos": float(nn.functional.cosine_similarity(*flat, dim=0)),
        "slope": sarnn_of(model).slope,
        **decisions(model, batches),
    }
    for name, over, under in (
        ("coord_over_gru_path", "coord_path", "gru_path"),
        ("coord_over_gru_cut", "coord_cut", "gru_cut"),
        ("coord_path_over_cut", "coord_path", "coord_cut"),
    ):  # a GRU whose units all skip gets no gradient at all
        row[name] = row[over] / row[under] if row[under] else None
    model.train(was_training)
    return row


def probe_batches(task, count: int) -> list:
    items = task.dataset("train")
    return [task.collate([items[i] for i in range(128 * b, 128 * (b + 1))])[:2] for b in range(count)]


def one_run(factor: str, seed: int, steps: list, probe: int, extra: list, out) -> None:
    overrides, bias = FACTORS[factor]
    with_initial_bias(bias)
    cfg = trainer.load_config(
        PRESET,
        AUTHORS_PATH + BASE + overrides + extra + [f"train.seed={seed}", "train.eval_every=0", "train.progress=false"],
    )
    cfg.results = None
    budget = float(cfg.train.loss_weights.get("budget", 0.0))
    trainer.seed_everything(seed)  # the trainer's own init: the same seed, then the same build
    task, model = build_task_and_model(cfg)
    batches = probe_batches(task, probe)
    started = time.time()

    def write(step: int, row: dict) -> None:
        record = {"factor": factor, "seed": seed, "step": step, "budget": budget, "bias": bias, **row}
        record["cpu_s"] = round(time.time() - started, 1)
        out.write(json.dumps(record) + "\n")
        out.flush()
        print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in record.items()}), flush=True)

    write(0, measure(model, batches, budget))
    norms: list = []
    clip = nn.utils.clip_grad_norm_

    def recording_clip(params, max_norm, *rest, **options):
        total = clip(params, max_norm, *rest, **options)
        norms.append(float(total))
        return total

    losses: list = []

    def on_step(state: dict) -> None:
        losses.append(state["loss"])
        if state["step"] in steps:
            row = measure(state["model"], batches, budget)
            row["train_loss_last50"] = statistics.mean(losses[-50:])
            row["clip_norm_median_last50"] = statistics.median(norms[-50:])
            write(state["step"], row)
        if state["step"] >= max(steps):
            raise Done

    nn.utils.clip_grad_norm_ = recording_clip  # the trainer clips through nn.utils.clip_grad_norm_
    cfg.run_dir = tempfile.mkdtemp(prefix="sarnn-factors-")
    try:
        trainer.train(cfg, callbacks=[on_step])
    except Done:
        pass
    finally:
        nn.utils.clip_grad_norm_ = clip
        shutil.rmtree(cfg.run_dir, ignore_errors=True)


def table(path: str) -> None:
    """The README's table: one row per factor, seed and step."""
    print("| factor | seed | step | coordinator, path / cut | GRU, path / cut | coordinator / GRU, path (cut) ", end="")
    print("| coordinator, path / cut | cos | skip | training loss, last 50 | norm before clipping, median of 50 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ratio = lambda v: "–" if v is None else f"{v:.3g}"  # noqa: E731
    for line in open(path):
        r = json.loads(line)
        print(
            f"| {r['factor']} | {r['seed']} | {r['step']} | {r['coord_path']:.3g} / {r['coord_cut']:.3g} "
            f"| {r['gru_path']:.3g} / {r['gru_cut']:.3g} | {ratio(r['coord_over_gru_path'])} "
            f"({ratio(r['coord_over_gru_cut'])}) | {ratio(r['coord_path_over_cut'])} | {r['cos']:.2f} "
            f"| {r['skip']:.2f} | {ratio(r.get('train_loss_last50'))} | {ratio(r.get('clip_norm_median_last50'))} |"
        )


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        return table(sys.argv[2])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("runs", nargs="+", help="FACTOR[:SEEDS], e.g. alpha0.1:1,2,3")
    parser.add_argument("--steps", default="100,200")
    parser.add_argument("--probe", type=int, default=2, help="fixed training batches of 128 per measurement")
    parser.add_argument("--set", action="append", default=[], help="an override for every run")
    args = parser.parse_args()
    torch.set_num_threads(1)
    steps = [int(s) for s in args.steps.split(",")]
    with open(args.out, "a") as out:
        for spec in args.runs:
            factor, _, seeds = spec.partition(":")
            if factor not in FACTORS:
                parser.error(f"FACTOR: expected one of {', '.join(FACTORS)}, got {factor!r}")
            for seed in [int(s) for s in (seeds or "1").split(",")]:
                one_run(factor, seed, steps, args.probe, args.set, out)


if __name__ == "__main__":
    main()
