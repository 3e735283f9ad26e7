"""The run record: the one builder of the record a run leaves, which ``result.json`` holds and the results
store turns into one row of its table ``runs`` (:class:`~ltdrnn.results.store.ResultStore`).

    record = run_record(run_id, status="finished", cell="lstm", task="adding", config={...}, metrics={...})
    record = config_record(cfg, run_id, status="failed", metrics={"error": "..."}, run_dir=cfg.run_dir)

Every producer builds its record here: the trainer (:meth:`ltdrnn.train.Run.finish`), a sweep trial
whose training raised (:func:`ltdrnn.sweep.trials.failed_row`) and the UCR benchmark's MiniRocket
(:func:`ltdrnn.ucr.benchmark.minirocket_record`); a reproduction's runs are trainer runs. The keys are
:data:`RECORD_KEYS`, always all of them and in that order (``result.json`` keeps it); a part a producer
does not have is None, which the store writes as it writes a missing one. The store's columns come from
the keys: ``metric_name``, ``metric`` and ``params`` from ``metrics``, ``train_time_s`` from
``timings["train_s"]``, ``git_commit`` from ``version``, the JSON columns (``config``, ``metrics``,
``timings``, ``history``, ``version``) as they are.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Dict, List, Optional

#: the keys of a record, in the order ``result.json`` shows them
RECORD_KEYS = (
    "id",
    "status",
    "created",
    "cell",
    "task",
    "preset",
    "study",
    "name",
    "config",
    "metrics",
    "timings",
    "history",
    "run_dir",
    "version",
)
#: how a run can end: trained to its budget, stopped by a sweep's pruner, stopped by a non-finite or
#: runaway loss, or raised before it had a result
STATUSES = ("finished", "pruned", "diverged", "failed")


def run_record(
    run_id: str,
    *,
    status: str,
    cell: str,
    task: str,
    config: Dict[str, Any],
    metrics: Dict[str, Any],
    preset: Optional[str] = None,
    study: Optional[str] = None,
    name: Optional[str] = None,
    timings: Optional[Dict[str, Any]] = None,
    history: Optional[List[Dict[str, Any]]] = None,
    run_dir: Optional[str] = None,
    version: Optional[Dict[str, Any]] = None,
    created: Optional[str] = None,
) -> Dict[str, Any]:
    """The record of one run, keys in :data:`RECORD_KEYS` order; ``created`` defaults to now (UTC, ISO)."""
    if status not in STATUSES:
        raise ValueError(f"status: expected one of {', '.join(STATUSES)}, got {status!r}")
    return {
        "id": run_id,
        "status": status,
        "created": created if created is not None else datetime.now(timezone.utc).isoformat(),
        "cell": cell,
        "task": task,
        "preset": preset,
        "study": study,
        "name": name,
        "config": config,
        "metrics": metrics,
        "timings": timings,
        "history": history,
        "run_dir": run_dir,
        "version": version,
    }


def config_record(cfg, run_id: str, *, status: str, metrics: Dict[str, Any], **parts: Any) -> Dict[str, Any]:
    """The record of a run of the RunConfig ``cfg``: its cell, task, preset, study, name and config from
    ``cfg``; ``parts`` the other keywords of :func:`run_record` (``run_dir`` included: a trainer given
    none makes one of its own)."""
    return run_record(
        run_id,
        status=status,
        cell=cfg.model.cell,
        task=cfg.task.name,
        preset=cfg.preset,
        study=cfg.study,
        name=cfg.name,
        config=cfg.to_dict(),
        metrics=metrics,
        **parts,
    )
