#!/bin/bash
# 12:30 UTC: at one thread on a machine running two jobs, TARNN takes about 215 s an epoch and LSTM 105 s (not the
# 7-9 and 4-5 core-minutes of the estimate, measured beside more jobs), so pixel-mnist's judged runs fit in this
# session. Lane a, after TARNN seed 4 (PID $2): TARNN seeds 5 and 6, then iRNN seed 6. Lane b, after the LSTM
# screen (PID $2, lab/2026-11-30-pixel-lstm): LSTM seeds 4-6 with the preset that screen adopts, then iRNN seed 5
# (resumed) and SA-RNN seed 6. Usage: bash follow_1230.sh a|b PID
cd "$(dirname "$0")/../.."
dir=lab/2026-11-30-full-mnist
while kill -0 "$2" 2>/dev/null; do sleep 20; done
case $1 in
  a) bash $dir/lane.sh pixel-mnist 5,6 tarnn
     bash $dir/lane.sh pixel-mnist 6, irnn ;;
  b) bash $dir/lane.sh pixel-mnist 4,5,6 lstm
     bash $dir/lane.sh pixel-mnist 5, irnn
     bash $dir/lane.sh pixel-mnist 6, sarnn ;;
esac
