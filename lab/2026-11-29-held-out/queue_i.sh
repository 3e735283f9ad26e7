#!/bin/bash
# Thirteenth session, core 1 (replaces queue_h): the queues before ran with train.threads unset, so each run took
# torch's default of two threads; two such runs on the 2 cores made their OpenMP teams wait for each other
# (a K = 5 iRNN step went from 0.25 s to 8-9 s). OMP_NUM_THREADS=1 runs each on one thread and leaves the config,
# so --resume continues the interrupted runs. irnn-identity-gradient K = 5 seed 6 and K = 10 seeds 4-6, then
# sarnn-adding-500's judged runs on seed 5 and seed 6 at λ 1e-4.
# Run from the repository root: nohup bash lab/2026-11-29-held-out/queue_i.sh > lab/2026-11-29-held-out/queue_i.log 2>&1 &
set -x
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
L=.venv/bin/ltdrnn
$L reproduce run irnn-identity-gradient --budget paper --only k5,k10 --seeds 4,5,6 --resume --store reproduction/results.db
$L reproduce run sarnn-adding-500 --budget paper --only lambda_0_code,lambda_1e5_code,lambda_1e4_code --seeds 5, --resume --store reproduction/results.db
$L reproduce run sarnn-adding-500 --budget paper --only lambda_1e4_code --seeds 6, --resume --store reproduction/results.db
