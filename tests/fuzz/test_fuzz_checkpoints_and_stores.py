"""Fuzz: damaged checkpoints and damaged results stores.

Property: ``ltdrnn eval`` of a damaged checkpoint exits 0 (the damage left a model that loads) or 2 with
one line naming the file, never a traceback; ``ltdrnn report`` and ``ltdrnn ucr report`` of a damaged
store exit 0 or 2 with at most one line, and never write to the store (its bytes and mtime stay).
"""

import contextlib
import io
import os
import sqlite3
import tempfile
from pathlib import Path

import pytest
import torch

from harness_helpers import install, tiny_config
from ltdrnn.cli import main
from ltdrnn.config import load_config

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fuzz_helpers import mutated  # noqa: E402

_ROOT = tempfile.TemporaryDirectory(prefix="ltdrnn-fuzz-files-")


def _folder(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir=_ROOT.name))


def _cli(argv, cwd):
    """``(exit code, stderr)`` of the command line run in ``cwd`` with the tiny cell and task registered."""
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(err):
        install(patch)
        patch.chdir(cwd)
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    return code, err.getvalue()


def _one_line_or_nothing(code, err, argv, names=None):
    assert code in (0, 2), (argv, code, err)
    assert "Traceback" not in err, (argv, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1, (argv, err)
        assert names is None or names in err, (argv, err)


# ---- L2: checkpoints ----------------------------------------------------------------------------------------
def _trained_checkpoint() -> Path:
    folder = _folder("fuzz-run-")
    with pytest.MonkeyPatch.context() as patch:
        install(patch)
        torch.set_num_threads(1)
        from ltdrnn.train import train

        train(load_config(tiny_config(folder, train={"steps": 2, "eval_every": 2}, results=None)))
    (folder / "run" / "best.pt").unlink(missing_ok=True)  # eval then reads last.pt
    return folder / "run" / "last.pt"


LAST = _trained_checkpoint()
LAST_BYTES = LAST.read_bytes()
ODD_VALUES = st.sampled_from([None, "weights", 3, 2.5, [1.0, 2.0], {"a": torch.zeros(1)}, True])


@st.composite
def damaged_state(draw, state):
    """The model's state dict after a few random edits of its keys, shapes, dtypes and values, or replaced."""
    state = dict(state)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["drop", "add", "shape", "dtype", "value", "replace"]))
        name = draw(st.sampled_from(sorted(state))) if state else "x"
        if kind == "drop":
            state.pop(name, None)
        elif kind == "add":
            state[draw(st.sampled_from(["nosuch.weight", "rnn.layers.9.W", name + ".x", ""]))] = torch.zeros(2)
        elif kind == "shape":
            state[name] = torch.zeros(draw(st.lists(st.integers(0, 9), max_size=3)))
        elif kind == "dtype" and isinstance(state.get(name), torch.Tensor):
            state[name] = state[name].to(draw(st.sampled_from([torch.int64, torch.bool, torch.float64, torch.uint8])))
        elif kind == "value":
            state[name] = draw(ODD_VALUES)
        elif kind == "replace":
            return draw(st.sampled_from([[1, 2], None, "state", {1: torch.zeros(1)}, {}]))
    return state


def _eval(path: Path):
    argv = ["eval", str(path)]
    code, err = _cli(argv, path.parent)
    event(f"eval: exit {code}")
    _one_line_or_nothing(code, err, argv, names=str(path))
    if code == 2:
        assert err.startswith("ltdrnn eval: "), err


@settings(max_examples=25)
@given(data=st.data())
def test_a_checkpoint_with_random_bytes_damaged(data):
    path = _folder("fuzz-bytes-") / "last.pt"
    path.write_bytes(data.draw(mutated(LAST_BYTES)))
    _eval(path)


@settings(max_examples=25)
@given(data=st.data())
def test_a_checkpoint_with_a_randomly_damaged_state_dict(data):
    checkpoint = torch.load(LAST, weights_only=True)
    checkpoint["model"] = data.draw(damaged_state(checkpoint["model"]))
    path = _folder("fuzz-state-") / "last.pt"
    torch.save(checkpoint, path)
    _eval(path)


