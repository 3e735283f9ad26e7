"""A checkpoint evaluated after training gives the training run's own test numbers, for every
source cell (SA-RNN's annealed slope travels in its state dict as extra state)."""

import pytest
import torch

from ltdrnn.checkpoint import restore_model
from ltdrnn.config import load_config
from ltdrnn.evaluation import evaluate_checkpoint
from ltdrnn.train import train

SHORT = [
    "train.steps=24",
    "train.eval_every=8",
    "train.batch_size=32",
    "task.options.n_train=256",
    "task.options.n_val=64",
    "task.options.n_test=128",
    "train.progress=false",
    "train.latency=false",
    "results=null",
]


@pytest.mark.parametrize("cell", ["tarnn", "srnn", "mist", "irnn", "sarnn"])
def test_train_then_eval_gives_the_runs_own_test_metric(tmp_path, cell):
    torch.set_num_threads(1)
    record = train(load_config(f"quick/toy-{cell}", [*SHORT, f"run_dir={tmp_path / 'run'}"]))
    test = record["metrics"]["test"]
    again = evaluate_checkpoint(tmp_path / "run")
    assert again["metric"] == test["metric"] and again["loss"] == pytest.approx(test["loss"], rel=1e-6, abs=1e-7)
    if cell == "sarnn":  # three epochs: the slope the run tested with is no longer the initial one
        _, _, model = restore_model(tmp_path / "run")
        (cell_module,) = [m for m in model.modules() if hasattr(m, "anneal_slope")]
        assert cell_module.slope > cell_module.initial_slope
