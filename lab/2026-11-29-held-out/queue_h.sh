#!/bin/bash
# Thirteenth session, core 1, after MIST's gradient-lag LSTM seed 3 (PID $1; queue_e stopped there): the rest of
# irnn-identity-gradient's held-out seeds (K = 5 seed 6, K = 10 seeds 4-6), then sarnn-adding-500's judged runs on
# held-out seed 5 and seed 6 of lambda 1e-4. adding-200's TARNN and LSTM held-out seeds wait: its SRNN seeds
# (about 95 core-minutes each) cannot finish this session. One thread, nice 0.
# Run from the repository root: nohup bash lab/2026-11-29-held-out/queue_h.sh PID > lab/2026-11-29-held-out/queue_h.log 2>&1 &
set -x
L=.venv/bin/ltdrnn
while kill -0 "$1" 2>/dev/null; do sleep 20; done
$L reproduce run irnn-identity-gradient --budget paper --only k5,k10 --seeds 4,5,6 --resume --store reproduction/results.db
$L reproduce run sarnn-adding-500 --budget paper --only lambda_0_code,lambda_1e5_code,lambda_1e4_code --seeds 5, --resume --store reproduction/results.db
$L reproduce run sarnn-adding-500 --budget paper --only lambda_1e4_code --seeds 6, --resume --store reproduction/results.db
