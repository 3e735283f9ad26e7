#!/bin/bash
# Thirteenth session, core 2 (replaces the rest of queue j): once sarnn-adding-500's λ 0 seed 4 has its result
# (the run directory's result.json), stop that process (PID $1; it has moved on to λ 1e-5 seed 4, which resumes
# later) and train adding-200's held-out SRNN and LSTM seeds: SRNN's 100,000 steps take about 13 minutes a seed
# on one thread since the kernel's readout products per chunk of steps. One thread a run.
# Run from the repository root: nohup bash lab/2026-11-29-held-out/queue_k.sh PID > lab/2026-11-29-held-out/queue_k.log 2>&1 &
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
L=.venv/bin/ltdrnn
until ls runs/reproduce/sarnn-adding-500/paper/lambda_0_code-s4-*/result.json >/dev/null 2>&1; do sleep 20; done
sleep 30  # the row and its analysis are stored after result.json
kill "$1"
set -x
$L reproduce run adding-200 --budget paper --only srnn,lstm --seeds 4,5,6 --resume --store reproduction/results.db
