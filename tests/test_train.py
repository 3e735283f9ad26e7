"""The trainer: learning, optimisers and schedule, extra losses, selection, exact resume, smoke over the
registries (every registered cell on a tiny task; every generated task with a small model)."""

import inspect
import json
import math
import shutil

import numpy as np
import pytest
import torch

from fixture_data import (
    toy_rows,
    write_batches,
    write_corpus,
    write_har,
    write_mnist,
    write_ptb,
    write_seizure,
    write_ts_set,
)
from harness_helpers import TinyTask, install, tiny_config
from ltdrnn import metrics as M
from ltdrnn.cells.registry import entry, list_cells
from ltdrnn.config import ConfigError, load_config
from ltdrnn.evaluation import evaluate_checkpoint
from ltdrnn.models import build_model
from ltdrnn.optimizers import SpikeGuard
from ltdrnn.tasks import build_task, list_tasks
from ltdrnn.tasks.base import _TASKS
from ltdrnn.tasks.speech import KAGGLE_WORDS
from ltdrnn.train import TrainingInterrupted, epoch_order, seed_everything, train


@pytest.fixture(autouse=True)
def tiny(monkeypatch):
    install(monkeypatch)
    torch.set_num_threads(1)


def run(tmp_path, overrides=(), **sections):
    return train(load_config(tiny_config(tmp_path, **sections), list(overrides)))


def test_the_trainer_learns_the_tiny_task(tmp_path):
    record = run(
        tmp_path, ["train.steps=80", "train.eval_every=20", "task.options.n_train=256", "task.options.n_test=128"]
    )
    assert record["status"] == "finished"
    assert record["metrics"]["metric"] > 0.8 and record["metrics"]["beats_baseline"]
    losses = [h["train_loss"] for h in record["history"]]
    assert losses[-1] < losses[0]


def test_epoch_order_depends_on_seed_and_epoch_only():
    a = epoch_order(20, 6, seed=1, epoch=3)
    assert a == epoch_order(20, 6, seed=1, epoch=3)
    assert a != epoch_order(20, 6, seed=1, epoch=4)
    assert sorted(i for batch in a for i in batch) == list(range(20)) and len(a[-1]) == 2


def stopping_at(step):
    """A trainer callback that interrupts the run right after ``step``, as a user's Ctrl-C would."""

    def stop(state):
        if state["step"] == step:
            raise TrainingInterrupted("simulated interruption")

    return stop


def _final_weights(record):
    return torch.load(f"{record['run_dir']}/last.pt", weights_only=False)["model"]


def test_interrupted_then_resumed_equals_uninterrupted(tmp_path):
    # dropout (RNG), lr halving every epoch (scheduler), momentum (optimiser state) and a mid-epoch stop
    settings = [
        "train.steps=14",
        "train.eval_every=4",
        "train.checkpoint_every=3",
        "model.num_layers=2",
        "model.dropout=0.3",
        "optim.halve_every=1",
        "task.options.n_train=40",
        "train.loss_weights.penalty=0.01",
    ]
    whole = run(tmp_path / "a", settings)

    cfg_b = load_config(tiny_config(tmp_path / "b"), settings)
    with pytest.raises(TrainingInterrupted):  # the latest checkpoint is step 6: steps 7.. are redone
        train(cfg_b, callbacks=[stopping_at(7)])
    assert torch.load(tmp_path / "b" / "run" / "last.pt", weights_only=False)["step"] == 6
    resumed = train(cfg_b, resume=True)

    assert resumed["id"] == json.loads((tmp_path / "b" / "run" / "result.json").read_text())["id"]
    weights_a, weights_b = _final_weights(whole), _final_weights(resumed)
    assert weights_a.keys() == weights_b.keys()
    for key in weights_a:
        assert torch.equal(weights_a[key], weights_b[key]), key
    assert resumed["metrics"]["test"] == whole["metrics"]["test"]
    strip = lambda history: [{k: v for k, v in h.items() if k != "time_s"} for h in history]
    assert strip(resumed["history"]) == strip(whole["history"])
    assert [h["lr"] for h in whole["history"]] != [whole["history"][0]["lr"]] * len(whole["history"])


def test_resume_refuses_a_changed_config(tmp_path):
    cfg = load_config(tiny_config(tmp_path), ["train.steps=3", "train.checkpoint_every=1"])
    train(cfg)
    changed = load_config(tiny_config(tmp_path), ["train.steps=3", "optim.lr=0.5"])
    with pytest.raises(ConfigError, match="optim.lr"):
        train(changed, resume=True)


def test_a_run_started_on_another_device_and_moved_resumes_here(tmp_path):
    """A GPU run finished on a CPU in another directory: the checkpoint's train.device and run_dir differ."""
    settings = ["train.steps=6", "train.eval_every=2", "train.checkpoint_every=2"]
    whole = run(tmp_path / "a", settings)
    cfg = load_config(tiny_config(tmp_path / "b"), settings)
    with pytest.raises(TrainingInterrupted):
        train(cfg, callbacks=[stopping_at(5)])
    path = tmp_path / "b" / "run" / "last.pt"
    checkpoint = torch.load(path, weights_only=False)
    checkpoint["config"]["train"]["device"] = "cuda"
    torch.save(checkpoint, path)
    shutil.move(tmp_path / "b" / "run", tmp_path / "moved")
    resumed = train(load_config(tiny_config(tmp_path / "b"), [*settings, f"run_dir={tmp_path / 'moved'}"]), resume=True)
    assert resumed["status"] == "finished" and resumed["metrics"]["test"] == whole["metrics"]["test"]
    for key, weight in _final_weights(whole).items():
        assert torch.equal(weight, _final_weights(resumed)[key]), key


