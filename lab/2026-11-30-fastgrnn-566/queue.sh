#!/bin/bash
# The screen's four configurations on development seeds 0-9, one after another, one thread (2026-11-30,
# beside the two full-MNIST lanes). Chosen before any run: the preset trained through int8 for its last
# 300 of 1,500 steps (as the source cells' screen), and the widths that fit 566 B at the preset's recipe.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
out=lab/2026-11-30-fastgrnn-566/runs.jsonl
run() { PYTHONPATH=src .venv/bin/python lab/2026-11-30-fastgrnn-566/screen.py "$@" >> $out; }
run q300 0-9 train.qat_steps=300
run h24 0-9 model.hidden_size=24
run h28 0-9 model.hidden_size=28
run h32r2 0-9 model.hidden_size=32 model.options.u_rank=2
