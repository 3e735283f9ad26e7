#!/bin/bash
# After queue u (copy-500 iRNN seeds 4-6): copy-500 SRNN seeds 4 and 5, so that copy-500 is judged within
# the seventeenth session (queue y runs seed 6 beside it). One thread a run; resumes (--resume).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
while kill -0 643 2>/dev/null; do sleep 30; done
.venv/bin/ltdrnn reproduce run copy-500 --budget paper --resume --store reproduction/results.db --only srnn --seeds 4,5
