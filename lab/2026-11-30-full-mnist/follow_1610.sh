#!/bin/bash
# 16:10: after follow_1505.sh a (PID), noise-padded MNIST's LSTM (clipped at 1) on the full data, seeds 1-3.
# bash lab/2026-11-30-full-mnist/follow_1610.sh PID
while kill -0 "$1" 2>/dev/null; do sleep 20; done
bash lab/2026-11-30-full-mnist/lane.sh noisy-mnist 1,2,3 lstm
