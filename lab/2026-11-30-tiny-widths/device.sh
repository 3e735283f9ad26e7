#!/bin/bash
# 10:40 UTC: seed 0 trained by deploy/tiny-tarnn at H = 32 (the adopted width) and put on the simulated chips for
# docs/deployment.md's cost columns (20 test sequences, as the other rows). One thread.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
cd "$(dirname "$0")/../.."
.venv/bin/ltdrnn train deploy/tiny-tarnn train.seed=0 --run-dir /tmp/tinywidths/preset32/s0 --no-store --no-progress
.venv/bin/ltdrnn device-table /tmp/tinywidths/preset32/s0 --sequences 20 --json lab/2026-11-30-tiny-widths/tarnn-h32-s0-device.json
