#!/bin/bash
# Takes over from queue x (its bash stopped at 02:27 while its copy-500 SRNN seed 4, PID 7806, ran on): after
# that run, copy-500 SRNN seed 5, then pmnist's full-MNIST lane a (TARNN, iRNN, SRNN seeds 1-3;
# lab/2026-11-30-full-mnist). One thread a run; resumes; run it again after a stop (the wait ends at once).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
while kill -0 7806 2>/dev/null; do sleep 30; done
.venv/bin/ltdrnn reproduce run copy-500 --budget paper --resume --store reproduction/results.db --only srnn --seeds 4,5
bash lab/2026-11-30-full-mnist/lane.sh pmnist 1,2,3 tarnn irnn srnn >> lab/2026-11-30-full-mnist/pmnist_a.log 2>&1
