"""Optuna plumbing: the storage with heartbeats, samplers, pruners, the study, the claims table that
makes a trial run once, the heartbeat thread, and the bookkeeping of retries (see the package notes)."""

from __future__ import annotations

import threading
import warnings
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional

from ..config import ConfigError
from ..results import create_tables, database_url, make_sqlite_folder, retry_creation_race
from .spec import SweepSpec

SPEC_ATTR = "ltdrnn_spec"
BUDGET_ATTR = "ltdrnn_budget"
CLAIMS_TABLE = "ltdrnn_sweep_claims"


def optuna_module():
    try:
        import optuna
    except ImportError as error:
        raise ImportError("sweeps need Optuna: pip install 'ltdrnn[sweep]'") from error
    return optuna


def open_storage(url: str, retries: int = 2, heartbeat_s: int = 30, grace_s: Optional[int] = None):
    """An Optuna RDB storage with heartbeats; dead workers' trials are failed and queued for retry."""
    optuna = optuna_module()
    url = database_url(url)
    make_sqlite_folder(url)
    import sqlalchemy

    def create():
        with warnings.catch_warnings():  # heartbeats are marked experimental; they are stable since 2.9
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs=_engine_options(url),
                heartbeat_interval=heartbeat_s,
                grace_period=grace_s if grace_s is not None else 2 * heartbeat_s,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=retries),
            )

    # creating the storage creates Optuna's tables, which workers starting together race for
    return retry_creation_race(sqlalchemy, create, attempts=5, pause_s=0.5)


def _engine_options(url: str) -> Dict[str, Any]:
    """SQLAlchemy engine options of the sweep's database: SQLite waits up to 120 s for a lock, since many
    workers write to one file."""
    return {"connect_args": {"timeout": 120}} if url.startswith("sqlite") else {}


def make_sampler(spec: SweepSpec, worker: int = 0):
    """random / tpe / grid; with a spec seed, worker ``i`` samples from ``seed + i``."""
    optuna = optuna_module()
    seed = None if spec.seed is None else spec.seed + worker
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.sampler == "grid":
        return _grid_sampler({p.name: p.grid_values() for p in spec.params}, seed)
    return optuna.samplers.TPESampler(seed=seed)


def _grid_sampler(search_space: Dict[str, List[Any]], seed: Optional[int]):
    """Optuna's grid sampler, except that the study's budget, not the sampler, ends a sweep."""
    optuna = optuna_module()

    class GridWithoutStop(optuna.samplers.GridSampler):
        def after_trial(self, study, trial, state, values) -> None:
            return None  # the stock one calls study.stop(), which raises outside optimize (we ask and tell)

    return GridWithoutStop(search_space, seed=seed)


def make_pruner(spec: SweepSpec):
    optuna = optuna_module()
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
    optuna = optuna_module()
    handle = optuna.create_study(
        storage=storage,
        study_name=study,
        direction=direction,
        sampler=make_sampler(spec, worker),
        pruner=make_pruner(spec),
        load_if_exists=True,
    )
    attrs = handle.user_attrs
    if attrs.get(BUDGET_ATTR) != budget:  # the latest budget a worker was given (--trials may grow a study)
        handle.set_user_attr(BUDGET_ATTR, budget)
    if SPEC_ATTR not in attrs:
        handle.set_user_attr(SPEC_ATTR, spec.to_dict())
    elif [p["name"] for p in attrs[SPEC_ATTR]["params"]] != [p.name for p in spec.params]:
        raise ConfigError(
            f"study {study!r} searches {[p['name'] for p in attrs[SPEC_ATTR]['params']]}, this spec "
            f"{[p.name for p in spec.params]}; use another --study name"
        )
    return handle


class Claims:
    """The table where workers claim ``(study, root, attempt)``; one insert wins (see the module notes)."""

    def __init__(self, url: str) -> None:
        import sqlalchemy as sa

        self.sa = sa
        url = database_url(url)
        self.engine = sa.create_engine(url, **_engine_options(url))
        metadata = sa.MetaData()
        self.table = sa.Table(
            CLAIMS_TABLE,
            metadata,
            sa.Column("study", sa.String(200), primary_key=True),
            sa.Column("root", sa.Integer, primary_key=True),
            sa.Column("attempt", sa.Integer, primary_key=True),
            sa.Column("trial_number", sa.Integer, nullable=False),
            sa.Column("worker", sa.String(200), nullable=False),
            sa.Column("claimed", sa.String(40), nullable=False),
        )
        create_tables(sa, metadata, self.engine)

    def claim(self, study: str, root: int, attempt: int, number: int, worker: str) -> Optional[int]:
        """None if this worker won; else the trial number that holds the claim."""
        row = {
            "study": study,
            "root": root,
            "attempt": attempt,
            "trial_number": number,
            "worker": worker,
            "claimed": datetime.now(timezone.utc).isoformat(),
        }
        try:
            with self.engine.begin() as connection:
                connection.execute(self.table.insert().values(**row))
            return None
        except self.sa.exc.IntegrityError:
            query = self.sa.select(self.table.c.trial_number).where(
                (self.table.c.study == study) & (self.table.c.root == root) & (self.table.c.attempt == attempt)
            )
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


def roots(study) -> List[int]:
    """Numbers of the first attempts that count against the budget (trials given back unrun do not)."""
    return sorted(
        t.number
        for t in study.get_trials(deepcopy=False)
        if "failed_trial" not in t.system_attrs and "not_run" not in t.user_attrs
    )


def pending(study, states) -> List[Any]:
    return study.get_trials(deepcopy=False, states=states)


def fail_stale_trials(study) -> None:
    """Optuna's ``fail_stale_trials`` (marked experimental, stable since 2.9) without its warning."""
    optuna = optuna_module()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def ask(study):
    """``study.ask()``; Optuna warns that heartbeats are meant for ``optimize``, and we beat ourselves."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        return study.ask()
