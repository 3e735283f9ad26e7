"""How long the page gets once copy-500 has held-out rows: render it from a copy of the store in which
copy-500's development rows (seeds 1-3) are copied as seeds 4-6. A size estimate only; the real rows decide.

Run from the repository root: .venv/bin/python lab/2026-11-29-held-out/page_size.py
(2026-11-29: 4,025 words before the page's shorter reading guide, 3,926 after; the test's limit is 4,000.)
"""

import hashlib
import json
import sqlite3
import tempfile
from pathlib import Path

from ltdrnn.reproduce import page

work = Path(tempfile.mkdtemp())
copy = sqlite3.connect(work / "sim.db")
with sqlite3.connect("reproduction/results.db") as source:
    source.backup(copy)
cols = [c[1] for c in copy.execute("pragma table_info(runs)")]
rows = copy.execute("select * from runs where study='reproduce/copy-500/paper' and status='finished'").fetchall()
for row in map(lambda r: dict(zip(cols, r)), rows):
    config = json.loads(row["config"])
    if config["train"]["seed"] not in (1, 2, 3):
        continue
    config["train"]["seed"] += 3
    row.update(
        config=json.dumps(config), id=row["id"] + "-sim", run_key=hashlib.sha256(row["run_key"].encode()).hexdigest()
    )
    copy.execute(f"insert into runs ({','.join(cols)}) values ({','.join('?' * len(cols))})", [row[c] for c in cols])
copy.commit()
text = page.render(str(work / "sim.db"), str(work / "R.md"), str(work / "plots"), plots=False).read_text()
print(f"{len(text.split())} words")
