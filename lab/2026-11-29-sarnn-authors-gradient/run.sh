#!/bin/bash
# 2026-11-29: the factor study (one thread, nice 10) and the confirming run, from the repository root.
#   bash lab/2026-11-29-sarnn-authors-gradient/run.sh study     # factors.jsonl, in order of priority
#   bash lab/2026-11-29-sarnn-authors-gradient/run.sh confirm   # the preset with α = 0.1 and the authors' path
set -e
here=lab/2026-11-29-sarnn-authors-gradient
case "$1" in
study)
    nice -n 10 .venv/bin/python $here/factors.py $here/factors.jsonl \
        alpha0.1:1 base:1 bias+0.1:1 bias-0.1:1 lambda0:1 lambda_sum1e-4:1 alpha0.1:2 base:2 lambda1e-5:1 \
        alpha0.1:3 base:3 alpha0.3:1 ;;
confirm)
    nice -n 10 .venv/bin/ltdrnn train reproduce/sarnn-adding500 model.options.coordinator_state_grad=true \
        model.options.anneal_slope=false model.options.slope=0.1 train.loss_weights.budget=1.0e-4 train.seed=1 \
        train.threads=1 train.latency=false --run-dir runs/sarnn-authors-alpha01-s1 --no-progress \
        --store $here/runs.db ;;
*) echo "usage: run.sh study|confirm" >&2; exit 2 ;;
esac
