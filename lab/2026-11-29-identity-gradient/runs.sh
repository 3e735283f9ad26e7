#!/bin/bash
# The runs of this note (seed 1; one thread, nice 19, on the shared 2-core machine), from the repository root.
# Per-step logs and histories in results/. See README.md.
set -e
cd "$(dirname "$0")/../.."
probe=lab/2026-11-29-identity-gradient/train_probe.py
common="model.options.K=10 model.options.eta=0.01 train.eval_every=25 train.track_gradients=false train.latency=false train.seed=1 train.threads=1"
# 0. at init (step 0), the claim's preset (uniform U), K = 10, eta 0.01, seeds 1 and 2 (results/init_probe.jsonl)
for s in 1 2; do
  nice -n 19 .venv/bin/python $probe /tmp/ig_init.jsonl k10_uniform model.options.K=10 model.options.eta=0.01 \
    model.options.u_init=uniform train.seed=$s train.threads=1 --init-only
done
# 1. the paper's K = 10, eta 0.01 with U = alpha I at init (V = 0), 400 steps: diverged at step 181
nice -n 19 .venv/bin/python $probe lab/2026-11-29-identity-gradient/results/k10_identity_eta001_s1.jsonl k10_identity \
  $common model.options.u_init=identity train.steps=400 --run-dir /tmp/ig/k10_identity_s1
# 2. the same with Theorem 1's guard ||P U|| <= alpha (contractive=true); stopped at step 63: ratio underflowed to 0
nice -n 19 .venv/bin/python $probe lab/2026-11-29-identity-gradient/results/k10_identity_guard_eta001_s1.jsonl k10_identity_guard \
  $common model.options.u_init=identity model.options.contractive=true train.steps=300 --run-dir /tmp/ig/k10_identity_guard_s1
