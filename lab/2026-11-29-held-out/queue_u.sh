#!/bin/bash
# copy-500 held-out, head start at the end of the fifteenth session: TARNN seeds 4-6, then iRNN seeds 4-6; one
# thread a run; cut at the stop and resumed with --resume (the run directories keep their checkpoints)
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
L=.venv/bin/ltdrnn
R="reproduce run copy-500 --budget paper --resume --store reproduction/results.db"
$L $R --only tarnn --seeds 4,5,6
$L $R --only irnn --seeds 4,5,6
