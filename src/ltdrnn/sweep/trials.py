"""From a spec to trials: the config of each trial, early checks of the searched keys, the direction,
and the default objective (one ``train(cfg)``, its run stored with the study's name)."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence

from ..config import RunConfig, load_config
from .spec import SweepSpec
from .storage import optuna_module

Objective = Callable[["Any", RunConfig], float]


def base_config(spec: SweepSpec, overrides: Sequence[str] = ()) -> RunConfig:
    return load_config(spec.base, list(spec.set) + list(overrides))


def trial_config(
    spec: SweepSpec,
    values: Dict[str, Any],
    number: int,
    study: str,
    overrides: Sequence[str] = (),
    runs_dir: str = "runs",
    results: Optional[str] = None,
) -> RunConfig:
    """The config of trial ``number`` (its first attempt's number): base + overrides + the trial's values,
    ``study``, ``name`` ``trial-<number>``, run dir ``<runs_dir>/<study>/trial-<number>``, per-trial seed."""
    base = base_config(spec, overrides)
    data = base.to_dict()
    for key, value in values.items():
        _set_key(data, key, value)
    if spec.seed_per_trial:
        data["train"]["seed"] = base.train.seed + number
    data.update(study=study, name=f"trial-{number}", run_dir=str(Path(runs_dir) / study / f"trial-{number}"))
    if results is not None:
        data["results"] = results
    return load_config(data)


def _set_key(data: Dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def check_params_apply(spec: SweepSpec, overrides: Sequence[str] = ()) -> None:
    """Fail early, naming the key, when a searched key is not a config key or a value is invalid there."""
    for param in spec.params:
        probe = param.choices if param.distribution == "categorical" else [param.low, param.high]
        for value in probe:
            value = int(value) if param.distribution == "int" else value
            trial_config(spec, {param.name: value}, 0, "check", overrides)


def resolve_direction(spec: SweepSpec, overrides: Sequence[str] = ()) -> str:
    if spec.direction != "auto":
        return spec.direction
    from ..tasks import build_task

    cfg = base_config(spec, overrides)
    return "maximize" if build_task(cfg.task.name, **cfg.task.options).info.higher_is_better else "minimize"


def train_objective(trial, cfg: RunConfig) -> float:
    """Train ``cfg``; the validation metric of the selected checkpoint. Pruning through ``on_validation``."""
    from ..train import train

    optuna = optuna_module()
    previous = stored_record(cfg)
    if previous is not None:  # the run finished before its worker died: do not train it again
        record = previous
    else:

        def report(entry: Dict[str, Any]) -> bool:
            value = entry.get("val_metric")
            if value is None or not math.isfinite(value):
                return False
            trial.report(value, entry["step"])
            return trial.should_prune()

        record = train(cfg, resume="auto", on_validation=[report])
    metrics = record["metrics"]
    for key, value in (
        ("run_id", record["id"]),
        ("run_status", record["status"]),
        ("test_metric", metrics["metric"]),
        ("metric_name", metrics["metric_name"]),
    ):
        trial.set_user_attr(key, value)
    value = metrics.get("val_best")
    if record["status"] in ("pruned", "diverged"):
        # counted among the finished trials of the top-k rule, never ranked
        raise optuna.TrialPruned(f"run {record['status']} at step {record['timings']['steps']}")
    if record["status"] != "finished" or value is None or not math.isfinite(value):
        raise RuntimeError(f"run ended with status {record['status']!r} and validation value {value!r}")
    return float(value)


def stored_record(cfg: RunConfig) -> Optional[Dict[str, Any]]:
    path = Path(cfg.run_dir) / "result.json"
    if not cfg.results or not path.exists():
        return None
    record = json.loads(path.read_text())
    from ..results import ResultStore

    stored = [r for r in ResultStore(cfg.results).rows(study=cfg.study) if r["id"] == record["id"]]
    return stored[0] if stored else None


def failed_row(cfg: RunConfig, error: str) -> None:
    """The results row of a trial whose training raised, so no trial is missing from the store."""
    if not cfg.results:
        return
    from ..results import ResultStore
    from ..results.record import config_record

    run_id = f"{cfg.study}-{cfg.name}-failed-{uuid.uuid4().hex[:8]}"
    ResultStore(cfg.results).add(
        config_record(cfg, run_id, status="failed", metrics={"error": error}, run_dir=cfg.run_dir)
    )
