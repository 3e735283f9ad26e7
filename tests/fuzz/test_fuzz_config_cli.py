"""Fuzz: the config loader and the command line.

Property: a ConfigError (for the CLI: one line on stderr and exit code 2, or argparse's usage error)
or a valid result; never another exception, never a hang.
"""

import contextlib
import io
import tempfile
from pathlib import Path

import pytest
import torch

from harness_helpers import install
from ltdrnn.cli import main
from ltdrnn.config import ConfigError, load_config, save_config

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

KEYS = [
    "model.cell",
    "model.hidden_size",
    "model.num_layers",
    "model.dropout",
    "model.bidirectional",
    "model.options",
    "model.options.K",
    "model.head",
    "model.embedding",
    "task.name",
    "task.options",
    "task.options.T",
    "optim.name",
    "optim.lr",
    "optim.alpha",
    "optim.beta2",
    "optim.clip_norm",
    "train.steps",
    "train.epochs",
    "train.batch_size",
    "train.device",
    "train.seed",
    "train.loss_weights.budget",
    "train.select_on",
    "train.max_val_loss",
    "train.stop_at",
    "train.eval_every",
    "results",
    "nosuch",
    "model",
    "train",
    "extends",
    "model..cell",
    "",
]
VALUES = st.one_of(
    # floats from a list: training turns on flush-denormal for the process, which Hypothesis's float
    # generator refuses to run under
    st.integers(-3, 3).map(str),
    st.sampled_from(["0.5", "-2.5", "1e-300", "1e308", "nan", "inf", "-0.0"]),
    st.sampled_from(
        [
            "true",
            "no",
            "null",
            "~",
            "1e-3",
            "-1e-3",
            ".inf",
            ".nan",
            "[1, 2]",
            "{a: 1}",
            "{}",
            "[]",
            "&a [*a]",
            "!!python/object/apply:os.system [true]",
            "'",
            "{",
            "lstm",
            "gru",
            "nosuch",
            "adam",
            "cpu",
            "cuda:3",
            "../../x",
            "2001-01-01",
            "0x10",
            "1_000",
        ]
    ),
    st.text(max_size=10),
)


@settings(max_examples=60)
@given(overrides=st.lists(st.tuples(st.sampled_from(KEYS), VALUES), max_size=4))
def test_overrides_give_a_valid_config_or_a_config_error(overrides):
    try:
        cfg = load_config("quick/toy-lstm", [f"{k}={v}" for k, v in overrides])
    except ConfigError:
        return
    assert load_config(cfg.to_dict()) == cfg  # a valid config is a fixed point of loading
    with tempfile.TemporaryDirectory() as folder:
        save_config(cfg, Path(folder) / "c.yaml")
        assert load_config(str(Path(folder) / "c.yaml")).to_dict() == cfg.to_dict()


@settings(max_examples=60)
@given(
    text=st.one_of(
        st.text(max_size=200),
        st.lists(
            st.tuples(st.sampled_from(["model", "optim", "train", "task", "extends", "x"]), VALUES), max_size=5
        ).map(lambda pairs: "\n".join(f"{k}: {v}" for k, v in pairs)),
    ),
    suffix=st.sampled_from([".yaml", ".json"]),
)
def test_config_files_give_a_valid_config_or_a_config_error(text, suffix):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"run{suffix}"
        path.write_text(text)
        try:
            load_config(str(path))
        except ConfigError as error:
            assert str(error)


TINY_TAIL = [
    "model.cell=tiny",
    "model.hidden_size=4",
    "task.name=tiny",
    "task.options={}",
    "train.steps=1",
    "train.epochs=null",
    "train.eval_every=0",
    "train.batch_size=8",
    "train.latency=false",
    "train.device=cpu",
]
FLAGS = [
    "--resume",
    "--no-resume",
    "--no-store",
    "--no-progress",
    "--store",
    "--split",
    "test",
    "val",
    "--kinds",
    "curves",
    "--study",
    "x",
    "--group",
    "nosuch",
    "-h",
    "--nosuch",
    "cells",
    "tasks",
    "presets",
]


