#!/bin/bash
# adding-750 held-out, core 1: iRNN seeds 4-6, SRNN seeds 4-6, then LSTM seed 4; one thread a run
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
L=.venv/bin/ltdrnn
R="reproduce run adding-750 --budget paper --resume --store reproduction/results.db"
$L $R --only irnn --seeds 4,5,6
$L $R --only srnn --seeds 4,5,6
$L $R --only lstm --seeds 4,
