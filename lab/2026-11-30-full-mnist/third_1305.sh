#!/bin/bash
# 13:05 UTC, the third one-thread job after iRNN seed 6 (PID $1): pmnist's lstm_mist seeds 2 and 3, so that the
# three lanes end together (lane a reaches lstm_mist seed 1 after TARNN seed 6, lane b seed 3 last; a finished
# run is skipped). Usage: bash third_1305.sh PID
cd "$(dirname "$0")/../.."
while kill -0 "$1" 2>/dev/null; do sleep 20; done
bash lab/2026-11-30-full-mnist/lane.sh pmnist 2,3 lstm_mist
