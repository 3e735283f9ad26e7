"""Hyperparameter sweeps on Optuna: ``ltdrnn sweep run`` and ``ltdrnn sweep report``.

A sweep spec (YAML, packaged under ``presets/sweeps/<group>/<name>.yaml`` or any file) names the config
the trials start from and the search space over its dotted keys::

    description: MIST protocol on pMNIST
    base: mist/pmnist                     # preset or config file of every trial
    set: [train.epochs=30]                # overrides applied to the base (optional)
    sampler: random                       # random | tpe | grid
    trials: 50                            # the study's total (grid: default the grid size)
    direction: maximize                   # maximize | minimize | auto (from the task's metric)
    seed_per_trial: true                  # train.seed = base seed + trial number (fresh initialisation)
    params:
      optim.lr: {distribution: log-float, low: 1.0e-4, high: 10}
      optim.weight_decay: {distribution: categorical, choices: [1.0e-6, 1.0e-5]}
      train.epochs: {distribution: int, low: 10, high: 50, step: 10}
    pruner: {name: median, n_startup_trials: 5, n_warmup_steps: 0}   # or none | percentile | hyperband
    retries: 2                            # re-runs of a trial whose worker died
    report: {top_fraction: 0.1}           # or {top_k: 5}

A spec may start from another with ``extends: <group>/<name>`` (its own keys win; ``params`` and
``report`` merge).

Every trial is one ``train(cfg)`` of the base config with the trial's values set; its run is stored in
the results database of single runs (``cfg.results``, or ``--store``) with ``study`` set to the study's
name, and the trial keeps the run id (user attribute ``run_id``). The objective is the validation metric
of the selected checkpoint (``metrics.val_best``). The trainer reports every validation to the trial
(``train(..., on_validation=...)``) so a pruner can end hopeless trials; a pruned run is stored with
status ``pruned``.

Workers: any number of processes on any number of machines share one study through its storage
(``--storage``: a SQLite file by default, any SQLAlchemy URL such as PostgreSQL for several machines).
The trial budget is the study's total. Exactly-once bookkeeping, also on SQLite:

- a trial runs where it was claimed: a worker inserts ``(study, first trial number, attempt)`` into the
  table ``ltdrnn_sweep_claims`` of the storage database before it runs a trial; the primary key lets one
  insert win, so a queued trial taken by two workers at once runs once;
- the budget counts first attempts ("roots") by trial number, so when two workers start the last trial
  at the same moment, the one with the higher number gives its trial back unrun (state FAIL, user
  attribute ``not_run``) and stops;
- a worker that dies (killed, machine lost) stops its heartbeat; after the grace period any worker marks
  its trial FAIL (Optuna's ``fail_stale_trials``) and Optuna's ``RetryHeartbeatStaleTrialCallback``
  queues a retry with the same parameters, up to ``retries`` times; the retry resumes the run's last
  checkpoint when it can see the run directory. Ctrl-C marks the trial FAIL and queues the retry at once;
- a trial whose training raises is FAIL with the error in user attribute ``error`` and a results row
  with status ``failed``; it is not retried (the same parameters would fail again);
- workers keep running until no trial is waiting or running, so queued retries are not left behind.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import socket
import statistics
import sys
import threading
import time
import uuid
import warnings
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from .config import ConfigError, RunConfig, load_config, read_file, yaml_number

DEFAULT_STORAGE = "sqlite:///sweeps.db"
DISTRIBUTIONS = ("float", "log-float", "int", "categorical")
SAMPLERS = ("random", "tpe", "grid")
PRUNERS = ("none", "median", "percentile", "hyperband")
SPEC_ATTR = "ltdrnn_spec"
BUDGET_ATTR = "ltdrnn_budget"
CLAIMS_TABLE = "ltdrnn_sweep_claims"

Objective = Callable[["Any", RunConfig], float]


# ---- the spec -------------------------------------------------------------------------------------
@dataclass
class Param:
    """One searched config key: ``float``/``log-float``/``int`` in ``[low, high]`` (``step`` optional),
    or ``categorical`` over ``choices``."""
    name: str
    distribution: str
    low: Optional[float] = None
    high: Optional[float] = None
    step: Optional[float] = None
    choices: Optional[List[Any]] = None

    def suggest(self, trial) -> Any:
        if self.distribution == "categorical":
            return trial.suggest_categorical(self.name, self.choices)
        if self.distribution == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), step=int(self.step or 1))
        return trial.suggest_float(self.name, self.low, self.high, step=self.step,
                                   log=self.distribution == "log-float")

    def grid_values(self) -> List[Any]:
        """The values a grid visits: the choices, or every ``step`` from low to high for int."""
        if self.distribution == "categorical":
            return list(self.choices)
        if self.distribution == "int":
            return list(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        raise ConfigError(f"params.{self.name}: the grid sampler needs categorical or int parameters, "
                          f"got distribution {self.distribution!r}")


@dataclass
class SweepSpec:
    base: str
    params: List[Param]
    name: str = "sweep"
    description: str = ""
    set: List[str] = field(default_factory=list)
    sampler: str = "tpe"
    trials: Optional[int] = None
    direction: str = "auto"
    seed: Optional[int] = None
    seed_per_trial: bool = False
    pruner: Dict[str, Any] = field(default_factory=lambda: {"name": "none"})
    retries: int = 2
    report: Dict[str, Any] = field(default_factory=lambda: {"top_fraction": 0.1})

    def budget(self, trials: Optional[int] = None) -> int:
        """Trials in the whole study: the argument, the spec's ``trials``, or the grid's size."""
        if trials is not None:
            if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
                raise ConfigError(f"trials: expected a positive number of trials, got {trials!r}")
            return trials
        if self.trials is not None:
            return self.trials
        if self.sampler == "grid":
            return math.prod(len(p.grid_values()) for p in self.params)
        raise ConfigError("trials: expected a number of trials (in the spec or --trials), got none")

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def to_spec_data(self) -> Dict[str, Any]:
        """Plain data that ``load_spec`` turns back into this spec (to hand it to another process)."""
        data = self.to_dict()
        params = {p.pop("name"): {k: v for k, v in p.items() if v is not None} for p in data.pop("params")}
        data["study"] = data.pop("name")
        return {**data, "params": params}


_SPEC_KEYS = {"base", "params", "description", "set", "sampler", "trials", "direction", "seed", "seed_per_trial",
              "pruner", "retries", "report", "extends", "study"}


def _sweep_root():
    return resources.files("ltdrnn") / "presets" / "sweeps"


def list_sweeps() -> List[str]:
    """Names ``"<group>/<name>"`` of the packaged sweep specs."""
    names = []
    for group in _sweep_root().iterdir():
        if group.is_dir() and not group.name.startswith(("_", ".")):
            names += [f"{group.name}/{item.name[:-5]}" for item in group.iterdir()
                      if item.name.endswith(".yaml") and not item.name.startswith("_")]
    return sorted(names)


def _read_spec_data(source: str) -> Dict[str, Any]:
    if Path(source).is_file():
        data = read_file(source)
    else:
        item = _sweep_root().joinpath(*f"{source}.yaml".split("/"))
        if not item.is_file():
            raise ConfigError(f"sweep {source!r}: no such file or packaged sweep; packaged: "
                              f"{', '.join(list_sweeps())}")
        import yaml
        data = yaml.safe_load(item.read_text()) or {}
    parent = data.pop("extends", None)
    if parent is None:
        return data
    merged = _read_spec_data(parent)
    for key, value in data.items():
        if key in ("params", "report", "pruner") and isinstance(value, dict):
            merged[key] = {**merged.get(key, {}), **value}
        else:
            merged[key] = value
    return merged


def load_spec(source: str | Dict[str, Any]) -> SweepSpec:
    """A validated spec from a packaged name (``mist/pmnist``), a YAML/JSON file, or plain data."""
    data = copy.deepcopy(source) if isinstance(source, dict) else _read_spec_data(str(source))
    unknown = sorted(set(data) - _SPEC_KEYS)
    if unknown:
        raise ConfigError(f"sweep: unknown key {unknown[0]!r}; valid keys: {', '.join(sorted(_SPEC_KEYS))}")
    if "base" not in data:
        raise ConfigError("sweep base: expected the preset or config file the trials start from, got none")
    params = data.get("params") or {}
    if not isinstance(params, dict) or not params:
        raise ConfigError(f"sweep params: expected a mapping of dotted config keys to distributions, got {params!r}")
    default_name = str(source).replace("/", "-") if not isinstance(source, dict) else "sweep"
    spec = SweepSpec(
        base=str(data["base"]), params=[_param(k, v) for k, v in params.items()],
        name=str(data.get("study") or Path(default_name).stem), description=str(data.get("description", "")),
        set=list(data.get("set") or []), sampler=data.get("sampler", "tpe"), trials=data.get("trials"),
        direction=data.get("direction", "auto"), seed=data.get("seed"),
        seed_per_trial=bool(data.get("seed_per_trial", False)), pruner=dict(data.get("pruner") or {"name": "none"}),
        retries=int(data.get("retries", 2)), report=dict(data.get("report") or {"top_fraction": 0.1}))
    _validate_spec(spec)
    return spec


def _param(name: str, raw: Any) -> Param:
    key = f"params.{name}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{key}: expected a mapping such as {{distribution: log-float, low: 1e-4, high: 10}}, "
                          f"got {raw!r}")
    unknown = sorted(set(raw) - {"distribution", "low", "high", "step", "choices"})
    if unknown:
        raise ConfigError(f"{key}: unknown key {unknown[0]!r}; valid: distribution, low, high, step, choices")
    kind = raw.get("distribution")
    if kind not in DISTRIBUTIONS:
        raise ConfigError(f"{key}.distribution: expected one of {', '.join(DISTRIBUTIONS)}, got {kind!r}")
    if kind == "categorical":
        choices = raw.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{key}.choices: expected a non-empty list, got {choices!r}")
        return Param(name, kind, choices=[yaml_number(c) for c in choices])
    low, high = yaml_number(raw.get("low")), yaml_number(raw.get("high"))
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high)) or not low < high:
        raise ConfigError(f"{key}: expected numbers low < high, got low={raw.get('low')!r}, high={raw.get('high')!r}")
    if kind == "log-float" and low <= 0:
        raise ConfigError(f"{key}.low: a log-float range must be positive, got {low!r}")
    if kind == "int" and not (float(low).is_integer() and float(high).is_integer()):
        raise ConfigError(f"{key}: an int range needs integer bounds, got low={low!r}, high={high!r}")
    step = yaml_number(raw.get("step"))
    if step is not None and (kind == "log-float" or not step > 0):
        raise ConfigError(f"{key}.step: expected a positive step (not with log-float), got {step!r}")
    return Param(name, kind, low=low, high=high, step=step)


def _validate_spec(spec: SweepSpec) -> None:
    if spec.sampler not in SAMPLERS:
        raise ConfigError(f"sweep sampler: expected one of {', '.join(SAMPLERS)}, got {spec.sampler!r}")
    if spec.direction not in ("auto", "maximize", "minimize"):
        raise ConfigError(f"sweep direction: expected auto, maximize or minimize, got {spec.direction!r}")
    if spec.pruner.get("name", "none") not in PRUNERS:
        raise ConfigError(f"sweep pruner.name: expected one of {', '.join(PRUNERS)}, got {spec.pruner.get('name')!r}")
    if spec.trials is not None and (not isinstance(spec.trials, int) or spec.trials < 1):
        raise ConfigError(f"sweep trials: expected a positive integer, got {spec.trials!r}")
    if spec.retries < 0:
        raise ConfigError(f"sweep retries: expected a non-negative integer, got {spec.retries!r}")
    top = spec.report
    if not (("top_fraction" in top and 0 < top["top_fraction"] <= 1) or ("top_k" in top and top["top_k"] >= 1)):
        raise ConfigError(f"sweep report: expected top_fraction in (0, 1] or top_k >= 1, got {top!r}")
    if spec.sampler == "grid":
        for param in spec.params:
            param.grid_values()


# ---- trial configs ----------------------------------------------------------------------------------
def base_config(spec: SweepSpec, overrides: Sequence[str] = ()) -> RunConfig:
    return load_config(spec.base, list(spec.set) + list(overrides))


def trial_config(spec: SweepSpec, values: Dict[str, Any], number: int, study: str,
                 overrides: Sequence[str] = (), runs_dir: str = "runs", results: Optional[str] = None) -> RunConfig:
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
    from .tasks import build_task
    cfg = base_config(spec, overrides)
    return "maximize" if build_task(cfg.task.name, **cfg.task.options).info.higher_is_better else "minimize"


# ---- Optuna plumbing --------------------------------------------------------------------------------
def _optuna():
    try:
        import optuna
    except ImportError as error:
        raise ImportError("sweeps need Optuna: pip install 'ltdrnn[sweep]'") from error
    return optuna


def storage_url(location: str | Path) -> str:
    """A SQLAlchemy URL: URLs pass through, anything else is a SQLite file path."""
    location = str(location)
    if "://" in location:
        return location
    return f"sqlite:///{Path(location).expanduser().resolve()}"


def open_storage(url: str, retries: int = 2, heartbeat_s: int = 30, grace_s: Optional[int] = None):
    """An Optuna RDB storage with heartbeats; dead workers' trials are failed and queued for retry."""
    optuna = _optuna()
    url = storage_url(url)
    engine_kwargs = {}
    if url.startswith("sqlite"):
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        engine_kwargs = {"connect_args": {"timeout": 120}}
    import sqlalchemy
    for attempt in range(5):
        try:
            with warnings.catch_warnings():  # heartbeats are marked experimental; they are stable since 2.9
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_s,
                    grace_period=grace_s if grace_s is not None else 2 * heartbeat_s,
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                        max_retry=retries))
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError):
            # workers starting together on a new database race to create Optuna's tables; the loser
            # finds them there on the next attempt
            if attempt == 4:
                raise
            time.sleep(0.5 * (attempt + 1))


