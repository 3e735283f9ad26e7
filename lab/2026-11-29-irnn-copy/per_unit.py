"""A step size per hidden unit (and per time step) for the ungated iRNN: a lab-only variant, not in the paper.

The paper's eta_k^i is one number per Euler step i and time step k. Here ``eta`` is ``(max_length, K, H)``,
raw and kept in [0, eta_max] as ``eta_param="projected"``, so each unit integrates at its own rate, as the
authors' gate lets it do (``h_k = h_{k-1} + u * g_K`` with ``u`` per unit). ``make_per_unit(model)`` turns the
built copy model's cell into this variant in place (reference loop, autograd); used by screen.py
``--per-unit``.
"""

from __future__ import annotations

import torch
from torch import nn

from ltdrnn.cells.irnn import IRNN
from ltdrnn.ops.common import join_counter, split_counter  # moved from cells/euler.py on 2026-11-29


class PerUnitIRNN(IRNN):
    def step(self, p_t, state):
        h, counter = split_counter(self.per_time_step, state)
        eta = self.steps.at(counter)  # (B, K, H)
        alpha = self.alpha()
        g = h if self.reading == "state" else torch.zeros_like(h)
        for i in range(self.K):
            y = g + h
            a = self.apply_u(y) + p_t
            drive = self.phi(self.apply_u(a) if self.projection else a)
            g = g + eta[:, i] * (drive - alpha * y)
        h_new = h + g if self.reading == "residual" else g
        return h_new, join_counter(h_new, counter + 1)


def make_per_unit(model):
    cell = model.rnn.cells[0]
    if not cell.per_time_step or cell.steps.param != "projected" or cell.gated:
        raise ValueError("per_unit: needs eta_per_time_step=true, eta_param=projected and no gate")
    old = cell.steps.eta.detach()
    cell.steps.eta = nn.Parameter(old[:, :, None].expand(*old.shape, cell.hidden_size).clone())
    cell.__class__ = PerUnitIRNN
    cell.backend = "reference"  # the per-unit step exists only as the reference loop
    return model
