#!/bin/bash
# 2026-11-30 08:47 UTC, a new checkout (/tmp/fg566 of the run before was not kept): the two widths after.sh
# did not reach, then the width chosen by the rule in README.md ("Widths: the rule") on the held-out seeds
# 20-24. One thread, beside the two full-MNIST lanes. Usage: bash widths.sh  (or: bash widths.sh held NAME)
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
cd "$(dirname "$0")/../.."
out=lab/2026-11-30-fastgrnn-566/runs.jsonl
run() { PYTHONPATH=src .venv/bin/python lab/2026-11-30-fastgrnn-566/screen.py "$@" >> $out; }
if [ "$1" = held ]; then
  case $2 in
    h24) run h24 20-24 model.hidden_size=24 ;;
    h28) run h28 20-24 model.hidden_size=28 ;;
    h32r2) run h32r2 20-24 model.hidden_size=32 model.options.u_rank=2 ;;
  esac
  exit
fi
run h28 0-9 model.hidden_size=28
run h32r2 0-9 model.hidden_size=32 model.options.u_rank=2
