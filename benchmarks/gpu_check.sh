#!/usr/bin/env bash
# The GPU check, in one run (about 7 minutes on one H100, Triton's compilation included; at most 9.7 by the
# timeouts below):
#   1. the Triton, CUDA-graph and autocast tests on the real GPU (LTDRNN_TEST_DEVICE=cuda: the compiled
#      kernels, float32, against the reference loops);
#   2. `ltdrnn bench --device cuda --tf32` (float32 products on TF32 tensor cores, as cuDNN's RNNs use them by
#      default; the amp section runs bf16): the source cells' Triton paths against cuDNN nn.LSTM / nn.GRU and against
#      their own PyTorch loops at the pixel-MNIST shape (T=784, d=1, B=128), H = 128, 256, 512;
#   3. benchmarks/copy_presets_gpu.py: a training step of the copy presets (T = 200 and 500, H = 128, B = 128;
#      per-time-step step sizes, iRNN's gate) on the Triton kernels against the PyTorch loop they ran before.
# Run from the repository root. It needs a python3 that has torch with CUDA, triton, numpy and pytest (the
# workplace's GPU image has them: python3 3.12, torch 2.11+cu130, triton 3.6, pytest, pytest-xdist); the
# project itself runs from src/ (PYTHONPATH), so nothing is installed and nothing is fetched.
# Results go to $OUT (the device tool's folder; ./gpu_check_out elsewhere): gpu_tests.log, bench_gpu.json,
# bench_gpu.md, bench_gpu.log, copy_presets.json, copy_presets.md, env.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_check_out}"
mkdir -p "$OUT"
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$PWD/src:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export LTDRNN_TEST_DEVICE=cuda LTDRNN_CACHE="${TMPDIR:-/tmp}/ltdrnn-gpu-check" TRITON_CACHE_DIR="${TMPDIR:-/tmp}/triton-gpu-check"
unset TRITON_INTERPRET

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  "$PYTHON" -c "import sys, torch, triton; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available()); print('triton', triton.__version__); print(torch.cuda.get_device_name(0))"
} 2>&1 | tee "$OUT/env.txt"
"$PYTHON" -c "import torch, triton; assert torch.cuda.is_available()" || { echo "gpu_check: no CUDA torch or no triton"; exit 2; }

# 1. tests on the GPU (xdist spreads Triton's compilation over the cores when it is there)
workers=()
"$PYTHON" -c "import xdist" 2>/dev/null && workers=(-n 8)
timeout 180 "$PYTHON" -m pytest -q -p no:cacheprovider "${workers[@]}" \
  tests/cells/test_triton_srnn.py tests/cells/test_triton_irnn.py tests/cells/test_triton_tarnn.py \
  tests/cells/test_triton_sarnn.py tests/cells/test_triton_mist.py tests/cells/test_triton_autocast.py \
  tests/cells/test_triton_compile.py tests/cells/test_triton_copy_presets.py \
  tests/test_cuda_graph_step.py "tests/cells/test_autocast.py::test_every_cell_runs_under_autocast_with_a_float32_state" \
  -k "not cpu" 2>&1 | tee "$OUT/gpu_tests.log"
tests_status=${PIPESTATUS[0]}

# 2. the benchmark; --time-budget stops starting new measurements after that many seconds
timeout 280 "$PYTHON" -m ltdrnn.cli bench --device cuda --hidden-sizes 128,256,512 --loop-hidden-sizes 128 \
  --tf32 --repeats 3 --warmup 1 --stream-steps 200 --time-budget 200 \
  --out "$OUT/bench_gpu.json" --markdown "$OUT/bench_gpu.md" 2>&1 | tee "$OUT/bench_gpu.log"
bench_status=${PIPESTATUS[0]}

# 3. the copy presets' training step, Triton against the loop (--time-budget as above)
timeout 120 "$PYTHON" benchmarks/copy_presets_gpu.py --repeats 5 --time-budget 80 --out "$OUT/copy_presets.json" \
  2>&1 | tee "$OUT/copy_presets.md"
copy_status=${PIPESTATUS[0]}

echo "gpu_check: tests exit $tests_status, bench exit $bench_status, copy presets exit $copy_status; results in $OUT"
exit $(( tests_status != 0 || bench_status != 0 || copy_status != 0 ))