def make_sampler(spec: SweepSpec, worker: int = 0):
    """random / tpe / grid; with a spec seed, worker ``i`` samples from ``seed + i``."""
    optuna = _optuna()
    seed = None if spec.seed is None else spec.seed + worker
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.sampler == "grid":
        return _grid_sampler({p.name: p.grid_values() for p in spec.params}, seed)
    return optuna.samplers.TPESampler(seed=seed)


def _grid_sampler(search_space: Dict[str, List[Any]], seed: Optional[int]):
    """Optuna's grid sampler, except that the study's budget, not the sampler, ends a sweep."""
    optuna = _optuna()

    class GridWithoutStop(optuna.samplers.GridSampler):
        def after_trial(self, study, trial, state, values) -> None:
            return None  # the stock one calls study.stop(), which raises outside optimize (we ask and tell)

    return GridWithoutStop(search_space, seed=seed)


def make_pruner(spec: SweepSpec):
    optuna = _optuna()
    options = dict(spec.pruner)
    name = options.pop("name", "none")
    if name == "median":
        return optuna.pruners.MedianPruner(**options)
    if name == "percentile":
        return optuna.pruners.PercentilePruner(**options)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(**options)
    return optuna.pruners.NopPruner()


def open_study(spec: SweepSpec, storage, study: str, direction: str, worker: int = 0, budget: Optional[int] = None):
    """Create or join the study; the first worker records the spec, every worker its budget."""
    optuna = _optuna()
    handle = optuna.create_study(storage=storage, study_name=study, direction=direction,
                                 sampler=make_sampler(spec, worker), pruner=make_pruner(spec), load_if_exists=True)
    attrs = handle.user_attrs
    if attrs.get(BUDGET_ATTR) != budget:  # the latest budget a worker was given (--trials may grow a study)
        handle.set_user_attr(BUDGET_ATTR, budget)
    if SPEC_ATTR not in attrs:
        handle.set_user_attr(SPEC_ATTR, spec.to_dict())
    elif [p["name"] for p in attrs[SPEC_ATTR]["params"]] != [p.name for p in spec.params]:
        raise ConfigError(f"study {study!r} searches {[p['name'] for p in attrs[SPEC_ATTR]['params']]}, this spec "
                          f"{[p.name for p in spec.params]}; use another --study name")
    return handle


