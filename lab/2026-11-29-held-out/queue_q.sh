#!/bin/bash
# copy-200 held-out, core 2, after queue_o: iRNN seeds 4-6, TARNN seed 6, LSTM seeds 4-6; one thread a run
while pgrep -f queue_o.sh >/dev/null; do sleep 30; done
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
L=.venv/bin/ltdrnn
R="reproduce run copy-200 --budget paper --resume --store reproduction/results.db"
$L $R --only irnn --seeds 4,5,6
$L $R --only tarnn --seeds 6,
$L $R --only lstm --seeds 4,5,6
