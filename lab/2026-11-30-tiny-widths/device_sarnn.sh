#!/bin/bash
# 10:55 UTC: seed 0 trained by deploy/tiny-sarnn at H = 24 (the adopted width) on the simulated chips, as device.sh.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
cd "$(dirname "$0")/../.."
.venv/bin/ltdrnn train deploy/tiny-sarnn train.seed=0 --run-dir /tmp/tinywidths/sarnn24/s0 --no-store --no-progress
.venv/bin/ltdrnn device-table /tmp/tinywidths/sarnn24/s0 --sequences 20 --json lab/2026-11-30-tiny-widths/sarnn-h24-s0-device.json