class Claims:
    """The table where workers claim ``(study, root, attempt)``; one insert wins (see the module notes)."""

    def __init__(self, url: str) -> None:
        import sqlalchemy as sa
        self.sa = sa
        url = storage_url(url)
        self.engine = sa.create_engine(url, connect_args={"timeout": 120} if url.startswith("sqlite") else {})
        metadata = sa.MetaData()
        self.table = sa.Table(
            CLAIMS_TABLE, metadata,
            sa.Column("study", sa.String(200), primary_key=True),
            sa.Column("root", sa.Integer, primary_key=True),
            sa.Column("attempt", sa.Integer, primary_key=True),
            sa.Column("trial_number", sa.Integer, nullable=False),
            sa.Column("worker", sa.String(200), nullable=False),
            sa.Column("claimed", sa.String(40), nullable=False))
        for attempt in range(3):  # workers starting together may race to create the table
            try:
                metadata.create_all(self.engine, checkfirst=True)
                break
            except (sa.exc.OperationalError, sa.exc.IntegrityError):
                if attempt == 2:
                    raise

    def claim(self, study: str, root: int, attempt: int, number: int, worker: str) -> Optional[int]:
        """None if this worker won; else the trial number that holds the claim."""
        row = {"study": study, "root": root, "attempt": attempt, "trial_number": number, "worker": worker,
               "claimed": datetime.now(timezone.utc).isoformat()}
        try:
            with self.engine.begin() as connection:
                connection.execute(self.table.insert().values(**row))
            return None
        except self.sa.exc.IntegrityError:
            query = self.sa.select(self.table.c.trial_number).where(
                (self.table.c.study == study) & (self.table.c.root == root) & (self.table.c.attempt == attempt))
            with self.engine.connect() as connection:
                return connection.execute(query).scalar_one()

    def dispose(self) -> None:
        self.engine.dispose()


