"""Evaluation of a model on a task's split, and the batches both training and evaluation read:
:func:`evaluate` (the metrics of a split, data-parallel under torchrun), :func:`evaluate_checkpoint`
(a saved run), :func:`validation_size` (an empty validation split refused before training)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

import torch
from torch import nn

from . import distributed as D
from . import metrics as M
from .checkpoint import restore_model
from .config import ConfigError, RunConfig


def evaluate_checkpoint(
    path: str | Path, split: str = "test", overrides: Optional[List[str]] = None
) -> Dict[str, float]:
    """Metrics of a saved checkpoint (``best.pt``/``last.pt`` or a run dir) on ``split``."""
    cfg, task, model = restore_model(path, overrides)
    return evaluate(model, task, split, cfg.train.eval_batch_size or cfg.train.batch_size)[0]


def evaluate(
    model: nn.Module, task, split: str, batch_size: int, max_batches: Optional[int] = None, device: str = "cpu"
):
    """``(summary, skip_fraction)`` of ``model`` on ``split``; ``max_batches`` caps the work."""
    evaluator = M.Evaluator(task.info)
    kept = total = 0.0
    dataset = task.dataset(split)
    if len(dataset) == 0:  # a metric of nothing would be an invented number (a loss of 0.0)
        raise ConfigError(
            f"split: the {split!r} split of task {task.info.name!r} is empty; there is nothing to evaluate"
        )
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for i, indices in enumerate(chunks(range(len(dataset)), batch_size)):
            if max_batches is not None and i >= max_batches:
                break
            if not D.owns(i):
                continue
            x, y, lengths = batch_on(task, dataset, indices, device)
            pred = model(x, lengths)
            evaluator.add(pred, y, lengths)
            skip = M.skip_fraction(model.aux, lengths)
            if skip is not None:
                kept += (1 - skip) * len(indices)
                total += len(indices)
    model.train(was_training)
    D.reduce_sums(evaluator)
    kept, total = D.all_reduce_sum([kept, total])
    return evaluator.summary(), (1 - kept / total if total else None)


def validation_size(cfg: RunConfig, task) -> int:
    """Items in the task's validation split. An empty one is refused here, before any training, unless
    ``train.select_on`` is ``last``: selecting a checkpoint on nothing kept the first one evaluated (its
    "loss" of 0.0 was never beaten), and the reported test came from it."""
    size = len(task.dataset("val"))
    if size == 0 and cfg.train.select_on != "last":
        options = cfg.task.options
        why = f" (val_fraction {options['val_fraction']})" if "val_fraction" in options else ""
        raise ConfigError(
            f"train.select_on: the validation split of task {cfg.task.name!r} is empty{why}, so no checkpoint "
            f"can be selected on its {cfg.train.select_on}; expected train.select_on=last (test the final "
            "weights) or a task with a validation split (UCR sets: a class needs 3 training series for one "
            "to validate at val_fraction 0.2)"
        )
    return size


def chunks(items, size: int) -> List[List[int]]:
    items = list(items)
    return [items[i : i + size] for i in range(0, len(items), size)]


def epoch_order(n: int, batch_size: int, seed: int, epoch: int) -> List[List[int]]:
    """The batches of an epoch: a permutation drawn from ``(seed, epoch)`` only, cut into batches."""
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return chunks(torch.randperm(n, generator=generator).tolist(), batch_size)


def batch_on(task, dataset, indices: List[int], device):
    x, y, lengths = task.collate([dataset[i] for i in indices])
    return x.to(device), y.to(device), (lengths.to(device) if lengths is not None else None)
