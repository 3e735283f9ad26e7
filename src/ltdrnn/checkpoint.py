"""Checkpoints: the one place that writes them (atomically) and reads them (``weights_only``), and the
model of a checkpoint rebuilt from its saved config (:func:`restore_model`).

A checkpoint is a ``torch.save`` of a mapping with at least ``config`` (the resolved run config) and
``model`` (a state dict): ``best.pt`` holds the best validation state, ``last.pt`` everything needed to
resume (optimiser, scheduler, RNG states (:func:`rng_states`), position; see :mod:`ltdrnn.train`). Files
are written to a temporary file, fsynced and renamed into place, so a crash leaves the old file or the
new one, never a torn one. They are read with ``weights_only=True``: only tensors, numbers, strings and containers come
back, so a crafted file cannot run code. Guarantees and their tests: docs/reliability.md.
"""

from __future__ import annotations

import io
import os
import random
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from .config import ConfigError, RunConfig, load_config
from .models import build_model
from .tasks.base import build_task

CHECKPOINT = "last.pt"
BEST = "best.pt"
ROLLBACK_POINT = "rollback.pt"  # a full checkpoint of the best validation, kept when train.rollbacks > 0
LOCK = ".lock"


class CheckpointError(ValueError):
    """A checkpoint file cannot be loaded safely (not a checkpoint, damaged, or holding objects other
    than tensors, numbers, strings and containers)."""


def checkpoint_file(path: str | Path) -> Path:
    """``path`` itself if it is a file, else the run directory's ``best.pt`` (or ``last.pt``).

    Raises FileNotFoundError naming what was looked for."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such run directory or checkpoint file")
    for name in (BEST, CHECKPOINT):
        if (path / name).is_file():
            return path / name
    raise FileNotFoundError(
        f"{path}: the run directory has no checkpoint ({BEST} or {CHECKPOINT}); "
        "was the run started with this directory?"
    )


def load_checkpoint(path: str | Path) -> Dict[str, Any]:
    """The contents of a checkpoint written by :func:`atomic_save`.

    Loaded with ``weights_only=True``: only tensors, numbers, strings and containers come back, so a
    crafted file cannot run code (checkpoints keep numpy's RNG state as a tensor for this reason).
    Raises CheckpointError for anything else, naming the file."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        # whatever damaged bytes lead torch's unpickler to raise (UnpicklingError, EOFError, and also
        # IndexError, KeyError or AssertionError from inside it) is this file's fault, not a bug here
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"{path}: not a checkpoint that can be loaded safely ({first})") from None
    if not isinstance(checkpoint, dict) or not {"config", "model"} <= set(checkpoint):
        raise CheckpointError(f"{path}: not an ltdrnn checkpoint (expected a mapping with 'config' and 'model')")
    return checkpoint


def atomic_save(obj: Any, path: Path) -> None:
    """``torch.save(obj)`` to ``path`` through :func:`atomic_write`."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    atomic_write(path, buffer.getvalue())


def atomic_write(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, flush to disk, then rename over ``path``: a
    reader sees the old file or the new one, never part of one.

    The temporary file is removed if anything fails on the way (a full disk, an interrupt)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def remove_stale_temp_files(run_dir: Path) -> List[Path]:
    """Delete the temporary checkpoint files (``.last.pt.<pid>.tmp``) left in ``run_dir`` by processes
    that no longer run (killed mid-write); returns the files removed. On a full disk they would
    otherwise hold the space the next checkpoint needs."""
    removed = []
    for tmp in run_dir.glob(".*.pt.*.tmp"):
        pid = tmp.name.rsplit(".", 2)[-2]
        if pid.isdigit() and int(pid) != os.getpid() and not _process_alive(int(pid)):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def lock_run_dir(run_dir: Path):
    """Hold ``run_dir`` for this process (an exclusive ``flock`` on ``run_dir/.lock``, released when the
    returned file is closed or the process dies, ``kill -9`` included): a second trainer in the same
    directory would mix its history and checkpoints with the first's. Raises ConfigError naming the
    directory and the process that holds it. Where ``fcntl`` does not exist (Windows) nothing is locked."""
    try:
        import fcntl
    except ImportError:
        return None
    run_dir.mkdir(parents=True, exist_ok=True)
    handle = open(run_dir / LOCK, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise ConfigError(
            f"run_dir: {run_dir} is in use by another trainer (process {holder}); wait for it to finish, "
            "or give this run another --run-dir"
        ) from None
    handle.truncate(0)
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    return True


# ---- restoring a model --------------------------------------------------------------------------
def restore_model(path: str | Path, overrides: Optional[List[str]] = None):
    """``(cfg, task, model)`` of a saved checkpoint (a file or a run directory), the weights loaded."""
    path = checkpoint_file(path)
    checkpoint = load_checkpoint(path)
    if not isinstance(checkpoint["config"], dict):
        raise CheckpointError(
            f"{path}: its config is not a mapping of keys (got {type(checkpoint['config']).__name__})"
        )
    try:  # the file's own config first, so that a damaged one is named as the file's
        cfg = load_config(checkpoint["config"])
    except ConfigError as error:
        raise CheckpointError(f"{path}: its config is not valid: {error}") from None
    if overrides:  # the user's overrides: their mistakes stay ConfigErrors of their own
        cfg = load_config(checkpoint["config"], overrides)
    task, model = build_task_and_model(cfg)
    load_weights(model, checkpoint["model"], path)
    return cfg, task, model


def load_weights(module: torch.nn.Module, state: Any, path: Path, what: str = "model") -> None:
    """``module.load_state_dict(state)``, or one CheckpointError naming the file and what is wrong (not a
    mapping of tensors, missing or unexpected keys, a wrong shape) instead of torch's traceback."""
    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        raise CheckpointError(f"{path}: its {what} is not a state dict (a mapping of names to tensors)")
    try:
        module.load_state_dict(state)
    except (RuntimeError, TypeError, ValueError, KeyError, AttributeError, IndexError) as error:
        text = " ".join(str(error).split()) or type(error).__name__
        raise CheckpointError(f"{path}: its {what} does not fit the model of its config ({text[:300]})") from None


def build_task_and_model(cfg: RunConfig):
    """``(task, model)`` of a config; a bad cell, task or option becomes a ConfigError naming it."""
    try:
        task = build_task(cfg.task.name, **cfg.task.options)
    except (ValueError, TypeError) as error:
        raise ConfigError(_naming(error, "task", cfg.task.name)) from None
    try:
        model = build_model(cfg.model, task.info)
    except (ValueError, TypeError) as error:
        raise ConfigError(_naming(error, "model", cfg.model.cell)) from None
    return task, model


def _naming(error: Exception, section: str, name: str) -> str:
    message = str(error)
    if message.split(":")[0] in ("cell", "task") or message.startswith(section):
        return message
    return f"{section} {name!r}: {message}"


# ---- the RNG states a checkpoint holds ----------------------------------------------------------
def rng_states() -> Dict[str, Any]:
    """Every RNG state, in types a ``weights_only`` load accepts (numpy's key array as a tensor)."""
    name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    numpy_state = {
        "name": name,
        "keys": torch.from_numpy(keys.astype(np.int64)),
        "pos": int(position),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached_gaussian),
    }
    return {"torch": torch.get_rng_state(), "numpy": numpy_state, "python": random.getstate()}


def set_rng_states(states: Dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    n = states["numpy"]
    np.random.set_state(
        (n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    random.setstate(states["python"])
