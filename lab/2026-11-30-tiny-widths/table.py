"""The screen's table: per cell, configuration and seed set, float and int8 accuracy (mean ± sample std over the
seeds, each over the 150 test series), the int8 step's agreement with eager PyTorch, the int8 weight bytes.

    python lab/2026-11-30-tiny-widths/table.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

SETS = {
    "0-9": range(0, 10),
    "0-4": range(0, 5),
    "10-14": range(10, 15),
    "15-19": range(15, 20),
    "20-24": range(20, 25),
    "25-29": range(25, 30),
}


def spread(values) -> str:
    values = [100 * v for v in values]
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.1f} ± {std:.1f}%"


def main() -> None:
    rows = [json.loads(line) for line in (Path(__file__).parent / "runs.jsonl").read_text().splitlines()]
    print("| configuration | seeds | n | float | int8 | agreement (lowest) | seeds below 100% | int8 weights |")
    print("|---|---|---|---|---|---|---|---|")
    for cell, name in dict.fromkeys((r["cell"], r["name"]) for r in rows):
        for label, seeds in SETS.items():
            found = [r for r in rows if (r["cell"], r["name"]) == (cell, name) and r["seed"] in seeds]
            if not found:
                continue
            below = [r["seed"] for r in found if r["agreement"] < 1]
            floats, ints = [r["eager"] for r in found], [r["int8"] for r in found]
            lowest = 100 * min(r["agreement"] for r in found)
            print(
                f"| {cell} {name} | {label} | {len(found)} | {spread(floats)} | {spread(ints)} | {lowest:.1f}% | "
                f"{', '.join(map(str, below)) or 'none'} | {found[0]['int8_weight_bytes']} B |"
            )


if __name__ == "__main__":
    main()
