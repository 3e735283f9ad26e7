"""Train a preset with the library's trainer and log every optimiser step (the seed screens).

    python lab/2026-11-26-seed-screens/step_probe.py PRESET OUT.jsonl [KEY=VALUE ...] [--store DB] [--run-dir DIR]
                                               [--stop-after N] [--label NAME] [--resume]

One JSON line per step in OUT.jsonl: ``step``, ``loss`` (this batch's task loss), ``grad_norm`` (global
norm before clipping), ``update_norm`` and ``largest_update`` (the optimiser step's global norm and its
largest relative change of one parameter tensor, ||delta p|| / ||p||, with that tensor's name), and per cell:

- iRNN: ``eta_min``/``eta_max``, ``M_norm`` (``||P U||_2``) and ``M_abscissa`` (largest real part of an
  eigenvalue of ``P U``): a large norm with an abscissa near 1 is a strongly non-normal operator, whose
  ReLU-masked products can expand the state far faster than the eigenvalues say;
- TARNN: ``eta_min``/``eta_max``;
- SA-RNN: ``skip`` (this batch's skip fraction), ``in_band`` (fraction of update probabilities strictly
  inside (0, 1), where the straight-through gradient reaches the coordinator) and ``slope``.

The last line is a summary: the largest loss and its step, the first non-finite step, and the steps whose
loss rose above twice the task's baseline after the loss had first fallen below half of it ("spikes").
Evaluation, selection and the results row are the trainer's own (``--store``: a results database;
without it no row is written). ``--stop-after N`` ends the run after N steps (no test, no row).
``--resume`` continues the run in ``--run-dir`` from its ``last.pt`` (bit for bit, as the trainer resumes):
the way to replay the steps before a late divergence with every step logged.
"""

from __future__ import annotations

import argparse
import json
import math

import torch
from torch import nn

from ltdrnn import train as trainer


class Stop(Exception):
    pass


def cell_of(model: nn.Module) -> nn.Module | None:
    names = {"IRNN", "TARNN", "SARNN"}
    return next((m for m in model.modules() if m.__class__.__name__ in names), None)


@torch.no_grad()
def cell_record(cell: nn.Module | None) -> dict:
    if cell is None:
        return {}
    kind = cell.__class__.__name__
    if kind in ("IRNN", "TARNN"):
        eta = cell.steps.values()
        record = {"eta_min": float(eta.min()), "eta_max": float(eta.max())}
        if kind == "IRNN":
            from ltdrnn.cells.fused.irnn import dense_operator

            first, second = cell.recurrent_operator()
            m = (first if second is None else dense_operator(first, second)).double()
            record["M_norm"] = float(torch.linalg.matrix_norm(m, 2))
            record["M_abscissa"] = float(torch.linalg.eigvals(m).real.max())
        return record
    prob = cell.aux.get("update_prob")
    if prob is None:
        return {"slope": cell.slope}
    return {
        "skip": float(1 - cell.aux["update_mask"].mean()),
        "in_band": float(((prob > 0) & (prob < 1)).float().mean()),
        "slope": cell.slope,
    }


_previous: dict = {}


def update_record(model: nn.Module) -> dict:
    """The optimiser step's size: its global norm, and the parameter tensor it changed most relative to
    its own norm (a step that moves one tensor by a large fraction is what a runaway starts with)."""
    squares, largest, name_of = 0.0, 0.0, None
    for name, p in model.named_parameters():
        before = _previous.get(name)
        now = p.detach().clone()
        _previous[name] = now
        if before is None:
            continue
        delta = float(torch.linalg.vector_norm(now - before))
        squares += delta**2
        relative = delta / max(float(torch.linalg.vector_norm(before)), 1e-30)
        if relative > largest:
            largest, name_of = relative, name
    if name_of is None:
        return {}
    return {"update_norm": math.sqrt(squares), "largest_update": largest, "largest_update_of": name_of}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("preset")
    parser.add_argument("out")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--store", default=None)
    parser.add_argument("--run-dir", default=None)
    parser.add_argument("--stop-after", type=int, default=None)
    parser.add_argument("--label", default=None, help="a name for the summary line")
    parser.add_argument("--resume", action="store_true", help="continue --run-dir from its last.pt")
    args = parser.parse_args()

    norms: list = []
    clip = nn.utils.clip_grad_norm_

    def recording_clip(params, max_norm, *rest, **options):
        norm = clip(params, max_norm, *rest, **options)
        norms.append(float(norm))
        return norm

    nn.utils.clip_grad_norm_ = recording_clip  # the trainer calls nn.utils.clip_grad_norm_
    cfg = trainer.load_config(args.preset, args.overrides + ["train.progress=false"])
    cfg.results = args.store
    if args.run_dir:
        cfg.run_dir = args.run_dir
    baseline = None
    summary = {"max_loss": -math.inf, "max_step": None, "first_nonfinite": None, "spikes": [], "low_reached": None}
    log = open(args.out, "w")

    def on_step(state: dict) -> None:
        nonlocal baseline
        model, step, loss = state["model"], state["step"], state["loss"]
        if baseline is None:
            from ltdrnn.tasks.base import build_task

            baseline = build_task(cfg.task.name, **cfg.task.options).info.baseline
        if norms:
            grad = norms[-1]
        else:
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            grad = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
        record = {"step": step, "loss": loss, "grad_norm": grad, **update_record(model), **cell_record(cell_of(model))}
        log.write(json.dumps(record) + "\n")
        log.flush()
        if loss > summary["max_loss"]:
            summary["max_loss"], summary["max_step"] = loss, step
        if baseline is not None:
            if summary["low_reached"] is None and loss < baseline / 2:
                summary["low_reached"] = step
            elif summary["low_reached"] is not None and loss > 2 * baseline:
                summary["spikes"].append([step, loss])
        if args.stop_after and step >= args.stop_after:
            raise Stop

    try:
        record = trainer.train(cfg, callbacks=[on_step], resume=args.resume)
        summary.update(status=record["status"], steps=record["timings"]["steps"], test=record["metrics"]["metric"])
        if record["status"] == "diverged":
            summary["first_nonfinite"] = record["timings"]["steps"]
    except Stop:
        summary.update(status="stopped", steps=args.stop_after)
    log.write(json.dumps({"summary": summary}) + "\n")
    log.close()
    print(json.dumps({"label": args.label, "preset": args.preset, "overrides": args.overrides, **summary}))


if __name__ == "__main__":
    main()
