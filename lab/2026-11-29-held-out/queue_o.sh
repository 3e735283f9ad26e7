#!/bin/bash
# sarnn-adding-500 held-out, core 2: λ 1e-4 seeds 4 (resume), 5, 6, then λ 0 seed 6; one thread a run
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
L=.venv/bin/ltdrnn
$L reproduce run sarnn-adding-500 --budget paper --only lambda_1e4_code --seeds 4,5,6 --resume --store reproduction/results.db
$L reproduce run sarnn-adding-500 --budget paper --only lambda_0_code --seeds 6, --resume --store reproduction/results.db
