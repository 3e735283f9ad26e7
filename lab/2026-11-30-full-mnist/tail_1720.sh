#!/bin/bash
# 17:20, at the session's end: noise-padded MNIST's TARNN seed 2 beside SA-RNN seed 1, full data, so that the
# next session resumes them from their last epoch's checkpoints (lane.sh runs with --resume).
# bash lab/2026-11-30-full-mnist/tail_1720.sh a|b
case $1 in
  a) bash lab/2026-11-30-full-mnist/lane.sh noisy-mnist 2,3 tarnn ;;
  b) bash lab/2026-11-30-full-mnist/lane.sh noisy-mnist 1,2,3 sarnn ;;
esac
