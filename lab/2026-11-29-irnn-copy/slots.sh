#!/bin/bash
# Like queue.sh, but fills a slot as soon as fewer than 2 screen.py processes of this screen are running:
#   lab/2026-11-29-irnn-copy/slots.sh LINES_FILE LOG
lines=$(realpath "$1"); log=$(realpath -m "$2")
cd "$(dirname "$0")/../.." || exit 1
grep -v "^#" "$lines" | grep -v '^\s*$' | while read -r line; do
  while [ "$(pgrep -f 'irnn-copy/screen.py' | wc -l)" -ge 2 ]; do sleep 5; done
  set -- $line
  name=$1; seed=$2; steps=$3; shift 3
  nice -n 19 .venv/bin/python lab/2026-11-29-irnn-copy/screen.py "$name" --seed "$seed" --steps "$steps" "$@" 2>&1 | grep -v Warning >> "$log" &
  sleep 10
done
wait
