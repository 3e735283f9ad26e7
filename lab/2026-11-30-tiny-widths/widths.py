"""Wider tiny presets for the source cells on GunPoint: does width steady them across seeds, as it did FastGRNN?

    PYTHONPATH=src python lab/2026-11-30-tiny-widths/widths.py CELL NAME SEEDS [KEY=VALUE ...] \
        >> lab/2026-11-30-tiny-widths/runs.jsonl

Per seed, the FastGRNN screen's `measured_run` (lab/2026-11-30-fastgrnn-566/screen.py, imported) on
deploy/tiny-CELL with the overrides, run directory /tmp/tinywidths/CELL/NAME/sSEED: one thread; eager and int8
C step accuracy over the 150 test series, their agreement, the int8 step's constant bytes. One JSON line a run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

LAB = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(LAB / "2026-11-30-fastgrnn-566"), str(LAB / "2026-11-30-int8-snap")]


def main() -> None:
    from screen import measured_run, seeds_of

    cell, name, seeds, extra = sys.argv[1], sys.argv[2], seeds_of(sys.argv[3]), sys.argv[4:]
    for seed in seeds:
        run_dir = Path("/tmp/tinywidths") / cell / name / f"s{seed}"
        row = measured_run(f"deploy/tiny-{cell}", extra, seed, run_dir)
        print(json.dumps({"cell": cell, "name": name, **row}), flush=True)


if __name__ == "__main__":
    main()
