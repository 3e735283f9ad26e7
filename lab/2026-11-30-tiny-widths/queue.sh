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
if [ "$1" = more ]; then  # 10:45: SA-RNN and SRNN, the second rule of README.md
  for name in h16 h24 h32; do run sarnn $name 0-9 model.hidden_size=${name#h}; done
  for name in h64 h96 h128; do run srnn $name 0-9 model.hidden_size=${name#h}; done
  exit
fi
if [ "$1" = srnnrest ]; then  # 10:56: "more" was stopped during SRNN h64 seed 6 for the SA-RNN runs; the rest
  run srnn h64 6-9 model.hidden_size=64
  for name in h96 h128; do run srnn $name 0-9 model.hidden_size=${name#h}; done
  exit
fi
if [ "$1" = srnnheld ]; then  # 11:09: the rule chose h128; it and h64 (read after) on seeds 25-29, then seed 0 on the chips
  run srnn h128 25-29 model.hidden_size=128
  run srnn h64 25-29 model.hidden_size=64
  .venv/bin/ltdrnn train deploy/tiny-srnn train.seed=0 --run-dir /tmp/tinywidths/srnn128/s0 --no-store --no-progress
  .venv/bin/ltdrnn device-table /tmp/tinywidths/srnn128/s0 --sequences 20 --json lab/2026-11-30-tiny-widths/srnn-h128-s0-device.json
  exit
fi
if [ "$1" = heldmore ]; then  # an adopted width on the seeds never run for its cell
  case $2 in sarnn) seeds=20-24 ;; srnn) seeds=25-29 ;; esac
  run "$2" "$3" $seeds model.hidden_size=${3#h}
  exit
fi
for cell in irnn tarnn; do
  run $cell h16 0-9
  run $cell h24 0-9 model.hidden_size=24
  run $cell h32 0-9 model.hidden_size=32
done
