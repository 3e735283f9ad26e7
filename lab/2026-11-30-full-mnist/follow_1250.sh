#!/bin/bash
# 12:50 UTC. pmnist's rule "MIST beats LSTM" now reads lstm_mist, MIST Table 1's LSTM (H = 100, lr 10^-1.11)
# trained under MIST's protocol (SGD momentum, clipping 1, batch 100: MIST's 5,000 steps in 10 epochs), seeds 1-3.
# Lane a, after follow_1230.sh a (PID $2): lstm_mist seeds 1 and 2. Lane b, after its LSTM seeds 4-6 (PID $2):
# iRNN seed 5 (resumed), the pixel LSTM's offline-digit rows again (seeds 1-3, the paper budget: its preset took
# clipping at 1, lab/2026-11-30-pixel-lstm), lstm_mist seed 3, then SA-RNN seed 6 (no rule reads it).
# Usage: bash follow_1250.sh a|b PID
cd "$(dirname "$0")/../.."
dir=lab/2026-11-30-full-mnist
while kill -0 "$2" 2>/dev/null; do sleep 20; done
case $1 in
  a) bash $dir/lane.sh pmnist 1,2 lstm_mist ;;
  b) bash $dir/lane.sh pixel-mnist 5, irnn
     OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/ltdrnn reproduce run pixel-mnist --budget paper --resume \
       --store reproduction/results.db --only lstm --seeds 1,2,3
     bash $dir/lane.sh pmnist 3, lstm_mist
     bash $dir/lane.sh pixel-mnist 6, sarnn ;;
esac
