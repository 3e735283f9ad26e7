#!/bin/bash
# Runs the screen lines of a file two at a time, niced, one thread each:
#   lab/2026-11-29-irnn-copy/queue.sh LINES_FILE
# Each line: NAME SEED STEPS [KEY=VALUE ...] (arguments of screen.py).
lines=$(realpath "$1")
cd "$(dirname "$0")/../.." || exit 1
grep -v "^#" "$lines" | grep -v '^\s*$' | xargs -P 2 -L 1 bash -c \
  'name=$0; seed=$1; steps=$2; shift 2; nice -n 19 .venv/bin/python lab/2026-11-29-irnn-copy/screen.py "$name" --seed "$seed" --steps "$steps" "$@" 2>&1 | grep -v Warning'
