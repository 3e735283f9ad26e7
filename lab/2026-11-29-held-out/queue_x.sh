#!/bin/bash
# After queue u (copy-500 iRNN seeds 4-6): copy-500 SRNN seed 4, so that copy-500 is judged within
# the seventeenth session (queue y runs seeds 6 and 5 beside it); then pmnist's full-MNIST lane a. One thread
# a run; resumes (--resume); run it again after a stop (the wait ends at once).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
while kill -0 643 2>/dev/null; do sleep 30; done
.venv/bin/ltdrnn reproduce run copy-500 --budget paper --resume --store reproduction/results.db --only srnn --seeds 4,
# then the full-MNIST rows of pmnist, lane a (lab/2026-11-30-full-mnist): TARNN, iRNN, SRNN seeds 1-3
bash lab/2026-11-30-full-mnist/lane.sh pmnist 1,2,3 tarnn irnn srnn >> lab/2026-11-30-full-mnist/pmnist_a.log 2>&1
