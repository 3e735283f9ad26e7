#!/bin/bash
# copy-500 held-out, second lane beside queue u (TARNN then iRNN): LSTM seeds 4-6 (its preset since
# 2026-11-29: the subjects' 4,000 steps and stabilisers), then SRNN seeds 4-6; then the lab runs waiting for a
# core: the per-unit iRNN at T = 200 (lab/2026-11-29-irnn-copy/q11.txt) and SRNN adding-750 at 100,000 steps,
# seed 3. One thread a run; cut at a stop and resumed by running it again (--resume; the screen restarts).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
L=.venv/bin/ltdrnn
R="reproduce run copy-500 --budget paper --resume --store reproduction/results.db"
$L $R --only lstm --seeds 4,5,6
$L $R --only srnn --seeds 4,5,6
grep -v "^#" lab/2026-11-29-irnn-copy/q11.txt | while read -r name seed steps rest; do
  .venv/bin/python lab/2026-11-29-irnn-copy/screen.py "$name" --seed "$seed" --steps "$steps" $rest 2>&1 | grep -v Warning
done
bash lab/2026-11-29-srnn-adding750-long/run.sh 3 >> lab/2026-11-29-srnn-adding750-long/run.log 2>&1
