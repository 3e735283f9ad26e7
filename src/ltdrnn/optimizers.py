"""The optimiser and learning-rate schedule a run config asks for: Adam, RMSprop or SGD with L2, parameter
groups of their own learning rate (``optim.lr_scales``), and TARNN's halving every tau epochs."""

from __future__ import annotations

import fnmatch
from typing import Any, Dict, List, Optional

import torch
from torch import nn

from .config import ConfigError, RunConfig


def build_optimizer(cfg: RunConfig, model: nn.Module) -> torch.optim.Optimizer:
    """Adam, RMSprop (``alpha``, ``momentum``) or SGD (``momentum``), all with L2 ``weight_decay``;
    parameters matched by ``optim.lr_scales`` form groups with their own learning rate."""
    o = cfg.optim
    params = parameter_groups(model, o.lr, o.lr_scales)
    if o.name == "adam":
        return torch.optim.Adam(params, lr=o.lr, weight_decay=o.weight_decay)
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