class Heartbeat:
    """Records the trial's heartbeat every ``interval`` seconds in a thread, while the trial runs."""

    def __init__(self, storage, trial_id: int) -> None:
        self.storage, self.trial_id = storage, trial_id
        self.interval = storage.get_heartbeat_interval()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self.stopped.wait(self.interval):
            self.storage.record_heartbeat(self.trial_id)

    def __enter__(self):
        # the first beat before any work: a trial that never had a heartbeat is never found stale
        self.storage.record_heartbeat(self.trial_id)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join()


def root_and_attempt(frozen) -> tuple:
    """A retry keeps the number of the first attempt (its root) and counts earlier attempts."""
    root = frozen.system_attrs.get("failed_trial", frozen.number)
    return root, len(frozen.system_attrs.get("retry_history", []))


def _roots(study) -> List[int]:
    """Numbers of the first attempts that count against the budget (trials given back unrun do not)."""
    return sorted(t.number for t in study.get_trials(deepcopy=False)
                  if "failed_trial" not in t.system_attrs and "not_run" not in t.user_attrs)


def _pending(study, states) -> List[Any]:
    return study.get_trials(deepcopy=False, states=states)


def fail_stale_trials(study) -> None:
    """Optuna's ``fail_stale_trials`` (marked experimental, stable since 2.9) without its warning."""
    optuna = _optuna()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def ask(study):
    """``study.ask()``; Optuna warns that heartbeats are meant for ``optimize``, and we beat ourselves."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        return study.ask()


# ---- objectives -------------------------------------------------------------------------------------
def train_objective(trial, cfg: RunConfig) -> float:
    """Train ``cfg``; the validation metric of the selected checkpoint. Pruning through ``on_validation``."""
    from .train import train
    optuna = _optuna()
    previous = _stored_record(cfg)
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
    for key, value in (("run_id", record["id"]), ("run_status", record["status"]),
                       ("test_metric", metrics["metric"]), ("metric_name", metrics["metric_name"])):
        trial.set_user_attr(key, value)
    value = metrics.get("val_best")
    if record["status"] in ("pruned", "diverged"):
        # counted among the finished trials of the top-k rule, never ranked
        raise optuna.TrialPruned(f"run {record['status']} at step {record['timings']['steps']}")
    if record["status"] != "finished" or value is None or not math.isfinite(value):
        raise RuntimeError(f"run ended with status {record['status']!r} and validation value {value!r}")
    return float(value)


def _stored_record(cfg: RunConfig) -> Optional[Dict[str, Any]]:
    path = Path(cfg.run_dir) / "result.json"
    if not cfg.results or not path.exists():
        return None
    record = json.loads(path.read_text())
    from .results import ResultStore
    stored = [r for r in ResultStore(cfg.results).rows(study=cfg.study) if r["id"] == record["id"]]
    return stored[0] if stored else None


def _failed_row(cfg: RunConfig, error: str) -> None:
    """The results row of a trial whose training raised, so no trial is missing from the store."""
    if not cfg.results:
        return
    from .results import ResultStore
    ResultStore(cfg.results).add({
        "id": f"{cfg.study}-{cfg.name}-failed-{uuid.uuid4().hex[:8]}", "status": "failed",
        "created": datetime.now(timezone.utc).isoformat(), "cell": cfg.model.cell, "task": cfg.task.name,
        "preset": cfg.preset, "study": cfg.study, "name": cfg.name, "config": cfg.to_dict(),
        "metrics": {"error": error}, "run_dir": cfg.run_dir})


# ---- the worker -------------------------------------------------------------------------------------
def run_worker(spec: SweepSpec | str, storage: str = DEFAULT_STORAGE, study: Optional[str] = None,
               trials: Optional[int] = None, objective: Objective = train_objective, worker: int = 0,
               overrides: Sequence[str] = (), runs_dir: str = "runs", results: Optional[str] = None,
               heartbeat_s: int = 30, grace_s: Optional[int] = None, poll_s: Optional[float] = None,
               log: Callable[[str], None] = print) -> Dict[str, int]:
    """Run trials of the study until its budget is used and nothing is waiting or running.

    ``objective(trial, cfg)`` returns the value to optimise for the trial's config (``train_objective``
    by default); it may raise ``optuna.TrialPruned``. Returns counts of what this worker did.
    """
    _optuna()  # a clear message when Optuna is missing
    from optuna.trial import TrialState
    spec = spec if isinstance(spec, SweepSpec) else load_spec(spec)
    study_name = study or spec.name
    budget = spec.budget(trials)
    check_params_apply(spec, overrides)
    store = open_storage(storage, spec.retries, heartbeat_s, grace_s)
    handle = open_study(spec, store, study_name, resolve_direction(spec, overrides), worker, budget)
    claims = Claims(storage)
    me = f"{socket.gethostname()}:{os.getpid()}:{worker}"
    done = {"complete": 0, "pruned": 0, "failed": 0, "given_back": 0}
    poll_s = poll_s if poll_s is not None else max(1.0, store.get_heartbeat_interval() / 2)
    try:
        while True:
            fail_stale_trials(handle)
            waiting = _pending(handle, (TrialState.WAITING,))
            if not waiting and len(_roots(handle)) >= budget:
                if not _pending(handle, (TrialState.RUNNING,)):
                    break
                time.sleep(poll_s)  # another worker's trial may still fail and be queued again
                continue
            trial = ask(handle)
            store.record_heartbeat(trial._trial_id)  # at once, so a worker dying from here on is noticed
            frozen = store.get_trial(trial._trial_id)
            root, attempt = root_and_attempt(frozen)
            holder = claims.claim(study_name, root, attempt, trial.number, me)
            if holder == trial.number:
                continue  # queued trial taken by two workers at once; the other one runs it
            if holder is not None or (root == trial.number and _roots(handle).index(trial.number) >= budget):
                reason = (f"duplicate of trial {holder}" if holder is not None
                          else f"budget of {budget} trials reached")
                trial.set_user_attr("not_run", reason)
                handle.tell(trial, state=TrialState.FAIL)
                done["given_back"] += 1
                continue
            state = _run_trial(handle, store, trial, spec, study_name, root, attempt, objective, overrides,
                               runs_dir, results, log)
            done[state] += 1
    finally:
        claims.dispose()
    return done


def _run_trial(handle, store, trial, spec, study_name, root, attempt, objective, overrides, runs_dir, results,
               log) -> str:
    optuna = _optuna()
    from optuna.trial import TrialState
    values = {p.name: p.suggest(trial) for p in spec.params}
    cfg = trial_config(spec, values, root, study_name, overrides, runs_dir, results)
    label = f"trial {trial.number}" + (f" (retry {attempt} of trial {root})" if attempt else "")
    try:
        with Heartbeat(store, trial._trial_id):
            value = objective(trial, cfg)
    except optuna.TrialPruned as pruned:
        handle.tell(trial, state=TrialState.PRUNED)
        log(f"{label}: pruned ({pruned}) {values}")
        return "pruned"
    except KeyboardInterrupt:
        trial.set_user_attr("error", "interrupted (KeyboardInterrupt)")
        failed = handle.tell(trial, state=TrialState.FAIL)
        store.get_heartbeat_stale_trial_callback()(handle, failed)  # queue the retry now, not after the grace
        raise
    except Exception as error:  # the trial fails, the sweep goes on
        message = f"{type(error).__name__}: {error}"
        trial.set_user_attr("error", message[:2000])
        handle.tell(trial, state=TrialState.FAIL)
        if objective is train_objective:
            _failed_row(cfg, message)
        log(f"{label}: FAILED {message} {values}")
        return "failed"
    handle.tell(trial, value)
    log(f"{label}: {value:.6g} {values}")
    return "complete"


def _worker_process(spec_data, storage, study, trials, worker, overrides, runs_dir, results, heartbeat_s,
                    threads, progress, outcomes=None) -> Dict[str, int]:
    """One worker of ``--workers K``, in this process or a fresh one (then its counts go to ``outcomes``)."""
    import torch
    torch.set_num_threads(threads)
    extra = list(overrides) + [f"train.threads={threads}", f"train.progress={str(progress).lower()}"]
    counts = run_worker(load_spec(spec_data), storage, study, trials, worker=worker, overrides=extra,
                        runs_dir=runs_dir, results=results, heartbeat_s=heartbeat_s)
    if outcomes is not None:
        outcomes.put(counts)
    return counts


def run_workers(spec: SweepSpec, workers: int, storage: str, study: str, trials: Optional[int],
                first_worker: int = 0, overrides: Sequence[str] = (), runs_dir: str = "runs",
                results: Optional[str] = None, heartbeat_s: int = 30, quiet: bool = False) -> List[Dict[str, int]]:
    """``workers`` processes on this machine, each a ``run_worker`` of the same study; returns the counts
    of the workers that ended normally (a worker that dies leaves its trial to the heartbeat rules)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers: expected a positive number of worker processes, got {workers!r}")
    spec.budget(trials)  # a bad --trials fails here, before any worker starts
    threads = max(1, (os.cpu_count() or 1) // workers)
    args = [(spec.to_spec_data(), storage, study, trials, first_worker + i, list(overrides), runs_dir,
             results, heartbeat_s, threads, not quiet and i == 0) for i in range(workers)]
    if workers == 1:
        return [_worker_process(*args[0])]
    # create the tables first: workers starting together would race to create them
    open_storage(storage, spec.retries, heartbeat_s)
    Claims(storage).dispose()
    import multiprocessing
    context = multiprocessing.get_context("spawn")
    outcomes = context.Queue()
    # separate processes, not a pool: a pool ends every worker when one of them dies
    processes = [context.Process(target=_worker_process, args=(*a, outcomes)) for a in args]
    for process in processes:
        process.start()
    counts = []
    for process in processes:
        process.join()
        if process.exitcode != 0:
            print(f"ltdrnn sweep: worker process {process.pid} ended with exit code {process.exitcode}; "
                  "its trial is failed and retried after the heartbeat grace period", file=sys.stderr)
    while not outcomes.empty():
        counts.append(outcomes.get())
    return counts


# ---- the report -------------------------------------------------------------------------------------
def top_k(spec_report: Dict[str, Any], finished: int, complete: int) -> int:
    """How many trials the papers' summary uses: ``top_k``, or ``top_fraction`` of the ``finished``
    trials (complete + pruned or diverged; the MIST protocol: 10% of 50 = 5), at least 1 and at most the
    ``complete`` ones that can be ranked."""
    wanted = int(spec_report["top_k"]) if "top_k" in spec_report else round(spec_report["top_fraction"] * finished)
    return max(1, min(wanted, complete))


def _mean_std(values: List[float]) -> str:
    if not values:
        return "-"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.4g} ± {std:.2g}"


