"""One trainer per run directory, result rows unique per (study, config, seed), reports
that never write to the store they read, and damaged stores refused with one clear error."""

import json
import sqlite3
import subprocess
import sys

import pytest
import torch

from harness_helpers import install, tiny_config
from ltdrnn.cli import main
from ltdrnn.config import ConfigError, load_config
from ltdrnn.results import ResultConflict, ResultStore
from ltdrnn.results.store import StoreReadError
from ltdrnn.train import train


@pytest.fixture(autouse=True)
def tiny(monkeypatch):
    install(monkeypatch)
    torch.set_num_threads(1)


def _config(tmp_path, **sections):
    return load_config(tiny_config(tmp_path, train={"steps": 2, "eval_every": 2}, **sections))


def _record(run_id, study="s", seed=0, run_dir="runs/x"):
    config = {"model": {"cell": "lstm"}, "task": {"name": "adding"}, "train": {"seed": seed, "threads": 1}}
    config["run_dir"], config["study"] = run_dir, study
    return {
        "id": run_id,
        "created": f"2026-01-01T00:00:0{len(run_id) % 10}",
        "cell": "lstm",
        "task": "adding",
        "study": study,
        "config": config,
        "metrics": {"metric": 0.5},
    }


# ---- M5: one trainer per run directory -----------------------------------------------------------------
HOLD = """
import sys, time
from pathlib import Path
from ltdrnn.checkpoint import lock_run_dir
lock = lock_run_dir(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_a_second_trainer_in_the_same_run_dir_gets_a_clear_error(tmp_path, capsys):
    run_dir = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir), "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(
            ConfigError, match=rf"run_dir: {run_dir} is in use by another trainer \(process {holder.pid}\)"
        ):
            train(_config(tmp_path))
        assert not (run_dir / "last.pt").exists()
        config = tmp_path / "tiny.json"
        config.write_text(json.dumps(tiny_config(tmp_path, train={"steps": 2})))
        assert main(["train", str(config), "--run-dir", str(run_dir), "--no-store"]) == 2
        err = capsys.readouterr().err.strip()
        assert "is in use by another trainer" in err and "\n" not in err
    finally:
        holder.kill()
        holder.wait()
    # the lock dies with its process (kill -9 included): the directory is free again
    assert train(_config(tmp_path))["status"] == "finished"
    assert train(_config(tmp_path), resume=True)["status"] == "finished"  # released after each run


# ---- M5: rows unique per (study, config, seed) ----------------------------------------------------------
def test_rows_of_a_study_are_unique_per_config_and_seed(tmp_path):
    store = ResultStore(str(tmp_path / "r.db"))
    store.add(_record("a"))
    with pytest.raises(ResultConflict, match=r"study 's' already holds this run .* as run 'a'"):
        store.add(_record("b", run_dir="runs/x/"))
    with pytest.raises(ResultConflict, match="as run 'a'"):
        store.add(_record("c"), on_conflict="new_id")
    store.add(_record("d", seed=1))
    store.add(_record("h", run_dir="runs/y"))  # a re-run in a directory of its own (the reproduction's)
    store.add(_record("e", study="t"))
    store.add(_record("f", study=None))
    store.add(_record("g", study=None))  # rows of no study are not keyed
    assert sorted(r["id"] for r in ResultStore(str(tmp_path / "r.db")).rows()) == ["a", "d", "e", "f", "g", "h"]


def test_two_identical_trainings_of_a_study_store_one_row(tmp_path, capsys):
    first = train(_config(tmp_path, study="s", run_dir=str(tmp_path / "one")))
    checkpoint = (tmp_path / "one" / "last.pt").read_bytes()
    with pytest.raises(ResultConflict, match=f"as run '{first['id']}'"):
        train(_config(tmp_path, study="s", run_dir=str(tmp_path / "one") + "/"))
    assert (tmp_path / "one" / "last.pt").read_bytes() == checkpoint  # refused before training
    train(_config(tmp_path, study="s", run_dir=str(tmp_path / "two")))  # a run of its own
    assert [r["run_dir"] for r in ResultStore(str(tmp_path / "results.db")).rows()] == [
        str(tmp_path / "one"),
        str(tmp_path / "two"),
    ]
    # resuming the finished run is still a no-op
    assert train(_config(tmp_path, study="s", run_dir=str(tmp_path / "one")), resume=True)["id"] == first["id"]


OLD_RUNS = """CREATE TABLE runs (id VARCHAR(200) PRIMARY KEY, created VARCHAR(40) NOT NULL, status VARCHAR(20)
NOT NULL, cell VARCHAR(100) NOT NULL, task VARCHAR(100) NOT NULL, preset VARCHAR(200), study VARCHAR(200),
name VARCHAR(200), metric_name VARCHAR(40), metric FLOAT, params INTEGER, train_time_s FLOAT, git_commit
VARCHAR(64), run_dir TEXT, config TEXT, metrics TEXT, timings TEXT, history TEXT, version TEXT)"""


def _old_store(path, ids=("a", "b")):
    with sqlite3.connect(path) as db:
        db.execute(OLD_RUNS)
        for i, run_id in enumerate(ids):
            record = _record(run_id)
            db.execute(
                "INSERT INTO runs (id, created, status, cell, task, study, config, metrics, run_dir) "
                "VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    run_id,
                    f"2026-01-0{i + 1}",
                    "finished",
                    "lstm",
                    "adding",
                    "s",
                    json.dumps(record["config"]),
                    "{}",
                    "runs/x",
                ),
            )
    db.close()


def test_a_store_written_before_the_key_gets_it_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.db"
    _old_store(path)  # two copies of one run, as two identical `ucr run` commands stored them
    assert [r["id"] for r in ResultStore(str(path), read_only=True).rows()] == ["a", "b"]
    assert "run_key" not in {row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(runs)")}
    store = ResultStore(str(path))
    assert [r["id"] for r in store.rows()] == ["a", "b"]
    with pytest.raises(ResultConflict, match="as run 'a'"):  # the oldest copy holds the key
        store.add(_record("c"))
    store.add(_record("d", seed=3))
    assert store.count() == 3


# ---- M6: caps on what a config from a file or a checkpoint may ask for ---------------------------------
@pytest.mark.parametrize(
    "override, key",
    [
        ("model.hidden_size=20000", "model.hidden_size"),
        ("model.num_layers=1000", "model.num_layers"),
        ("train.batch_size=10000000", "train.batch_size"),
        ("task.options.n_test=1e9", "task.options.n_test"),
        ("task.options.T=100000000", "task.options.T"),
    ],
)
def test_a_config_asking_for_too_much_names_the_key(override, key):
    with pytest.raises(ConfigError, match=rf"^{key}: expected at most [\d,]+ .*got"):
        load_config("quick/toy-lstm", [override])


def test_too_many_values_in_all_are_refused_too():
    with pytest.raises(ConfigError, match=r"task.options: n_train \+ n_val \+ n_test = .* expected at most"):
        load_config({"task": {"name": "adding", "options": {"T": 100_000, "n_train": 100_000}}, "train": {"steps": 1}})
    load_config({"task": {"name": "adding", "options": {"T": 1000, "n_train": 100_000}}, "train": {"steps": 1}})


@pytest.mark.parametrize("key, value", [("hidden_size", 20000), ("n_test", 10**9)])
def test_a_checkpoint_whose_config_asks_for_too_much_is_refused_by_eval_and_export(tmp_path, capsys, key, value):
    train(_config(tmp_path, results=None))
    path = tmp_path / "run" / "last.pt"
    checkpoint = torch.load(path, weights_only=True)
    section = checkpoint["config"]["model"] if key == "hidden_size" else checkpoint["config"]["task"]["options"]
    section[key] = value
    torch.save(checkpoint, path)
    (tmp_path / "run" / "best.pt").unlink(missing_ok=True)
    for command in (["eval", str(path)], ["export", str(path), "--format", "c", "--out", str(tmp_path / "c")]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert f"{key}: expected at most" in err and "\n" not in err, err


# ---- L5: reports never write to the store they read; damaged stores are one clear error ------------------
def _store_cases(tmp_path):
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 100)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    odd = tmp_path / "odd.db"
    writer = ResultStore(str(odd))
    writer.add(_record("a"))
    writer.engine.dispose()  # its write-ahead log folded in and removed
    with sqlite3.connect(odd) as db:
        db.execute("UPDATE runs SET metrics = '{broken' WHERE id = 'a'")
    db.close()
    return {
        "empty": (empty, "not a results database"),
        "garbage": (garbage, "not a results database"),
        "other": (other, "no table 'runs'"),
        "odd": (odd, "run 'a': its metrics is not JSON"),
    }


@pytest.mark.parametrize("case", ["empty", "garbage", "other", "odd"])
@pytest.mark.parametrize("command", ["report", "ucr report"])
def test_report_on_a_damaged_store_is_one_line_and_writes_nothing(tmp_path, capsys, case, command):
    path, message = _store_cases(tmp_path)[case]
    # (SQLite's -shm/-wal index files of a WAL database may appear beside it: its bytes stay as they are)
    files = lambda: sorted(p for p in tmp_path.iterdir() if not p.name.endswith(("-shm", "-wal")))  # noqa: E731
    before, listed = path.read_bytes(), files()
    out = (
        ["--out", str(tmp_path / "out")] if command == "report" else ["--page", str(tmp_path / "p.md"), "--study", "s"]
    )
    assert main([*command.split(), "--store", str(path), *out]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ltdrnn {command}: ") and message in err and "\n" not in err, err
    assert path.read_bytes() == before  # an empty file stays empty: no table was created
    assert files() == listed


def test_training_into_a_damaged_store_fails_before_training(tmp_path):
    (tmp_path / "results.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(StoreReadError, match="results.db"):
        train(_config(tmp_path))
    assert not (tmp_path / "run" / "last.pt").exists()
