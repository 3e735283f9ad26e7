#!/bin/bash
# The screen of README.md: iRNN then TARNN at H = 16, 24, 32 on seeds 0-9. One thread.
# 10:32 UTC, after the rule chose TARNN h32 (README.md, "Results"): h32 on the held-out seeds 20-24, then the
# H = 16 preset on the same seeds (read after, deciding nothing). Run: bash queue.sh held
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
cd "$(dirname "$0")/../.."
out=lab/2026-11-30-tiny-widths/runs.jsonl
run() { PYTHONPATH=src .venv/bin/python lab/2026-11-30-tiny-widths/widths.py "$@" >> $out; }
if [ "$1" = held ]; then
  run tarnn h32 20-24 model.hidden_size=32
  run tarnn h16 20-24
  exit
fi
if [ "$1" = seen ]; then  # 10:36: h32 on seeds 10-19, which H = 16's rounds held out and saw; no choice of h32 read them
  run tarnn h32 10-19 model.hidden_size=32
  exit
fi
for cell in irnn tarnn; do
  run $cell h16 0-9
  run $cell h24 0-9 model.hidden_size=24
  run $cell h32 0-9 model.hidden_size=32
done
