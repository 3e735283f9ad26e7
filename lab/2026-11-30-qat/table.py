"""Summary of runs.jsonl beside the presets without QAT: python lab/2026-11-30-qat/table.py

Without QAT: MIST and SRNN from lab/2026-11-30-int8-snap/snap.jsonl (the presets' runs of
lab/2026-11-29-tiny-recipes-5, the same configs and seeds); the other cells from runs.jsonl's qat_steps 0 rows.
Per preset, QAT length and seed group: float accuracy, int8 accuracy (mean ± sample std over the 150 test
series, in %), the seeds whose int8 step misses a series of eager's, and the lowest agreement.
"""

import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent
GROUPS = {"0-9": range(0, 10), "10-24": range(10, 25)}


def rows():
    out = [json.loads(line) for line in open(HERE / "runs.jsonl")]
    for line in open(HERE.parent / "2026-11-30-int8-snap" / "snap.jsonl"):
        d = json.loads(line)
        cell, seed = d["run"].split("/")[4], int(d["run"].rsplit("/s", 1)[1])
        if cell in ("mist", "srnn"):
            out.append(
                {
                    "preset": f"deploy/tiny-{cell}",
                    "qat_steps": 0,
                    "seed": seed,
                    "eager": d["as_trained_eager"],
                    "int8": d["as_trained_int8"],
                    "agreement": d["as_trained_agreement"],
                }
            )
    return out


def stats(values):
    values = [100 * v for v in values]
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}" if len(values) > 1 else f"{values[0]:.1f}"


def main():
    found = rows()
    print("| preset | qat_steps | seeds | n | float | int8 | seeds < 100% agreement | lowest agreement |")
    print("|---|---|---|---|---|---|---|---|")
    for preset in sorted({r["preset"] for r in found}):
        for qat in sorted({r["qat_steps"] for r in found if r["preset"] == preset}):
            for name, seeds in GROUPS.items():
                got = sorted(
                    (r for r in found if r["preset"] == preset and r["qat_steps"] == qat and r["seed"] in seeds),
                    key=lambda r: r["seed"],
                )
                if not got:
                    continue
                missing = [str(r["seed"]) for r in got if r["agreement"] < 1]
                print(
                    f"| {preset} | {qat} | {name} | {len(got)} | {stats([r['eager'] for r in got])} | "
                    f"{stats([r['int8'] for r in got])} | {', '.join(missing) or 'none'} | "
                    f"{100 * min(r['agreement'] for r in got):.1f}% |"
                )


if __name__ == "__main__":
    main()
