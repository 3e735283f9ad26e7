#!/bin/bash
# Held-out seeds (4, 5, 6) of the labels whose settings were tuned, cheapest first; one thread (started at nice 19, reniced to 0 at 11:10 when the helpers starved them).
# Run from the repository root: nohup bash lab/2026-11-29-held-out/queue_a.sh > lab/2026-11-29-held-out/queue_a.log 2>&1 &
set -x
L=.venv/bin/ltdrnn
$L reproduce run adding-200 --budget paper --only irnn --seeds 4,5,6 --resume --store reproduction/results.db
$L reproduce run irnn-identity-gradient --budget paper --only k1,k5,k10 --seeds 4,5,6 --resume --store reproduction/results.db
$L reproduce run copy-200 --budget paper --only irnn --seeds 4,5,6 --resume --store reproduction/results.db