def test_checkpoints_hold_the_resolved_config(tmp_path):
    record = run(tmp_path, ["train.steps=4"])
    for name in ("last.pt", "best.pt"):
        saved = torch.load(f"{record['run_dir']}/{name}", weights_only=False)
        assert load_config(saved["config"]) == load_config(record["config"])
    assert load_config(f"{record['run_dir']}/config.yaml") == load_config(record["config"])
    assert not list((tmp_path / "run").glob("*.tmp"))


def test_malloc_tuning_is_applied_unless_turned_off(tmp_path, monkeypatch):
    import ltdrnn.train as train_module

    calls = []
    monkeypatch.setattr(train_module, "tune_malloc", lambda: calls.append(1) or True)
    run(tmp_path / "on", ["train.steps=2"])
    run(tmp_path / "off", ["train.steps=2", "train.malloc_tuning=false"])
    assert calls == [1]


MALLOC_PROBE = """
import ctypes, sys, torch
from ltdrnn.ops.memory import tune_malloc
libc = ctypes.CDLL("libc.so.6")
if not hasattr(libc, "mallinfo2"):
    sys.exit(3)
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                 "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = Info
def mmapped_by(size):
    before = libc.mallinfo2().hblkhd
    block = torch.empty(size, dtype=torch.uint8)
    return libc.mallinfo2().hblkhd - before
size = 64 << 20
print(mmapped_by(size) >= size, tune_malloc(), mmapped_by(size))
"""


