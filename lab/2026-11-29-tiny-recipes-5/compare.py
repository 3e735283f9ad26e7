"""Each configuration of this folder's results.jsonl beside the presets as committed before this round, per cell.

    python lab/2026-11-29-tiny-recipes-5/compare.py [--seeds 0 1 ... 9] [--cell CELL]
    python lab/2026-11-29-tiny-recipes-5/compare.py --screens CELL NAME [--seeds ...]

A copy of lab/2026-11-29-tiny-recipes-4/compare.py. The presets' own rows ("preset now") are earlier
rounds' runs of exactly the committed presets: for MIST, SA-RNN and SRNN lab/2026-11-29-tiny-recipes-4's
``full50-ema99`` rows (seeds 0-19); for TARNN, iRNN and FastGRNN, unchanged by round 4,
lab/2026-11-29-tiny-recipes-3's rows of the configuration each preset became (seeds 0-9) and its
``preset`` rows (seeds 10-14). Each row: mean ± sample std, the lowest seed, the mean of ``ceiling``
(the best test accuracy at any validation, or at any traced step: a diagnosis), and each seed's accuracy,
marked ``*`` where the screen of ``train.restarts`` chose another candidate than the run's own seed.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROUND4 = HERE.parent / "2026-11-29-tiny-recipes-4" / "results.jsonl"
ROUND3 = HERE.parent / "2026-11-29-tiny-recipes-3" / "results.jsonl"
NOW = {"tarnn": "ema99", "irnn": "ema99-skip5", "fastgrnn": "ema99-wd2e-3-h500"}
ROUND4_PRESETS = ("mist", "sarnn", "srnn")  # the presets round 4 changed


def lines(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def preset_rows(seeds):
    found = {}
    for r in lines(ROUND3):
        if r["seed"] in seeds and r["name"] in (NOW.get(r["cell"]), "preset") and r["cell"] in NOW:
            found.setdefault(r["cell"], {})[r["seed"]] = r
    for r in lines(ROUND4):
        if r["seed"] in seeds and r["name"] == "full50-ema99" and r["cell"] in ROUND4_PRESETS:
            found.setdefault(r["cell"], {})[r["seed"]] = r
    return {(cell, "preset now"): rows for cell, rows in found.items()}


def groups(seeds):
    found = preset_rows(seeds)
    for r in lines(HERE / "results.jsonl"):
        if r["seed"] in seeds:
            found.setdefault((r["cell"], r["name"]), {})[r["seed"]] = r
    return found


def moved(r) -> str:
    """``*`` where the screen of ``train.restarts`` chose another candidate than the run's own seed."""
    screen = r.get("restarts")
    return "*" if screen and screen["seed"] != r["seed"] else ""


def row(cell, name, by_seed, seeds, key="test_accuracy"):
    values = [by_seed[s][key] for s in seeds if s in by_seed and key in by_seed[s]]
    if not values:
        return None
    mean, std = statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0
    ceilings = [r["rules"]["ceiling"] for r in by_seed.values() if r.get("rules")]
    ceiling = f"{100 * statistics.mean(ceilings):.1f}" if ceilings and key == "test_accuracy" else ""
    each = " ".join(f"{100 * by_seed[s][key]:.1f}{moved(by_seed[s])}" if s in by_seed else "-" for s in seeds)
    spread = f"{100 * mean:.1f} ± {100 * std:.1f}"
    return f"| {cell} | {name} | {len(values)} | {spread} | {100 * min(values):.1f} | {ceiling} | {each} |"


def screens(cell, name, seeds) -> None:
    """Per seed: each candidate's windowed training loss, the candidate chosen, and the test accuracy beside
    the preset's own ("preset now": for MIST, SA-RNN and SRNN round 4's row of the run's own seed, the
    same run as candidate 0)."""
    own = preset_rows(seeds).get((cell, "preset now"), {})
    print("| seed | candidate losses (0, 1, 2) | chosen | test % | preset now % |")
    print("|---|---|---|---|---|")
    for r in sorted(lines(HERE / "results.jsonl"), key=lambda r: r["seed"]):
        if (r["cell"], r["name"]) == (cell, name) and r["seed"] in seeds and r.get("restarts"):
            screen = r["restarts"]
            losses = ", ".join(f"{v:.4f}" if isinstance(v, float) else v for v in screen["losses"])
            before = f"{100 * own[r['seed']]['test_accuracy']:.1f}" if r["seed"] in own else ""
            chosen = screen["seeds"].index(screen["seed"])
            print(f"| {r['seed']} | {losses} | {chosen} | {100 * r['test_accuracy']:.1f} | {before} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--cell")
    parser.add_argument("--screens", nargs=2, metavar=("CELL", "NAME"), help="the restart screens of CELL NAME")
    args = parser.parse_args()
    if args.screens:
        return screens(*args.screens, args.seeds)
    print("| cell | configuration | n | float % mean ± std | min | ceiling mean | each seed |")
    print("|---|---|---|---|---|---|---|")
    for (cell, name), by_seed in sorted(groups(args.seeds).items()):
        if args.cell in (None, cell):
            line = row(cell, name, by_seed, args.seeds)
            if line:
                print(line)


if __name__ == "__main__":
    main()
