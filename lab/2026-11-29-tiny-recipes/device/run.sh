#!/bin/bash
# The device table of docs/deployment.md for the frozen deploy/tiny presets: seed 0 of each preset's
# `final` runs (screen.py run CELL final --seeds 0 1 2 3 4), the first 20 test sequences on the simulated
# ATmega328P (simavr) and Cortex-M4F (QEMU), one cell at a time, one process at nice 19.
cd "$(dirname "$0")/../../.."
for cell in tarnn srnn mist irnn sarnn fastgrnn lstm gru; do
    nice -n 19 .venv/bin/ltdrnn device-table /tmp/tinyrec/runs/$cell/final/s0 --sequences 20 \
        --json lab/2026-11-29-tiny-recipes/device/$cell.json \
        > lab/2026-11-29-tiny-recipes/device/$cell.md 2> lab/2026-11-29-tiny-recipes/device/$cell.log
done
