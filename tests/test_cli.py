"""The ``ltdrnn`` command: listing, train/eval, clear config errors, delegation, the ``run`` job."""

import json
import sys

import pytest
import torch

from harness_helpers import install
from ltdrnn.cells.registry import list_cells
from ltdrnn.cli import main
from ltdrnn.results import ResultStore


@pytest.fixture(autouse=True)
def tiny(monkeypatch):
    install(monkeypatch)
    torch.set_num_threads(1)


TINY = [
    "model.cell=tiny",
    "model.hidden_size=6",
    "task.name=tiny",
    "task.options={}",
    "train.steps=6",
    "train.eval_every=3",
    "train.batch_size=8",
    "train.latency=false",
]


def test_list_shows_the_registries_and_presets(capsys):
    assert main(["list", "cells"]) == 0
    assert "lstm" in capsys.readouterr().out.split()
    assert main(["list", "tasks"]) == 0
    assert "tiny" in capsys.readouterr().out.split()
    assert main(["list", "presets", "--group", "quick"]) == 0
    listed = capsys.readouterr().out.split()
    assert "quick/toy-lstm" in listed and all(n.startswith("quick/") for n in listed)


def test_train_stores_a_row_and_eval_reproduces_the_test_metric(tmp_path, capsys):
    db = str(tmp_path / "r.db")
    code = main(["train", "quick/toy-lstm", *TINY, "--store", db, "--run-dir", str(tmp_path / "run"), "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out
    rows = ResultStore(db).rows()
    assert len(rows) == 1 and rows[0]["preset"] == "quick/toy-lstm" and rows[0]["cell"] == "tiny"
    assert "test accuracy" in out
    assert main(["eval", str(tmp_path / "run")]) == 0
    assert f'"metric": {rows[0]["metric"]}' in capsys.readouterr().out


def test_train_resume_of_a_finished_run_gives_the_same_result(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["train", "quick/toy-lstm", *TINY, "--no-store", "--run-dir", str(tmp_path / "run"), "--no-progress"]
    assert main(args) == 0
    first = (tmp_path / "run" / "result.json").read_text()
    assert main(args + ["--resume"]) == 0
    again = (tmp_path / "run" / "result.json").read_text()
    strip = lambda text: {k: v for k, v in json.loads(text).items() if k in ("id", "metrics", "history")}
    assert strip(first) == strip(again)
    assert not (tmp_path / "results.db").exists()


def test_unknown_key_exits_2_with_the_key_and_the_valid_ones(tmp_path, capsys):
    assert main(["train", "quick/toy-lstm", "train.stepz=3", "--no-store"]) == 2
    err = capsys.readouterr().err
    assert "unknown config key 'train.stepz'" in err and "steps" in err and "batch_size" in err


def test_train_overrides_may_follow_the_options_in_order_and_other_strays_are_refused(capsys):
    from ltdrnn.cli import parse

    argv = ["train", "quick/toy-lstm", "optim.lr=1", "--run-dir", "d", "optim.lr=2", "--progress", "train.steps=3"]
    args = parse(argv)
    assert args.overrides == ["optim.lr=1", "optim.lr=2", "train.steps=3"] and args.run_dir == "d" and args.progress
    with pytest.raises(SystemExit) as refused:
        parse(["train", "quick/toy-lstm", "--run-dir", "d", "stray"])
    assert refused.value.code == 2 and "unrecognized arguments: stray" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse(["report", "train.steps=3"])  # only train takes overrides


def test_missing_runs_checkpoints_and_stores_exit_2_naming_the_path(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["eval", str(tmp_path / "nowhere")]) == 2
    assert f"{tmp_path / 'nowhere'}: no such run directory or checkpoint file" in capsys.readouterr().err
    assert main(["plot", str(tmp_path / "empty")]) == 2
    assert "has no checkpoint (best.pt or last.pt)" in capsys.readouterr().err
    assert main(["report", "--store", str(tmp_path / "none.db"), "--out", str(tmp_path / "r")]) == 2
    assert "no results database there" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "r").exists()
    # a SQLite URL names a file too: a missing one is not created empty and reported on
    assert main(["report", "--store", f"sqlite:///{tmp_path / 'none.db'}", "--out", str(tmp_path / "r")]) == 2
    assert "no results database there" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "r").exists()


def test_every_group_is_parsed_by_the_one_parser_and_a_missing_package_is_one_line(monkeypatch, capsys):
    from ltdrnn.cli import parse

    args = parse(["sweep", "run", "spec", "--jobs", "2", "--set", "train.steps=3", "--store", "r.db"])
    assert (args.command_name, args.jobs, args.overrides, args.store) == ("sweep run", 2, ["train.steps=3"], "r.db")
    args = parse(["ucr", "run", "--seeds", "0,4", "--store", "u.db"])
    assert (args.command_name, args.seeds, args.store) == ("ucr run", "0,4", "u.db")
    assert parse(["bench", "--cells", "lstm"]).cells == "lstm"
    for group in ("sweep", "ucr", "reproduce"):  # a group without its command prints the group's help
        assert main([group]) == 2
        assert f"usage: ltdrnn {group} [-h] COMMAND" in capsys.readouterr().out
    monkeypatch.setitem(sys.modules, "ltdrnn.sweep", None)  # None in sys.modules: import fails
    assert main(["sweep", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ltdrnn sweep list: ") and len(err.splitlines()) == 1 and "Traceback" not in err


def test_run_compares_the_group_reports_missing_cells_and_writes_the_report(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    overrides = [
        "train.steps=4",
        "train.eval_every=2",
        "train.latency=false",
        "task.options.n_train=64",
        "task.options.n_val=32",
        "task.options.n_test=32",
    ]
    args = ["run", "--group", "quick", "--cells", "lstm,tiny,tarnn,nonexistent", "--jobs", "1"]
    for o in overrides:
        args += ["--set", o]
    code = main(args)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "| lstm |" in out and "adding(T=100)" in out and "tarnn_toy" in out
    expected = {("lstm", "adding"), ("lstm", "tarnn_toy")}
    if "tarnn" in list_cells():
        expected |= {("tarnn", "adding"), ("tarnn", "tarnn_toy")}
    else:  # a cell that has not landed is reported, not crashed on
        assert "missing: quick/toy-tarnn: cell 'tarnn' not registered" in out
    rows = ResultStore("results.db").rows()
    assert {(r["cell"], r["task"]) for r in rows} == expected
    report = (tmp_path / "report" / "report.md").read_text()
    assert report.count("\n| lstm |") == 1  # one row of the comparison table
    assert (tmp_path / "report" / "curves_tarnn_toy.png").stat().st_size > 0
    assert (tmp_path / "report" / "report.html").exists()


@pytest.mark.slow
def test_run_with_two_worker_processes_stores_both_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["run", "--group", "quick", "--cells", "lstm", "--jobs", "2"]
    for o in [
        "train.steps=2",
        "train.eval_every=1",
        "train.latency=false",
        "task.options.n_train=16",
        "task.options.n_val=8",
        "task.options.n_test=8",
    ]:
        args += ["--set", o]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.count("  quick/") == 2 and "2 at a time" in out
    rows = ResultStore("results.db").rows()
    assert sorted(r["preset"] for r in rows) == ["quick/adding-lstm", "quick/toy-lstm"]
    assert len({r["study"] for r in rows}) == 1


# ---- one vocabulary ------------------------------------------------------------------------------------
def command_parsers():
    """``{"ucr run": parser, ...}``: every command of ``ltdrnn`` with its parser."""
    import argparse

    from ltdrnn.cli import build_parser

    found = {}

    def walk(parser, path):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs and path:
            found[" ".join(path)] = parser
        for action in subs:
            for name, child in action.choices.items():
                walk(child, [*path, name])

    walk(build_parser(), [])
    return found


def flags(parser):
    import argparse

    return {
        option: action
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        for option in action.option_strings
    }


GRIDS = ("run", "ucr run", "reproduce run", "sweep run")
WRITERS = ("run", "train", "report", "ucr run", "ucr report", "reproduce run", "reproduce list", "reproduce report")
RESUMING = {"train": False, "run": True, "ucr run": True, "reproduce run": False}
SHOWING_PROGRESS = {"train": None, "sweep run": True, "reproduce run": False}  # None: the config's
SEEDED = ("run", "ucr run", "reproduce run")


def test_the_shared_flags_are_where_the_vocabulary_says_with_one_store_default():
    from ltdrnn.config import DEFAULT_STORE

    commands = command_parsers()
    assert DEFAULT_STORE == "results.db"
    for name in WRITERS + ("sweep run", "sweep report"):
        store = flags(commands[name])["--store"]
        # train and sweep run fall back on the config's results, whose default is the same
        assert store.default == (None if name in ("train", "sweep run") else DEFAULT_STORE), name
        assert "results.db in the working directory" in store.help, name
    for name in GRIDS:
        assert "--jobs" in flags(commands[name]), name
        assert "--set" in flags(commands[name]), name
    for name in SEEDED:
        assert "--seeds" in flags(commands[name]) and "a count such as 3" in flags(commands[name])["--seeds"].help
    for name, default in RESUMING.items():
        assert {"--resume", "--no-resume"} <= set(flags(commands[name])), name
        assert flags(commands[name])["--resume"].default is default, name
        assert "a run already finished is not trained again" in flags(commands[name])["--resume"].help, name
    for name, default in SHOWING_PROGRESS.items():
        assert {"--progress", "--no-progress"} <= set(flags(commands[name])), name
        assert flags(commands[name])["--progress"].default is default, name
    assert "--set" in flags(commands["train"])


def test_every_database_is_a_store_and_every_flag_has_one_spelling_with_no_alias():
    import argparse

    commands = command_parsers()
    every = {option for parser in commands.values() for option in flags(parser)}
    hidden = [
        (name, action.option_strings)
        for name, parser in commands.items()
        for action in parser._actions
        if action.help == argparse.SUPPRESS and action.option_strings
    ]
    assert not hidden  # no hidden spellings
    assert not every & {"--storage", "--sweeps", "--quiet", "--workers", "--skip-done", "--resume-auto"}
    assert {"--store", "--resume", "--progress"} <= every


def test_seeds_are_a_count_or_a_list_everywhere():
    from ltdrnn.cli.common import parse_seeds
    from ltdrnn.config import ConfigError

    assert parse_seeds("3", [], (7,)) == ((0, 1, 2), [])
    assert parse_seeds("0,4,2", [], (7,)) == ((0, 4, 2), [])
    assert parse_seeds("5,", ["a=1"], (7,)) == ((5,), ["a=1"])
    assert parse_seeds(None, [], (7,)) == ((7,), [])
    assert parse_seeds(None, ["train.seed=9", "a=1"], (7,)) == ((9,), ["a=1"])
    for bad in ("0", "x", "1,,2", "1,1", ""):
        with pytest.raises(ConfigError, match="--seeds"):
            parse_seeds(bad, [], (7,))
    with pytest.raises(ConfigError, match="also chooses the seed"):
        parse_seeds("3", ["train.seed=1"], (7,))


@pytest.mark.parametrize(
    "argv",
    [
        ["sweep", "run", "spec", "--workers", "3"],
        ["sweep", "run", "spec", "--storage", "s.db"],
        ["sweep", "run", "spec", "--quiet"],
        ["sweep", "report", "--study", "x", "--storage", "s.db"],
        ["report", "--sweeps", "s.db"],
        ["reproduce", "run", "tarnn-toy", "--skip-done"],
        ["train", "quick/toy-lstm", "--quiet"],
        ["train", "quick/toy-lstm", "--resume=auto"],
        ["train", "quick/toy-lstm", "--resume", "auto"],
    ],
)
def test_the_old_spellings_are_usage_errors(argv, capsys):
    from ltdrnn.cli import parse

    with pytest.raises(SystemExit) as refused:
        parse(argv)
    assert refused.value.code == 2 and "error:" in capsys.readouterr().err


def test_jobs_must_be_a_positive_integer(capsys):
    from ltdrnn.cli import parse

    with pytest.raises(SystemExit):
        parse(["sweep", "run", "spec", "--jobs", "0"])
    assert "--jobs: expected a positive integer, got '0'" in capsys.readouterr().err


def test_a_bare_number_of_seeds_is_a_count_in_reproduce_run_too(monkeypatch):
    import ltdrnn.reproduce as reproduce

    asked = []
    monkeypatch.setattr(reproduce, "run_claim", lambda *args, seeds, **kwargs: asked.append(seeds) or [])
    assert main(["reproduce", "run", "tarnn-toy", "--seeds", "2"]) == 0
    assert main(["reproduce", "run", "tarnn-toy", "--seeds", "2,"]) == 0
    assert asked == [(0, 1), (2,)]


def test_resume_never_swallows_the_override_that_follows_it():
    from ltdrnn.cli import parse

    args = parse(["train", "quick/toy-lstm", "--resume", "train.steps=3", "--run-dir", "d"])
    assert args.resume is True and args.overrides == ["train.steps=3"]
    args = parse(["train", "quick/toy-lstm", "a.b=1", "--set", "c.d=2", "--resume", "e.f=3"])
    assert args.overrides == ["a.b=1", "e.f=3", "c.d=2"] and args.resume is True
    assert parse(["train", "quick/toy-lstm", "--no-resume"]).resume is False
