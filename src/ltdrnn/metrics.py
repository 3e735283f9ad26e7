"""Losses and metrics: task loss, accuracy, MSE, cross entropy against the memoryless baseline,
perplexity; model size, parameter count, latency, skip fraction and analytic FLOPs.

Shapes use the legend of :mod:`ltdrnn.cells.base`; ``o`` is the number of classes or outputs.

Per-sequence loss ``l_b``: terminal tasks score one output per sequence; per-step tasks average over the
sequence's valid steps (``t < lengths[b]`` and target != ``ignore_index``). The batch loss is
``mean_b l_b`` (``reduction="mean"``) or ``sum_b l_b`` (``"sum"``, MIST's convention).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .cells.masked import update_counts
from .ops.common import step_mask
from .tasks.base import TaskInfo


# ---- losses ---------------------------------------------------------------------------------------
def valid_steps(y: Tensor, lengths: Optional[Tensor], info: TaskInfo) -> Tensor:
    """``(B, T)`` bool: the steps of a per-step target that count."""
    batch, steps = y.shape[0], y.shape[1]
    valid = torch.ones(batch, steps, dtype=torch.bool, device=y.device)
    if lengths is not None:
        valid &= step_mask(steps, lengths, y.device).T
    if info.ignore_index is not None and info.loss == "cross_entropy":
        valid &= y != info.ignore_index
    return valid


def per_sequence_loss(pred: Tensor, y: Tensor, info: TaskInfo, lengths: Optional[Tensor] = None) -> Tensor:
    """``(B,)`` loss of each sequence (cross entropy or squared error, averaged over its valid steps)."""
    if info.target == "terminal":
        if info.loss == "cross_entropy":
            return F.cross_entropy(pred, y, reduction="none")
        return (pred - y.reshape(pred.shape)).pow(2).flatten(1).mean(1)
    valid = valid_steps(y, lengths, info).to(pred.dtype)
    if info.loss == "cross_entropy":
        safe = torch.where(valid.bool(), y, torch.zeros_like(y))
        step_loss = F.cross_entropy(pred.transpose(1, 2), safe, reduction="none")
    else:
        step_loss = (pred - y.reshape(pred.shape)).pow(2).flatten(2).mean(2)
    return (step_loss * valid).sum(1) / valid.sum(1).clamp_min(1)


def task_loss(
    pred: Tensor, y: Tensor, info: TaskInfo, lengths: Optional[Tensor] = None, reduction: str = "mean"
) -> Tensor:
    """The scalar training loss: per-sequence losses averaged (``mean``) or summed (``sum``)."""
    losses = per_sequence_loss(pred, y, info, lengths)
    return losses.sum() if reduction == "sum" else losses.mean()


# ---- evaluation ------------------------------------------------------------------------------------
class Evaluator:
    """Accumulates a split's metrics batch by batch.

    ``summary()`` gives ``loss`` (mean per-sequence loss), the task's headline ``metric`` under its own
    name, and for classification ``accuracy``, ``cross_entropy`` (per valid step) and ``perplexity``; for
    regression ``mse``. A task with ``recall_steps`` (the copy tasks) adds ``recall_accuracy``: the accuracy
    on the last ``recall_steps`` steps of every sequence, the symbols recalled.
    """

    def __init__(self, info: TaskInfo) -> None:
        self.info = info
        self.loss_sum = 0.0
        self.sequences = 0
        self.correct = 0
        self.scored = 0
        self.token_ce = 0.0
        self.sq_err = 0.0
        self.sq_count = 0
        self.recalled = 0
        self.recall_scored = 0

    @torch.no_grad()
    def add(self, pred: Tensor, y: Tensor, lengths: Optional[Tensor] = None) -> None:
        info = self.info
        self.loss_sum += float(per_sequence_loss(pred, y, info, lengths).sum())
        self.sequences += y.shape[0]
        if info.loss == "cross_entropy":
            if info.target == "terminal":
                mask = torch.ones_like(y, dtype=torch.bool)
                ce = F.cross_entropy(pred, y, reduction="none")
                hits = pred.argmax(-1) == y
            else:
                mask = valid_steps(y, lengths, info)
                safe = torch.where(mask, y, torch.zeros_like(y))
                ce = F.cross_entropy(pred.transpose(1, 2), safe, reduction="none")
                hits = pred.argmax(-1) == safe
            self.correct += int((hits & mask).sum())
            self.scored += int(mask.sum())
            self.token_ce += float((ce * mask).sum())
            if info.recall_steps and info.target == "per_step":
                tail = mask[:, -info.recall_steps :]
                self.recalled += int((hits[:, -info.recall_steps :] & tail).sum())
                self.recall_scored += int(tail.sum())
        else:
            err = (pred - y.reshape(pred.shape)).pow(2)
            if info.target == "terminal":
                count = err.numel()
            else:
                mask = valid_steps(y, lengths, info).unsqueeze(-1)
                err = err * mask
                count = int(mask.sum()) * pred.shape[-1]
            self.sq_err += float(err.sum())
            self.sq_count += count

    def summary(self) -> Dict[str, float]:
        out = {"loss": self.loss_sum / max(self.sequences, 1)}
        if self.info.loss == "cross_entropy":
            ce = self.token_ce / max(self.scored, 1)
            out.update(
                accuracy=self.correct / max(self.scored, 1), cross_entropy=ce, perplexity=math.exp(min(ce, 700.0))
            )
            if self.recall_scored:
                out["recall_accuracy"] = self.recalled / self.recall_scored
        else:
            out["mse"] = self.sq_err / max(self.sq_count, 1)
        out["metric"] = out[self.info.metric] if self.info.metric in out else out["loss"]
        return out


def beats_baseline(value: float, info: TaskInfo) -> bool:
    """Whether a headline metric value is better than the task's memoryless/trivial baseline."""
    return value > info.baseline if info.higher_is_better else value < info.baseline


