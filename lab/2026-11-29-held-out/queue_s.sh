#!/bin/bash
# adding-750 held-out, core 0: TARNN seeds 4-6, then LSTM seeds 5-6; one thread a run
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
L=.venv/bin/ltdrnn
R="reproduce run adding-750 --budget paper --resume --store reproduction/results.db"
$L $R --only tarnn --seeds 4,5,6
$L $R --only lstm --seeds 5,6
