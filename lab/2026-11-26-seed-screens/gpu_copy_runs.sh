#!/usr/bin/env bash
# The copy claim runs on one GPU, in one call of the device tool (about 9 minutes):
#   1. the TARNN copy claim runs at the paper budget, seeds 1-3, on the GPU (TARNN's Triton kernels, per-time-step
#      step sizes): copy T=500 (reproduce/copy500-tarnn) and copy T=200 with rollbacks (reproduce/copy200-tarnn),
#      six processes under CUDA MPS where it starts; each writes a checkpoint every 50 steps, so a run cut off at
#      the deadline resumes on any machine:
#        ltdrnn train RUN_DIR/config.yaml --run-dir RUN_DIR --resume train.device=cpu --store results.db
#   2. at the same time, the Triton tests on the GPU (LTDRNN_TEST_DEVICE=cuda, as benchmarks/gpu_check.sh);
#   3. after the runs, a short `ltdrnn bench --device cuda` at H = 128.
# Run from anywhere; it needs a python3 with CUDA torch, triton, numpy, pytest, pyyaml, tqdm and sqlalchemy (the
# workplace's GPU image lacks sqlalchemy: the device call installed its wheel first).
# Results in $OUT (else ./gpu_out): env.txt, gpu_tests.log, copy-500.log, copy-200.log, runs.tgz (run directories
# and the two results databases), bench_gpu.json, bench_gpu.md, bench_gpu.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpu_out}"
WORK="${WORK:-/tmp/ltdrnn-gpu-runs}"
DEVICE="${DEVICE:-cuda}"
DEADLINE="${DEADLINE:-400}"  # seconds after the start at which unfinished runs are stopped
BENCH_BUDGET="${BENCH_BUDGET:-90}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$OUT" "$WORK"
export PYTHONPATH="$PWD/src:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export LTDRNN_CACHE="$WORK/cache" TRITON_CACHE_DIR="$WORK/triton-cache"
unset TRITON_INTERPRET
start=$(date +%s)
elapsed() { echo $(($(date +%s) - start)); }
any_alive() { for pid in "$@"; do kill -0 "$pid" 2>/dev/null && return 0; done; return 1; }

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  "$PYTHON" -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available()); print('triton', triton.__version__)"
  if [ "$DEVICE" = cuda ] && nvidia-cuda-mps-control -d 2>&1; then echo "MPS daemon started"; else echo "no MPS"; fi
} >"$OUT/env.txt" 2>&1

runners=()
for claim in copy-500 copy-200; do
  setsid "$PYTHON" -m ltdrnn.cli reproduce run "$claim" --budget paper --only tarnn --seeds 1,2,3 --jobs 3 \
    --set "train.device=$DEVICE" --set train.threads=1 --set train.checkpoint_every=50 \
    --store "$WORK/$claim.db" --runs "$WORK/runs" >"$OUT/$claim.log" 2>&1 &
  runners+=($!)
done

if [ "$DEVICE" = cuda ]; then
  LTDRNN_TEST_DEVICE=cuda timeout 200 "$PYTHON" -m pytest -q -p no:cacheprovider -n 4 \
    tests/cells/test_triton_srnn.py tests/cells/test_triton_irnn.py tests/cells/test_triton_tarnn.py \
    tests/cells/test_triton_sarnn.py tests/cells/test_triton_mist.py tests/cells/test_triton_autocast.py \
    tests/cells/test_triton_compile.py tests/test_cuda_graph_step.py \
    "tests/cells/test_autocast.py::test_every_cell_runs_under_autocast_with_a_float32_state" \
    -k "not cpu" >"$OUT/gpu_tests.log" 2>&1
  echo "tests exit $? at $(elapsed) s" >>"$OUT/env.txt"
fi

while [ "$(elapsed)" -lt "$DEADLINE" ] && any_alive "${runners[@]}"; do sleep 5; done
for pid in "${runners[@]}"; do kill -TERM -- "-$pid" 2>/dev/null; done
sleep 3
echo "runs stopped at $(elapsed) s" >>"$OUT/env.txt"
[ "$DEVICE" = cuda ] && echo quit | nvidia-cuda-mps-control 2>/dev/null
tar czf "$OUT/runs.tgz" -C "$WORK" --exclude cache --exclude triton-cache .

if [ "$DEVICE" = cuda ]; then
  timeout $((BENCH_BUDGET + 60)) "$PYTHON" -m ltdrnn.cli bench --device cuda --hidden-sizes 128 --loop-hidden-sizes 128 \
    --tf32 --repeats 3 --warmup 1 --stream-steps 100 --time-budget "$BENCH_BUDGET" \
    --out "$OUT/bench_gpu.json" --markdown "$OUT/bench_gpu.md" >"$OUT/bench_gpu.log" 2>&1
  echo "bench exit $? at $(elapsed) s" >>"$OUT/env.txt"
fi
