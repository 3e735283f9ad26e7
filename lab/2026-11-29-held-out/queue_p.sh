#!/bin/bash
# copy-200 held-out, core 1, after queue_n: TARNN seeds 4, 5, then SRNN seeds 4-6; one thread a run
while pgrep -f queue_n.sh >/dev/null; do sleep 30; done
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
L=.venv/bin/ltdrnn
R="reproduce run copy-200 --budget paper --resume --store reproduction/results.db"
$L $R --only tarnn --seeds 4,5
$L $R --only srnn --seeds 4,5,6
