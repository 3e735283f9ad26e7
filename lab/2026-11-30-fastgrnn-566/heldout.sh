#!/bin/bash
# After the pmnist eta probe (its bash's PID as $1): deploy/tiny-fastgrnn as adopted (qat_steps 300, the
# preset file itself, no override) on held-out seeds 20-24, then on seeds 10-14 (held out for the preset
# before, seen since), then the widths of queue.sh. Started 07:01 UTC.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
out=lab/2026-11-30-fastgrnn-566/runs.jsonl
run() { PYTHONPATH=src .venv/bin/python lab/2026-11-30-fastgrnn-566/screen.py "$@" >> $out; }
while [ -n "$1" ] && kill -0 "$1" 2>/dev/null; do sleep 30; done
run preset 20-24
run preset 10-14
run h24 0-9 model.hidden_size=24
run h28 0-9 model.hidden_size=28
run h32r2 0-9 model.hidden_size=32 model.options.u_rank=2
