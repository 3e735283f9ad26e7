"""A tiny cell and tiny tasks for the harness tests, registered only for the duration of a test.

``TinyCell``: ``h_t = tanh(W x_t + U h_{t-1} + b)``, with an extra loss ``penalty = ||U||^2``, an
``aux["update_mask"]`` of ones on the units whose pre-activation is positive.

``TinyTask``: T steps of 2 features drawn from N(0, 1); the target depends on the first step only, so a
model must carry it to the end: ``terminal`` class ``x[0, 0] > 0``; ``regression`` value ``x[0, 0]``;
``per_step`` class ``x[0, 0] > 0`` at every step.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from ltdrnn.cells import registry
from ltdrnn.cells.base import Cell
from ltdrnn.tasks import base as task_base
from ltdrnn.tasks.base import Task, TaskInfo


class TinyCell(Cell):
    def __init__(self, input_size, hidden_size, backend="auto", device=None, dtype=None):
        super().__init__(input_size, hidden_size, backend=backend, device=device, dtype=dtype)
        self.W = nn.Linear(input_size, hidden_size, **self.factory)
        self.U = nn.Parameter(torch.empty(hidden_size, hidden_size, **self.factory))
        self._masks = []
        nn.init.orthogonal_(self.U)

    def precompute(self, x):
        return self.W(x)

    def step(self, p_t, state):
        pre = p_t + state @ self.U.T
        self._masks.append((pre > 0).to(pre.dtype))
        h = torch.tanh(pre)
        return h, h

    def scan_reference(self, x, state, lengths=None):
        self._masks = []
        out = super().scan_reference(x, state, lengths)
        self.aux = {"update_mask": torch.stack(self._masks)}
        return out

    def losses(self):
        return {"penalty": (self.U**2).sum()}


class TinyTask(Task):
    def __init__(
        self, T: int = 6, kind: str = "terminal", n_train: int = 64, n_val: int = 32, n_test: int = 32, seed: int = 0
    ):
        self.T, self.kind, self.seed = T, kind, seed
        self.sizes = {"train": n_train, "val": n_val, "test": n_test}
        classes = kind != "regression"
        self.info = TaskInfo(
            name="tiny",
            input_size=2,
            output_size=2 if classes else 1,
            loss="cross_entropy" if classes else "mse",
            target="per_step" if kind == "per_step" else "terminal",
            metric="accuracy" if classes else "mse",
            higher_is_better=classes,
            baseline=0.5 if classes else 1.0,
            baseline_note="chance",
            seq_len=T,
        )

    def build_split(self, split):
        generator = torch.Generator().manual_seed(self.seed * 10 + ("train", "val", "test").index(split))
        x = torch.randn(self.sizes[split], self.T, 2, generator=generator)
        label = (x[:, 0, 0] > 0).long()
        if self.kind == "regression":
            y = x[:, 0, :1].clone()
        elif self.kind == "per_step":
            y = label.unsqueeze(1).expand(-1, self.T).clone()
        else:
            y = label
        return TensorDataset(x, y)


def install(monkeypatch) -> None:
    """Register ``tiny`` (cell) and ``tiny`` (task) for one test."""
    registry._load_all()
    task_base._load_all()
    entry = registry.Entry("tiny", TinyCell, "baseline", "test cell")
    monkeypatch.setitem(registry._REGISTRY, "tiny", entry)
    monkeypatch.setitem(task_base._TASKS, "tiny", TinyTask)


def tiny_config(tmp_path, **sections):
    """Plain config data for a quick run of the tiny cell on the tiny task; ``sections`` merge in."""
    from ltdrnn.config import deep_merge

    data = {
        "model": {"cell": "tiny", "hidden_size": 8},
        "task": {"name": "tiny"},
        "optim": {"name": "adam", "lr": 0.02},
        "train": {"steps": 10, "batch_size": 8, "eval_every": 5, "progress": False, "latency": False},
        "run_dir": str(tmp_path / "run"),
        "results": str(tmp_path / "results.db"),
    }
    return deep_merge(data, sections)


def train_tiny(tmp_path, overrides, callbacks=()) -> dict:
    """The trainer's record of a :func:`tiny_config` run under ``tmp_path`` with ``overrides`` applied."""
    from ltdrnn.config import load_config
    from ltdrnn.train import train

    return train(load_config(tiny_config(tmp_path), list(overrides)), callbacks=list(callbacks))


def train_adding_t100(tmp_path, model: dict, optim: dict) -> dict:
    """The training regression run of the source cells: 400 steps of adding T=100 at batch 64, seed 0,
    one thread, tested on 512 sequences; returns the trainer's record."""
    from ltdrnn.config import load_config
    from ltdrnn.train import train

    torch.set_num_threads(1)
    cfg = load_config(
        {
            "model": model,
            "task": {"name": "adding", "options": {"T": 100, "n_train": 25_600, "n_val": 256, "n_test": 512}},
            "optim": optim,
            "train": {
                "steps": 400,
                "batch_size": 64,
                "eval_every": 400,
                "seed": 0,
                "progress": False,
                "latency": False,
                "threads": 1,
            },
            "run_dir": str(tmp_path / "run"),
            "results": None,
        }
    )
    return train(cfg)
