#!/bin/bash
# 2026-11-30 09:45 UTC: a third one-thread job beside the two lanes while the core the FastGRNN screen used is
# free: noisy-mnist's MIST (seeds 1-3, about 20 core-minutes a seed), which lane b would reach last.
cd "$(dirname "$0")/../.."
bash lab/2026-11-30-full-mnist/lane.sh noisy-mnist 1,2,3 mist
