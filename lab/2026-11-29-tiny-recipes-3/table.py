"""The presets' accuracy and agreement per cell, as docs/deployment.md and this folder's README give them.

    python lab/2026-11-29-tiny-recipes-3/table.py

Per cell and seed set: the float test accuracy of eager PyTorch (the trainer's), of the integer and of the
float C step compiled for the host (int8.jsonl: ``screen.py int8 CELL NAME --seeds ... --fp32``), mean ±
sample std over the 150 test series of each seed, and the lowest agreement with eager over the seeds (each
seed's in brackets when one is below 100%). The presets changed in this round read their development rows
(seeds 0-4) and their ``preset`` rows (seeds 10-14) here; SA-RNN and SRNN, unchanged, read seeds 0-4 from
lab/2026-11-29-tiny-recipes (``adopted``, else ``final``).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
OLD = HERE.parent / "2026-11-29-tiny-recipes"
CHOSEN = {  # the configuration each preset is now, as named in results.jsonl; None: unchanged this round
    "tarnn": "ema99",
    "irnn": "ema99-skip5",
    "srnn": None,
    "mist": "ema99-lr1e-2-s3000-h500",
    "sarnn": None,
    "fastgrnn": "ema99-wd2e-3-h500",
}


def lines(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def rows(cell, seeds):
    found = {}
    name = CHOSEN[cell]
    if name is None and min(seeds) < 10:
        for old in ("final", "adopted"):
            found.update({r["seed"]: r for r in lines(OLD / "int8.jsonl") if (r["cell"], r["name"]) == (cell, old)})
    else:
        want = "preset" if min(seeds) >= 10 else name
        found.update({r["seed"]: r for r in lines(HERE / "int8.jsonl") if (r["cell"], r["name"]) == (cell, want)})
    return [found[s] for s in seeds if s in found]


def spread(values) -> str:
    return f"{100 * statistics.mean(values):.1f} ± {100 * statistics.stdev(values):.1f}%"


def agreement(values) -> str:
    low = f"{100 * min(values):.1f}%"
    return low if min(values) == 1 else f"{low} ({', '.join(f'{100 * v:.1f}' for v in values)})"


def main() -> None:
    print("| cell | seeds | eager | int8 C step | fp32 C step | int8 agreement, lowest | fp32 agreement, lowest |")
    print("|---|---|---|---|---|---|---|")
    for cell in CHOSEN:
        for seeds in (range(5), range(10, 15)):
            got = rows(cell, list(seeds))
            if len(got) < len(seeds):
                print(f"| {cell} | {seeds.start}-{seeds.stop - 1} | missing ({len(got)} of {len(seeds)}) |")
                continue
            column = lambda key: [r[key] for r in got]  # noqa: E731
            fp32 = all("fp32_accuracy" in r for r in got)
            print(
                f"| {cell} | {seeds.start}-{seeds.stop - 1} | {spread(column('int8_eager_accuracy'))} "
                f"| {spread(column('int8_accuracy'))} | {spread(column('fp32_accuracy')) if fp32 else ''} "
                f"| {agreement(column('int8_agreement'))} | {agreement(column('fp32_agreement')) if fp32 else ''} |"
            )


if __name__ == "__main__":
    main()
