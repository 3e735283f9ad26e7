#!/bin/bash
# The iRNN fidelity runs of the readings (docs/cells/irnn.md, "Readings"): the presets' paper settings
# (H=128, batch 128, Adam lr 1e-2, eta_0 = 1e-2, relu, K=1), fewer steps than the presets' 2,000 (the
# machine was shared; see the doc), 3 seeds each, one thread, rows in lab/2026-11-23-readings/irnn.db.
# usage: lab/2026-11-23-readings/irnn_runs.sh NAME SEED   (NAME: one of the cases below); run from the repo root.
set -euo pipefail
name=$1 seed=$2
small="train.eval_every=50 train.eval_batches=2 task.options.n_val=256 task.options.n_test=1000 train.latency=false"
case $name in
  adding200)        args="reproduce/adding200-irnn train.steps=300 task.options.n_train=38400" ;;
  adding200-paper)  args="reproduce/adding200-irnn train.steps=300 task.options.n_train=38400
                          model.options.reading=paper model.options.contractive=false" ;;
  adding750)        args="reproduce/adding750-irnn train.steps=200 task.options.n_train=25600" ;;
  copy200)          args="reproduce/copy200-irnn train.steps=300 task.options.n_train=38400" ;;
  copy500)          args="reproduce/copy500-irnn train.steps=200 task.options.n_train=25600" ;;
  *) echo "irnn_runs.sh: NAME: expected adding200, adding200-paper, adding750, copy200 or copy500, got $name" >&2
     exit 2 ;;
esac
exec nice -n 10 ltdrnn train $args $small train.threads=1 train.seed=$seed \
    --store lab/2026-11-23-readings/irnn.db --run-dir "${RUNS:-runs/fidelity}/irnn-$name-s$seed" --quiet
