#!/bin/bash
# copy-200 held-out: LSTM seed 6 on the core queue p freed (queue q trains seeds 4 and 5, and skips 6 once stored)
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
.venv/bin/ltdrnn reproduce run copy-200 --budget paper --only lstm --seeds 6, --resume --store reproduction/results.db
