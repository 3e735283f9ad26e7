#!/bin/bash
# sarnn-adding-500 held-out, core 1: λ 1e-5 seeds 4 (resume), 5, 6, then λ 0 seed 5; one thread a run
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
L=.venv/bin/ltdrnn
$L reproduce run sarnn-adding-500 --budget paper --only lambda_1e5_code --seeds 4,5,6 --resume --store reproduction/results.db
$L reproduce run sarnn-adding-500 --budget paper --only lambda_0_code --seeds 4,5 --resume --store reproduction/results.db