def test_tune_malloc_serves_large_blocks_from_the_heap():
    """In a fresh process (the setting is process-wide): a 64 MB block is mmap-ed with glibc's
    defaults and comes from the heap after ``tune_malloc``."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}  # glibc's defaults
    done = subprocess.run([sys.executable, "-c", MALLOC_PROBE], capture_output=True, text=True, timeout=120, env=env)
    if done.returncode == 3:
        pytest.skip("not glibc >= 2.33 (no mallinfo2)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "0"]


def test_lr_halves_every_tau_epochs(tmp_path):
    # 64 training items / batch 16 = 4 steps per epoch; tau = 2 epochs
    record = run(
        tmp_path,
        [
            "train.epochs=5",
            "train.steps=null",
            "train.batch_size=16",
            "train.eval_every=0",
            "optim.halve_every=2",
            "optim.lr=0.08",
        ],
    )
    lrs = [h["lr"] for h in record["history"]]
    assert lrs == pytest.approx([0.08, 0.04, 0.04, 0.02, 0.02])
    assert [h["epoch"] for h in record["history"]] == [1, 2, 3, 4, 5]


def test_set_epoch_is_called_each_epoch(tmp_path, monkeypatch):
    seen = []
    from harness_helpers import TinyCell

    monkeypatch.setattr(TinyCell, "set_epoch", lambda self, epoch: seen.append(epoch))
    run(tmp_path, ["train.epochs=3", "train.steps=null", "train.batch_size=32", "train.eval_every=0"])
    assert sorted(set(seen)) == [0, 1, 2]


@pytest.mark.parametrize("fresh", [True, False])
def test_fresh_train_draws_new_training_items_every_epoch(tmp_path, monkeypatch, fresh):
    import ltdrnn.train as train_module

    real, seen = train_module.batch_on, []

    def recording(task, dataset, indices, device):
        batch = real(task, dataset, indices, device)
        if dataset is task.dataset("train"):
            seen.append(dict(zip(indices, batch[0].unbind(0))))
        return batch

    monkeypatch.setattr(train_module, "batch_on", recording)
    options = {"T": 6, "n_train": 4, "n_val": 4, "n_test": 4, "fresh_train": fresh}
    run(
        tmp_path,
        ["train.epochs=2", "train.steps=null", "train.batch_size=4", "train.eval_every=0"],
        model={"cell": "lstm", "hidden_size": 4},
        task={"name": "adding", "options": options},
    )
    first, second = seen
    assert sorted(first) == sorted(second) == [0, 1, 2, 3]
    assert all(torch.equal(first[i], second[i]) for i in first) is not fresh


def test_weighted_extra_loss_is_added(tmp_path):
    plain = run(tmp_path / "a", ["train.steps=30"])
    penalised = run(tmp_path / "b", ["train.steps=30", "train.loss_weights.penalty=1.0"])
    norm = lambda r: float((_final_weights(r)["rnn.cells.0.U"] ** 2).sum())
    assert norm(penalised) < 0.5 * norm(plain)


def test_unknown_loss_weight_names_the_provided_terms(tmp_path):
    with pytest.raises(ConfigError, match="unknown loss term 'budget'.*provides: penalty"):
        run(tmp_path, ["train.loss_weights.budget=0.1"])


def test_summed_loss_is_batch_size_times_mean():
    info = TinyTask().info
    pred, y = torch.randn(5, 2), torch.tensor([0, 1, 1, 0, 1])
    assert M.task_loss(pred, y, info, reduction="sum") == pytest.approx(5 * float(M.task_loss(pred, y, info)))


@pytest.mark.parametrize(
    "optimiser",
    [
        ["optim.name=sgd", "optim.momentum=0.9", "optim.loss_reduction=sum", "optim.clip_norm=1.0", "optim.lr=0.01"],
        ["optim.name=rmsprop", "optim.alpha=0.9", "optim.lr=0.01"],
        ["optim.name=adam", "optim.weight_decay=1e-3"],
    ],
)
def test_each_optimiser_learns(tmp_path, optimiser):
    record = run(tmp_path, ["train.steps=60", "train.eval_every=20", "task.options.n_train=256"] + optimiser)
    assert record["metrics"]["metric"] > 0.75


def test_validation_selects_the_checkpoint_used_for_test(tmp_path):
    record = run(tmp_path, ["train.steps=40", "train.eval_every=5", "optim.lr=0.05"])
    best = max(record["history"], key=lambda h: h["val_metric"])
    assert record["metrics"]["best_step"] == best["step"]
    assert record["metrics"]["val_best"] == best["val_metric"]
    assert evaluate_checkpoint(record["run_dir"])["metric"] == record["metrics"]["test"]["metric"]


def test_select_after_keeps_earlier_validations_out_of_the_selection(tmp_path):
    settings = ["train.steps=40", "train.eval_every=5", "optim.lr=0.05"]
    plain = run(tmp_path / "plain", settings)
    after = plain["metrics"]["best_step"] + 1
    assert after <= 40  # the plain run picked an earlier validation than the last
    record = run(tmp_path / "after", settings + [f"train.select_after={after}"])
    late = [h for h in record["history"] if h["step"] >= after]
    best = max(late, key=lambda h: h["val_metric"])
    # the earlier validations are still recorded, and training is the same
    assert [h["val_loss"] for h in record["history"]] == [h["val_loss"] for h in plain["history"]]
    assert record["metrics"]["best_step"] == best["step"]
    assert record["metrics"]["val_best"] == best["val_metric"]


def test_select_after_refuses_a_negative_step(tmp_path):
    with pytest.raises(ConfigError, match="train.select_after: expected a non-negative value, got -1"):
        run(tmp_path, ["train.select_after=-1"])


def _weights_after_every_step(log):
    def record(state):
        log.append({name: p.detach().clone() for name, p in state["model"].named_parameters()})

    return record


def test_ema_decay_validates_tests_and_saves_the_bias_corrected_average(tmp_path):
    decay, settings = 0.8, ["train.steps=12", "train.eval_every=12", "optim.lr=0.05", "train.ema_decay=0.8"]
    steps = []
    record = train(load_config(tiny_config(tmp_path), settings), callbacks=[_weights_after_every_step(steps)])
    weights = [decay ** (len(steps) - i) for i in range(1, len(steps) + 1)]
    best = torch.load(f"{record['run_dir']}/best.pt", weights_only=False)["model"]
    latest = _final_weights(record)
    for name, last in steps[-1].items():
        average = sum(w * s[name] for w, s in zip(weights, steps)) / sum(weights)
        assert torch.allclose(best[name], average, atol=1e-6), name
        assert not torch.allclose(average, last, atol=1e-4), name  # the average is not the latest weights
        assert torch.equal(latest[name], last), name  # the optimiser stepped the latest weights
    # the test split was read with the average
    assert evaluate_checkpoint(record["run_dir"])["metric"] == record["metrics"]["test"]["metric"]


def test_ema_decay_without_selection_tests_saves_and_loads_the_final_average(tmp_path):
    decay, settings = 0.8, ["train.steps=12", "train.eval_every=5", "optim.lr=0.05", "train.ema_decay=0.8"]
    steps = []
    cfg = load_config(tiny_config(tmp_path), settings + ["train.select_on=last"])
    record = train(cfg, callbacks=[_weights_after_every_step(steps)])
    weights = [decay ** (len(steps) - i) for i in range(1, len(steps) + 1)]
    best = torch.load(f"{record['run_dir']}/best.pt", weights_only=False)
    assert best["step"] == record["metrics"]["best_step"] == 12  # the last step, not a validated one
    for name, last in steps[-1].items():
        average = sum(w * s[name] for w, s in zip(weights, steps)) / sum(weights)
        assert torch.allclose(best["model"][name], average, atol=1e-6), name
        assert not torch.allclose(average, last, atol=1e-4), name
        assert torch.equal(_final_weights(record)[name], last), name  # last.pt keeps the latest, to resume
    assert record["metrics"]["checkpoint"] == "last" and record["metrics"]["val_best"] is None
    # the test and a later load of the run directory (as export does) read the average
    assert evaluate_checkpoint(record["run_dir"])["metric"] == record["metrics"]["test"]["metric"]


def test_ema_decay_leaves_the_trained_weights_as_without_it(tmp_path):
    settings = ["train.steps=12", "train.eval_every=4", "optim.lr=0.05"]
    plain = run(tmp_path / "plain", settings)
    averaged = run(tmp_path / "averaged", settings + ["train.ema_decay=0.9"])
    for key, weight in _final_weights(plain).items():
        assert torch.equal(weight, _final_weights(averaged)[key]), key
    assert [h["val_loss"] for h in averaged["history"]] != [h["val_loss"] for h in plain["history"]]


def test_an_interrupted_run_resumes_with_its_average_bit_identical(tmp_path):
    settings = ["train.steps=14", "train.eval_every=4", "train.checkpoint_every=3", "train.ema_decay=0.9"]
    whole = run(tmp_path / "a", settings)
    cfg = load_config(tiny_config(tmp_path / "b"), settings)
    with pytest.raises(TrainingInterrupted):
        train(cfg, callbacks=[stopping_at(7)])
    resumed = train(cfg, resume=True)
    for name in ("best.pt", "last.pt"):
        a, b = (torch.load(f"{r['run_dir']}/{name}", weights_only=False) for r in (whole, resumed))
        for key in a["model"]:
            assert torch.equal(a["model"][key], b["model"][key]), (name, key)
    averages = [torch.load(f"{r['run_dir']}/last.pt", weights_only=False)["average"] for r in (whole, resumed)]
    assert averages[0]["updates"] == averages[1]["updates"] == 14
    assert all(torch.equal(a, b) for a, b in zip(averages[0]["params"], averages[1]["params"]))
    assert resumed["metrics"]["test"] == whole["metrics"]["test"]


@pytest.mark.parametrize(
    "settings, message",
    [
        (["train.ema_decay=1"], r"train.ema_decay: expected a value in \[0, 1\), got 1"),
        (["train.ema_decay=-0.5"], r"train.ema_decay: expected a value in \[0, 1\), got -0.5"),
    ],
)
def test_ema_decay_refuses_a_decay_outside_0_1(tmp_path, settings, message):
    with pytest.raises(ConfigError, match=message):
        run(tmp_path, settings)


def test_skip_fraction_is_recorded_from_update_masks(tmp_path):
    record = run(tmp_path, ["train.steps=2"])
    assert 0.0 < record["metrics"]["skip_fraction"] < 1.0
    assert "val_skip_fraction" in record["history"][-1]


@pytest.mark.parametrize("kind, head", [("per_step", "tagger"), ("regression", "regressor")])
def test_other_heads_train(tmp_path, kind, head):
    record = run(tmp_path, ["train.steps=40", f"task.options.kind={kind}", "train.latency=true"])
    assert record["config"]["model"]["head"] == "auto"
    m = record["metrics"]
    assert m["beats_baseline"], m
    assert record["timings"]["per_sequence_ms"] > 0 and record["timings"]["per_step_ms"] > 0


def test_diverging_run_stops_with_status_diverged(tmp_path):
    record = run(tmp_path, ["train.steps=20", "task.options.kind=regression", "optim.name=sgd", "optim.lr=1e6"])
    assert record["status"] == "diverged"


def _overflow_once_at(monkeypatch, steps):
    """The optimiser steps numbered in ``steps`` (1-based) end, the first time they are taken, with NaN
    weights and a NaN loss, as a batch whose forward pass overflows does."""
    from ltdrnn.train import Run

    real, pending = Run.train_step, set(steps)

    def overflowing(self, indices):
        loss, terms = real(self, indices)
        if self.step + 1 in pending:
            pending.discard(self.step + 1)
            with torch.no_grad():
                for parameter in self.model.parameters():
                    parameter.fill_(math.nan)
            return math.nan, terms
        return loss, terms

    monkeypatch.setattr(Run, "train_step", overflowing)


# dropout (RNG), momentum (optimiser state), lr halving every other epoch (scheduler), 5 batches an epoch
# and a checkpoint at every evaluation (steps 9, 18, 27) and epoch end (5, 10, 15, 20, 25, 30)
ROLLBACK_SETTINGS = [
    "train.steps=30",
    "train.eval_every=9",
    "model.num_layers=2",
    "model.dropout=0.3",
    "optim.halve_every=2",
    "task.options.n_train=40",
]


def _best_step_before(record, step):
    """The evaluation with the best validation metric up to ``step`` (the first of equals)."""
    entries = [h for h in record["history"] if h["step"] <= step]
    pick = max if record["metrics"]["higher_is_better"] else min
    return pick(entries, key=lambda h: h["val_metric"])["step"]


def test_a_non_finite_loss_rolls_back_to_the_best_validation_and_goes_on_at_half_the_learning_rate(
    tmp_path, monkeypatch
):
    plain = run(tmp_path / "plain", ROLLBACK_SETTINGS)
    best = _best_step_before(plain, 24)  # step 9 or 18: an earlier epoch than step 24's
    # the reference: the same run stopped right after its checkpoint of that step, the checkpoint's
    # learning rates halved by hand, then resumed
    cfg = load_config(tiny_config(tmp_path / "reference"), ROLLBACK_SETTINGS + ["train.rollbacks=2"])
    with pytest.raises(TrainingInterrupted):  # before the checkpoint at the end of the epoch
        train(cfg, callbacks=[stopping_at(best + 1)])
    path = tmp_path / "reference" / "run" / "last.pt"
    checkpoint = torch.load(path, weights_only=False)
    assert checkpoint["step"] == best
    for group in checkpoint["optimizer"]["param_groups"]:
        group["lr"] *= 0.5
    torch.save(checkpoint, path)
    reference = train(cfg, resume=True)

    _overflow_once_at(monkeypatch, [24])
    rolled = run(tmp_path / "rolled", ROLLBACK_SETTINGS + ["train.rollbacks=2"])

    lr_at_best = next(h["lr"] for h in plain["history"] if h["step"] == best)
    assert rolled["status"] == "finished" and rolled["timings"]["steps"] == 30
    assert rolled["metrics"]["rollbacks"] == [{"failed_at": 24, "to_step": best, "lr": lr_at_best * 0.5}]
    weights, expected = _final_weights(rolled), _final_weights(reference)
    for key in expected:
        assert torch.equal(weights[key], expected[key]), key
    assert rolled["metrics"]["test"] == reference["metrics"]["test"]
    # the halving holds after the rollback, under the schedule: half the plain run's rate from there on
    assert [h["lr"] for h in rolled["history"]] == [
        h["lr"] * (0.5 if h["step"] > best else 1.0) for h in plain["history"]
    ]


def test_each_rollback_halves_the_rate_once_also_from_a_checkpoint_written_after_one(tmp_path, monkeypatch):
    # select_on=last: no best validation, so the latest checkpoint is the one to go back to
    settings = ROLLBACK_SETTINGS + ["train.select_on=last", "train.rollbacks=3"]
    plain = run(tmp_path / "plain", ROLLBACK_SETTINGS + ["train.select_on=last"])
    lr = {h["step"]: h["lr"] for h in plain["history"]}  # 18: epoch 3; 27: epoch 5, after the halving at 20
    _overflow_once_at(monkeypatch, [19, 20, 23])
    record = run(tmp_path / "thrice", settings)
    assert record["status"] == "finished"
    assert record["metrics"]["rollbacks"] == [
        {"failed_at": 19, "to_step": 18, "lr": lr[18] * 0.5},
        {"failed_at": 20, "to_step": 18, "lr": lr[18] * 0.25},
        {"failed_at": 23, "to_step": 20, "lr": lr[27] * 0.125},
    ]
    assert not (tmp_path / "thrice" / "run" / "rollback.pt").exists()


def test_rollbacks_stop_at_the_configured_number(tmp_path, monkeypatch):
    _overflow_once_at(monkeypatch, [24, 25])
    record = run(tmp_path / "budget", ROLLBACK_SETTINGS + ["train.rollbacks=1"])
    assert record["status"] == "diverged"
    assert [r["failed_at"] for r in record["metrics"]["rollbacks"]] == [24]

    _overflow_once_at(monkeypatch, [4])  # without rollbacks no checkpoint is written before the first evaluation
    record = run(tmp_path / "none", ROLLBACK_SETTINGS)
    assert record["status"] == "diverged" and record["metrics"]["rollbacks"] == []


def test_a_non_finite_loss_before_the_first_evaluation_rolls_back_to_the_start(tmp_path, monkeypatch):
    """Back to step 0 at half the rate: the same run as one started at half the rate."""
    lr = load_config(tiny_config(tmp_path / "plain")).optim.lr
    halved = run(tmp_path / "halved", ROLLBACK_SETTINGS + [f"optim.lr={lr / 2}"])
    _overflow_once_at(monkeypatch, [4])
    rolled = run(tmp_path / "rolled", ROLLBACK_SETTINGS + ["train.rollbacks=3"])
    assert rolled["status"] == "finished"
    assert rolled["metrics"]["rollbacks"] == [{"failed_at": 4, "to_step": 0, "lr": lr / 2}]
    weights, expected = _final_weights(rolled), _final_weights(halved)
    for key in expected:
        assert torch.equal(weights[key], expected[key]), key
    assert rolled["metrics"]["test"] == halved["metrics"]["test"]


def _validation_runs_away_once_at(monkeypatch, call):
    """Make the ``call``-th validation (1-based) report a finite loss of 1e30, as a runaway model does."""
    import ltdrnn.train as T

    real, calls = T.evaluate, []

    def evaluating(model, task, split, *args, **kwargs):
        summary, skip = real(model, task, split, *args, **kwargs)
        if split == "val":
            calls.append(1)
            if len(calls) == call:
                summary = {**summary, "loss": 1e30}
        return summary, skip

    monkeypatch.setattr(T, "evaluate", evaluating)


def test_a_validation_loss_above_max_val_loss_rolls_back_as_a_non_finite_training_loss_does(tmp_path, monkeypatch):
    # evaluations at steps 9, 18, 27: the runaway at 18 and a non-finite training loss at 18 both go back
    # to step 9 at half the rate and replay the same batches
    _overflow_once_at(monkeypatch, [18])
    non_finite = run(tmp_path / "nan", ROLLBACK_SETTINGS + ["train.rollbacks=2"])
    monkeypatch.undo()
    install(monkeypatch)
    _validation_runs_away_once_at(monkeypatch, 2)
    runaway = run(tmp_path / "runaway", ROLLBACK_SETTINGS + ["train.rollbacks=2", "train.max_val_loss=100"])
    (rollback,) = non_finite["metrics"]["rollbacks"]
    assert (rollback["failed_at"], rollback["to_step"]) == (18, 9)
    assert runaway["metrics"]["rollbacks"] == [{**rollback, "val_loss": 1e30}]
    assert runaway["status"] == "finished" and runaway["timings"]["steps"] == 30
    assert runaway["metrics"]["test"] == non_finite["metrics"]["test"]
    assert [h["step"] for h in runaway["history"]] == [9, 18, 27, 30]  # the runaway's entry was rolled back

    _validation_runs_away_once_at(monkeypatch, 2)
    stopped = run(tmp_path / "stopped", ROLLBACK_SETTINGS + ["train.max_val_loss=100"])
    assert stopped["status"] == "diverged" and stopped["timings"]["steps"] == 18
    assert stopped["history"][-1]["val_loss"] == 1e30 and stopped["metrics"]["best_step"] == 9

    _validation_runs_away_once_at(monkeypatch, 2)
    unlimited = run(tmp_path / "unlimited", ROLLBACK_SETTINGS + ["train.rollbacks=2"])
    assert unlimited["status"] == "finished" and unlimited["metrics"]["rollbacks"] == []


@pytest.mark.parametrize(
    "settings, message",
    [
        (["train.max_val_loss=0"], r"train.max_val_loss: expected a positive value, got 0"),
        (["train.max_val_loss=100", "train.eval_every=0"], r"train.max_val_loss: .*eval_every > 0, got 0"),
    ],
)
def test_max_val_loss_must_be_positive_and_have_evaluations(tmp_path, settings, message):
    with pytest.raises(ConfigError, match=message):
        load_config(tiny_config(tmp_path), settings)


def test_rollbacks_must_be_a_count(tmp_path):
    with pytest.raises(ConfigError, match=r"train.rollbacks: expected a non-negative value, got -1"):
        load_config(tiny_config(tmp_path), ["train.rollbacks=-1"])


# ---- the spike guard (optim.skip_spikes) --------------------------------------------------------------
def _guard_with_gradients(norms, factor=10.0, clip_norm=None):
    """A guard fed one gradient of each norm in turn; returns it, its decisions and the gradients it left."""
    guard, weight, decisions, left = SpikeGuard(factor, clip_norm), torch.nn.Parameter(torch.zeros(3)), [], []
    for step, norm in enumerate(norms, start=1):
        weight.grad = torch.tensor([norm, 0.0, 0.0])
        decisions.append(guard.admits([weight], step))
        left.append(float(weight.grad[0]))
    return guard, decisions, left


def test_the_guard_vetoes_a_norm_above_its_factor_times_the_median_once_it_has_seen_enough():
    calm = [1.0, 2.0] * 5  # ten norms: median 1.5
    guard, decisions, _ = _guard_with_gradients(calm + [15.1, 14.9, 1.0, math.inf, math.nan])
    assert decisions == [True] * 10 + [False, True, True, False, False]
    assert guard.skipped == [11, 14, 15]
    # one spike does not move the median: the next one is vetoed as well
    assert _guard_with_gradients(calm + [100.0, 100.0])[1][-2:] == [False, False]
    # before ten norms are known only a non-finite one is vetoed
    assert _guard_with_gradients([1.0, 1000.0, math.inf])[1] == [True, True, False]


def test_a_lasting_change_of_scale_is_vetoed_for_half_a_window_then_admitted():
    calm = [1.0, 2.0] * 25  # a full window of 50, median 1.5
    guard, decisions, _ = _guard_with_gradients(calm + [30.0] * 30)
    assert decisions[50:] == [False] * 25 + [True] * 5
    assert guard.skipped == list(range(51, 76))


def test_the_guard_clips_as_clip_norm_does_and_without_a_factor_admits_everything():
    _, decisions, left = _guard_with_gradients([0.5, 3.0, 1e6], factor=None, clip_norm=1.0)
    assert decisions == [True, True, True] and left == pytest.approx([0.5, 1.0, 1.0], rel=1e-5)
    _, decisions, left = _guard_with_gradients([0.5, 3.0], factor=10.0, clip_norm=1.0)
    assert decisions == [True, True] and left == pytest.approx([0.5, 1.0], rel=1e-5)


def _spike_gradients_at(monkeypatch, steps):
    real = SpikeGuard.admits

    def spiking(self, parameters, step):
        if step in steps:
            for parameter in parameters:
                parameter.grad.mul_(1e3)
        return real(self, parameters, step)

    monkeypatch.setattr(SpikeGuard, "admits", spiking)


SPIKE_SETTINGS = [
    "train.steps=16",
    "train.eval_every=4",
    "train.checkpoint_every=3",
    "model.dropout=0.3",
    "model.num_layers=2",
    "task.options.n_train=40",
]


def test_a_spiking_batch_is_skipped_as_if_its_update_were_never_made(tmp_path, monkeypatch):
    real = SpikeGuard.admits

    def vetoing_13(self, parameters, step):  # the reference: step 13 makes no update, by hand
        return False if step == 13 else real(self, parameters, step)

    monkeypatch.setattr(SpikeGuard, "admits", vetoing_13)
    reference = run(tmp_path / "reference", SPIKE_SETTINGS + ["optim.skip_spikes=10"])
    monkeypatch.setattr(SpikeGuard, "admits", real)
    _spike_gradients_at(monkeypatch, {13})
    guarded = run(tmp_path / "guarded", SPIKE_SETTINGS + ["optim.skip_spikes=10"])
    unguarded = run(tmp_path / "unguarded", SPIKE_SETTINGS)
    assert guarded["metrics"]["skipped_updates"] == [13] and unguarded["metrics"]["skipped_updates"] == []
    for key, weight in _final_weights(reference).items():
        assert torch.equal(weight, _final_weights(guarded)[key]), key
    assert any(not torch.equal(w, _final_weights(guarded)[k]) for k, w in _final_weights(unguarded).items())


def test_the_guard_s_memory_survives_an_interruption(tmp_path, monkeypatch):
    """Resumed at step 9, the guard still knows the nine norms before it and vetoes the spike at step 13
    as the uninterrupted run does (started afresh it would know only three and let it through)."""
    _spike_gradients_at(monkeypatch, {13})
    settings = SPIKE_SETTINGS + ["optim.skip_spikes=10"]
    whole = run(tmp_path / "a", settings)
    cfg = load_config(tiny_config(tmp_path / "b"), settings)
    with pytest.raises(TrainingInterrupted):
        train(cfg, callbacks=[stopping_at(10)])
    resumed = train(cfg, resume=True)
    assert resumed["metrics"]["skipped_updates"] == whole["metrics"]["skipped_updates"] == [13]
    for key, weight in _final_weights(whole).items():
        assert torch.equal(weight, _final_weights(resumed)[key]), key


@pytest.mark.parametrize("value", ["1", "0.5", "-3"])
def test_skip_spikes_must_be_a_factor_above_one(tmp_path, value):
    with pytest.raises(ConfigError, match=rf"optim.skip_spikes: expected a factor above 1, got {value}"):
        load_config(tiny_config(tmp_path), [f"optim.skip_spikes={value}"])


@pytest.mark.parametrize("beta2", [0.5, 0.999])
def test_adam_takes_its_second_moment_decay_from_beta2(tmp_path, beta2):
    """Two Adam steps with gradients 1 then 0: the second moves each weight by
    lr * (0.09 / 0.19) / sqrt(beta2 / (1 + beta2)) (bias-corrected moments), which depends on beta2."""
    from ltdrnn.models import build_model
    from ltdrnn.optimizers import build_optimizer

    cfg = load_config(tiny_config(tmp_path), ["optim.lr=0.01", f"optim.beta2={beta2}"])
    model = build_model(cfg.model, TinyTask().info)
    optimizer = build_optimizer(cfg, model)
    for fill in (1.0, 0.0):
        before = [p.detach().clone() for p in model.parameters()]
        for p in model.parameters():
            p.grad = torch.full_like(p, fill)
        optimizer.step()
    expected = 0.01 * (0.09 / 0.19) / math.sqrt(beta2 / (1 + beta2))
    moved = [(b - p.detach()).abs().max().item() for b, p in zip(before, model.parameters())]
    assert all(abs(m - expected) < 1e-6 for m in moved)


@pytest.mark.parametrize("value", ["1", "0", "1.5"])
def test_beta2_must_lie_strictly_between_zero_and_one(tmp_path, value):
    with pytest.raises(ConfigError, match=rf"optim.beta2: expected a value in \(0, 1\), got {value}"):
        load_config(tiny_config(tmp_path), [f"optim.beta2={value}"])


# ---- smoke over the registries ------------------------------------------------------------------
@pytest.mark.parametrize("cell", [c for c in list_cells()])
def test_every_registered_cell_trains_one_batch_and_evaluates(tmp_path, cell):
    options = dict(entry(cell).test_options)
    record = run(
        tmp_path,
        [
            "train.steps=1",
            "train.eval_every=1",
            "train.batch_size=4",
            "task.options.n_val=4",
            "task.options.n_test=4",
            "train.latency=true",
        ],
        model={"cell": cell, "hidden_size": 6, "options": options},
    )
    assert record["status"] == "finished"
    assert math.isfinite(record["metrics"]["metric"]) and record["metrics"]["params"] > 0
    seed_everything(0)  # the trainer's seed: the same initial weights
    before = build_model(load_config(record["config"]).model, TinyTask().info).state_dict()
    after = _final_weights(record)
    weights = [k for k in after if k.startswith("rnn.") and isinstance(after[k], torch.Tensor)]  # not extra state
    changed = [k for k in weights if not torch.equal(before[k], after[k])]
    assert changed, "one optimiser step changed no weight of the recurrent stack"


def _small_options(name):
    """Small split sizes and lengths for generated tasks."""
    accepted = inspect.signature(_TASKS[name]).parameters
    if not all(k in accepted for k in ("n_train", "n_val", "n_test")):
        return {}
    options = {"n_train": 8, "n_val": 4, "n_test": 4}
    if "T" in accepted:
        options["T"] = 16
    if "delay" in accepted:
        options["delay"] = 10
    return options


def _write_toy_ucr(root):
    rng = np.random.default_rng(0)
    write_ts_set(root, toy_rows(12, 2, rng), toy_rows(6, 2, rng), dims=2)


# data-set family -> (task, writes the fixture files under a data dir, options besides data_dir)
FIXTURE_TASKS = {
    "cifar": (
        "noisy_cifar10",
        lambda root: write_batches(root / "cifar-10-batches-py"),
        {"verify": False, "n_val": 4, "T": 40},
    ),
    "har": ("har2", lambda root: write_har(root / "har"), {}),
    "mnist": ("pixel_mnist", lambda root: write_mnist(root / "mnist"), {"source": "idx", "verify": False, "n_val": 5}),
    "ptb": ("ptb", lambda root: write_ptb(root / "ptb"), {"seq_len": 4, "expect_vocab": None}),
    "seizure": ("seizure", lambda root: write_seizure(root / "seizure" / "Epileptic Seizure Recognition.csv"), {}),
    "speech": ("google12", lambda root: write_corpus(root / "speech_commands", KAGGLE_WORDS + ["bed"]), {}),
    "uea_ucr": ("ucr", _write_toy_ucr, {"dataset": "Toy", "val_fraction": 0.25}),
}


def _families():
    families = {}
    for name in list_tasks():
        if name != "tiny":
            families.setdefault(_TASKS[name].__module__.rsplit(".", 1)[-1], []).append(name)
    return families


def _smoke_task(family, data_dir):
    """A data-set family's task on fixture files written into ``data_dir``; a generated family's first
    task, made small."""
    if family not in FIXTURE_TASKS:
        task = _families()[family][0]
        return task, _small_options(task)
    task, write, options = FIXTURE_TASKS[family]
    write(data_dir)
    return task, {"data_dir": str(data_dir), **options}


@pytest.mark.parametrize("family", sorted(_families()))
def test_every_task_family_trains_one_batch_and_evaluates(tmp_path, family):
    task, options = _smoke_task(family, tmp_path / "data")
    info = build_task(task, **options).info
    record = run(
        tmp_path,
        ["train.steps=1", "train.eval_every=1", "train.batch_size=4", "train.eval_batches=1", "train.test_batches=1"],
        model={"cell": "lstm", "hidden_size": 4},
        task={"name": task, "options": options},
    )
    assert record["status"] == "finished" and record["metrics"]["metric_name"] == info.metric
    assert math.isfinite(record["metrics"]["metric"])


def test_a_judge_can_prune_the_run_at_a_validation(tmp_path):
    seen = []

    def judge(entry):
        seen.append(entry["step"])
        return entry["step"] >= 10

    record = train(load_config(tiny_config(tmp_path), ["train.steps=30", "train.eval_every=5"]), on_validation=[judge])
    assert record["status"] == "pruned" and seen == [5, 10] and record["timings"]["steps"] == 10
    assert math.isfinite(record["metrics"]["metric"])


def test_stop_at_ends_the_run_at_the_first_validation_that_reaches_the_target(tmp_path):
    settings = ["train.steps=80", "train.eval_every=5", "task.options.n_train=256", "optim.lr=0.05"]
    whole = run(tmp_path / "whole", settings)
    metrics = [h["val_metric"] for h in whole["history"]]
    first = next(i for i, m in enumerate(metrics) if m >= 0.8)
    assert 0 < first < len(metrics) - 1  # the target is met mid-run, not at the first or the last validation

    record = run(tmp_path / "stopped", settings + ["train.stop_at=0.8"])
    stripped = lambda history: [{k: v for k, v in h.items() if k != "time_s"} for h in history]  # noqa: E731
    assert stripped(record["history"]) == stripped(whole["history"][: first + 1])  # the same run, cut there
    assert record["status"] == "finished" and record["timings"]["steps"] == whole["history"][first]["step"]
    assert record["metrics"]["stopped_at_target"] and not whole["metrics"]["stopped_at_target"]
    assert record["metrics"]["val_best"] == max(metrics[: first + 1])  # the test still uses the selection


@pytest.mark.parametrize(
    "kind, target, stops",
    [("terminal", 0.0, True), ("terminal", 1.01, False), ("regression", 1e9, True), ("regression", -1.0, False)],
)
def test_stop_at_reads_the_metric_s_direction(tmp_path, kind, target, stops):
    # accuracy is reached from below and MSE from above: a target every value meets ends the run at the first
    # validation, one no value can meet never does
    record = run(
        tmp_path, ["train.steps=15", "train.eval_every=5", f"task.options.kind={kind}", f"train.stop_at={target}"]
    )
    assert record["timings"]["steps"] == (5 if stops else 15)
    assert record["metrics"]["stopped_at_target"] is stops


def test_a_run_cut_before_its_target_resumes_to_the_same_stop(tmp_path):
    settings = ["train.steps=80", "train.eval_every=5", "task.options.n_train=256", "optim.lr=0.05"]
    settings += ["train.stop_at=0.8"]
    whole = run(tmp_path / "a", settings)
    cfg = load_config(tiny_config(tmp_path / "b"), settings)
    with pytest.raises(TrainingInterrupted):
        train(cfg, callbacks=[stopping_at(7)])
    resumed = train(cfg, resume=True)
    assert resumed["timings"]["steps"] == whole["timings"]["steps"] < 80
    assert resumed["metrics"]["test"] == whole["metrics"]["test"]
    again = train(cfg, resume=True)  # resuming the stopped run trains nothing more
    assert again["timings"]["steps"] == whole["timings"]["steps"]


@pytest.mark.parametrize(
    "settings, message",
    [
        (["train.stop_at=.nan"], r"train.stop_at: expected a finite target and a validation split, got nan and 32 "),
        (["train.stop_at=0.9", "task.options.n_val=0", "train.select_on=last"], r"got 0.9 and 0 validation items"),
    ],
)
def test_stop_at_needs_a_finite_target_and_a_validation_split(tmp_path, settings, message):
    with pytest.raises(ConfigError, match=message):
        run(tmp_path, settings)


def test_lr_scales_give_matching_parameters_their_own_learning_rate(tmp_path):
    """optim.lr_scales: one Adam step moves a matched parameter by its scaled learning rate (Adam's first
    step is lr * sign(grad)), every other one by lr; a pattern that matches nothing is refused."""
    from ltdrnn.config import ConfigError
    from ltdrnn.models import build_model
    from ltdrnn.optimizers import build_optimizer

    cfg = load_config(
        tiny_config(tmp_path),
        ["model.cell=tarnn", "model.options={K: 1}", "optim.lr=0.01", "optim.lr_scales={'*.steps.*': 5}"],
    )
    model = build_model(cfg.model, TinyTask().info)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = build_optimizer(cfg, model)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    moved = {n: (before[n] - p.detach()).abs().max().item() for n, p in model.named_parameters()}
    steps = [n for n in moved if ".steps." in n]
    assert steps and all(abs(moved[n] - 0.05) < 1e-6 for n in steps)
    assert all(abs(moved[n] - 0.01) < 1e-6 for n in moved if n not in steps)
    with pytest.raises(ConfigError, match="optim.lr_scales: pattern 'nothing.\\*' matches no trainable parameter"):
        build_optimizer(load_config(tiny_config(tmp_path), ["optim.lr_scales={'nothing.*': 2}"]), model)
    with pytest.raises(ConfigError, match="optim.lr_scales.x: expected a positive number, got -1"):
        load_config(tiny_config(tmp_path), ["optim.lr_scales={x: -1}"])
