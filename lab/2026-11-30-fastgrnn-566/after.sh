#!/bin/bash
# Replaces heldout.sh's remaining order at 07:44 (its last preset process, PID $1, runs on): the preset before
# (q0: without qat_steps) on seeds 20-24 as well, the A/B on seeds neither side was chosen on (read after
# the adoption, deciding nothing), then the widths at the adopted preset (with its qat_steps 300).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
out=lab/2026-11-30-fastgrnn-566/runs.jsonl
run() { PYTHONPATH=src .venv/bin/python lab/2026-11-30-fastgrnn-566/screen.py "$@" >> $out; }
while [ -n "$1" ] && kill -0 "$1" 2>/dev/null; do sleep 15; done
run q0 20-24 train.qat_steps=0
run h24 0-9 model.hidden_size=24
run h28 0-9 model.hidden_size=28
run h32r2 0-9 model.hidden_size=32 model.options.u_rank=2
