#!/bin/bash
# Adding T = 2,000 past the papers: the preset <cell>/adding-2000 as it is, on the seeds given, one after
# another, one thread a run. Rows to this folder's results.db; run directories runs/lab/adding2000/<cell>-s<seed>
# (run it again to resume an unfinished seed). Extra overrides after "--". From the repository root:
#   bash lab/2026-11-30-adding-long/run.sh irnn 4 5 6 >> lab/2026-11-30-adding-long/irnn.log 2>&1
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1000000000
cell=$1; shift
seeds=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do seeds+=("$1"); shift; done; [ "$1" = "--" ] && shift
for seed in "${seeds[@]}"; do
  echo "$(date -u +%FT%TZ) $cell seed $seed $*"
  .venv/bin/ltdrnn train $cell/adding-2000 train.seed=$seed train.progress=false "$@" \
    --run-dir runs/lab/adding2000/$cell-s$seed${TAG:+-$TAG} --resume --store lab/2026-11-30-adding-long/results.db
done
echo "$(date -u +%FT%TZ) done"
