#!/bin/bash
# Thirteenth session, the last half hour: TARNN's adding-200 seeds took 4 minutes each on one thread, so
# adding-200's held-out LSTM seeds run here after TARNN seed 6 (PID $1) instead of in queue k after SRNN seed 6;
# queue k's process (PID $2) is stopped once SRNN seed 6 has its result. One thread a run.
# Run from the repository root: nohup bash lab/2026-11-29-held-out/queue_m.sh PID1 PID2 > lab/2026-11-29-held-out/queue_m.log 2>&1 &
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
L=.venv/bin/ltdrnn
while kill -0 "$1" 2>/dev/null; do sleep 10; done
( until ls runs/reproduce/adding-200/paper/srnn-s6-*/result.json >/dev/null 2>&1; do sleep 10; done; sleep 30; kill "$2" ) &
set -x
$L reproduce run adding-200 --budget paper --only lstm --seeds 4,5,6 --resume --store reproduction/results.db
wait
