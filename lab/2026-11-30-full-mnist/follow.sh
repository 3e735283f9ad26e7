#!/bin/bash
# One lane's next claims once its current queue (PID $1) ends: bash follow.sh PID LABELS... trains pixel-mnist
# (tuned: held-out seeds 4,5,6), then noisy-mnist (untuned: seeds 1,2,3), each with lane.sh's full-data set.
# Started 2026-11-30 06:20 UTC for lane a (after queue z: tarnn irnn srnn) and lane b (after queue aa: lstm
# sarnn mist). Run it again after a stop with no live PID: the wait ends at once and finished runs are skipped.
pid=$1
shift
while [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; do sleep 60; done
bash lab/2026-11-30-full-mnist/lane.sh pixel-mnist 4,5,6 "$@"
bash lab/2026-11-30-full-mnist/lane.sh noisy-mnist 1,2,3 "$@"
