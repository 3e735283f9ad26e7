"""Work items for the study runner's tests (a module of its own, so that spawned worker processes can
import them by name)."""

import os
import time
from pathlib import Path

from ltdrnn.results import ResultStore


def record(label, seed, **extra):
    """A finished results row of study ``s`` as a run of ``label`` and ``seed`` stores it."""
    return {
        "id": f"{label}-{seed}-{os.getpid()}-{time.monotonic_ns()}",
        "status": "finished",
        "created": "2026-01-01T00:00:00",
        "cell": label,
        "task": "toy",
        "study": "s",
        "name": label,
        "config": {"model": {"cell": label}, "train": {"seed": seed}},
        "metrics": {"metric_name": "accuracy", "metric": 0.5, "baseline": 0.25, "params": 10},
        "timings": {"train_s": 1.0, "steps": 3},
        "history": [],
        **extra,
    }


def store_a_row(store, label, seed, log, threads=None, progress=None):
    """Store a finished row and note the run in ``log`` (one line per run)."""
    with open(log, "a") as handle:
        handle.write(f"{label} {seed} {threads} {progress}\n")
    row = record(label, seed)
    ResultStore(store).add(row)
    return row


def fail(message, threads=None, progress=None):
    raise ValueError(message)


def meet(folder, label, other, threads=None, progress=None):
    """Say this run started, then wait (up to 120 s) until ``other`` has started too: two runs can only
    both return if they run at the same time."""
    Path(folder, f"{label}.started").write_text(str(os.getpid()))
    deadline = time.monotonic() + 120
    while not Path(folder, f"{other}.started").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{other} never started while {label} waited")
        time.sleep(0.05)
    return record(label, 0, pid=os.getpid(), threads=threads, progress=progress)
