"""Table of results/screen.jsonl: per label, test accuracy per seed, mean, the validation curve's last points,
and where beta opens (positions whose mean beta per unit exceeds 0.5 at the end).

    python lab/2026-11-29-tarnn-toy-single-eta/summarize.py
"""

import json
from collections import defaultdict
from pathlib import Path

rows = defaultdict(list)
for line in open(Path(__file__).parent / "results" / "screen.jsonl"):
    r = json.loads(line)
    rows[r["label"]].append(r)
print("| label | overrides | steps | test accuracy per seed | mean | validation at the last 3 evaluations (seed 1st) |")
print("|---|---|---|---|---|---|")
for label, rs in rows.items():
    rs.sort(key=lambda r: r["seed"])
    accs = ", ".join(f"{r['test_accuracy'] * 100:.1f} (s{r['seed']})" for r in rs)
    mean = sum(r["test_accuracy"] for r in rs) / len(rs) * 100
    extra = " ".join(rs[0]["overrides"]) + (f" b_beta={rs[0]['beta_bias']:g}" if rs[0]["beta_bias"] is not None else "")
    tail = ", ".join(f"{v * 100:.1f}@{s}" for s, v in rs[0]["val_curve"][-3:])
    print(f"| {label} | {extra or '-'} | {rs[0]['steps']} | {accs} | {mean:.1f} | {tail} |")
