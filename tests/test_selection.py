"""Which checkpoint a run tests: ``train.select_on=metric_then_loss`` takes the best validation metric and,
among checkpoints tied on it, the lowest validation loss (``metric`` keeps the first of the tied ones)."""

import pytest
import torch

from harness_helpers import install, tiny_config
from ltdrnn.config import ConfigError, load_config
from ltdrnn.evaluation import evaluate_checkpoint
from ltdrnn.train import train

SETTINGS = ["train.steps=40", "train.eval_every=5", "optim.lr=0.05", "task.options.n_val=16"]


@pytest.fixture(autouse=True)
def tiny(monkeypatch):
    install(monkeypatch)
    torch.set_num_threads(1)


def run(tmp_path, select_on):
    return train(load_config(tiny_config(tmp_path / select_on), SETTINGS + [f"train.select_on={select_on}"]))


def test_metric_then_loss_breaks_a_tie_on_the_metric_by_the_lower_loss(tmp_path):
    record = run(tmp_path, "metric_then_loss")
    history = record["history"]
    first_best = max(history, key=lambda h: h["val_metric"])
    best = min(history, key=lambda h: (-h["val_metric"], h["val_loss"]))
    assert best["step"] != first_best["step"]  # the run holds a tie that the loss settles
    assert record["metrics"]["best_step"] == best["step"]
    assert record["metrics"]["checkpoint"] == "best validation metric_then_loss"
    assert evaluate_checkpoint(record["run_dir"])["metric"] == record["metrics"]["test"]["metric"]
    # the same training selected on the metric alone keeps the first of the tied checkpoints
    assert run(tmp_path, "metric")["metrics"]["best_step"] == first_best["step"]


def test_an_unknown_selection_rule_is_refused_with_the_choices(tmp_path):
    with pytest.raises(ConfigError, match="metric_then_loss"):
        load_config(tiny_config(tmp_path), ["train.select_on=accuracy"])
