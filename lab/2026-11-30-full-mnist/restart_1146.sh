#!/bin/bash
# Both lanes at the start of the session of 2026-11-30 11:46 UTC (the checkout and its run directories were
# kept this time). Pixel MNIST's rules read TARNN, iRNN and LSTM, so those go first, longest first:
# lane a TARNN seed 4 (about 1.5 h), then iRNN seed 5 (resumed from its checkpoint) and SA-RNN seed 6;
# lane b LSTM seeds 4, 5, 6 (about 1 h each). One seed is written "4," (a bare "4" means four seeds, 0-3; lane a
# started so at 11:46 and was restarted at 11:58). Usage: bash restart_1146.sh a|b
cd "$(dirname "$0")/../.."
dir=lab/2026-11-30-full-mnist
case $1 in
  a) bash $dir/lane.sh pixel-mnist 4, tarnn
     bash $dir/lane.sh pixel-mnist 5, irnn
     bash $dir/lane.sh pixel-mnist 6, sarnn ;;
  b) bash $dir/lane.sh pixel-mnist 4,5,6 lstm ;;
esac
