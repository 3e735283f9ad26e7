#!/bin/bash
# Runs the lines of jobs.txt (a script of this folder and its arguments) one after another, one process at
# a time, one thread, at low priority (started in its own session, autogroup lowered by the caller); lines
# appended while it runs are run too; a line "END" stops it.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
cd "$(dirname "$0")/../.." || exit 1
i=1
while true; do
  line=$(sed -n "${i}p" lab/2026-11-29-tiny-recipes-5/jobs.txt)
  if [ -z "$line" ]; then sleep 10; continue; fi
  [ "$line" = "END" ] && break
  echo "$(date -u +%H:%M:%S) start $line"
  eval nice -n 5 .venv/bin/python lab/2026-11-29-tiny-recipes-5/$line
  echo "$(date -u +%H:%M:%S) done rc=$?"
  i=$((i + 1))
done
