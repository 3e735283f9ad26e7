#!/bin/bash
# 13:15 UTC: the epochs run slower with three jobs on the 2 cores than the 12:50 plan assumed, so pmnist's
# lstm_mist full-data runs (seeds 1-3, about 50 core-minutes) wait for the next session and pixel-mnist's judged
# runs come first. Lane b, after its LSTM seeds 4-6 (PID $2): the pixel LSTM's offline-digit rows again (seeds
# 1-3, the paper budget: its preset took clipping at 1). The third job, after iRNN seed 6 (PID $2): iRNN seed 5
# (resumed). Lane a ends with TARNN seed 6. Usage: bash follow_1315.sh b|third PID
cd "$(dirname "$0")/../.."
while kill -0 "$2" 2>/dev/null; do sleep 20; done
case $1 in
  b) OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/ltdrnn reproduce run pixel-mnist --budget paper --resume \
       --store reproduction/results.db --only lstm --seeds 1,2,3 ;;
  third) bash lab/2026-11-30-full-mnist/lane.sh pixel-mnist 5, irnn ;;
esac
