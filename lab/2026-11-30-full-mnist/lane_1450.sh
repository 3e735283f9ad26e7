#!/bin/bash
# 14:50 lanes: pmnist's LSTM competitors trained as SRNN and MIST were (lstm_srnn, lstm_mist), full data,
# seeds 1-3; then their offline-digit rows and the pixel LSTM's missing offline-digit seed 2.
# bash lab/2026-11-30-full-mnist/lane_1450.sh a|b
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
here=lab/2026-11-30-full-mnist
proxy() { .venv/bin/ltdrnn reproduce run "$1" --budget paper --resume --store reproduction/results.db --only "$2" --seeds "$3"; }
case $1 in
  a) bash $here/lane.sh pmnist 1,2,3 lstm_srnn ;;
  b) bash $here/lane.sh pmnist 1,2,3 lstm_mist
     proxy pmnist lstm_srnn 1,2,3
     proxy pixel-mnist lstm 2, ;;
esac
