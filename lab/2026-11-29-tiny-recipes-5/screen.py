"""Seed screens of the deploy/tiny presets on GunPoint: one configuration, several seeds, one JSON line each.

A copy of lab/2026-11-29-tiny-recipes-4/screen.py (its rows and runs stay there) without its FastGRNN
trials (gate bias, sparsity), whose runs go to /tmp/tinyrec5/runs. The test trace (the test accuracy,
of the moving average when ``train.ema_decay`` is set, at every ``train.eval_every`` steps) is now off
unless ``--trace``: it doubled a run's time on the shared core. Each row holds the trainer's
``metrics.restarts`` (with ``train.restarts``: each candidate's seed and windowed training loss, and the
seed chosen), so that a row can be matched with round 4's row of the chosen seed.

    python lab/2026-11-29-tiny-recipes-5/screen.py run CELL NAME [KEY=VALUE ...] [--seeds 0 1 2] [--int8]
                                                 [--trace] [--preset deploy/tiny-CELL] [--out results.jsonl]
    python lab/2026-11-29-tiny-recipes-5/screen.py int8 CELL NAME [--seeds 0 1 2] [--fp32]
    python lab/2026-11-29-tiny-recipes-5/screen.py summary [--out results.jsonl] [--seeds 0 1 2] [--cell CELL]

``run`` trains ``deploy/tiny-CELL`` plus the overrides once per seed (``train.seed=S``, one thread, no
results row) in ``/tmp/tinyrec5/runs/CELL/NAME/sS`` and appends one line per seed to the JSONL file
(default: ``results.jsonl`` beside this script): the date, the command, cell, NAME, overrides, the
resolved config, seed, the float test accuracy over all 150 test series of what the trainer tests (the
test split is read once, after training), the best step, the screen of ``train.restarts`` and the
training time. A (cell, NAME, seed) already in the file is skipped, so a screen can be rerun to finish
it. ``--int8`` also exports the run as the integer C step and records its accuracy over the same 150
series, its agreement with eager float32 and its weight bytes.

``int8`` exports runs already trained (``/tmp/tinyrec5/runs/CELL/NAME/sS``) as the integer C step and
appends their int8 accuracy, agreement with eager float32 and weight bytes over the test series (with
the eager accuracy and the number of series) to ``int8.jsonl`` beside this script; ``--fp32`` adds the
same for the float C step compiled for the host (``fp32_*``), measured by :func:`c_parity`'s copy of
the export's parity (``"parity": "lean"``).

``summary`` prints one row per (cell, NAME): n, mean +- sample std (n - 1) and min of the float test
accuracy (and of the int8 one where measured) over the seeds asked for.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = Path("/tmp/tinyrec5/runs")


def done(out: Path):
    if not out.exists():
        return set()
    return {(r["cell"], r["name"], r["seed"]) for r in map(json.loads, out.read_text().splitlines())}


def c_parity(run_dir: Path, int8: bool = True) -> dict:
    """The C step's accuracy, agreement with eager and weight bytes over the test split, measured as
    ``ltdrnn export RUN --format c [--int8]`` measures its parity (``export._measure``'s parity part): the
    same generated step, compiled for the host and fed the raw series. Without the export's long-stream
    probe and latency loops, which took minutes per export on the loaded machine."""
    import numpy as np

    from ltdrnn.export import StreamingStep, _calibration, c_build, load_trained, measure
    from ltdrnn.export.c_export import generate_c
    from ltdrnn.export.contract import contract

    kind = "int8" if int8 else "fp32"
    model, _, task = load_trained(str(run_dir))
    step = StreamingStep(model)
    agreed = contract(step, task, measured=False)
    out = run_dir / f"parity-{kind}"
    out.mkdir(exist_ok=True)
    generated = generate_c(step, "model", int8, _calibration(task), agreed)
    written = c_build.write(step, generated, out)
    run, channel = written["step"], agreed["input"]["channel"]
    if channel is not None:  # the C step standardises its input itself: feed it the raw series
        mean, std = (np.asarray(channel[k], np.float32) for k in ("mean", "std"))
        run = lambda x_t, state, normalised=run: normalised(x_t * std + mean, state)  # noqa: E731
    parity = measure.parity(model, step, run, task, "test", init=written["init"])
    return {
        f"{kind}_eager_accuracy": parity["accuracy_eager"],
        f"{kind}_accuracy": parity["accuracy_export"],
        f"{kind}_agreement": parity["agreement"],
        f"{kind}_sequences": parity["sequences"],
        f"{kind}_weight_bytes": generated.weight_bytes,
    }


class TestTrace:
    """Test accuracy and loss at every validation step, for comparing selection rules afterwards."""

    def __init__(self, cfg):
        from ltdrnn.checkpoint import build_task_and_model

        self.task = build_task_and_model(cfg)[0]
        self.every, self.batch = cfg.train.eval_every, cfg.train.eval_batch_size or cfg.train.batch_size
        self.trace = {}

    def __call__(self, state) -> None:
        import contextlib

        from ltdrnn.evaluation import evaluate

        if state["step"] % self.every == 0:
            average, model = state.get("average"), state["model"]
            with average.applied(model) if average is not None else contextlib.nullcontext():
                summary = evaluate(model, self.task, "test", self.batch)[0]
            self.trace[state["step"]] = summary["accuracy"]


def selections(history, trace) -> dict:
    """The test accuracy of the checkpoint each validation rule picks (see the module's docstring)."""
    import math

    rows = [h for h in history if h["step"] in trace and math.isfinite(h["val_loss"])]
    if not rows:  # no validation split: only the final weights and the diagnosis
        return {"last": trace[max(trace)], "ceiling": max(trace.values())} if trace else {}
    by_loss = min(rows, key=lambda h: h["val_loss"])  # min/max keep the first of equals, as the trainer
    by_accuracy = max(rows, key=lambda h: h["val_accuracy"])
    by_both = min(rows, key=lambda h: (-h["val_accuracy"], h["val_loss"]))
    picked = {"by_loss": by_loss, "by_accuracy": by_accuracy, "by_accuracy_then_loss": by_both}
    result = {f"{rule}": trace[h["step"]] for rule, h in picked.items()}
    result.update(last=trace[max(trace)], ceiling=max(trace.values()))
    return result


def traced(history, trace) -> list:
    """[step, validation loss, validation accuracy, test accuracy] at every validation, so that other
    selection rules can be judged afterwards from the same run (``rules.py``)."""
    if not history:  # no validation split: the test accuracy at every traced step
        return [[step, None, None, accuracy] for step, accuracy in sorted(trace.items())]
    return [[h["step"], h["val_loss"], h["val_accuracy"], trace[h["step"]]] for h in history if h["step"] in trace]


def run(args) -> None:
    from ltdrnn.config import load_config
    from ltdrnn.train import train

    preset = args.preset or f"deploy/tiny-{args.cell}"
    seen = done(args.out)
    for seed in args.seeds:
        if (args.cell, args.name, seed) in seen:
            continue
        run_dir = RUNS / args.cell / args.name / f"s{seed}"
        overrides = list(args.overrides) + [f"train.seed={seed}", "train.threads=1", "train.progress=false"]
        cfg = load_config(preset, overrides)
        cfg.run_dir, cfg.results = str(run_dir), None
        start = time.time()
        trace = TestTrace(cfg)
        record = train(cfg, callbacks=[trace] if args.trace else [])
        metrics = record["metrics"]
        best = next((h for h in record["history"] if h["step"] == metrics["best_step"]), {})
        row = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "python lab/2026-11-29-tiny-recipes-5/screen.py " + shlex.join(sys.argv[1:]),
            "cell": args.cell,
            "name": args.name,
            "preset": preset,
            "overrides": list(args.overrides),
            "config": {k: v for k, v in cfg.to_dict().items() if k in ("model", "task", "optim", "train")},
            "seed": seed,
            "test_accuracy": metrics["test"]["accuracy"],
            "test_loss": metrics["test"]["loss"],
            "best_step": metrics["best_step"],
            "best_val_loss": best.get("val_loss"),
            "best_val_accuracy": best.get("val_accuracy"),
            "status": record["status"],
            "restarts": metrics["restarts"],
            "rules": selections(record["history"], trace.trace),
            "trace": traced(record["history"], trace.trace),
            "params": metrics["params"],
            "train_s": round(record["timings"]["train_s"], 1),
            "wall_s": round(time.time() - start, 1),
        }
        if args.int8:
            row.update(c_parity(run_dir))
        with args.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps({k: row[k] for k in ("cell", "name", "seed", "test_accuracy", "best_step", "wall_s")}))


