#!/bin/bash
# adding-200's LSTM trained until it learns or 20,000 steps (reproduce/adding200-lstm as changed on 2026-11-30:
# TARNN's protocol, clipping at 1, 20,000 steps), on the held-out seeds given, one thread, niced so that the
# full-MNIST lanes keep their cores; --resume continues a cut run from its last checkpoint.
# bash lab/2026-11-30-lstm-adding/run.sh SEEDS   e.g.  run.sh 4,
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
exec nice -n 10 .venv/bin/ltdrnn reproduce run adding-200 --budget paper --resume --store reproduction/results.db \
  --only lstm --seeds "$1"
