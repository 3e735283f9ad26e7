#!/bin/bash
# Runs the lines of jobs.txt (arguments of screen.py) one after another, one process at a time, at low
# priority; lines appended while it runs are run too; a line "END" stops it.
echo 5 > /proc/$$/autogroup
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
cd "$(dirname "$0")/../.." || exit 1
i=1
while true; do
  line=$(sed -n "${i}p" lab/2026-11-29-tiny-recipes-4/jobs.txt)
  if [ -z "$line" ]; then sleep 10; continue; fi
  [ "$line" = "END" ] && break
  echo "$(date -u +%H:%M:%S) start $line"
  eval nice -n 5 .venv/bin/python lab/2026-11-29-tiny-recipes-4/screen.py $line
  echo "$(date -u +%H:%M:%S) done rc=$?"
  i=$((i + 1))
done
