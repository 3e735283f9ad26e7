#!/bin/bash
# SRNN on copy T = 1,000 (past the claims: the SRNN paper's Fig. 2 copies up to T = 2,000): the preset srnn/copy-1000
# as it is (the paper's minibatch 20, H = 128, f_r 1x8, our embedding of 128, 10,000 steps), one thread a run, one
# seed after another. Rows to this folder's results.db; run directories runs/lab/copy1000/s<seed> (run it again
# with the unfinished seeds to resume). From the repository root:
#   bash lab/2026-11-30-beyond-the-claims/copy1000.sh 4 5 6 >> lab/2026-11-30-beyond-the-claims/copy1000.log 2>&1
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
for seed in "$@"; do
  .venv/bin/ltdrnn train srnn/copy-1000 train.seed=$seed train.progress=false --run-dir runs/lab/copy1000/s$seed \
    --resume --store lab/2026-11-30-beyond-the-claims/results.db
done
