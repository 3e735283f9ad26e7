#!/bin/bash
# SRNN on adding T = 750 at the authors' main.py length (100,000 steps, validation every 2,000), the claim's
# preset reproduce/adding750-srnn otherwise unchanged; one thread, one run at a time. Rows go to this folder's
# results.db; run directories to runs/lab/srnn-adding750-long/ (resumable: run this again with the same seeds).
# Usage, from the repository root: lab/2026-11-29-srnn-adding750-long/run.sh SEED...
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
for seed in "$@"; do
  .venv/bin/ltdrnn train reproduce/adding750-srnn train.steps=100000 train.eval_every=2000 train.seed=$seed \
    train.progress=false --run-dir runs/lab/srnn-adding750-long/s$seed --resume \
    --store lab/2026-11-29-srnn-adding750-long/results.db
done
