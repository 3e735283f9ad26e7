#!/bin/bash
# 17:40: SA-RNN's first full-data epoch took 188 s (not the 10 minutes estimated), so SA-RNN seed 3 follows
# seeds 1-2 on lane b (tail_1735.sh b, PID given) instead of waiting for TARNN on lane a.
# bash lab/2026-11-30-full-mnist/tail_1740.sh PID
while kill -0 "$1" 2>/dev/null; do sleep 30; done
bash lab/2026-11-30-full-mnist/lane.sh noisy-mnist 3, sarnn
