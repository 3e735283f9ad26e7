"""Validation curves of the screen as shares of the memoryless cross entropy.

    nice -n 19 .venv/bin/python lab/2026-11-29-irnn-copy/plot.py OUT.png NAME [NAME ...]

Reads runs.jsonl beside this file; one line per (name, seed), the memoryless level at 1.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent


def main(out, names):
    rows = [json.loads(line) for line in open(HERE / "runs.jsonl")]
    fig, ax = plt.subplots(figsize=(7, 4))
    colours = {}
    for r in rows:
        if r["name"] not in names or not r["curve"]:
            continue
        T = next((int(o.split("=")[1]) for o in r["overrides"] if o.startswith("task.options.T=")), 20)
        baseline = 10 * math.log(8) / (T + 20)
        colour = colours.setdefault(r["name"], f"C{len(colours) % 10}")
        steps = [c["step"] for c in r["curve"]]
        shares = [c["val"] / baseline for c in r["curve"]]
        label = r["name"] if r["seed"] == 1 or r["name"] not in [line.get_label() for line in ax.lines] else None
        ax.plot(steps, shares, color=colour, alpha=0.8, label=label, linestyle=["-", "--", ":"][(r["seed"] - 1) % 3])
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.axhline(0.05, color="k", linewidth=0.8, linestyle=":")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("validation CE / memoryless")
    ax.legend(fontsize=7, ncol=2)
    ax.set_title("ungated iRNN, copy (line style: seed 1 / 2 / 3)")
    fig.tight_layout()
    fig.savefig(out, dpi=80)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
