#!/bin/bash
# 15:05: after each 14:50 lane, noise-padded MNIST: the LSTM's offline-digit rows with its new preset (clipping
# at 1), then the first full-data rows of the claim's cheapest cells.
# bash lab/2026-11-30-full-mnist/follow_1505.sh a|b PID   (PID: the lane to wait for)
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
here=lab/2026-11-30-full-mnist
while kill -0 "$2" 2>/dev/null; do sleep 20; done
proxy() { .venv/bin/ltdrnn reproduce run "$1" --budget paper --resume --store reproduction/results.db --only "$2" --seeds "$3"; }
case $1 in
  a) proxy noisy-mnist lstm 1,2
     bash $here/lane.sh noisy-mnist 1,2,3 irnn ;;
  b) proxy noisy-mnist lstm 3,
     bash $here/lane.sh noisy-mnist 1,2,3 srnn ;;
esac
