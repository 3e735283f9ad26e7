"""Safe checkpoint loading, resuming, the results store under load, temp files, config limits,
and the CLI's one-line errors."""

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness_helpers import install, tiny_config
from ltdrnn.checkpoint import CheckpointError, atomic_save, load_checkpoint, remove_stale_temp_files
from ltdrnn.cli import main
from ltdrnn.config import MAX_CONFIG_VALUES, ConfigError, load_config
from ltdrnn.limits import DATA_SERIES, MAX_SPLIT_STEPS
from ltdrnn.results import ResultStore
from ltdrnn.results.store import StoreError
from ltdrnn.tasks import Task
from ltdrnn.train import train


@pytest.fixture(autouse=True)
def tiny(monkeypatch):
    install(monkeypatch)
    torch.set_num_threads(1)


TINY = [
    "model.cell=tiny",
    "model.hidden_size=6",
    "task.name=tiny",
    "task.options={}",
    "train.steps=4",
    "train.eval_every=2",
    "train.batch_size=8",
    "train.latency=false",
]


def _train(tmp_path, resume=False, **sections):
    return train(load_config(tiny_config(tmp_path, train={"steps": 4, "eval_every": 2}, **sections)), resume=resume)


# ---- checkpoints never run code -----------------------------------------------------------------------
class _Payload:
    def __reduce__(self):
        return (os.system, (f"touch {_Payload.marker}",))


def _plant_payload(path: Path, marker: Path) -> None:
    """Replace the checkpoint by one whose unpickling would create ``marker`` through os.system."""
    _Payload.marker = marker
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["payload"] = _Payload()
    torch.save(checkpoint, path)


@pytest.mark.parametrize("command", ["eval", "plot", "resume"])
def test_a_crafted_checkpoint_runs_no_code(tmp_path, command, capsys):
    _train(tmp_path)
    run_dir = tmp_path / "run"
    marker = tmp_path / "pwned"
    for name in ("best.pt", "last.pt"):
        _plant_payload(run_dir / name, marker)
    config = str(run_dir / "config.yaml")
    argv = {
        "eval": ["eval", str(run_dir)],
        "plot": ["plot", str(run_dir), "--kinds", "curves"],
        "resume": ["train", config, "--run-dir", str(run_dir), "--resume", "--no-store", "--no-progress"],
    }[command]
    assert main(argv) == 2
    assert not marker.exists()
    err = capsys.readouterr().err
    assert "can be loaded safely" in err and len(err.strip().splitlines()) == 1


def test_a_checkpoint_round_trips_every_rng_state_under_weights_only(tmp_path):
    import random

    import numpy as np

    from ltdrnn.checkpoint import rng_states, set_rng_states

    np.random.seed(3), random.seed(3), torch.manual_seed(3)
    atomic_save({"config": {}, "model": {}, "rng": rng_states()}, tmp_path / "c.pt")
    expected = (np.random.rand(3), random.random(), torch.rand(2))
    set_rng_states(load_checkpoint(tmp_path / "c.pt")["rng"])
    again = (np.random.rand(3), random.random(), torch.rand(2))
    assert (expected[0] == again[0]).all() and expected[1] == again[1] and torch.equal(expected[2], again[2])


def test_a_damaged_checkpoint_is_a_checkpoint_error(tmp_path):
    path = tmp_path / "last.pt"
    path.write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="last.pt"):
        load_checkpoint(path)


# ---- resuming ---------------------------------------------------------------------------------------
def test_resume_without_a_checkpoint_is_an_error_unless_auto(tmp_path):
    with pytest.raises(ConfigError, match="nothing to resume.*resume with 'auto'"):
        _train(tmp_path, resume=True)
    assert not (tmp_path / "results.db").exists()
    record = _train(tmp_path, resume="auto")
    assert record["status"] == "finished" and record["timings"]["steps"] == 4


