"""The results store: round trip, unique ids, atomic rows under crashes, concurrent writers."""

import multiprocessing
import shutil
import subprocess
import sys
import textwrap

import pytest

from ltdrnn.results import ResultConflict, ResultStore, create_tables, database_url, sqlite_file


def record(run_id, metric=0.5, study=None):
    return {
        "id": run_id,
        "created": "2026-01-01T00:00:00+00:00",
        "status": "finished",
        "cell": "lstm",
        "task": "adding",
        "preset": "x/y",
        "study": study,
        "name": None,
        "config": {"task": {"options": {"T": 10}}},
        "metrics": {"metric_name": "mse", "metric": metric, "params": 12, "baseline": 0.167},
        "timings": {"train_s": 1.5},
        "history": [{"step": 1, "val_metric": metric}],
        "version": {"git_commit": "abc"},
        "run_dir": "/tmp/x",
    }


def test_round_trip_decodes_json_columns(tmp_path):
    store = ResultStore(str(tmp_path / "r.db"))
    store.add(record("a", 0.25, study="s1"))
    store.add(record("b", 0.5))
    rows = store.rows(study="s1")
    assert [r["id"] for r in rows] == ["a"]
    row = rows[0]
    assert row["metric"] == 0.25 and row["params"] == 12 and row["train_time_s"] == 1.5
    assert row["config"] == {"task": {"options": {"T": 10}}} and row["history"][0]["step"] == 1
    assert row["git_commit"] == "abc" and store.count() == 2


def test_a_path_means_sqlite_and_urls_pass_through(tmp_path):
    assert database_url(str(tmp_path / "r.db")) == f"sqlite:///{tmp_path / 'r.db'}"
    assert database_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert sqlite_file(database_url(tmp_path / "r.db")) == tmp_path / "r.db"
    assert sqlite_file("sqlite:///:memory:") is None and sqlite_file("postgresql://u@h/db") is None


def test_table_creation_survives_a_racing_creator_and_gives_up_after_its_attempts(tmp_path):
    sa = pytest.importorskip("sqlalchemy")
    engine = sa.create_engine(database_url(tmp_path / "r.db"))
    calls = []

    class Racing(sa.MetaData):
        """Fails like the loser of a race until ``losses`` calls have failed."""

        def __init__(self, losses):
            super().__init__()
            self.losses = losses

        def create_all(self, bind, checkfirst=True):
            calls.append(checkfirst)
            if len(calls) <= self.losses:
                raise sa.exc.OperationalError("CREATE TABLE t", {}, Exception("table t already exists"))
            super().create_all(bind, checkfirst=checkfirst)

    metadata = Racing(losses=2)
    sa.Table("t", metadata, sa.Column("x", sa.Integer, primary_key=True))
    create_tables(sa, metadata, engine)
    assert len(calls) == 3 and sa.inspect(engine).has_table("t")
    calls.clear()
    with pytest.raises(sa.exc.OperationalError):
        create_tables(sa, Racing(losses=5), engine)
    assert len(calls) == 3


def test_checkpoint_leaves_every_row_in_the_database_file_alone(tmp_path):
    # a results database is committed beside its report: the file must hold the rows, not only its
    # write-ahead log (which git ignores and a copy of the file leaves behind)
    store = ResultStore(str(tmp_path / "r.db"))
    store.add(record("one"))
    store.checkpoint()
    alone = tmp_path / "copy" / "r.db"
    alone.parent.mkdir()
    shutil.copy(tmp_path / "r.db", alone)
    assert [r["id"] for r in ResultStore(str(alone)).rows()] == ["one"]


def test_rows_are_never_overwritten(tmp_path):
    store = ResultStore(str(tmp_path / "r.db"))
    store.add(record("a", 0.25))
    with pytest.raises(ResultConflict, match="'a' is already in"):
        store.add(record("a", 0.99))
    new_id = store.add(record("a", 0.99), on_conflict="new_id")
    assert new_id != "a" and new_id.startswith("a-")
    values = {r["id"]: r["metric"] for r in store.rows()}
    assert values == {"a": 0.25, new_id: 0.99}


