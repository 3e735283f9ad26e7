#!/bin/bash
# Thirteenth session, core 2, after queue_f (PID $1): sarnn-adding-500's judged runs (the authors' gradient path,
# slope 0.1 fixed) on held-out seed 4, then seed 6 of lambda 0 and 1e-5. One thread, nice 0.
# Run from the repository root: nohup bash lab/2026-11-29-held-out/queue_g.sh PID > lab/2026-11-29-held-out/queue_g.log 2>&1 &
set -x
L=.venv/bin/ltdrnn
while kill -0 "$1" 2>/dev/null; do sleep 20; done
$L reproduce run sarnn-adding-500 --budget paper --only lambda_0_code,lambda_1e5_code,lambda_1e4_code --seeds 4, --resume --store reproduction/results.db
$L reproduce run sarnn-adding-500 --budget paper --only lambda_0_code,lambda_1e5_code --seeds 6, --resume --store reproduction/results.db
