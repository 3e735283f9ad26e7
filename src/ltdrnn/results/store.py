"""The results store: one row per finished run, in SQLite by default or any SQLAlchemy database URL.

    store = ResultStore("results.db")            # a path means SQLite; or "postgresql://..."
    store.add(record)                            # one transaction; a duplicate id is an error
    rows = store.rows(study="adding-lr")         # JSON columns come back decoded

Rows are written in one transaction each, so a crash leaves either the whole row or none. SQLite runs
in WAL mode with a busy timeout so that several processes (sweep workers, ``ltdrnn run --jobs 2``) can
write at once. Run ids are unique: adding a row whose id exists raises :class:`ResultConflict` unless
``on_conflict="new_id"``, which stores it under a fresh id; rows are never overwritten.

The helpers :func:`database_url`, :func:`sqlite_file`, :func:`make_sqlite_folder`, :func:`create_tables`
and :func:`retry_creation_race` serve every table the project keeps in a database (runs, sweep claims and
Optuna's tables, reproduction analyses). Rendering lives in
:mod:`ltdrnn.results.report`.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, TypeVar

Created = TypeVar("Created")

COLUMNS_JSON = ("config", "metrics", "timings", "history", "version")


class ResultConflict(RuntimeError):
    """A row with the same run id is already in the store."""


def database_url(location: str | Path) -> str:
    """A SQLAlchemy URL: URLs pass through, anything else is a SQLite file path."""
    location = str(location)
    if "://" in location:
        return location
    return f"sqlite:///{Path(location).expanduser().resolve()}"


def sqlite_file(url: str) -> Optional[Path]:
    """The file behind a SQLite URL; None for another database or an in-memory one."""
    if not url.startswith("sqlite:///") or url.startswith("sqlite:///:memory:"):
        return None
    return Path(url[len("sqlite:///") :])


def database_exists(location: str | Path) -> bool:
    """Whether there is a database at ``location`` to read from: a SQLite file (a path or a SQLite URL)
    that exists, or any other database URL (its server is asked only when it is opened)."""
    path = sqlite_file(database_url(location))
    return path is None or path.is_file()


def make_sqlite_folder(url: str) -> None:
    """Create the folder of a SQLite database file (SQLite creates the file, not its folder)."""
    path = sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)


def create_tables(sa, metadata, engine, attempts: int = 3) -> None:
    """``metadata.create_all``, tolerating a race (see :func:`retry_creation_race`)."""
    retry_creation_race(sa, lambda: metadata.create_all(engine, checkfirst=True), attempts)


def retry_creation_race(sa, create: Callable[[], Created], attempts: int, pause_s: float = 0.0) -> Created:
    """``create()``, tried again when it loses a race: processes starting together (sweep workers,
    ``--jobs 2``) may create the same tables at once, and the loser sees "already exists" (SQLite says so
    with an OperationalError, other databases with an IntegrityError on their catalogue); on the next
    attempt, after ``pause_s`` times the attempts so far, it finds them there."""
    for attempt in range(attempts):
        try:
            return create()
        except (sa.exc.OperationalError, sa.exc.IntegrityError):
            if attempt == attempts - 1:
                raise
            time.sleep(pause_s * (attempt + 1))


class ResultStore:
    """The table ``runs`` in the database at ``location`` (created on first use)."""

    def __init__(self, location: str, busy_timeout_s: float = 60.0) -> None:
        try:
            import sqlalchemy as sa
        except ImportError as error:
            raise ImportError("the results store needs SQLAlchemy: pip install 'ltdrnn[train]'") from error
        self.sa = sa
        self.url = database_url(location)
        sqlite = self.url.startswith("sqlite")
        make_sqlite_folder(self.url)
        self.engine = sa.create_engine(self.url, connect_args={"timeout": busy_timeout_s} if sqlite else {})
        if sqlite:
            milliseconds = int(busy_timeout_s * 1000)

            @sa.event.listens_for(self.engine, "connect")
            def _pragmas(dbapi_connection, _record):
                cursor = dbapi_connection.cursor()
                cursor.execute(f"PRAGMA busy_timeout={milliseconds}")
                cursor.execute("PRAGMA journal_mode=WAL")
                cursor.close()

        self.table = _runs_table(sa)
        create_tables(sa, self.table.metadata, self.engine)

    def add(self, record: Dict[str, Any], on_conflict: str = "error") -> str:
        """Insert one run in a transaction; returns the id it was stored under."""
        if on_conflict not in ("error", "new_id"):
            raise ValueError(f"on_conflict: expected 'error' or 'new_id', got {on_conflict!r}")
        row = _to_row(record)
        try:
            with self.engine.begin() as connection:
                connection.execute(self.table.insert().values(**row))
        except self.sa.exc.IntegrityError:
            if on_conflict == "error":
                raise ResultConflict(
                    f"run id {row['id']!r} is already in {self.url}; rows are never "
                    "overwritten (store it with on_conflict='new_id')"
                ) from None
            row["id"] = f"{row['id']}-{uuid.uuid4().hex[:6]}"
            with self.engine.begin() as connection:
                connection.execute(self.table.insert().values(**row))
        return row["id"]

    def checkpoint(self) -> None:
        """Fold SQLite's write-ahead log into the database file, so that the file alone (a copy, a
        commit of a results database beside its report) holds every row; nothing to do elsewhere."""
        if self.url.startswith("sqlite"):
            with self.engine.connect() as connection:
                connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")

    def has(self, run_id: str) -> bool:
        """Whether a row with this id is stored."""
        query = self.sa.select(self.table.c.id).where(self.table.c.id == run_id)
        with self.engine.connect() as connection:
            return connection.execute(query).first() is not None

    def rows(
        self,
        study: Optional[str] = None,
        status: Optional[str] = None,
        cell: Optional[str] = None,
        task: Optional[str] = None,
    ) -> List[Dict[str, Any]]:
        """Stored runs, oldest first, JSON columns decoded."""
        query = self.sa.select(self.table).order_by(self.table.c.created, self.table.c.id)
        for column, value in (("study", study), ("status", status), ("cell", cell), ("task", task)):
            if value is not None:
                query = query.where(self.table.c[column] == value)
        with self.engine.connect() as connection:
            result = connection.execute(query).mappings().all()
        return [_from_row(dict(r)) for r in result]

    def count(self) -> int:
        with self.engine.connect() as connection:
            return connection.execute(self.sa.select(self.sa.func.count()).select_from(self.table)).scalar_one()


def _runs_table(sa):
    metadata = sa.MetaData()
    return sa.Table(
        "runs",
        metadata,
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("created", sa.String(40), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("cell", sa.String(100), nullable=False, index=True),
        sa.Column("task", sa.String(100), nullable=False, index=True),
        sa.Column("preset", sa.String(200)),
        sa.Column("study", sa.String(200), index=True),
        sa.Column("name", sa.String(200)),
        sa.Column("metric_name", sa.String(40)),
        sa.Column("metric", sa.Float),
        sa.Column("params", sa.Integer),
        sa.Column("train_time_s", sa.Float),
        sa.Column("git_commit", sa.String(64)),
        sa.Column("run_dir", sa.Text),
        *[sa.Column(name, sa.Text) for name in COLUMNS_JSON],
    )


def _to_row(record: Dict[str, Any]) -> Dict[str, Any]:
    metrics = record.get("metrics") or {}
    metric = metrics.get("metric")
    return {
        "id": record["id"],
        "created": record["created"],
        "status": record.get("status", "finished"),
        "cell": record["cell"],
        "task": record["task"],
        "preset": record.get("preset"),
        "study": record.get("study"),
        "name": record.get("name"),
        "metric_name": metrics.get("metric_name"),
        "metric": metric if metric is None or math.isfinite(metric) else None,
        "params": metrics.get("params"),
        "train_time_s": (record.get("timings") or {}).get("train_s"),
        "git_commit": (record.get("version") or {}).get("git_commit"),
        "run_dir": record.get("run_dir"),
        **{name: json.dumps(record.get(name), default=str) for name in COLUMNS_JSON},
    }


def _from_row(row: Dict[str, Any]) -> Dict[str, Any]:
    for name in COLUMNS_JSON:
        row[name] = json.loads(row[name]) if row[name] is not None else None
    return row
