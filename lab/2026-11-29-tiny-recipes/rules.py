"""Selection rules judged afterwards on the traced runs: which checkpoint each rule would have picked and
its test accuracy over the 150 test series, per cell, mean ± sample std over the seeds asked for.

    python lab/2026-11-29-tiny-recipes/rules.py [--name final-traced] [--seeds 0 1 2 3 4]

Reads the ``trace`` of each row of ``results.jsonl`` ([step, validation loss, validation accuracy, test
accuracy] at every validation; ``screen.py`` records it). Training does not depend on the selection, so
the test accuracy a rule gets here is the one the trainer's own selection with that rule would test
(checked on the five development runs whose checkpoint the adopted ``train.select_after: 250`` changed). The rules:
``now`` the presets' ``metric_then_loss`` over all validations; ``after-A`` the same over the validations
at step >= A only (``train.select_after``); ``loss-after-A`` the lowest validation loss among those;
``smooth-K`` the validation with the lowest loss averaged over it and the K - 1 before it; ``last``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent


def pick_then_loss(trace, after=0):
    rows = [t for t in trace if t[0] >= after]
    return min(rows, key=lambda t: (-t[2], t[1]))[3] if rows else trace[-1][3]


def pick_loss(trace, after=0):
    rows = [t for t in trace if t[0] >= after]
    return min(rows, key=lambda t: t[1])[3] if rows else trace[-1][3]


def pick_smooth(trace, k):
    losses = [t[1] for t in trace]
    smooth = [statistics.mean(losses[max(0, i - k + 1) : i + 1]) for i in range(len(trace))]
    return trace[min(range(k - 1, len(trace)), key=lambda i: smooth[i])][3]


RULES = {"now": lambda t: pick_then_loss(t)}
for a in (250, 500, 750, 1000):
    RULES[f"after-{a}"] = lambda t, a=a: pick_then_loss(t, a)
    RULES[f"loss-after-{a}"] = lambda t, a=a: pick_loss(t, a)
RULES.update({"smooth-4": lambda t: pick_smooth(t, 4), "smooth-8": lambda t: pick_smooth(t, 8)})
RULES["last"] = lambda t: t[-1][3]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default="final-traced")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    args = parser.parse_args()
    rows = [json.loads(line) for line in (HERE / "results.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["name"] == args.name and r["seed"] in args.seeds and r.get("trace")]
    cells = sorted({r["cell"] for r in rows})
    print("| rule | " + " | ".join(cells) + " | mean of cells | worst seed |")
    print("|---" * (len(cells) + 3) + "|")
    for rule, pick in RULES.items():
        cols, every = [], []
        for cell in cells:
            accs = [pick(r["trace"]) for r in sorted(rows, key=lambda r: r["seed"]) if r["cell"] == cell]
            every += accs
            std = statistics.stdev(accs) if len(accs) > 1 else 0.0
            cols.append(f"{100 * statistics.mean(accs):.1f} ± {100 * std:.1f}")
        print(f"| {rule} | " + " | ".join(cols) + f" | {100 * statistics.mean(every):.1f} | {100 * min(every):.1f} |")


if __name__ == "__main__":
    main()