@settings(max_examples=30)
@given(
    command=st.sampled_from(["train", "eval", "plot", "report", "list", "sweep", "nosuch", ""]),
    config=st.sampled_from(["quick/toy-lstm", "nosuch", "../x", "{}"]),
    middle=st.lists(
        st.one_of(st.sampled_from(FLAGS), st.tuples(st.sampled_from(KEYS), VALUES).map("=".join)), max_size=4
    ),
)
def test_the_cli_exits_with_a_code_never_a_traceback(command, config, middle):
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        install(patch)
        patch.chdir(folder)
        argv = [command] if command else []
        if command == "train":
            argv += [config, *middle, *TINY_TAIL, "--no-store", "--no-progress", "--run-dir", str(Path(folder) / "run")]
        elif command in ("eval", "plot"):
            argv += [str(Path(folder) / "nosuch"), *middle]
        elif command == "sweep":
            argv += ["report", "--study", "nosuch", "--store", f"sqlite:///{folder}/s.db", *middle]
        else:
            argv += middle
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                code = main(argv)
        except SystemExit as stop:  # argparse: usage error (2) or --help (0)
            assert stop.code in (0, 2), argv
            return
        assert code in (0, 1, 2), (argv, code)
        if code == 2 and err.getvalue():
            assert len(err.getvalue().strip().splitlines()) == 1 and "Traceback" not in err.getvalue(), argv


# ---- what a config file may ask for ----------------------------------------------------------
from ltdrnn.limits import LIMITS, MAX_ITEMS, MAX_STEPS, MAX_VALUES  # noqa: E402

CAPS = {
    **LIMITS,
    "task.options.n_train": MAX_ITEMS,
    "task.options.n_val": MAX_ITEMS,
    "task.options.n_test": MAX_ITEMS,
    "task.options.T": MAX_STEPS,
}


def _sizes(cap):
    """Small (a run starts in a moment), within the cap, past it, or far past it (ints and floats)."""
    return st.one_of(
        st.integers(1, 8),
        st.integers(max(cap // 2, 1), cap),
        st.integers(cap + 1, cap * 1000),
        st.sampled_from([1e9, 1e12, 2**63, float(cap + 1)]),
    )


@settings(max_examples=40)
@given(sizes=st.fixed_dictionaries({}, optional={key: _sizes(cap) for key, cap in CAPS.items()}))
def test_a_config_file_asking_for_too_much_names_the_key_and_a_small_one_runs(sizes):
    """A config file with random sizes: past a cap (or past 1e9 values in all), a ConfigError naming the
    key; within them a config that holds the sizes asked for; all small, a run that trains."""
    from ltdrnn.config import deep_merge
    from ltdrnn.train import train

    data = {"model": {"cell": "tiny"}, "task": {"name": "tiny", "options": {}}, "train": {"steps": 1}}
    for key, value in sizes.items():
        for part in reversed(key.split(".")):
            value = {part: value}
        data = deep_merge(data, value)
    past = [key for key, value in sizes.items() if value > CAPS[key]]
    options = data["task"]["options"]
    values = sum(options.get(k, 0) for k in ("n_train", "n_val", "n_test")) * options.get("T", 0)
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        install(patch)
        path = Path(folder) / "run.yaml"
        path.write_text(yaml_text(data))
        if past or values > MAX_VALUES:
            with pytest.raises(ConfigError) as caught:
                load_config(str(path))
            named = str(caught.value).split(":")[0]
            assert named in past or (not past and named == "task.options"), (caught.value, sizes)
            return
        cfg = load_config(str(path))
        assert all(_get(cfg.to_dict(), key) == value for key, value in sizes.items())
        if all(value <= 8 for value in sizes.values()):
            torch.set_num_threads(1)
            cfg = load_config(str(path), ["train.latency=false", f"run_dir={folder}/run", "results=null"])
            assert train(cfg)["timings"]["steps"] == 1
            event("trained")


def yaml_text(data) -> str:
    import yaml

    return yaml.safe_dump(data)


def _get(data, key):
    for part in key.split("."):
        data = data[part]
    return data
