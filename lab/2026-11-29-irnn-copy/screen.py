"""One short copy run of the ungated iRNN with every step's diagnostics (the 2026-11-29 screen).

    nice -n 19 .venv/bin/python lab/2026-11-29-irnn-copy/screen.py NAME --seed S --steps N [KEY=VALUE ...]

The model and optimiser are those of ``reproduce/copy200-irnn`` at T = 20 with ``gate=none`` (Adam, the
preset's lr, beta2 and clipping), changed by the KEY=VALUE overrides (config keys, as ``ltdrnn train``).
A lean loop instead of the trainer, so that the 2-core machine can run many screens: fresh batches of the
copy task drawn with numpy (the task's distribution: ``tasks/synthetic.py``), validation cross entropy
on 512 fixed sequences every ``--eval-every`` steps, the test on 1,000 sequences of the task's own test split
with the best-validation weights. Appends one JSON line to ``runs.jsonl`` beside this file: the config's
overrides, the curve (step, train-loss EMA, validation CE, eta range, largest abs(h), gradient norm) and the
test CE, also as a share of the memoryless 10 ln 8 / (T + 20).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from per_unit import make_per_unit

from ltdrnn import apply_constraints_
from ltdrnn.config import load_config
from ltdrnn.models import build_model
from ltdrnn.tasks.base import build_task

HERE = Path(__file__).resolve().parent
BASE = ["task.options.T=20", "model.options.gate=none"]


def copy_batch(rng: np.random.Generator, batch: int, T: int):
    """The copy task's items, vectorised: 10 symbols of 0..7, T-1 blanks (8), the delimiter (9), 10 blanks."""
    symbols = rng.integers(0, 8, size=(batch, 10))
    tokens = np.full((batch, T + 20), 8)
    tokens[:, :10] = symbols
    tokens[:, T + 9] = 9
    targets = np.full((batch, T + 20), 8)
    targets[:, -10:] = symbols
    x = F.one_hot(torch.from_numpy(tokens), 10).float()
    return x, torch.from_numpy(targets)


def cross_entropy(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def build(overrides, seed):
    """``lab.per_unit=true`` among the overrides: one step size per unit (per_unit.py, not a config key)."""
    per_unit = "lab.per_unit=true" in overrides
    cfg = load_config("reproduce/copy200-irnn", BASE + [o for o in overrides if not o.startswith("lab.")])
    task = build_task(cfg.task.name, **cfg.task.options)
    torch.manual_seed(seed)
    model = build_model(cfg.model, task.info)
    return cfg, task, make_per_unit(model) if per_unit else model


def optimiser(cfg, model):
    o = cfg.optim
    return torch.optim.Adam(model.parameters(), lr=o.lr, betas=(0.9, o.beta2))


@torch.no_grad()
def probe(model, x):
    """Largest abs(h) over the validation batch and time, from the recurrent layer itself."""
    out, _ = model.rnn(x)
    return float(out.abs().max())


def run(name, seed, steps, eval_every, overrides, batch):
    cfg, task, model = build(overrides, seed)
    T = cfg.task.options["T"]
    rng = np.random.default_rng(1000 + seed)
    x_val, y_val = copy_batch(np.random.default_rng(7), 512, T)
    opt = optimiser(cfg, model)
    clip = cfg.optim.clip_norm
    cell = model.rnn.cells[0]
    best, best_state, curve, ema, started = math.inf, None, [], None, time.time()
    status = "finished"
    for step in range(1, steps + 1):
        x, y = copy_batch(rng, batch, T)
        loss = cross_entropy(model, x, y)
        opt.zero_grad()
        loss.backward()
        gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip if clip else math.inf))
        if not math.isfinite(loss.item()) or not math.isfinite(gnorm):
            status = f"diverged at {step}"
            break
        opt.step()
        apply_constraints_(model)
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % eval_every == 0 or step == steps:
            with torch.no_grad():
                val = float(cross_entropy(model, x_val, y_val))
            eta = cell.steps.values().detach()
            curve.append(
                {
                    "step": step,
                    "train": round(ema, 5),
                    "val": round(val, 5),
                    "eta": [round(float(eta.min()), 4), round(float(eta.max()), 4)],
                    "h_max": round(probe(model, x_val), 3),
                    "grad": round(gnorm, 3),
                }
            )
            if math.isfinite(val) and val < best:
                best, best_state = val, copy.deepcopy(model.state_dict())
    if best_state is not None:
        model.load_state_dict(best_state)
    test_items = [task.dataset("test")[i] for i in range(1000)]
    x_test = torch.stack([a for a, _ in test_items])
    y_test = torch.stack([b for _, b in test_items])
    test, worst = math.nan, math.nan
    if best_state is not None:
        with torch.no_grad():  # per sequence too: one runaway sequence can carry the mean
            logits = model(x_test)
            per_sequence = F.cross_entropy(logits.transpose(1, 2), y_test, reduction="none").mean(1)
        test, worst = per_sequence.mean().item(), per_sequence.max().item()
        rest = (per_sequence.sum() - worst).item() / (len(per_sequence) - 1)
    baseline = 10 * math.log(8) / (T + 20)
    row = {
        "name": name,
        "seed": seed,
        "steps": steps,
        "batch": batch,
        "overrides": list(overrides),
        "status": status,
        "test": round(test, 5),
        "worst_sequence": round(worst, 4),
        "test_without_worst": round(rest, 5) if best_state is not None else None,
        "share": round(test / baseline, 4),
        "best_val": round(best, 5),
        "seconds": round(time.time() - started, 1),
        "curve": curve,
    }
    with open(HERE / "runs.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    share = f"{100 * test / baseline:.1f}% of memoryless"
    print(f"{name} seed {seed}: test {test:.4f} ({share}), {status}, {row['seconds']} s")
    return model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--save", help="where to save the tested weights (default /tmp/irnn-copy/NAME-sSEED.pt)")
    args = parser.parse_intermixed_args()
    torch.set_num_threads(1)
    model = run(args.name, args.seed, args.steps, args.eval_every, args.overrides, args.batch)
    save = Path(args.save or f"/tmp/irnn-copy/{args.name}-s{args.seed}.pt")
    save.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"overrides": args.overrides, "seed": args.seed, "state": model.state_dict()}, save)


if __name__ == "__main__":
    main()
