"""The results store: one row per finished run, in SQLite by default or any SQLAlchemy database URL.

    store = ResultStore("results.db")            # a path means SQLite; or "postgresql://..."
    store.add(record)                            # one transaction; a duplicate id is an error
    rows = store.rows(study="adding-lr")         # JSON columns come back decoded

Rows are written in one transaction each, so a crash leaves either the whole row or none. SQLite runs
in WAL mode with a busy timeout so that several processes (sweep workers, ``ltdrnn run --jobs 2``) can
write at once. Run ids are unique: adding a row whose id exists raises :class:`ResultConflict` unless
``on_conflict="new_id"``, which stores it under a fresh id; rows are never overwritten. The rows of a
study are also unique per (study, config, seed) (:func:`run_key`, a unique column; the run directory is
part of the config): a second row of the same run raises :class:`ResultConflict` naming the first,
whatever ``on_conflict`` says. Stores written
before the column existed get it when first opened for writing (the oldest row of each run keeps its key).

``ResultStore(location, read_only=True)`` (reports) never writes: it opens a SQLite file read-only, creates
no table and raises :class:`StoreReadError` naming the file when it holds no results table or is damaged.

The helpers :func:`database_url`, :func:`sqlite_file`, :func:`make_sqlite_folder`, :func:`create_tables`
and :func:`retry_creation_race` serve every table the project keeps in a database (runs, sweep claims and
Optuna's tables, reproduction analyses). Rendering lives in
:mod:`ltdrnn.results.report`.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, TypeVar

Created = TypeVar("Created")

COLUMNS_JSON = ("config", "metrics", "timings", "history", "version")


class ResultConflict(RuntimeError):
    """A row with the same run id, or of the same run (study, config, seed), is already in the store."""


class StoreError(RuntimeError):
    """The finished run's row could not be written to the results store; the message says how to
    store it later."""


class StoreReadError(ValueError):
    """A store cannot be read as a results database (not SQLite, damaged, no ``runs`` table, a row
    that does not decode); the message names the store."""


def run_key(record: Dict[str, Any]) -> Optional[str]:
    """What makes a row of a study unique: the sha256 of its study and its config without the keys that do
    not change a result (:func:`~ltdrnn.config.comparable_config`), the seed and the run directory
    included (the record's own ``run_dir`` when it has one: a trainer given none makes a new directory per
    run). Two identical commands (the same directories) store one row; the reproduction's re-runs, each in
    a directory of its own, stay rows of their own. None for a row of no study (a lone ``ltdrnn train``)."""
    from ..config import comparable_config

    study, config = record.get("study"), record.get("config")
    if not study or not isinstance(config, dict):
        return None
    flat = comparable_config(config)
    run_dir = record["run_dir"] if "run_dir" in record else config.get("run_dir")
    flat["run_dir"] = None if run_dir is None else str(Path(run_dir))  # "runs/x/" is "runs/x"
    return hashlib.sha256(json.dumps([study, flat], sort_keys=True, default=str).encode()).hexdigest()


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


def read_only_url(location: str | Path) -> str:
    """The URL that opens the database at ``location`` for reading only: a SQLite file in read-only mode
    (nothing is created or written, not even an empty file), any other URL as it is."""
    url = database_url(location)
    path = sqlite_file(url)
    return url if path is None else f"sqlite:///file:{path}?mode=ro&uri=true"


def database_exists(location: str | Path) -> bool:
    """Whether there is a database at ``location`` to read from: a SQLite file (a path or a SQLite URL)
    that exists, or any other database URL (its server is asked only when it is opened)."""
    path = sqlite_file(database_url(location))
    return path is None or path.is_file()


def fold_write_ahead_log(location: str | Path) -> None:
    """Fold the write-ahead log of the SQLite file at ``location`` into the file, so that the file alone (a
    copy, a commit beside its report) holds every row. Nothing else is written: no table, column or key (a
    report calls it on the store it read; opening a :class:`ResultStore` for writing would add the key
    column to an old store). Nothing to do without a log, or for other databases."""
    import sqlite3

    path = sqlite_file(database_url(location))
    log = None if path is None else path.with_name(path.name + "-wal")
    if log is None or not log.is_file() or log.stat().st_size == 0:
        return
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()


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

    def __init__(self, location: str, busy_timeout_s: float = 60.0, read_only: bool = False) -> None:
        try:
            import sqlalchemy as sa
        except ImportError as error:
            raise ImportError("the results store needs SQLAlchemy: pip install 'ltdrnn[train]'") from error
        self.sa = sa
        self.url = database_url(location)
        self.read_only = read_only
        self.table = _runs_table(sa)
        if read_only:
            self._open_read_only(location)
            return
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

        try:
            create_tables(sa, self.table.metadata, self.engine)
            retry_creation_race(sa, self._add_run_key_column, 3)
        except sa.exc.DatabaseError as error:
            raise StoreReadError(
                f"{location}: not a results database that can be written ({_first_line(error)})"
            ) from None
        self.columns = [column.name for column in self.table.columns]

    def _open_read_only(self, location: str) -> None:
        sa, path = self.sa, sqlite_file(self.url)
        if path is not None and not path.is_file():
            raise FileNotFoundError(f"{location}: no results database there")
        self.engine = sa.create_engine(read_only_url(self.url))
        try:
            present = {c["name"] for c in sa.inspect(self.engine).get_columns("runs")}
        except sa.exc.NoSuchTableError:
            raise StoreReadError(f"{location}: not a results database (it has no table 'runs')") from None
        except sa.exc.DatabaseError as error:
            raise StoreReadError(
                f"{location}: not a results database that can be read ({_first_line(error)})"
            ) from None
        missing = [c.name for c in self.table.columns if c.name not in present and c.name != "run_key"]
        if missing:
            raise StoreReadError(
                f"{location}: the table 'runs' lacks the column {missing[0]!r}; not a results database"
            )
        self.columns = [c.name for c in self.table.columns if c.name in present]

    def _add_run_key_column(self) -> None:
        """Give a store written before :func:`run_key` existed its column: the oldest row of each run gets
        the key, later copies keep none (they were stored before rows were unique)."""
        if "run_key" in {c["name"] for c in self.sa.inspect(self.engine).get_columns("runs")}:
            return
        with self.engine.begin() as connection:
            connection.exec_driver_sql("ALTER TABLE runs ADD COLUMN run_key VARCHAR(64)")
            columns = [self.table.c[name] for name in ("id", "study", "config", "run_dir")]
            seen = set()
            for row in connection.execute(self.sa.select(*columns).order_by(self.table.c.created)).mappings():
                key = run_key({"study": row["study"], "config": _decoded(row["config"]), "run_dir": row["run_dir"]})
                if key is not None and key not in seen:
                    seen.add(key)
                    update = self.table.update().where(self.table.c.id == row["id"]).values(run_key=key)
                    connection.execute(update)
            connection.exec_driver_sql("CREATE UNIQUE INDEX ix_runs_run_key ON runs (run_key)")

    def add(self, record: Dict[str, Any], on_conflict: str = "error") -> str:
        """Insert one run in a transaction; returns the id it was stored under."""
        if on_conflict not in ("error", "new_id"):
            raise ValueError(f"on_conflict: expected 'error' or 'new_id', got {on_conflict!r}")
        if self.read_only:
            raise StoreError(f"{self.url}: opened read-only, rows cannot be added")
        row = _to_row(record)
        try:
            with self.engine.begin() as connection:
                connection.execute(self.table.insert().values(**row))
        except self.sa.exc.IntegrityError:
            if row["run_key"] is not None and not self.has(row["id"]):
                self.refuse_a_second_row(record)
            if on_conflict == "error":
                raise ResultConflict(
                    f"run id {row['id']!r} is already in {self.url}; rows are never "
                    "overwritten (store it with on_conflict='new_id')"
                ) from None
            row["id"] = f"{row['id']}-{uuid.uuid4().hex[:6]}"
            with self.engine.begin() as connection:
                connection.execute(self.table.insert().values(**row))
        return row["id"]

    def refuse_a_second_row(self, record: Dict[str, Any]) -> None:
        """Raise ResultConflict naming the stored row of the run ``record`` is (its study and config, see
        :func:`run_key`), if there is one; the trainer asks before it trains."""
        key = run_key(record)
        if key is None or "run_key" not in self.columns:
            return
        query = self.sa.select(self.table.c.id).where(self.table.c.run_key == key)
        with self.engine.connect() as connection:
            first = connection.execute(query).scalar()
        if first is not None:
            raise ResultConflict(
                f"study {record['study']!r} already holds this run (the same config, seed and run directory) as "
                f"run {first!r} in {self.url}; rows are unique per (study, config, seed), so a second is not "
                "stored (give the run another study or run directory to keep both)"
            )

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
        shown = [self.table.c[name] for name in self.columns if name != "run_key"]
        query = self.sa.select(*shown).order_by(self.table.c.created, self.table.c.id)
        for column, value in (("study", study), ("status", status), ("cell", cell), ("task", task)):
            if value is not None:
                query = query.where(self.table.c[column] == value)
        try:
            with self.engine.connect() as connection:
                result = connection.execute(query).mappings().all()
        except self.sa.exc.DatabaseError as error:
            raise StoreReadError(f"{self.url}: the runs cannot be read ({_first_line(error)})") from None
        return [_from_row(dict(r), self.url) for r in result]

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
        sa.Column("run_key", sa.String(64)),
        sa.Index("ix_runs_run_key", "run_key", unique=True),
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
        "run_key": run_key(record),
    }


#: what each column of a row must hold once read (SQLite keeps whatever a damaged or foreign writer put
#: in a column, a blob in ``cell`` or text in ``metric``, and the readers would fail on it far away)
REQUIRED_TEXT = ("id", "created", "status", "cell", "task")
NUMBERS = ("metric", "params", "train_time_s")
JSON_KINDS = {"config": dict, "metrics": dict, "timings": dict, "history": list, "version": dict}


def _from_row(row: Dict[str, Any], url: str = "") -> Dict[str, Any]:
    """A row as read, JSON columns decoded; a StoreReadError naming the store, the run and the column when a
    value is not of its column's kind (text, a number, a JSON mapping or list)."""

    def odd(name: str, expected: str) -> StoreReadError:
        return StoreReadError(f"{url}: run {row.get('id')!r}: its {name} is not {expected}")

    for name, value in row.items():
        if name in NUMBERS:
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise odd(name, "a number")
        elif name not in JSON_KINDS and not isinstance(value, str) and (value is not None or name in REQUIRED_TEXT):
            raise odd(name, "text")
    for name in COLUMNS_JSON:
        try:
            row[name] = _decoded(row[name])
        except ValueError:
            raise odd(name, "JSON") from None
        kind = JSON_KINDS[name]
        if row[name] is None and name in ("config", "metrics"):
            row[name] = {}  # the readers look keys up in these; nothing stored is nothing to look up
        if row[name] is not None and not isinstance(row[name], kind):
            raise odd(name, f"a JSON {'mapping' if kind is dict else 'list'}")
    return row


