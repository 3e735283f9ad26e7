#!/bin/bash
# pmnist's new run lstm_mist on the offline digits (the paper budget, seeds 1-3: the proxy rows shown beside the
# full-data rows); about 1,050 steps a run. A third one-thread job, 12:55 UTC.
cd "$(dirname "$0")/../.."
OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/ltdrnn reproduce run pmnist --budget paper --resume \
  --store reproduction/results.db --only lstm_mist --seeds 1,2,3
