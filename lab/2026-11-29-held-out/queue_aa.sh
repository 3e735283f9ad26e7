#!/bin/bash
# After SRNN adding-750 seed 3 at 100,000 steps (lab/2026-11-29-srnn-adding750-long, PID given as $1): copy-200's
# LSTM trained as the rule's subjects (reproduce/copy200-lstm of 2026-11-30: 4,000 steps, clipping 1, beta2 0.95,
# 3 rollbacks, validation-loss limit 100) on held-out seeds 4-6, then pmnist's full-MNIST lane b (LSTM, SA-RNN,
# MIST, seeds 1-3). One thread a run; resumes; run it again after a stop (the wait ends at once).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
while [ -n "$1" ] && kill -0 "$1" 2>/dev/null; do sleep 30; done
.venv/bin/ltdrnn reproduce run copy-200 --budget paper --resume --store reproduction/results.db --only lstm --seeds 4,5,6
bash lab/2026-11-30-full-mnist/lane.sh pmnist 1,2,3 lstm sarnn mist >> lab/2026-11-30-full-mnist/pmnist_b.log 2>&1
