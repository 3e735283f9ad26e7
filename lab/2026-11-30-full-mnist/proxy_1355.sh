#!/bin/bash
# 13:55 UTC: the pixel LSTM's offline-digit rows again (the paper budget; its preset took clipping at 1), split
# so that they end with TARNN seed 6: lane b seeds 1 and 2 after its LSTM seed 6 (PID $1), the third job seed 3
# after iRNN seed 5 (PID $1). Usage: bash proxy_1355.sh PID SEEDS
cd "$(dirname "$0")/../.."
while kill -0 "$1" 2>/dev/null; do sleep 10; done
OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/ltdrnn reproduce run pixel-mnist --budget paper --resume \
  --store reproduction/results.db --only lstm --seeds "$2"
