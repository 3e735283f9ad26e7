"""Per run of this folder: steps trained, first validation at MSE <= 0.05 and <= 0.01, last validation, and the
test MSE of its row in results.db (none while a run is unfinished or was cut). From the repository root:

    .venv/bin/python lab/2026-11-30-adding-long/summarize.py
"""

import glob
import json
import sqlite3
from pathlib import Path

HERE = Path(__file__).parent
RUNS = sorted(glob.glob("runs/lab/adding2000/*") + glob.glob("runs/lab/irnn-adding-5000/*"))


def first_step(history, threshold):
    return next((r["step"] for r in history if r.get("val_metric") is not None and r["val_metric"] <= threshold), None)


def main():
    rows = sqlite3.connect(HERE / "results.db").execute("select run_dir, metric, train_time_s from runs").fetchall()
    tests = {d: (m, s) for d, m, s in rows}
    print("| run | steps | val <= 0.05 at | val <= 0.01 at | last val | test MSE | train s |")
    print("|---|---|---|---|---|---|---|")
    for run in RUNS:
        path = Path(run) / "history.jsonl"
        history = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        if not history:
            continue
        test, seconds = tests.get(run, (None, None))
        below = [first_step(history, 0.05) or "–", first_step(history, 0.01) or "–"]
        print(
            f"| {run} | {history[-1]['step']} | {below[0]} | {below[1]} "
            f"| {history[-1]['val_metric']:.4f} | {'–' if test is None else f'{test:.4f}'} "
            f"| {'–' if seconds is None else round(seconds)} |"
        )


if __name__ == "__main__":
    main()
