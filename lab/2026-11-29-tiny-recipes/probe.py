"""The export's long-stream probe (``contract(..., measured=True)["stability"]``) on trained runs.

    python lab/2026-11-29-tiny-recipes/probe.py CELL [CELL ...] [--seeds 0]

For each cell's ``final`` run of each seed (``/tmp/tinyrec/runs/CELL/final/sS``), appends the probe
(10,000 steps without reset on 4 streams of test series; the first non-finite step, the largest ``|state|``
within the validated length and over the stream, ``bounded``) and ``reset_within`` to ``probe.jsonl``
beside this script: what ``ltdrnn export`` writes into the header as ``NAME_RESET_WITHIN``.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = Path("/tmp/tinyrec/runs")


def main() -> None:
    from ltdrnn.export import StreamingStep, load_trained
    from ltdrnn.export.contract import contract

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cells", nargs="+")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    for cell in args.cells:
        for seed in args.seeds:
            model, _, task = load_trained(str(RUNS / cell / "final" / f"s{seed}"))
            agreed = contract(StreamingStep(model), task, measured=True)
            row = {
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "cell": cell,
                "seed": seed,
                "stability": agreed["stability"],
                "reset_within": agreed["reset_within"],
            }
            with (HERE / "probe.jsonl").open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row))


if __name__ == "__main__":
    main()
