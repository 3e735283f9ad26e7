"""Sweeps: specs and search spaces, workers sharing one SQLite study (no trial lost or run twice),
interrupted and failing trials, the MIST protocol on a tiny task, pruning through the trainer, the report.

Where training is not the point the objective is a tiny function of the trial's config."""

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import pytest
import torch
from optuna.trial import TrialState

from harness_helpers import install, tiny_config
from ltdrnn import sweep as S
from ltdrnn.config import ConfigError, list_presets
from ltdrnn.results import ResultStore, database_url

optuna.logging.set_verbosity(optuna.logging.WARNING)
BASE = {
    "model": {"cell": "lstm", "hidden_size": 4},
    "task": {"name": "adding", "options": {"T": 5}},
    "optim": {"name": "sgd", "lr": 0.1},
    "train": {"steps": 1},
    "results": None,
}


def write_spec(tmp_path, **changes) -> Path:
    """A spec over a small base config file (never trained by the tiny objectives)."""
    (tmp_path / "base.json").write_text(json.dumps(BASE))
    spec = {
        "base": str(tmp_path / "base.json"),
        "sampler": "random",
        "direction": "minimize",
        "seed": 0,
        "params": {"optim.lr": {"distribution": "log-float", "low": 1e-4, "high": 10.0}},
        **changes,
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def quadratic(trial, cfg):
    return (math.log10(cfg.optim.lr) + 2) ** 2


def trials_of(storage, study):
    return optuna.load_study(study_name=study, storage=database_url(storage)).get_trials(deepcopy=False)


# ---- specs ------------------------------------------------------------------------------------------
def test_packaged_sweeps_load_and_their_keys_apply_to_the_base_configs():
    names = S.list_sweeps()
    assert {"mist/pmnist", "mist/copy", "tarnn/pmnist", "irnn/pmnist"} <= set(names)
    assert not any(n.startswith("sweeps") for n in list_presets())  # never mistaken for run presets
    for name in names:
        S.check_params_apply(S.load_spec(name))


def test_the_tarnn_irnn_grid_is_the_papers_grid():
    spec = S.load_spec("irnn/pmnist")
    grid = {p.name: p.grid_values() for p in spec.params}
    assert grid == {
        "optim.lr": [1e-2, 1e-3, 1e-4],
        "optim.weight_decay": [4.5e-6, 4.5e-5, 4.5e-4, 1e-6, 1e-5, 1e-4],
        "optim.halve_every": [5, 10, 20],
        "train.epochs": [30, 50, 100, 300],
    }
    assert spec.sampler == "grid" and spec.budget() == 216 and spec.base == "irnn/pmnist"
    assert S.load_spec("tarnn/pmnist").base == "tarnn/pmnist"


@pytest.mark.parametrize(
    "params, message",
    [
        ({"optim.lr": {"distribution": "uniform", "low": 0, "high": 1}}, "distribution"),
        ({"optim.lr": {"distribution": "log-float", "low": 0.0, "high": 1}}, "must be positive"),
        ({"optim.lr": {"distribution": "float", "low": 2, "high": 1}}, "low < high"),
        ({"optim.lr": {"distribution": "categorical", "choices": []}}, "non-empty list"),
        (
            {"optim.lr": {"distribution": "float", "low": 0.1, "high": 1, "bounds": 3}},
            "unknown config key 'params.optim.lr.bounds'",
        ),
        ({"optim.lr": {"distribution": "float", "low": "0.1", "high": 1}}, "params.optim.lr.low: expected a number"),
    ],
)
def test_bad_search_spaces_are_refused_naming_the_key(tmp_path, params, message):
    with pytest.raises(ConfigError, match=message):
        S.load_spec(json.loads(write_spec(tmp_path).read_text()) | {"params": params})


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"trials": "5"}, "sweep.trials: expected an integer"),
        ({"set": "train.steps=1"}, "sweep.set: expected a list"),
        ({"set": [3]}, r"sweep.set\[0\]: expected a string"),
        ({"seed_per_trial": "yes"}, "sweep.seed_per_trial: expected true or false"),
        ({"sampler": "grid-search"}, "sweep sampler: expected one of random, tpe, grid"),
        ({"budget": 5}, "unknown config key 'sweep.budget'"),
    ],
)
def test_bad_spec_keys_and_types_are_refused_naming_the_key(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        S.load_spec(str(write_spec(tmp_path, **changes)))


def test_a_searched_key_that_is_not_a_config_key_is_refused(tmp_path):
    spec = S.load_spec(
        str(write_spec(tmp_path, params={"optim.lrr": {"distribution": "float", "low": 0.1, "high": 1}}))
    )
    with pytest.raises(ConfigError, match="optim.lrr|lrr"):
        S.check_params_apply(spec)


def test_grid_needs_discrete_parameters(tmp_path):
    with pytest.raises(ConfigError, match="grid sampler needs categorical or int"):
        S.load_spec(str(write_spec(tmp_path, sampler="grid")))


def test_trial_config_sets_values_study_name_seed_and_run_dir(tmp_path):
    spec = S.load_spec(str(write_spec(tmp_path, seed_per_trial=True)))
    cfg = S.trial_config(spec, {"optim.lr": 0.5}, 7, "st", ["train.seed=3"], runs_dir="R", results="r.db")
    assert (cfg.optim.lr, cfg.train.seed, cfg.study, cfg.name) == (0.5, 10, "st", "trial-7")
    assert cfg.run_dir == str(Path("R") / "st" / "trial-7") and cfg.results == "r.db"


def test_grid_visits_every_point_once_and_tpe_and_random_stay_in_bounds(tmp_path):
    grid = {
        "optim.lr": {"distribution": "categorical", "choices": [0.01, 0.1, 1.0]},
        "train.steps": {"distribution": "int", "low": 1, "high": 2},
    }
    spec = S.load_spec(str(write_spec(tmp_path, sampler="grid", params=grid)))
    assert spec.budget() == 6
    S.run_worker(spec, str(tmp_path / "s.db"), "grid", objective=quadratic, log=lambda s: None)
    points = sorted((t.params["optim.lr"], t.params["train.steps"]) for t in trials_of(tmp_path / "s.db", "grid"))
    assert points == [(lr, steps) for lr in (0.01, 0.1, 1.0) for steps in (1, 2)]
    for sampler in ("tpe", "random"):
        spec = S.load_spec(
            str(
                write_spec(
                    tmp_path,
                    sampler=sampler,
                    params={
                        "optim.lr": {"distribution": "log-float", "low": 1e-3, "high": 1.0},
                        "model.hidden_size": {"distribution": "int", "low": 2, "high": 8, "step": 2},
                    },
                )
            )
        )
        S.run_worker(spec, str(tmp_path / "s.db"), sampler, 5, objective=quadratic, log=lambda s: None)
        trials = trials_of(tmp_path / "s.db", sampler)
        assert len(trials) == 5 and all(t.state == TrialState.COMPLETE for t in trials)
        assert all(1e-3 <= t.params["optim.lr"] <= 1 and t.params["model.hidden_size"] in (2, 4, 6, 8) for t in trials)


# ---- workers sharing a study ------------------------------------------------------------------------
WORKER = textwrap.dedent("""
    import math, sys, time
    from ltdrnn.sweep import run_worker
    spec, storage, trials, worker, log, sleep = sys.argv[1:]

    def objective(trial, cfg):
        with open(log, "a") as f:
            f.write(f"start {trial.number} {worker}\\n")
        time.sleep(float(sleep) if trial.number == 0 or worker != "A" else 0.05)
        return (math.log10(cfg.optim.lr) + 2) ** 2

    run_worker(spec, storage, "shared", int(trials), objective=objective, worker=ord(worker), heartbeat_s=1,
               grace_s=2, poll_s=0.5, log=lambda line: None)
""")


def start_worker(tmp_path, name, trials, sleep):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen(
        [
            sys.executable,
            str(script),
            str(tmp_path / "spec.json"),
            str(tmp_path / "s.db"),
            str(trials),
            name,
            str(tmp_path / "log.txt"),
            str(sleep),
        ],
        env=env,
    )


def started(tmp_path):
    path = tmp_path / "log.txt"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_two_worker_processes_complete_the_budget_once_each(tmp_path):
    write_spec(tmp_path)
    workers = [start_worker(tmp_path, name, 8, 0.2) for name in ("B", "C")]
    assert [w.wait(timeout=120) for w in workers] == [0, 0]
    trials = trials_of(tmp_path / "s.db", "shared")
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    given_back = [t for t in trials if "not_run" in t.user_attrs]
    assert len(complete) == 8
    assert all(t.state == TrialState.FAIL for t in given_back) and len(trials) == 8 + len(given_back)
    runs = [int(number) for _, number, _ in started(tmp_path)]
    assert sorted(runs) == sorted(t.number for t in complete)  # every complete trial ran exactly once
    assert len({t.params["optim.lr"] for t in complete}) == 8  # workers sample from different seeds
    for t in complete:
        assert t.value == pytest.approx((math.log10(t.params["optim.lr"]) + 2) ** 2)


@pytest.mark.slow
def test_a_killed_worker_trial_is_failed_and_retried_by_another(tmp_path):
    write_spec(tmp_path, retries=1)
    victim = start_worker(tmp_path, "A", 3, 60)
    deadline = time.time() + 60
    while not started(tmp_path) and time.time() < deadline:
        time.sleep(0.2)
    assert started(tmp_path)[0][:2] == ["start", "0"]
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    rescuer = start_worker(tmp_path, "B", 3, 0.05)
    assert rescuer.wait(timeout=120) == 0
    trials = {t.number: t for t in trials_of(tmp_path / "s.db", "shared")}
    assert trials[0].state == TrialState.FAIL  # the killed attempt: never silently dropped
    retries = [t for t in trials.values() if t.system_attrs.get("failed_trial") == 0]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
    assert retries[0].params == trials[0].params
    assert sum(t.state == TrialState.COMPLETE for t in trials.values()) == 3
    assert [who for _, _, who in started(tmp_path)].count("B") == 3  # two new trials and the retry


def test_ctrl_c_fails_the_trial_queues_a_retry_and_the_next_worker_runs_it(tmp_path):
    write_spec(tmp_path)
    storage = str(tmp_path / "s.db")

    def interrupted(trial, cfg):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        S.run_worker(str(tmp_path / "spec.json"), storage, "st", 2, objective=interrupted, log=lambda s: None)
    counts = S.run_worker(str(tmp_path / "spec.json"), storage, "st", 2, objective=quadratic, log=lambda s: None)
    trials = trials_of(storage, "st")
    assert counts["complete"] == 2 and trials[0].state == TrialState.FAIL
    assert trials[0].user_attrs["error"].startswith("interrupted")
    retry = [t for t in trials if t.system_attrs.get("failed_trial") == 0]
    assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE and retry[0].params == trials[0].params


def test_a_trial_that_raises_is_failed_with_its_error_and_the_sweep_goes_on(tmp_path):
    write_spec(tmp_path)

    def flaky(trial, cfg):
        if trial.number == 1:
            raise ValueError("bad luck")
        return quadratic(trial, cfg)

    counts = S.run_worker(
        str(tmp_path / "spec.json"), str(tmp_path / "s.db"), "st", 3, objective=flaky, log=lambda s: None
    )
    assert counts == {"complete": 2, "pruned": 0, "failed": 1, "given_back": 0}
    failed = trials_of(tmp_path / "s.db", "st")[1]
    assert failed.state == TrialState.FAIL and failed.user_attrs["error"] == "ValueError: bad luck"


# ---- the MIST protocol on a tiny task ---------------------------------------------------------------
TINY = [
    "model.cell=tiny",
    "model.hidden_size=6",
    "task.name=tiny",
    "task.options={}",
    "train.epochs=null",
    "train.steps=4",
    "train.batch_size=16",
    "train.eval_every=2",
    "train.progress=false",
    "train.latency=false",
]


def test_mist_protocol_searches_lr_log_uniformly_and_reports_the_top_tenth(tmp_path, monkeypatch, capsys):
    install(monkeypatch)
    torch.set_num_threads(1)
    spec = S.load_spec("mist/pmnist")
    assert (spec.sampler, spec.trials, spec.seed_per_trial, spec.report) == ("random", 50, True, {"top_fraction": 0.1})
    assert [(p.name, p.distribution, p.low, p.high) for p in spec.params] == [("optim.lr", "log-float", 1e-4, 10.0)]
    base = S.base_config(spec)
    assert (base.optim.name, base.optim.momentum, base.optim.clip_norm, base.optim.loss_reduction) == (
        "sgd",
        0.9,
        1.0,
        "sum",
    )
    assert S.top_k(spec.report, 50, 50) == 5  # the paper's "top 5 of 50"
    spec.seed = 0
    store = str(tmp_path / "results.db")  # the study and its runs in one database, as `--store` puts them
    counts = S.run_worker(
        spec,
        store,
        "mist-tiny",
        trials=10,
        overrides=TINY,
        runs_dir=str(tmp_path / "runs"),
        results=store,
        log=lambda s: None,
    )
    assert counts["complete"] + counts["pruned"] == 10 and counts["failed"] == 0
    trials = trials_of(store, "mist-tiny")
    lrs = [t.params["optim.lr"] for t in trials]
    assert all(1e-4 <= lr <= 10 for lr in lrs)
    assert min(lrs) < 1e-2 and max(lrs) > 1e-1  # spread over the decades, not bunched linearly at the top
    rows = {r["id"]: r for r in ResultStore(store).rows(study="mist-tiny")}
    assert len(rows) == 10 and {t.user_attrs["run_id"] for t in trials} == set(rows)
    assert len({r["config"]["train"]["seed"] for r in rows.values()}) == 10  # fresh initialisation per trial
    for t in trials:
        assert rows[t.user_attrs["run_id"]]["config"]["optim"]["lr"] == t.params["optim.lr"]

    summary = S.study_summary("mist-tiny", store)
    ranked = summary["ranked"]
    assert summary["k"] == 1  # 10% of 10
    best = ranked[0]
    assert best.value == max(t.value for t in ranked)  # accuracy: maximise
    assert summary["top"]["validation"].startswith(f"{best.value:.4g} ± 0")
    assert summary["top"]["test"].startswith(f"{rows[best.user_attrs['run_id']]['metric']:.4g}")
    assert summary["top"]["params"]["log10(optim.lr)"].startswith(f"{math.log10(best.params['optim.lr']):.4g}")
    paths = S.study_report("mist-tiny", store, tmp_path / "report")
    text = paths["markdown"].read_text()
    assert "Top 1 of 10 finished trials by validation (top 10%" in text
    assert paths["sensitivity"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    from ltdrnn.cli import main

    capsys.readouterr()
    assert (
        main(
            [
                "report",
                "--store",
                store,
                "--out",
                str(tmp_path / "cli-report"),
                "--study",
                "mist-tiny",
                "--no-plots",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "Top 1 of 10 finished trials by validation" in printed  # the study's summary, after the runs table


def test_top_k_rules():
    assert [S.top_k({"top_fraction": 0.1}, n, n) for n in (1, 10, 14, 15, 50)] == [1, 1, 1, 2, 5]
    assert S.top_k({"top_fraction": 0.1}, 50, 3) == 3  # never more than the ranked trials
    assert S.top_k({"top_k": 5}, 50, 50) == 5


def test_importance_falls_back_to_rank_correlation(monkeypatch):
    study = optuna.create_study(direction="minimize")
    distribution = optuna.distributions.FloatDistribution(1e-3, 1.0, log=True)
    for lr in (1e-3, 1e-2, 1e-1, 0.5):
        study.add_trial(
            optuna.trial.create_trial(params={"lr": lr}, distributions={"lr": distribution}, value=-math.log10(lr))
        )

    def unavailable(*args, **kwargs):
        raise RuntimeError("evaluator unavailable")

    monkeypatch.setattr(optuna.importance, "get_param_importances", unavailable)
    importance = S.parameter_importance(study, study.trials, {"lr"})
    assert importance["method"].startswith("|Spearman") and importance["values"] == {"lr": pytest.approx(1.0)}


# ---- pruning through the trainer --------------------------------------------------------------------
class ScriptedTrial:
    """Stands in for an Optuna trial: records reports and asks to prune at the second one."""

    def __init__(self):
        self.reports, self.attrs = [], {}

    def report(self, value, step):
        self.reports.append((step, value))

    def should_prune(self):
        return len(self.reports) >= 2

    def set_user_attr(self, key, value):
        self.attrs[key] = value


def test_the_trainer_reports_validations_and_stops_a_pruned_trial(tmp_path, monkeypatch):
    install(monkeypatch)
    torch.set_num_threads(1)
    from ltdrnn.config import load_config

    cfg = load_config(tiny_config(tmp_path), ["train.steps=20", "train.eval_every=2", "study=st", "name=trial-0"])
    trial = ScriptedTrial()
    with pytest.raises(optuna.TrialPruned):
        S.train_objective(trial, cfg)
    assert [step for step, _ in trial.reports] == [2, 4]
    rows = ResultStore(cfg.results).rows(study="st")
    assert len(rows) == 1 and rows[0]["status"] == "pruned" and rows[0]["id"] == trial.attrs["run_id"]
    assert rows[0]["timings"]["steps"] == 4 and trial.attrs["run_status"] == "pruned"


# ---- command line -----------------------------------------------------------------------------------
def test_the_cli_lists_specs_and_refuses_a_bad_one_naming_the_key(tmp_path, capsys):
    from ltdrnn.cli import main

    assert main(["sweep", "list"]) == 0
    assert "mist/pmnist" in capsys.readouterr().out.split()
    bad = write_spec(tmp_path, sampler="annealing")
    assert main(["sweep", "run", str(bad), "--store", str(tmp_path / "s.db")]) == 2
    assert "sweep sampler: expected one of random, tpe, grid, got 'annealing'" in capsys.readouterr().err


def test_sweep_run_keeps_the_study_and_its_runs_in_the_one_store(tmp_path, capsys):
    from ltdrnn.cli import main

    torch.set_num_threads(1)
    spec, db = write_spec(tmp_path, trials=2), str(tmp_path / "one.db")
    argv = ["sweep", "run", str(spec), "--study", "st", "--store", db, "--runs", str(tmp_path / "runs")]
    assert main([*argv, "--no-progress"]) == 0
    assert f"Report: ltdrnn sweep report --study st --store {db}" in capsys.readouterr().out
    rows = ResultStore(db).rows(study="st")
    assert len(rows) == 2 and {t.user_attrs["run_id"] for t in trials_of(db, "st")} == {r["id"] for r in rows}
    assert main(["sweep", "report", "--study", "st", "--store", db, "--out", str(tmp_path / "r"), "--no-plots"]) == 0
    assert "trials" in capsys.readouterr().out


def _tables(path):
    import sqlite3

    with sqlite3.connect(path) as connection:
        return {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_has_study_tells_whether_a_store_holds_the_study_without_writing_to_it(tmp_path):
    write_spec(tmp_path)
    assert not S.has_study("st", str(tmp_path / "missing.db")) and not (tmp_path / "missing.db").exists()
    results = tmp_path / "results.db"  # a store of runs only: asking adds no table of Optuna's to it
    ResultStore(str(results))
    assert not S.has_study("st", str(results)) and _tables(results) == {"runs"}
    S.run_worker(str(tmp_path / "spec.json"), str(tmp_path / "s.db"), "st", 1, objective=quadratic, log=lambda s: None)
    assert S.has_study("st", str(tmp_path / "s.db")) and not S.has_study("other", str(tmp_path / "s.db"))
