#!/bin/bash
# adding-750's LSTM trained until it learns (validation MSE <= 0.01) or 20,000 steps (reproduce/adding750-lstm
# as changed on 2026-11-30: TARNN's protocol, clipping at 1, train.stop_at 0.01), on the seeds given, one
# thread; --resume continues a cut run from its last checkpoint (every validation, every 100 steps).
# bash lab/2026-11-30-lstm-adding750/run.sh SEEDS   e.g.  run.sh 4,
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
exec .venv/bin/ltdrnn reproduce run adding-750 --budget paper --resume --store reproduction/results.db \
  --only lstm --seeds "$1"
