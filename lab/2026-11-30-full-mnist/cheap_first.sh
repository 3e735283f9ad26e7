#!/bin/bash
# From 2026-11-30 09:00 UTC: run directories do not outlive a session (the checkout is new each time), so a
# run must end inside the session that starts it. After a lane's pmnist run (PID $1), the cells whose runs
# take under an hour a seed go first: pixel-mnist on the held-out seeds 4-6, then noisy-mnist on seeds 1-3.
# TARNN and LSTM (1-1.5 h a seed) start at the beginning of a session of their own.
# Usage: bash cheap_first.sh PID LABEL...   (lane a: srnn irnn; lane b: mist sarnn)
cd "$(dirname "$0")/../.."
dir=lab/2026-11-30-full-mnist
pid=$1
shift
while [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; do sleep 30; done
bash $dir/lane.sh pixel-mnist 4,5,6 "$@"
bash $dir/lane.sh noisy-mnist 1,2,3 "$@"
