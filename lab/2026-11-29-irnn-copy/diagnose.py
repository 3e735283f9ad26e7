"""Where the ungated iRNN's copy model loses the recall: state scale, gradients and eta over the time steps.

    nice -n 19 .venv/bin/python lab/2026-11-29-irnn-copy/diagnose.py WEIGHTS.pt   # saved by screen.py --save
    nice -n 19 .venv/bin/python lab/2026-11-29-irnn-copy/diagnose.py --init [--seed S] [KEY=VALUE ...]

On 256 copy sequences (T from the config), one streaming step at a time with autograd, so that every
state ``h_t`` is a leaf of the graph whose gradient is the *total* one (through the head and all later steps):
- ``rms_h``: root mean square of ``h_t`` over batch and units, per time step;
- ``g_all``, ``g_recall``: ``||dL/dh_t||`` (mean over the batch of the per-sequence norm) for the whole loss and
  for the loss of the 10 recall steps alone: what of the recall's error reaches the write steps;
- ``eta``: the step size used at each time step (one row per time step, or the shared one);
- recall accuracy per position (1..10) and the cross entropy split into the blank part and the recall part.
Prints a compact table; ``--json OUT`` writes the arrays.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch
import torch.nn.functional as F
from screen import build, copy_batch


def analyse(model, T):
    cell = model.rnn.cells[0]
    x, y = copy_batch(np.random.default_rng(11), 256, T)
    state = cell.init_state(x.shape[0])
    inputs = cell.precompute(x.transpose(0, 1))
    hs, logits = [], []
    for t in range(x.shape[1]):
        h, state = cell.step(inputs[t], state)  # the state carries this very tensor on
        h.retain_grad()
        hs.append(h)
        logits.append(model.output(h))
    z = torch.stack(logits, 1)
    ce = F.cross_entropy(z.transpose(1, 2), y, reduction="none")  # (B, T+20)
    result = {"rms_h": [float(h.detach().pow(2).mean().sqrt()) for h in hs]}
    for name, loss in (("g_recall", ce[:, -10:].mean()), ("g_all", ce.mean())):
        for h in hs:
            h.grad = None
        loss.backward(retain_graph=True)
        result[name] = [float(h.grad.norm(dim=1).mean()) for h in hs]
    eta = cell.steps.values().detach()
    if eta.dim() == 3:  # per unit: the mean over units
        eta = eta.mean(-1)
    result["eta"] = eta[: x.shape[1], 0].tolist() if eta.dim() == 2 else [float(eta[0])] * x.shape[1]
    result["recall_acc"] = (z[:, -10:].argmax(-1) == y[:, -10:]).float().mean(0).tolist()
    result["ce_blank"] = ce[:, :-10].mean().item()
    result["ce_recall"] = ce[:, -10:].mean().item()
    result["head_norm"] = float(model.output.weight.norm())
    return result


def show(r, T):
    marks = {0: "write 1", 9: "write 10", T + 9: "delimiter", T + 10: "recall 1", T + 19: "recall 10"}
    print(" t      eta    rms_h   |dL/dh_t|  |dL_recall/dh_t|")
    for t in sorted(set(list(range(0, 10, 3)) + [9, 10, T // 2 + 10, T + 8, T + 9, T + 10, T + 14, T + 19])):
        row = f"{t:3d} {r['eta'][t]:8.4f} {r['rms_h'][t]:8.3f} {r['g_all'][t]:10.2e} {r['g_recall'][t]:10.2e}"
        print(f"{row}  {marks.get(t, '')}")
    print("recall accuracy by position:", " ".join(f"{a:.2f}" for a in r["recall_acc"]))
    print(f"CE blank part {r['ce_blank']:.4f}, recall part {r['ce_recall']:.4f} (chance ln 8 = 2.079)")
    print(f"head norm {r['head_norm']:.1f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("weights", nargs="?")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--init", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json")
    args = parser.parse_intermixed_args()
    torch.set_num_threads(1)
    if args.init:
        overrides = ([args.weights] if args.weights else []) + args.overrides
        cfg, _, model = build(overrides, args.seed)
    else:
        saved = torch.load(args.weights)
        cfg, _, model = build(saved["overrides"], saved["seed"])
        model.load_state_dict(saved["state"])
    T = cfg.task.options["T"]
    r = analyse(model, T)
    show(r, T)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f)


if __name__ == "__main__":
    main()
