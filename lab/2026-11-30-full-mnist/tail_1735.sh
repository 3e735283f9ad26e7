#!/bin/bash
# 17:35 (next session): SA-RNN's three noise-padded full-data seeds split over the two lanes, so that all
# five missing rows land in about 2.5 hours: lane b runs SA-RNN seeds 1-2; lane a, once TARNN seeds 2-3
# (tail_1720.sh a, PID given as $2) are done, runs SA-RNN seed 3.
# bash lab/2026-11-30-full-mnist/tail_1735.sh b   |   bash lab/2026-11-30-full-mnist/tail_1735.sh a PID
case $1 in
  a) while kill -0 "$2" 2>/dev/null; do sleep 30; done
     bash lab/2026-11-30-full-mnist/lane.sh noisy-mnist 3, sarnn ;;
  b) bash lab/2026-11-30-full-mnist/lane.sh noisy-mnist 1,2 sarnn ;;
esac
