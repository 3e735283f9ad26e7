"""What identifies a run and the code that made it: the UTC stamp of run ids, run directories and study
names, the run id, and the versions of the package, torch and git."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict

import torch


def utc_stamp() -> str:
    """Now in UTC as ``YYYYmmdd-HHMMSS``: the stamp of run ids, run directories and study names, which
    sorts as it reads."""
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def new_run_id(cell: str, task: str) -> str:
    """A unique run id that sorts by start time and names the cell and the task (or data set)."""
    return f"{utc_stamp()}-{cell}-{task}-{uuid.uuid4().hex[:8]}"


def version_info() -> Dict[str, Any]:
    """Package, torch and git versions of the code that produced a run."""
    import subprocess

    from .. import __version__

    info: Dict[str, Any] = {"ltdrnn": __version__, "torch": torch.__version__}
    root = Path(__file__).resolve().parents[3]  # the checkout holding src/ltdrnn/results
    try:
        info["git_commit"] = (
            subprocess.run(
                ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
            ).stdout.strip()
            or None
        )
        info["git_dirty"] = bool(
            subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=5,
            ).stdout.strip()
        )
    except (OSError, subprocess.SubprocessError):
        info["git_commit"] = None
    return info
