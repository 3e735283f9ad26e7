"""docs/deployment.md's device table for the frozen deploy/tiny presets, from this folder's measurements.

    python lab/2026-11-29-tiny-recipes/device/table.py > lab/2026-11-29-tiny-recipes/device/table.md

Costs (weights, flash, RAM, cycles, instructions) are seed 0's ``ltdrnn device-table`` rows (``CELL.json``,
written by ``run.sh``). Accuracy and agreement are over all 150 test series and seeds 0-4, from
``../int8.jsonl`` (``screen.py int8 CELL final --seeds 0 1 2 3 4 --fp32``: the C step compiled for the
host, which computes the integer step's outputs bit for bit as both chips do): eager accuracy -> C step
accuracy as mean ± sample std over the seeds, and the lowest agreement of a seed (the seeds' agreements in
brackets when one is below 100%). Also prints the chips' own scores on seed 0's first 20 series.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
CELLS = ("tarnn", "srnn", "mist", "irnn", "sarnn", "fastgrnn", "lstm", "gru")
SEEDS = (0, 1, 2, 3, 4)


def seeds(cell: str) -> list:
    """The last ``int8.jsonl`` row of each seed of the cell's ``final`` runs, or of its ``adopted`` run
    where there is one: the presets now select after step 250 (``deploy/_tiny.yaml``), which changed the
    tested checkpoint of FastGRNN's seeds 0, 2, 3, 4 and SRNN's seed 4 only (``rules.py``); the other
    seeds' ``final`` checkpoints are the ones the presets pick now."""
    latest = {}
    for name in ("final", "adopted"):
        for line in (HERE.parent / "int8.jsonl").read_text().splitlines():
            row = json.loads(line)
            if row["cell"] == cell and row["name"] == name and "fp32_accuracy" in row:
                latest[row["seed"]] = row
    missing = [s for s in SEEDS if s not in latest]
    if missing:
        raise SystemExit(f"{cell}: no int8.jsonl row for seeds {missing}")
    return [latest[s] for s in SEEDS]


def spread(values) -> str:
    return f"{100 * statistics.mean(values):.1f} ± {100 * statistics.stdev(values):.1f}%"


def quality(rows, kind: str) -> list:
    eager = spread([r[f"{kind}_eager_accuracy"] for r in rows])
    device = spread([r[f"{kind}_accuracy"] for r in rows])
    agreements = [r[f"{kind}_agreement"] for r in rows]
    agreement = f"{100 * min(agreements):.1f}%"
    if min(agreements) < 1:
        agreement += " (" + ", ".join(f"{100 * a:.1f}" for a in agreements) + ")"
    return [f"{eager} -> {device}", agreement]


def costs(measured: dict, speed: str) -> list:
    pace = f"{measured[speed]:,.0f}"
    if speed == "cycles_per_step":
        pace += f" ({measured['us_per_step_16mhz']:,.0f})"
    return [f"{measured['flash']:,} B", f"{measured['ram']:,} B ({measured['stack']})", pace]


def label(row: dict) -> str:
    options = ", ".join(f"{k}={v}" for k, v in row["options"].items())
    return f"{row['cell']} H={row['hidden']}" + (f" ({options})" if options else "")


def main() -> None:
    print(
        "| cell | C step | weights | AVR flash | AVR RAM (stack) | AVR cycles/step (us at 16 MHz) | M4 flash "
        "| M4 RAM (stack) | M4 instructions/step | accuracy eager -> C step, seeds 0-4 | agreement, lowest seed |"
    )
    print("|" + "---|" * 11)
    chips = []
    for cell in CELLS:
        (row,) = json.loads((HERE / f"{cell}.json").read_text())
        rows = seeds(cell)
        for kind in ("fp32", "int8"):
            avr, m4 = row[kind]["atmega328p"], row[kind]["cortex-m4"]
            cells = [label(row) if kind == "fp32" else "", kind, f"{row[kind]['weight_bytes']:,} B"]
            cells += costs(avr, "cycles_per_step") + costs(m4, "instructions_per_step") + quality(rows, kind)
            print("| " + " | ".join(cells) + " |")
            chips.append(
                f"{cell} {kind}: seed 0, first {row['sequences']} series: eager {100 * row['accuracy_eager']:.1f}%, "
                f"AVR {100 * avr['accuracy']:.1f}% (agreement {100 * avr['agreement']:.1f}%), "
                f"M4 {100 * m4['accuracy']:.1f}% (agreement {100 * m4['agreement']:.1f}%)"
            )
        speedup = row["fp32"]["atmega328p"]["cycles_per_step"] / row["int8"]["atmega328p"]["cycles_per_step"]
        chips.append(f"{cell}: int8 takes {speedup:.2f}x fewer AVR cycles than fp32")
    print()
    print("\n".join(chips))


if __name__ == "__main__":
    main()
