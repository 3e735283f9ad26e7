#!/bin/bash
# Thirteenth session, core 1 (replaces the rest of queue i): after irnn-identity-gradient's K = 10 runs (PID $1),
# adding-200's held-out TARNN seeds, then sarnn-adding-500's judged runs on seed 5. One thread a run.
# Run from the repository root: nohup bash lab/2026-11-29-held-out/queue_l.sh PID > lab/2026-11-29-held-out/queue_l.log 2>&1 &
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
L=.venv/bin/ltdrnn
while kill -0 "$1" 2>/dev/null; do sleep 20; done
set -x
$L reproduce run adding-200 --budget paper --only tarnn --seeds 4,5,6 --resume --store reproduction/results.db
$L reproduce run sarnn-adding-500 --budget paper --only lambda_0_code,lambda_1e5_code,lambda_1e4_code --seeds 5, --resume --store reproduction/results.db
