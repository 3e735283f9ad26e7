"""Each configuration of this folder's results.jsonl beside the committed presets, per cell, over the seeds asked.

    python lab/2026-11-29-tiny-recipes-3/compare.py [--seeds 0 1 ... 9] [--cell CELL]

The presets' own rows ("preset before") are the previous round's runs of the presets as committed before
this round: ``adopted`` where that name holds the seed, else ``final`` (select_after left those checkpoints
as they were; lab/2026-11-29-tiny-recipes/README.md). Each row: mean ± sample std, the lowest seed, the
mean of ``ceiling`` (the best test accuracy at any validation, a diagnosis), and each seed's accuracy.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
OLD = HERE.parent / "2026-11-29-tiny-recipes" / "results.jsonl"


def lines(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def groups(seeds):
    found = {}
    for name in ("final", "adopted"):  # adopted overrides final where both hold a seed
        for r in lines(OLD):
            if r["name"] == name and r["seed"] in seeds:
                found.setdefault((r["cell"], "preset before"), {})[r["seed"]] = r
    for r in lines(HERE / "results.jsonl"):
        if r["seed"] in seeds:
            found.setdefault((r["cell"], r["name"]), {})[r["seed"]] = r
    return found


def row(cell, name, by_seed, seeds, key="test_accuracy"):
    values = [by_seed[s][key] for s in seeds if s in by_seed and key in by_seed[s]]
    if not values:
        return None
    mean, std = statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0
    ceilings = [r["rules"]["ceiling"] for r in by_seed.values() if r.get("rules")]
    ceiling = f"{100 * statistics.mean(ceilings):.1f}" if ceilings and key == "test_accuracy" else ""
    each = " ".join(f"{100 * by_seed[s][key]:.1f}" if s in by_seed else "-" for s in seeds)
    spread = f"{100 * mean:.1f} ± {100 * std:.1f}"
    return f"| {cell} | {name} | {len(values)} | {spread} | {100 * min(values):.1f} | {ceiling} | {each} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--cell")
    args = parser.parse_args()
    print("| cell | configuration | n | float % mean ± std | min | ceiling mean | each seed |")
    print("|---|---|---|---|---|---|---|")
    for (cell, name), by_seed in sorted(groups(args.seeds).items()):
        if args.cell in (None, cell):
            line = row(cell, name, by_seed, args.seeds)
            if line:
                print(line)


if __name__ == "__main__":
    main()
