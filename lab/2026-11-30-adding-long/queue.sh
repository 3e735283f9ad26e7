#!/bin/bash
# Wait for a lane's process group to end, then train a preset on the seeds given, one after another, one
# thread a run (rows to this folder's results.db; run directories runs/lab/<group>-<name>/s<seed>, resumable).
#   bash lab/2026-11-30-adding-long/queue.sh PGID PRESET SEED... [-- OVERRIDES]   (PGID 0: do not wait)
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1000000000
pgid=$1 preset=$2; shift 2
seeds=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do seeds+=("$1"); shift; done; [ "$1" = "--" ] && shift
while [ "$pgid" != 0 ] && pgrep -g "$pgid" > /dev/null; do sleep 20; done
for seed in "${seeds[@]}"; do
  echo "$(date -u +%FT%TZ) $preset seed $seed $*"
  .venv/bin/ltdrnn train "$preset" train.seed=$seed train.progress=false "$@" \
    --run-dir "runs/lab/${preset/\//-}/s$seed${TAG:+-$TAG}" --resume --store lab/2026-11-30-adding-long/results.db
done
echo "$(date -u +%FT%TZ) done"
