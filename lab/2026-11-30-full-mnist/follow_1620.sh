#!/bin/bash
# 16:20: after follow_1505.sh b (PID), noise-padded MNIST's TARNN on the full data, seed 1 (resumable: a
# session that stops it leaves its last epoch's checkpoint, and lane.sh's --resume continues from it).
# bash lab/2026-11-30-full-mnist/follow_1620.sh PID
while kill -0 "$1" 2>/dev/null; do sleep 20; done
bash lab/2026-11-30-full-mnist/lane.sh noisy-mnist 1, tarnn