def _format_param(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def study_summary(study: str, storage: str = DEFAULT_STORAGE) -> Dict[str, Any]:
    """The study as plain data: trials by state, the ranked finished trials, the top-k summary, importances."""
    optuna = _optuna()
    from optuna.trial import TrialState
    if not has_study(study, storage):
        raise ConfigError(f"study: no study {study!r} in {storage}; run one with 'ltdrnn sweep run' or name "
                          "the storage that holds it (--storage)")
    store = open_storage(storage, heartbeat_s=30)
    handle = optuna.load_study(study_name=study, storage=store)
    fail_stale_trials(handle)  # a dead worker's trial shows as FAIL, not as running forever
    trials = handle.get_trials(deepcopy=False)
    spec = handle.user_attrs.get(SPEC_ATTR) or {"params": [], "report": {"top_fraction": 0.1}}
    maximize = handle.direction == optuna.study.StudyDirection.MAXIMIZE
    complete = sorted((t for t in trials if t.state == TrialState.COMPLETE),
                      key=lambda t: t.value, reverse=maximize)
    finished = len(complete) + sum(t.state == TrialState.PRUNED for t in trials)
    k = top_k(spec["report"], finished, len(complete)) if complete else 0
    top = complete[:k]
    log_params = {p["name"] for p in spec["params"] if p["distribution"] == "log-float"}
    params_summary = {}
    for name in {n for t in top for n in t.params}:
        values = [t.params[name] for t in top if name in t.params]
        if all(isinstance(v, (int, float)) for v in values):
            if name in log_params:
                logs = [math.log10(v) for v in values]
                params_summary[f"log10({name})"] = _mean_std(logs)
            else:
                params_summary[name] = _mean_std([float(v) for v in values])
        else:
            params_summary[name] = ", ".join(f"{v} x{values.count(v)}" for v in sorted(set(values), key=str))
    tests = [t.user_attrs["test_metric"] for t in top if t.user_attrs.get("test_metric") is not None]
    states = {s.name: sum(t.state == s for t in trials) for s in TrialState}
    return {
        "study": study, "direction": "maximize" if maximize else "minimize", "spec": spec,
        "budget": handle.user_attrs.get(BUDGET_ATTR), "states": {k: v for k, v in states.items() if v},
        "trials": trials, "ranked": complete, "k": k,
        "top": {"validation": _mean_std([t.value for t in top]), "test": _mean_std(tests),
                "metric_name": top[0].user_attrs.get("metric_name", "value") if top else None,
                "params": params_summary, "n_test": len(tests)},
        "importance": parameter_importance(handle, complete, log_params),
    }


def parameter_importance(handle, complete, log_params) -> Dict[str, Any]:
    """Optuna's importance evaluator; when it cannot run (too few trials, one value), the absolute
    Spearman rank correlation of each numeric parameter (log10 for log-float) with the objective."""
    optuna = _optuna()
    if len(complete) >= 2:
        try:
            return {"method": "optuna.importance.get_param_importances",
                    "values": dict(optuna.importance.get_param_importances(handle))}
        except (RuntimeError, ValueError, ZeroDivisionError):
            pass
    values = {}
    for name in sorted({n for t in complete for n in t.params}):
        pairs = [(t.params[name], t.value) for t in complete if isinstance(t.params.get(name), (int, float))]
        if len(pairs) >= 3:
            xs = [math.log10(x) if name in log_params else x for x, _ in pairs]
            rho = _spearman(xs, [v for _, v in pairs])
            if rho is not None:
                values[name] = abs(rho)
    return {"method": "|Spearman rank correlation| with the objective", "values": values}


def _spearman(xs: List[float], ys: List[float]) -> Optional[float]:
    def ranks(values):
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for m in range(i, j + 1):
                out[order[m]] = (i + j) / 2
            i = j + 1
        return out
    rx, ry = ranks(xs), ranks(ys)
    if len(set(rx)) < 2 or len(set(ry)) < 2:
        return None
    return statistics.correlation(rx, ry)


def sensitivity_plot(summary: Dict[str, Any], path: Path) -> bool:
    """Objective against each parameter (log axis for log-float), top-k marked; False if nothing to plot."""
    ranked = summary["ranked"]
    names = [p["name"] for p in summary["spec"]["params"]]
    if not ranked or not names:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    log_params = {p["name"] for p in summary["spec"]["params"] if p["distribution"] == "log-float"}
    figure, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.2), squeeze=False)
    top = set(t.number for t in ranked[:summary["k"]])
    for axis, name in zip(axes[0], names):
        points = [(t.params[name], t.value, t.number in top) for t in ranked if name in t.params]
        numeric = all(isinstance(x, (int, float)) for x, _, _ in points)
        labels = sorted({str(x) for x, _, _ in points})
        xs = [x if numeric else labels.index(str(x)) for x, _, _ in points]
        axis.scatter(xs, [v for _, v, _ in points], c=["tab:red" if best else "tab:blue" for *_, best in points],
                     s=18)
        if numeric and name in log_params:
            axis.set_xscale("log")
        if not numeric:
            axis.set_xticks(range(len(labels)), labels, rotation=30)
        axis.set_xlabel(name)
        axis.set_ylabel("validation " + (summary["top"]["metric_name"] or "value"))
    figure.suptitle(f"{summary['study']}: red = top {summary['k']}")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def study_markdown(summary: Dict[str, Any], figure: Optional[str] = None, best: int = 10) -> str:
    """The study as markdown: states, the papers' top-k summary, the best trials, importances, failures."""
    spec, top = summary["spec"], summary["top"]
    ranked = summary["ranked"]
    metric = top["metric_name"] or "value"
    states = ", ".join(f"{n} {c}" for n, c in summary["states"].items())
    lines = [f"## Sweep {summary['study']}", "",
             f"{spec.get('description', '')}".strip(),
             f"Base `{spec.get('base')}`, sampler {spec.get('sampler')}, {summary['direction']} validation "
             f"{metric}; budget {summary['budget']} trials; trials by state: {states}.", ""]
    if ranked:
        rule = (f"top {spec['report']['top_fraction']:.0%}" if "top_fraction" in spec["report"]
                else f"top {spec['report']['top_k']}")
        finished = len(ranked) + summary["states"].get("PRUNED", 0)
        lines += [f"### Top {summary['k']} of {finished} finished trials by validation ({rule}; mean ± std)", "",
                  "| quantity | mean ± std |", "|---|---|",
                  f"| validation {metric} | {top['validation']} |",
                  f"| test {metric} (n={top['n_test']}) | {top['test']} |"]
        lines += [f"| {name} | {value} |" for name, value in sorted(top["params"].items())]
        lines += ["", f"### Best {min(best, len(ranked))} trials", "",
                  "| rank | trial | validation | test | " + " | ".join(p["name"] for p in spec["params"])
                  + " | run id |", "|" + "---|" * (4 + len(spec["params"]) + 1)]
        for i, t in enumerate(ranked[:best], 1):
            test = t.user_attrs.get("test_metric")
            lines.append(f"| {i} | {t.number} | {t.value:.4g} | {'-' if test is None else f'{test:.4g}'} | "
                         + " | ".join(_format_param(t.params.get(p["name"], "-")) for p in spec["params"])
                         + f" | {t.user_attrs.get('run_id', '-')} |")
    importance = summary["importance"]
    if importance["values"]:
        lines += ["", f"### Parameter importance ({importance['method']})", "", "| parameter | importance |",
                  "|---|---|"] + [f"| {n} | {v:.3f} |" for n, v in
                                  sorted(importance["values"].items(), key=lambda kv: -kv[1])]
    if figure:
        lines += ["", f"![sensitivity]({figure})"]
    unfinished = [t for t in summary["trials"] if t.state.name not in ("COMPLETE", "PRUNED")]
    if unfinished:
        lines += ["", "### Trials not completed", "", "| trial | state | retry of | reason |", "|---|---|---|---|"]
        for t in unfinished:
            reason = t.user_attrs.get("not_run") or t.user_attrs.get("error") or (
                "worker stopped sending heartbeats" if t.state.name == "FAIL" else "")
            lines.append(f"| {t.number} | {t.state.name} | {t.system_attrs.get('failed_trial', '-')} | "
                         f"{reason.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def has_study(study: str, storage: str = DEFAULT_STORAGE) -> bool:
    """Whether ``storage`` holds a study named ``study`` (False, without creating it, if a SQLite file is
    missing or Optuna is not installed)."""
    url = storage_url(storage)
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists():
        return False
    try:
        optuna = _optuna()
    except ImportError:
        return False
    return study in optuna.study.get_all_study_names(storage=url)


def study_report(study: str, storage: str = DEFAULT_STORAGE, out_dir: str | Path = "report",
                 plots: bool = True) -> Dict[str, Path]:
    """Write ``sweep-<study>.md`` (and ``sweep-<study>.png``) into ``out_dir``; returns their paths.

    This is the function ``ltdrnn report --study NAME`` can call to add the study's section.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = study_summary(study, storage)
    slug = "".join(c if c.isalnum() or c in "-_" else "_" for c in study)
    paths = {"markdown": out_dir / f"sweep-{slug}.md"}
    figure = out_dir / f"sweep-{slug}.png"
    if plots and sensitivity_plot(summary, figure):
        paths["sensitivity"] = figure
    paths["markdown"].write_text(study_markdown(summary, figure.name if "sensitivity" in paths else None))
    return paths


# ---- command line -----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ltdrnn sweep", description="Hyperparameter sweeps on Optuna: many "
                                     "workers share one study through a database.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser("run", help="run trials of a study (creating it if needed)")
    run.add_argument("spec", help="packaged sweep (ltdrnn sweep list) or a sweep YAML file")
    run.add_argument("--storage", default=DEFAULT_STORAGE, help=f"Optuna storage URL (default {DEFAULT_STORAGE}); "
                     "e.g. postgresql://user:pass@host/db to share the study between machines")
    run.add_argument("--study", help="study name (default: the spec's)")
    run.add_argument("--trials", type=int, help="trials in the whole study (default: the spec's)")
    run.add_argument("--workers", type=int, default=1, help="worker processes on this machine (default 1)")
    run.add_argument("--first-worker", type=int, default=0, help="index of this machine's first worker: "
                     "workers on different machines need different indices for different sampler seeds")
    run.add_argument("--store", help="results database of the runs (default: the base config's results)")
    run.add_argument("--runs", default="runs", help="directory of run directories (default ./runs)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override for every trial's config, e.g. --set train.epochs=2")
    run.add_argument("--heartbeat", type=int, default=30, help="seconds between heartbeats (default 30); a "
                     "trial without one for twice as long is failed and retried")
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    report = sub.add_parser("report", help="best trials, top-k summary, importance, sensitivity plot")
    report.add_argument("--study", required=True)
    report.add_argument("--storage", default=DEFAULT_STORAGE)
    report.add_argument("--out", default="report")
    report.add_argument("--no-plots", action="store_true")
    sub.add_parser("list", help="packaged sweep specs")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "run":
            spec = load_spec(args.spec)
            study = args.study or spec.name
            started = time.perf_counter()
            counts = run_workers(spec, args.workers, args.storage, study, args.trials, args.first_worker,
                                 args.overrides, args.runs, args.store, args.heartbeat, args.quiet)
            total = {k: sum(c[k] for c in counts) for k in ("complete", "pruned", "failed", "given_back")}
            print(f"sweep {study}: this machine {total}; {time.perf_counter() - started:.0f} s. "
                  f"Report: ltdrnn sweep report --study {study} --storage {args.storage}")
            return 0 if len(counts) == args.workers else 1
        if args.command == "report":
            paths = study_report(args.study, args.storage, args.out, plots=not args.no_plots)
            print(paths["markdown"].read_text())
            print("written: " + ", ".join(str(p) for p in paths.values()))
            return 0
        if args.command == "list":
            for name in list_sweeps():
                print(name)
            return 0
    except ConfigError as error:
        print(f"ltdrnn sweep {args.command}: {error}", file=sys.stderr)
        return 2
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