# ---- L5: results stores ---------------------------------------------------------------------------------------
def _store_bytes() -> bytes:
    """A small store of the UCR benchmark's shape: one cell on two sets (no diagram to draw), MiniRocket beside."""
    from ltdrnn.results import ResultStore

    path = _folder("fuzz-store-") / "results.db"
    store = ResultStore(str(path))
    for cell in ("lstm", "minirocket"):
        for dataset in ("A", "B"):
            for seed in (0, 1):
                config = {"model": {"cell": cell}, "task": {"options": {"dataset": dataset}}, "train": {"seed": seed}}
                store.add(
                    {
                        "id": f"{cell}-{dataset}-{seed}",
                        "status": "finished",
                        "created": f"2026-01-01T00:00:0{seed}",
                        "cell": cell,
                        "task": "uea_ucr",
                        "study": "ucr/default",
                        "name": dataset,
                        "config": config,
                        "metrics": {"metric_name": "accuracy", "metric": 0.5 + 0.1 * seed, "params": 10},
                        "timings": {"train_s": 1.0},
                        "version": {"git_commit": "abc"},
                    }
                )
    store.engine.dispose()  # the log folded in: the file alone holds the store
    return path.read_bytes()


STORE = _store_bytes()
COLUMNS = ["status", "cell", "study", "name", "metric", "params", "config", "metrics", "timings", "version"]
ODD_CELLS = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    # floats from a list: training turns on flush-denormal for the process, which Hypothesis's float
    # generator refuses to run under
    st.sampled_from([0.5, -1.0, 1e308, float("nan"), float("inf"), float("-inf")]),
    st.text(max_size=12),
    st.binary(max_size=8),
    st.sampled_from(["{}", "[]", "null", "1", '"x"', '{"metric": "high"}', '{"train": 5}', '{"seed": []}', "{broken"]),
)


@st.composite
def damaged_store(draw) -> bytes:
    """The store's file cut, its bytes mutated, a table or index dropped, or odd values in its rows."""
    kind = draw(st.sampled_from(["cut", "bytes", "schema", "rows"]))
    if kind == "cut":
        return STORE[: draw(st.integers(0, len(STORE) - 1))]
    if kind == "bytes":
        return draw(mutated(STORE))
    path = _folder("fuzz-edit-") / "s.db"
    path.write_bytes(STORE)
    db = sqlite3.connect(path)
    try:
        if kind == "schema":
            db.execute(
                draw(
                    st.sampled_from(
                        [
                            "DROP TABLE runs",
                            "ALTER TABLE runs RENAME TO old",
                            "ALTER TABLE runs DROP COLUMN history",
                            "DROP INDEX ix_runs_run_key",
                            "DELETE FROM runs",
                        ]
                    )
                )
            )
        else:
            for _ in range(draw(st.integers(1, 3))):
                column = draw(st.sampled_from(COLUMNS))
                row = draw(st.sampled_from(["lstm-A-0", "lstm-B-1", "minirocket-A-0"]))
                with contextlib.suppress(sqlite3.IntegrityError):  # NULL where the schema says NOT NULL
                    db.execute(f"UPDATE runs SET {column} = ? WHERE id = ?", (draw(ODD_CELLS), row))
        db.commit()
    finally:
        db.close()
    return path.read_bytes()


@settings(max_examples=30)
@given(raw=damaged_store(), command=st.sampled_from(["report", "ucr report"]))
def test_a_damaged_store_gives_one_line_and_is_never_written(raw, command):
    folder = _folder("fuzz-report-")
    path = folder / "results.db"
    path.write_bytes(raw)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    out = ["--out", str(folder / "out"), "--no-plots"] if command == "report" else ["--page", str(folder / "p.md")]
    argv = [*command.split(), "--store", str(path), *out]
    code, err = _cli(argv, folder)
    event(f"{command}: exit {code}")
    _one_line_or_nothing(code, err, argv)
    assert path.read_bytes() == raw, argv
    assert path.stat().st_mtime_ns == 1_000_000_000, argv