def int8_rows(args) -> None:
    out = HERE / "int8.jsonl"
    for seed in args.seeds:
        row = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "python lab/2026-11-29-tiny-recipes-5/screen.py " + shlex.join(sys.argv[1:]),
            "cell": args.cell,
            "name": args.name,
            "seed": seed,
            "parity": "lean",
        }
        for int8 in [True] + [False] * args.fp32:
            row.update(c_parity(RUNS / args.cell / args.name / f"s{seed}", int8))
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row))


def spread(values):
    mean = statistics.mean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * mean:.1f} ± {100 * std:.1f} (min {100 * min(values):.1f})"


def described(row) -> str:
    return " ".join(row["overrides"])


def rule_means(group) -> str:
    if not all(r.get("rules") for r in group):
        return ""
    rules = ("by_accuracy", "by_accuracy_then_loss", "last", "ceiling")
    return " / ".join(f"{100 * statistics.mean(r['rules'][k] for r in group):.1f}" for k in rules)


def summary(args) -> None:
    rows = [json.loads(line) for line in args.out.read_text().splitlines()]
    groups = {}
    for r in rows:
        if r["seed"] in args.seeds and (args.cell is None or r["cell"] == args.cell):
            groups.setdefault((r["cell"], r["name"]), []).append(r)
    print(
        "| cell | configuration | overrides | seeds | float accuracy % mean ± std (min) | int8 % | best steps "
        "| other rules: accuracy / accuracy then loss / last / ceiling (means) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (cell, name), group in groups.items():
        group.sort(key=lambda r: r["seed"])
        int8 = [r["int8_accuracy"] for r in group if "int8_accuracy" in r]
        print(
            f"| {cell} | {name} | `{described(group[0])}` | {','.join(str(r['seed']) for r in group)} "
            f"| {spread([r['test_accuracy'] for r in group])} | {spread(int8) if int8 else ''} "
            f"| {','.join(str(r['best_step']) for r in group)} | {rule_means(group)} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run")
    p.add_argument("cell")
    p.add_argument("name")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--preset")
    p.add_argument("--int8", action="store_true")
    p.add_argument("--trace", action="store_true")
    p.add_argument("--out", type=Path, default=HERE / "results.jsonl")
    s = sub.add_parser("summary")
    s.add_argument("--out", type=Path, default=HERE / "results.jsonl")
    s.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    s.add_argument("--cell")
    i = sub.add_parser("int8")
    i.add_argument("cell")
    i.add_argument("name")
    i.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    i.add_argument("--fp32", action="store_true")
    args = parser.parse_args()
    {"run": run, "int8": int8_rows, "summary": summary}[args.command](args)


if __name__ == "__main__":
    main()