def _decoded(text: Optional[str]) -> Any:
    return json.loads(text) if text is not None else None


def _first_line(error: BaseException) -> str:
    text = str(getattr(error, "orig", None) or error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def open_store_for_writing(location: str) -> "ResultStore":
    """The store a run will write its row to, opened (and its tables made) before the run trains, so that
    a damaged or unwritable store fails in seconds, not after the training (a StoreReadError naming it)."""
    try:
        return ResultStore(location)
    except StoreReadError:
        raise
    except Exception as error:
        if type(error).__module__.split(".")[0] != "sqlalchemy" and not isinstance(error, OSError):
            raise
        raise StoreReadError(
            f"results: the store {location} cannot be opened for writing ({_first_line(error)})"
        ) from None


def store_record(record: Dict[str, Any], location: str, resumed: bool) -> None:
    """Add the run's row to the store; when resuming, a row already there is left as it is.

    Raises StoreError (saying how to store the row later) when the store cannot be written, e.g.
    locked by other writers for longer than its busy timeout."""
    try:
        store = ResultStore(location)
        if resumed and store.has(record["id"]):
            return
        store.add(record)
    except Exception as error:
        if type(error).__module__.split(".")[0] != "sqlalchemy" and not isinstance(error, OSError):
            raise
        run_dir = record["run_dir"]
        raise StoreError(
            f"results: the run finished but its row could not be written to {location} "
            f"({_first_line(error)}); result.json and last.pt in {run_dir} hold it: store it with "
            f"'ltdrnn train {Path(run_dir) / 'config.yaml'} --run-dir {run_dir} --resume' "
            "(trains nothing, adds the row)"
        ) from None
