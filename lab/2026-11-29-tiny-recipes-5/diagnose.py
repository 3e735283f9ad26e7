"""Is a seed that goes wrong visible in its training loss early? Per-step training loss of the presets' runs.

    python lab/2026-11-29-tiny-recipes-5/diagnose.py run CELL [--seeds 0 1 ...]
    python lab/2026-11-29-tiny-recipes-5/diagnose.py report CELL [--fractions 0.1 0.2 0.3] [--tail 0.1]

``run`` trains ``deploy/tiny-CELL`` as committed (round 4's recipe for MIST, SA-RNN and SRNN: all 50
training series, the averaged final weights tested) once per seed, in one process, one thread, runs in
/tmp/tinyrec5/diag/CELL/sS, and appends to ``diagnosis.jsonl`` beside this script the float test accuracy
over the 150 test series and the training loss of every optimiser step (the batch's mean loss, which the
trainer passes to its callbacks; the test split is read once, after training, by the trainer).

``report`` prints, per seed, the test accuracy and the mean training loss over the window of ``--tail``
(a fraction of the whole run) that ends at each of ``--fractions`` of the steps, and each seed's rank by
that loss among the seeds (1 = lowest), so that one sees whether the seeds that test badly are the ones
whose loss is high early.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = Path("/tmp/tinyrec5/diag")
OUT = HERE / "diagnosis.jsonl"


def lines():
    return [json.loads(line) for line in OUT.read_text().splitlines()] if OUT.exists() else []


def run(args) -> None:
    from ltdrnn.config import load_config
    from ltdrnn.train import train

    seen = {(r["cell"], r["seed"]) for r in lines()}
    for seed in args.seeds:
        if (args.cell, seed) in seen:
            continue
        overrides = [f"train.seed={seed}", "train.threads=1", "train.progress=false"]
        cfg = load_config(f"deploy/tiny-{args.cell}", overrides)
        cfg.run_dir, cfg.results = str(RUNS / args.cell / f"s{seed}"), None
        losses = []
        record = train(cfg, callbacks=[lambda state: losses.append(state["loss"])])
        row = {
            "cell": args.cell,
            "seed": seed,
            "test_accuracy": record["metrics"]["test"]["accuracy"],
            "train_s": round(record["timings"]["train_s"], 1),
            "losses": [float(f"{loss:.5g}") for loss in losses],
        }
        with OUT.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps({k: row[k] for k in ("cell", "seed", "test_accuracy", "train_s")}), flush=True)


def window(losses, end: float, tail: float) -> float:
    stop = round(end * len(losses))
    return statistics.mean(losses[max(0, stop - max(1, round(tail * len(losses)))) : stop])


def report(args) -> None:
    rows = sorted((r for r in lines() if r["cell"] == args.cell), key=lambda r: r["seed"])
    columns = {f: [window(r["losses"], f, args.tail) for r in rows] for f in args.fractions}
    ranks = {f: {v: i + 1 for i, v in enumerate(sorted(values))} for f, values in columns.items()}
    head = " | ".join(f"loss at {f:.0%} (rank)" for f in args.fractions)
    print(f"| seed | test % | {head} |")
    print("|---" * (2 + len(args.fractions)) + "|")
    for i, r in enumerate(rows):
        cells = " | ".join(f"{columns[f][i]:.4f} ({ranks[f][columns[f][i]]})" for f in args.fractions)
        print(f"| {r['seed']} | {100 * r['test_accuracy']:.1f} | {cells} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run")
    p.add_argument("cell")
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(20)))
    r = sub.add_parser("report")
    r.add_argument("cell")
    r.add_argument("--fractions", type=float, nargs="+", default=[0.1, 0.2, 0.3, 0.5, 1.0])
    r.add_argument("--tail", type=float, default=0.05)
    args = parser.parse_args()
    {"run": run, "report": report}[args.command](args)


if __name__ == "__main__":
    main()
