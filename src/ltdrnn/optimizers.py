"""The optimiser and learning-rate schedule a run config asks for: Adam, RMSprop or SGD with L2, parameter
groups of their own learning rate (``optim.lr_scales``), TARNN's halving every tau epochs, and the guard that
skips the update of a batch whose gradient norm spikes (``optim.skip_spikes``); and the moving average of
the weights that a run validates and tests in place of the latest ones (``train.ema_decay``)."""

from __future__ import annotations

import contextlib
import fnmatch
import math
import statistics
from collections import deque
from typing import Any, Dict, List, Optional

import torch
from torch import nn

from .config import ConfigError, RunConfig


def build_optimizer(cfg: RunConfig, model: nn.Module) -> torch.optim.Optimizer:
    """Adam (``beta2``), RMSprop (``alpha``, ``momentum``) or SGD (``momentum``), all with L2 ``weight_decay``;
    parameters matched by ``optim.lr_scales`` form groups with their own learning rate."""
    o = cfg.optim
    params = parameter_groups(model, o.lr, o.lr_scales)
    if o.name == "adam":
        return torch.optim.Adam(params, lr=o.lr, betas=(0.9, o.beta2), weight_decay=o.weight_decay)
    if o.name == "rmsprop":
        return torch.optim.RMSprop(params, lr=o.lr, alpha=o.alpha, momentum=o.momentum, weight_decay=o.weight_decay)
    return torch.optim.SGD(params, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)


def parameter_groups(model: nn.Module, lr: float, scales: Dict[str, float]) -> List[Dict[str, Any]]:
    """The trainable parameters in groups of one learning rate: ``lr`` times the factor of the first
    pattern of ``scales`` (``fnmatch`` on the parameter's name) that the name matches, 1 otherwise."""
    groups: Dict[float, List[nn.Parameter]] = {}
    used = set()
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        pattern = next((pat for pat in scales if fnmatch.fnmatchcase(name, pat)), None)
        used.add(pattern)
        groups.setdefault(lr * scales[pattern] if pattern else lr, []).append(p)
    unused = [pattern for pattern in scales if pattern not in used]
    if unused:
        raise ConfigError(f"optim.lr_scales: pattern {unused[0]!r} matches no trainable parameter of the model")
    return [{"params": ps, "lr": group_lr} for group_lr, ps in groups.items()]


def build_scheduler(cfg: RunConfig, optimizer: torch.optim.Optimizer) -> Optional[torch.optim.lr_scheduler.StepLR]:
    """Every learning rate halved every ``optim.halve_every`` epochs (TARNN's tau; the trainer steps it
    at each epoch's end); None without it."""
    if not cfg.optim.halve_every:
        return None
    return torch.optim.lr_scheduler.StepLR(optimizer, cfg.optim.halve_every, gamma=0.5)


class SpikeGuard:
    """Clips the gradients (``optim.clip_norm``) and, with ``optim.skip_spikes = f``, vetoes the update of a
    batch whose global gradient norm (before clipping) is not finite or above ``f`` times the median of the
    last ``WINDOW`` finite norms, vetoed or not (judged once ``MIN_SEEN`` are known). Vetoed norms count: a
    lasting change of scale becomes the median within half a window and updates resume (a guard that
    remembered only the norms it let through vetoed every step after one, lab/notes/tarnn.md).

    Why: a long copy run can meet a batch whose backward pass explodes at an ordinary loss (TARNN copy
    T = 500: the norm 1,000 x its median at a loss of 0.005, lab/notes/tarnn.md). Clipping bounds the
    step's length but not its direction, and Adam's second moment, small in the exploding coordinates,
    turns it into the largest step of the run; the next forward pass overflows. Skipping the batch keeps
    the weights and the optimiser's moments as they were. ``skipped`` lists the steps vetoed."""

    WINDOW = 50
    MIN_SEEN = 10

    def __init__(self, factor: Optional[float], clip_norm: Optional[float]):
        self.factor, self.clip_norm = factor, clip_norm
        self.norms: deque = deque(maxlen=self.WINDOW)
        self.skipped: List[int] = []

    def admits(self, parameters: List[nn.Parameter], step: int) -> bool:
        """Clip the gradients of ``parameters``; False when ``step``'s update is to be skipped."""
        if not self.factor:
            if self.clip_norm:
                nn.utils.clip_grad_norm_(parameters, self.clip_norm)
            return True
        norm = float(nn.utils.clip_grad_norm_(parameters, self.clip_norm or math.inf))
        if not math.isfinite(norm):
            self.skipped.append(step)
            return False
        spike = len(self.norms) >= self.MIN_SEEN and norm > self.factor * statistics.median(self.norms)
        self.norms.append(norm)
        if spike:
            self.skipped.append(step)
        return not spike

    def state_dict(self) -> Dict[str, Any]:
        return {"norms": list(self.norms), "skipped": list(self.skipped)}

    def load_state_dict(self, state: Optional[Dict[str, Any]]) -> None:
        """A checkpoint written without the guard's state starts it afresh."""
        state = state or {}
        self.norms = deque((float(n) for n in state.get("norms", [])), maxlen=self.WINDOW)
        self.skipped = [int(s) for s in state.get("skipped", [])]


class WeightAverage:
    """The exponential moving average of a model's parameters (``train.ema_decay``), bias-corrected.

    After update t the average is ``sum_i decay ** (t - i) * w_i / sum_i decay ** (t - i)`` over the
    weights ``w_1 .. w_t`` after each update: the first update copies the weights, so the initial ones
    weigh nothing. Buffers are not averaged.
    """

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay, self.updates = decay, 0
        self.params = [p.detach().clone() for p in model.parameters()]

    def update(self, model: nn.Module) -> None:
        self.updates += 1
        weight = (1 - self.decay) / (1 - self.decay**self.updates)
        with torch.no_grad():
            for average, p in zip(self.params, model.parameters()):
                average.lerp_(p.detach(), weight)

    @contextlib.contextmanager
    def applied(self, model: nn.Module):
        """The model holds the average inside the block and its own weights again after it."""
        own = [p.detach().clone() for p in model.parameters()]
        with torch.no_grad():
            for p, average in zip(model.parameters(), self.params):
                p.copy_(average)
        try:
            yield model
        finally:
            with torch.no_grad():
                for p, weights in zip(model.parameters(), own):
                    p.copy_(weights)

    def state_dict(self) -> Dict[str, Any]:
        return {"decay": self.decay, "updates": self.updates, "params": self.params}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.updates = state["updates"]
        for average, saved in zip(self.params, state["params"]):
            average.copy_(saved)