def test_cli_resume_of_a_directory_without_checkpoint_says_so_and_starts_the_run_there(tmp_path, capsys):
    args = ["train", "quick/toy-lstm", *TINY, "--no-store", "--run-dir", str(tmp_path / "empty"), "--no-progress"]
    assert main(args + ["--resume"]) == 0
    err = capsys.readouterr().err.strip()
    assert err == f"ltdrnn train: no checkpoint in {tmp_path / 'empty'} to continue; a new run starts there"
    assert (tmp_path / "empty" / "result.json").is_file()
    assert main(["train", "quick/toy-lstm", *TINY, "--no-store", "--no-progress", "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ltdrnn train: run_dir: resuming needs the run directory") and "\n" not in err
    with pytest.raises(SystemExit) as caught:  # argparse's own one-line usage error
        main(args + ["--resume=yes"])
    assert caught.value.code == 2


def test_resuming_a_stored_run_is_a_no_op_and_a_missing_row_is_stored(tmp_path):
    record = _train(tmp_path)
    store = ResultStore(str(tmp_path / "results.db"))
    assert store.count() == 1
    again = _train(tmp_path, resume=True)  # the second --resume used to raise ResultConflict
    assert again["id"] == record["id"] and store.count() == 1
    with sqlite3.connect(tmp_path / "results.db") as db:
        db.execute("DELETE FROM runs")
    _train(tmp_path, resume=True)
    assert [r["id"] for r in store.rows()] == [record["id"]]


def test_a_locked_store_loses_no_row_and_says_how_to_store_it(tmp_path, monkeypatch):
    import ltdrnn.results.store as store_module

    class Locked(ResultStore):
        def __init__(self, location, busy_timeout_s=60.0):
            super().__init__(location, busy_timeout_s=0.05)

    locker = sqlite3.connect(tmp_path / "results.db", isolation_level=None)

    def lock_the_store(state):  # after the trainer checked the store, before it stores the row
        if state["step"] == 1:
            locker.execute("CREATE TABLE IF NOT EXISTS hold (x)")
            locker.execute("BEGIN EXCLUSIVE")
            monkeypatch.setattr(store_module, "ResultStore", Locked)

    cfg = load_config(tiny_config(tmp_path, train={"steps": 4, "eval_every": 2}, run_dir=str(tmp_path / "run2")))
    try:
        with pytest.raises(StoreError, match=r"--resume' \(trains nothing, adds the row\)") as caught:
            train(cfg, callbacks=[lock_the_store])
    finally:
        locker.rollback()
        locker.close()
    assert str(tmp_path / "run2") in str(caught.value)
    assert (tmp_path / "run2" / "result.json").exists()
    monkeypatch.setattr(store_module, "ResultStore", ResultStore)
    # what the message says to do
    assert (
        main(
            [
                "train",
                str(tmp_path / "run2" / "config.yaml"),
                "--run-dir",
                str(tmp_path / "run2"),
                "--resume",
                "--no-progress",
            ]
        )
        == 0
    )
    assert len(ResultStore(str(tmp_path / "results.db")).rows()) == 1


# ---- temporary files ----------------------------------------------------------------------------------
def test_a_failed_checkpoint_write_leaves_no_temp_file(tmp_path, monkeypatch):
    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        atomic_save({"a": 1}, tmp_path / "last.pt")
    assert list(tmp_path.iterdir()) == []


def test_stale_temp_files_of_dead_processes_are_removed_on_start(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    stale = run_dir / f".last.pt.{dead.pid}.tmp"
    alive = run_dir / f".last.pt.{os.getppid()}.tmp"
    stale.write_bytes(b"x" * 10)
    alive.write_bytes(b"x")
    assert remove_stale_temp_files(run_dir) == [stale]
    assert not stale.exists() and alive.exists()


def test_interrupt_prints_the_resume_hint_and_exits_130(tmp_path, capsys, monkeypatch):
    import ltdrnn.train as trainer

    def ctrl_c(state):
        if state["step"] == 3:
            raise KeyboardInterrupt

    original = trainer.Run.fit
    monkeypatch.setattr(trainer.Run, "fit", lambda self, callbacks, judges=(): original(self, [ctrl_c], judges))
    run_dir = tmp_path / "run"
    code = main(["train", "quick/toy-lstm", *TINY, "--no-store", "--run-dir", str(run_dir), "--no-progress"])
    assert code == 130
    err = capsys.readouterr().err
    assert f"--run-dir {run_dir} --resume" in err and "Traceback" not in err
    assert not list(run_dir.glob(".*.tmp"))


# ---- configs --------------------------------------------------------------------------------------
def _alias_bomb(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def test_nested_yaml_aliases_are_refused_quickly(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb(9))  # 10**9 values once expanded
    with pytest.raises(ConfigError, match=f"at most {MAX_CONFIG_VALUES} values"):
        load_config(str(path))
    with pytest.raises(ConfigError, match="at most"):
        load_config(None, ["model.options.x=[&a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1], " + ", ".join(["*a"] * 2000) + "]"])


def test_a_float_written_without_a_dot_is_a_number_in_a_file_too(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("optim: {lr: 1e-3}\ntrain: {steps: 2}\nmodel: {options: {eps: 5E-2}}\n")
    cfg = load_config(str(path))
    assert cfg.optim.lr == 0.001 and cfg.model.options["eps"] == 0.05


@pytest.mark.parametrize("name", ["../../nosuch/x", "quick/../../cli", "quick//toy-lstm", "./quick/toy-lstm"])
def test_a_preset_name_cannot_leave_the_presets(name):
    with pytest.raises(ConfigError, match="packaged preset name"):
        load_config(name)


# ---- the CLI: one line and exit code 2 -------------------------------------------------------------
def _cli_cases(tmp_path):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("model: [unclosed\n")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"model": ')
    train = ["train", "quick/toy-lstm", "--no-store", "--no-progress", "--run-dir", str(tmp_path / "r")]
    return {
        "malformed yaml": ["train", str(bad_yaml), "--no-store"],
        "malformed json": ["train", str(bad_json), "--no-store"],
        "unknown cell": [*train, "model.cell=nosuch"],
        "unknown task": [*train, "task.name=nosuch"],
        "bad cell option": [*train, "model.cell=gru", "model.options.nosuch=1"],
        "bad task option": [*train, "task.name=adding", "task.options.T=-5"],
        "bad device": [*train, "train.device=nosuch"],
        "unavailable device": [*train, "train.device=cuda:7"],
        "bad preset path": ["train", "../../x", "--no-store"],
        "sweep trials": [
            "sweep",
            "run",
            "quick/adding-lstm",
            "--trials",
            "-1",
            "--store",
            f"sqlite:///{tmp_path / 's.db'}",
        ],
        "sweep no study": ["sweep", "report", "--study", "nosuch", "--store", f"sqlite:///{tmp_path / 's.db'}"],
    }


@pytest.mark.parametrize(
    "case",
    [
        "malformed yaml",
        "malformed json",
        "unknown cell",
        "unknown task",
        "bad cell option",
        "bad task option",
        "bad device",
        "unavailable device",
        "bad preset path",
        "sweep trials",
        "sweep no study",
    ],
)
def test_cli_mistakes_end_in_one_line_and_exit_2(tmp_path, capsys, case):
    pytest.importorskip("optuna") if case.startswith("sweep") else None
    argv = _cli_cases(tmp_path)[case]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ltdrnn ") and len(err.splitlines()) == 1 and "Traceback" not in err


def test_the_installed_command_shows_no_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "ltdrnn.cli", "train", "quick/toy-lstm", "model.cell=nosuch", "--no-store"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 2
    assert result.stderr.strip().startswith("ltdrnn train: cell: unknown name 'nosuch'")
    assert "Traceback" not in result.stderr


def test_a_bug_still_shows_its_traceback(monkeypatch):
    import ltdrnn.cli.harness as harness

    monkeypatch.setattr(harness, "cmd_list", lambda args: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        main(["list", "cells"])


# ---- damaged state dicts ----------------------------------------------------------------------------------
def _damage(state, how):
    name = next(iter(state))
    if how == "missing key":
        del state[name]
    elif how == "wrong shape":
        state[name] = torch.zeros(*state[name].shape, 3)
    elif how == "unexpected key":
        state["nosuch.weight"] = torch.zeros(1)
    elif how == "not a tensor":
        state[name] = "weights"
    elif how == "a list":
        return [1, 2]
    elif how == "integer keys":
        return {i: v for i, v in enumerate(state.values())}
    return state


@pytest.mark.parametrize(
    "how", ["missing key", "wrong shape", "unexpected key", "not a tensor", "a list", "integer keys"]
)
def test_a_damaged_state_dict_is_one_clear_error_in_eval_and_resume(tmp_path, capsys, how):
    _train(tmp_path)
    run_dir = tmp_path / "run"
    (run_dir / "best.pt").unlink()
    checkpoint = torch.load(run_dir / "last.pt", weights_only=True)
    checkpoint["model"] = _damage(checkpoint["model"], how)
    torch.save(checkpoint, run_dir / "last.pt")
    with pytest.raises(CheckpointError, match=r"last.pt: its model (is not a state dict|does not fit the model)"):
        _train(tmp_path, resume=True)
    assert main(["eval", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ltdrnn eval: ") and "last.pt: its model" in err and "\n" not in err


@pytest.mark.parametrize("key", ["optimizer", "step", "rng"])
def test_a_damaged_resume_state_is_one_clear_error(tmp_path, key):
    _train(tmp_path)
    path = tmp_path / "run" / "last.pt"
    checkpoint = torch.load(path, weights_only=True)
    checkpoint[key] = {"state": "x"} if key == "optimizer" else None
    if key == "step":
        del checkpoint["step"]
    if key == "rng":
        checkpoint["rng_by_rank"] = [{"torch": "not a state"}]
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match=r"last.pt: (its optimizer state|not a checkpoint a run can resume)"):
        _train(tmp_path, resume=True)


# ---- work caps: one pass over a split is bounded, whatever a config file or a checkpoint asks for --------
def _adding(**options):
    return {"task": {"name": "adding", "options": options}, "train": {"steps": 1}}


PER_SPLIT = MAX_SPLIT_STEPS // 100  # series of T = 100 steps that fill one split up to the cap


@pytest.mark.parametrize(
    "under, over, message",
    [
        # the option the config sets is named: the split's size, or the length when the size is the default
        (
            _adding(T=100, n_train=1000, n_test=PER_SPLIT),
            _adding(T=100, n_train=1000, n_test=PER_SPLIT + 1),
            rf"^task.options.n_test: expected at most {PER_SPLIT:,} series of 100 steps in the test split",
        ),
        (
            _adding(T=MAX_SPLIT_STEPS // 100_000),
            _adding(T=MAX_SPLIT_STEPS // 100_000 + 1),
            r"^task.options.T: expected at most 5,000 steps a series for the 100,000 series of the train split",
        ),
        # a data set's split (noisy MNIST) counts as DATA_SERIES series, refused before any data is read
        (
            {"task": {"name": "noisy_mnist", "options": {"T": MAX_SPLIT_STEPS // DATA_SERIES}}, "train": {"steps": 1}},
            {
                "task": {"name": "noisy_mnist", "options": {"T": MAX_SPLIT_STEPS // DATA_SERIES + 1}},
                "train": {"steps": 1},
            },
            r"^task.options.T: expected at most 8,333 steps a series",
        ),
    ],
    ids=["n_test", "T", "noisy_mnist T"],
)
def test_a_split_at_the_work_cap_is_taken_and_one_step_past_it_names_the_option(under, over, message):
    load_config(under)
    with pytest.raises(ConfigError, match=message + r".*limits.MAX_SPLIT_STEPS: 500,000,000 steps.*got"):
        load_config(over)


def test_eval_of_a_checkpoint_asking_for_a_split_past_the_work_cap_refuses_before_reading_data(
    tmp_path, capsys, monkeypatch
):
    """The outside re-test's checkpoint: n_test = 9.99e6 at T = 100 is under every older cap (10 M series,
    1e9 values) and kept ``ltdrnn eval`` busy past 150 s; it is now refused before a split is built."""
    _train(tmp_path)
    path = tmp_path / "run" / "last.pt"
    (tmp_path / "run" / "best.pt").unlink(missing_ok=True)
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["config"]["task"]["options"].update(n_test=9_990_000, T=100)
    torch.save(checkpoint, path)

    def no_split(task, split):
        raise AssertionError(f"the {split} split was built")

    monkeypatch.setattr(Task, "dataset", no_split)
    assert main(["eval", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "task.options.n_test: expected at most 5,000,000 series of 100 steps in the test split" in err, err
    assert err.startswith("ltdrnn eval: ") and "\n" not in err
    args = ["train", "quick/toy-lstm", *TINY, "task.options.n_test=9990000", "task.options.T=100", "--no-store"]
    assert main([*args, "--run-dir", str(tmp_path / "again"), "--no-progress"]) == 2
    assert "task.options.n_test: expected at most" in capsys.readouterr().err
