#!/bin/bash
# Lane a from 07:40 UTC on 2026-11-30 (replaces its follow.sh): once queue z (PID $1) ends, pmnist's
# tarnn_code (the authors' code's step sizes, a reading beside TARNN, lab/2026-11-30-pmnist-eta) on the
# held-out seeds 4, 5, 6, then pixel-mnist and noisy-mnist as follow.sh. Run it again after a stop.
pid=$1
while [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; do sleep 60; done
bash lab/2026-11-30-full-mnist/lane.sh pmnist 4,5,6 tarnn_code
bash lab/2026-11-30-full-mnist/follow.sh "" tarnn irnn srnn