def test_an_exception_inside_the_transaction_leaves_no_row(tmp_path):
    store = ResultStore(str(tmp_path / "r.db"))
    with pytest.raises(RuntimeError):
        with store.engine.begin() as connection:
            connection.execute(
                store.table.insert().values(id="half", created="t", status="finished", cell="c", task="t")
            )
            raise RuntimeError("crash after the insert, before the commit")
    assert store.count() == 0
    with pytest.raises(KeyError):
        store.add({"id": "broken", "created": "t"})  # an incomplete record fails before writing
    assert store.count() == 0


def test_a_process_killed_mid_write_leaves_no_row_and_a_usable_store(tmp_path):
    path = tmp_path / "r.db"
    ResultStore(str(path)).add(record("before"))
    script = textwrap.dedent(f"""
        import os
        from ltdrnn.results import ResultStore
        store = ResultStore({str(path)!r})
        with store.engine.begin() as connection:
            connection.execute(store.table.insert().values(id="killed", created="t", status="finished",
                                                           cell="c", task="t"))
            os._exit(9)  # the process dies with the transaction open
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 9, result.stderr
    store = ResultStore(str(path))
    assert [r["id"] for r in store.rows()] == ["before"]
    store.add(record("after"))
    assert store.count() == 2


def _writer(path, prefix, count):
    store = ResultStore(path)
    for i in range(count):
        store.add(record(f"{prefix}-{i}"))


def test_two_processes_write_at_once(tmp_path):
    path = str(tmp_path / "r.db")
    # fork is quick; each child opens its own engine, so nothing of the parent's database state is shared
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    workers = [context.Process(target=_writer, args=(path, name, 15)) for name in ("p", "q")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    ids = {r["id"] for r in ResultStore(path).rows()}
    assert ids == {f"{p}-{i}" for p in "pq" for i in range(15)}


# ---- the text export of a database -------------------------------------------------------------------
def test_the_text_export_is_sorted_stable_one_row_a_line_and_only_reads(tmp_path):
    import json

    from ltdrnn.results.export import export_lines, export_path, refresh_export, write_export

    db = tmp_path / "r.db"
    store = ResultStore(str(db))
    store.add(record("b", 0.25))
    store.add(record("a", 0.75))
    store.checkpoint()
    before = db.read_bytes()
    lines = export_lines(str(db))
    assert db.read_bytes() == before  # reading never writes to the store
    rows = [json.loads(line) for line in lines]
    assert [(r["table"], r["id"]) for r in rows] == [("runs", "a"), ("runs", "b")]
    assert rows[0]["metric"] == 0.75 and rows[0]["config"] == {"task": {"options": {"T": 10}}}
    assert "history" not in rows[0]  # the learning curve stays in the database only
    assert lines == [json.dumps(r, sort_keys=True, ensure_ascii=False) for r in rows]
    assert export_lines(f"sqlite:///{db}") == lines  # the same database as a URL
    assert refresh_export(str(db)) is None and not export_path(str(db)).exists()  # no export yet: none made
    path = write_export(str(db))
    assert path == tmp_path / "r.jsonl" and path.read_text() == "".join(line + "\n" for line in lines)
    path.unlink()
    from ltdrnn.cli import main

    assert main(["report", "--store", str(db), "--export-jsonl"]) == 0  # the command that writes it
    assert path.read_text() == "".join(line + "\n" for line in lines)
    store.add(record("c"))
    assert refresh_export(str(db)) == path and len(path.read_text().splitlines()) == 3
    with pytest.raises(ValueError, match="a text export lies beside a SQLite file"):
        export_path("postgresql://host/db")
    with pytest.raises(FileNotFoundError, match="no results database there"):
        export_lines(str(tmp_path / "none.db"))
    assert not (tmp_path / "none.db").exists()


def test_every_committed_database_has_its_text_export_beside_it_in_sync():
    from pathlib import Path

    from ltdrnn.results.export import export_lines, export_path

    root = Path(__file__).resolve().parents[1]
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "*.db"], capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: the committed databases are not known")
    databases = [root / name for name in listed.stdout.split()]
    assert databases, "expected committed databases (reproduction/results.db, docs/ucr/results.db, ...)"
    stale = []
    for db in databases:
        path = export_path(db)
        expected = "".join(line + "\n" for line in export_lines(db))
        if not path.is_file() or path.read_text() != expected:
            stale.append(f"ltdrnn report --store {db.relative_to(root)} --export-jsonl")
    assert not stale, "text exports missing or out of date; write them with:\n" + "\n".join(stale)


# ---- the run record: one builder for every producer's row ----------------------------------------------
def _raw_rows(location, where=""):
    """The rows of ``runs`` as the database holds them (JSON columns as text), without the ``run_key``."""
    import sqlite3

    connection = sqlite3.connect(f"file:{location}?mode=ro", uri=True)
    connection.row_factory = sqlite3.Row
    try:
        rows = [dict(r) for r in connection.execute(f"SELECT * FROM runs {where} ORDER BY created, id")]
    finally:
        connection.close()
    return [{k: v for k, v in row.items() if k != "run_key"} for row in rows]


@pytest.mark.parametrize("committed", ["reproduction/results.db", "docs/ucr/results.db"])
def test_committed_rows_rebuilt_by_the_record_builder_are_stored_byte_for_byte(tmp_path, committed):
    """One row of every (cell, status) of a committed store, trained or MiniRocket's, decoded, built again
    with ``run_record`` and stored: the new store holds exactly the committed row."""
    from pathlib import Path

    from ltdrnn.results.record import RECORD_KEYS, run_record

    source = Path(__file__).resolve().parents[1] / committed
    if not source.is_file():
        pytest.skip(f"{committed} is not in this checkout")
    first = {}
    for row in _raw_rows(source):
        first.setdefault((row["cell"], row["status"]), row)
    assert len(first) >= 2
    store = ResultStore(str(tmp_path / "r.db"))
    for row in first.values():
        decoded = ResultStore(str(source), read_only=True).rows(study=row["study"], cell=row["cell"])
        stored = next(r for r in decoded if r["id"] == row["id"])
        parts = {k: stored[k] for k in RECORD_KEYS if k not in ("id", "status", "cell", "task", "config", "metrics")}
        record = run_record(
            stored["id"],
            status=stored["status"],
            cell=stored["cell"],
            task=stored["task"],
            config=stored["config"],
            metrics=stored["metrics"],
            **parts,
        )
        assert list(record) == list(RECORD_KEYS)
        store.add(record)
    store.checkpoint()
    rebuilt = {r["id"]: r for r in _raw_rows(tmp_path / "r.db")}
    assert rebuilt == {row["id"]: row for row in first.values()}


def test_the_trainer_and_a_failed_trial_store_their_records_with_every_key_in_order(tmp_path, monkeypatch):
    import json

    from harness_helpers import install, tiny_config
    from ltdrnn.config import load_config
    from ltdrnn.results.record import RECORD_KEYS
    from ltdrnn.sweep.trials import failed_row
    from ltdrnn.train import train

    install(monkeypatch)
    cfg = load_config(tiny_config(tmp_path), ["study=st", "name=trial-0"])
    record = train(cfg)
    saved = json.loads((tmp_path / "run" / "result.json").read_text())
    assert list(saved) == list(RECORD_KEYS) and saved["id"] == record["id"]
    trial = load_config(cfg.to_dict(), ["name=trial-1", f"run_dir={tmp_path / 'trial-1'}"])
    failed_row(trial, "RuntimeError: boom")
    trained, failed = _raw_rows(tmp_path / "results.db")
    assert trained["id"] == record["id"] and trained["git_commit"] == record["version"]["git_commit"]
    assert trained["timings"] == json.dumps(record["timings"]) and trained["metric"] == record["metrics"]["metric"]
    # what a failed trial's row always held: its config's fields, the error, and nothing measured
    assert failed["id"].startswith("st-trial-1-failed-") and failed["created"] > trained["created"]
    assert {k: v for k, v in failed.items() if k not in ("id", "created")} == {
        "status": "failed",
        "cell": "tiny",
        "task": "tiny",
        "preset": None,
        "study": "st",
        "name": "trial-1",
        "metric_name": None,
        "metric": None,
        "params": None,
        "train_time_s": None,
        "git_commit": None,
        "run_dir": str(tmp_path / "trial-1"),
        "config": json.dumps(trial.to_dict()),
        "metrics": '{"error": "RuntimeError: boom"}',
        "timings": "null",
        "history": "null",
        "version": "null",
    }


def test_minirocket_stores_the_row_it_always_stored(tmp_path, monkeypatch):
    import json

    import numpy as np

    pytest.importorskip("aeon", reason="MiniRocket comes from aeon")
    import aeon.classification.convolution_based as convolution_based

    from fixture_data import toy_rows, write_ts_set
    from ltdrnn.results import version_info
    from ltdrnn.results.record import RECORD_KEYS
    from ltdrnn.ucr.benchmark import fit_minirocket

    class Constant:
        """Stands in for MiniRocket (whose first fit compiles for a minute): always class 0."""

        def __init__(self, random_state, n_jobs):
            pass

        def fit(self, x, y):
            return self

        def predict(self, x):
            return np.zeros(len(x), dtype=int)

    monkeypatch.setattr(convolution_based, "MiniRocketClassifier", Constant)
    rng = np.random.default_rng(0)
    write_ts_set(tmp_path, toy_rows(9, 1, rng), toy_rows(6, 1, rng), name="Toy")
    record = fit_minirocket("Toy", 3, "ucr/tiny", str(tmp_path / "r.db"), data_dir=str(tmp_path))
    assert list(record) == list(RECORD_KEYS)
    (row,) = _raw_rows(tmp_path / "r.db")
    assert row["id"] == record["id"] and row["id"].split("-", 2)[2].startswith("minirocket-Toy-")
    assert row["train_time_s"] == record["timings"]["train_s"] and row["timings"] == json.dumps(record["timings"])
    assert {k: v for k, v in row.items() if k not in ("id", "created", "train_time_s", "timings")} == {
        "status": "finished",
        "cell": "minirocket",
        "task": "uea_ucr",
        "preset": None,
        "study": "ucr/tiny",
        "name": "Toy",
        "metric_name": "accuracy",
        "metric": 2 / 6,
        "params": None,
        "git_commit": version_info()["git_commit"],
        "run_dir": None,
        "config": json.dumps(
            {
                "model": {"cell": "minirocket", "n_kernels": 10000},
                "task": {"name": "uea_ucr", "options": {"dataset": "Toy", "val_fraction": 0.0}},
                "train": {"seed": 3},
            }
        ),
        "metrics": json.dumps(
            {
                "metric_name": "accuracy",
                "metric": 2 / 6,
                "higher_is_better": True,
                "baseline": 1 / 3,
                "params": None,
            }
        ),
        "history": "[]",
        "version": json.dumps(version_info()),
    }


def test_a_record_with_an_unknown_status_is_refused_naming_it():
    from ltdrnn.results.record import run_record

    with pytest.raises(ValueError, match="status: expected one of finished, pruned, diverged, failed, got 'done'"):
        run_record("x", status="done", cell="lstm", task="adding", config={}, metrics={})