# ---- model cost ------------------------------------------------------------------------------------
def parameter_count(model: nn.Module) -> int:
    """Trainable parameters (shared tensors counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters() if p.requires_grad}.values())


def model_size_kb(model: nn.Module) -> float:
    """Bytes of all parameters and buffers at their stored dtype, in KB (1024 bytes)."""
    tensors = {id(t): t for t in list(model.parameters()) + list(model.buffers())}.values()
    return sum(t.numel() * t.element_size() for t in tensors) / 1024.0


def skip_fraction(aux_per_cell: List[dict], lengths: Optional[Tensor] = None) -> Optional[float]:
    """``1 - mean(update_mask)`` over layers, valid steps, batch and units; None if no cell has a mask.

    ``aux_per_cell``: the Recurrent's ``aux`` (one dict per layer and direction), each mask ``(T, B, ...)``.
    """
    kept, total = 0.0, 0.0
    for aux in aux_per_cell:
        mask = aux.get("update_mask") if isinstance(aux, dict) else None
        if mask is None:
            continue
        updated, counted = update_counts(mask.detach(), lengths)
        kept += float(updated)
        total += float(counted)
    if total == 0:
        return None
    return 1.0 - kept / total


def flops_per_sequence(model, steps: int, skip: Optional[float] = None) -> Optional[float]:
    """Analytic FLOPs of the recurrent stack for one sequence of ``steps`` steps, from
    ``ltdrnn.flops.flops_per_sequence``; None when that module or the cell's formula is missing."""
    try:
        from . import flops
    except ImportError:
        return None
    try:
        return float(sum(flops.flops_per_sequence(cell, steps, skip_fraction=skip) for cell in model.rnn.cells))
    except (NotImplementedError, KeyError, TypeError, ValueError, AttributeError):
        return None


@torch.no_grad()
def latency(model, example: Tensor, repeats: int = 5) -> Dict[str, float]:
    """Median wall time of inference at batch 1: ``per_sequence_ms`` (a whole ``forward``) and
    ``per_step_ms`` (one streaming ``Recurrent.step``), in milliseconds.

    ``example``: one input sequence ``(T, d)`` or ids ``(T,)``.
    """
    was_training = model.training
    model.eval()
    x = example.unsqueeze(0)
    model(x)  # warm-up
    per_sequence = _median_time(lambda: model(x), repeats)
    stream_input = model.embed(x) if model.embed is not None else x
    steps = stream_input[0].unbind(0)[: max(1, min(64, stream_input.shape[1]))]

    def stream():
        state = None
        for x_t in steps:
            _, state = model.rnn.step(x_t.unsqueeze(0), state)

    per_step = _median_time(stream, repeats) / len(steps) if not model.rnn.bidirectional else float("nan")
    model.train(was_training)
    return {"per_sequence_ms": per_sequence * 1e3, "per_step_ms": per_step * 1e3}


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
