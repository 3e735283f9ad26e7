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
