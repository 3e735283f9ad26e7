"""A run whose validation split is empty is refused before training unless it tests its
final weights (``train.select_on=last``); no metric of an empty split is ever reported."""

import numpy as np
import pytest

from ltdrnn.config import ConfigError, load_config
from ltdrnn.evaluation import evaluate, evaluate_checkpoint
from ltdrnn.tasks import build_task
from ltdrnn.train import train


def _two_per_class(tmp_path):
    """A learnable set with two TRAIN series per class: a stratified 20 % keeps none for validation."""
    rng = np.random.default_rng(0)
    ramp = np.linspace(-1, 1, 12)

    def rows(per_class):
        labels = np.repeat(["up", "down"], per_class)
        x = np.stack([(1 if label == "up" else -1) * ramp + 0.1 * rng.normal(size=12) for label in labels])
        return x.astype(np.float32), labels

    (x_train, y_train), (x_test, y_test) = rows(2), rows(20)
    path = tmp_path / "tiny.npz"
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return str(path)


def _config(tmp_path, *overrides):
    return load_config(
        "ucr/default",
        [
            f"task.options.arrays={_two_per_class(tmp_path)}",
            "model.cell=lstm",
            "model.hidden_size=8",
            "train.steps=30",
            "train.eval_every=10",
            "train.progress=false",
            "train.threads=1",
            f"run_dir={tmp_path / 'run'}",
            *overrides,
        ],
    )


def test_an_empty_validation_split_is_refused_before_training(tmp_path):
    cfg = _config(tmp_path)
    assert cfg.train.select_on == "loss"
    with pytest.raises(ConfigError, match=r"train\.select_on: the validation split .* is empty.*select_on=last"):
        train(cfg)
    assert not (tmp_path / "run" / "last.pt").exists() and not (tmp_path / "run" / "history.jsonl").exists()


def test_select_on_last_tests_the_final_weights_and_reports_no_validation(tmp_path):
    record = train(_config(tmp_path, "train.select_on=last"))
    metrics = record["metrics"]
    assert metrics["checkpoint"] == "last" and metrics["best_step"] == 30
    assert metrics["val_best"] is None
    assert record["history"] == []  # no entry holds a metric of the empty split
    assert not (tmp_path / "run" / "best.pt").exists()
    assert evaluate_checkpoint(tmp_path / "run")["metric"] == metrics["metric"]


def test_evaluating_an_empty_split_is_an_error_not_a_zero(tmp_path):
    task = build_task("uea_ucr", arrays=_two_per_class(tmp_path))
    assert len(task.dataset("val")) == 0
    with pytest.raises(ConfigError, match="split: the 'val' split of task 'uea_ucr' is empty"):
        evaluate(None, task, "val", 8)
