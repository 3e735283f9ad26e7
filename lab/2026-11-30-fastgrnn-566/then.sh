#!/bin/bash
# Replaces queue.sh's order at 06:40 (its q300 process, PID $1, runs on): the preset as it is on the same
# seeds, code and machine load (the A of the A/B, added once q300's first seeds read 2-4 points above the
# preset's stored seeds 0-9), then lab/2026-11-30-pmnist-eta's probe, then queue.sh's widths.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
out=lab/2026-11-30-fastgrnn-566/runs.jsonl
run() { PYTHONPATH=src .venv/bin/python lab/2026-11-30-fastgrnn-566/screen.py "$@" >> $out; }
while [ -n "$1" ] && kill -0 "$1" 2>/dev/null; do sleep 30; done
run q0 0-9
bash lab/2026-11-30-pmnist-eta/probe.sh >> lab/2026-11-30-pmnist-eta/probe.log 2>&1
run h24 0-9 model.hidden_size=24
run h28 0-9 model.hidden_size=28
run h32r2 0-9 model.hidden_size=32 model.options.u_rank=2
