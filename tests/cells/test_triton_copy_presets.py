"""The copy presets train on the Triton kernels, not on a loop: the model each one builds (per-time-step step
sizes, TARNN's exp parametrisation with its cap, iRNN's projected step sizes and the authors' gate) runs its
cell's Triton forward and backward once per training step, and never the reference loop or iRNN's PyTorch loop.
On the CPU the kernels run in Triton's interpreter (tests/triton_helpers.py), at T = 4 and H = 16."""

from __future__ import annotations

import pytest
import torch

from triton_helpers import DEVICE, DTYPE, requires_triton  # sets TRITON_INTERPRET=1 first

pytestmark = requires_triton

PRESETS = ["tarnn/copy", "irnn/copy", "reproduce/copy200-tarnn", "reproduce/copy200-irnn"]


def _model(preset: str):
    from ltdrnn.checkpoint import build_task_and_model
    from ltdrnn.config import load_config

    overrides = ["task.options.T=4", "model.hidden_size=16", "model.options.backend=triton"]
    task, model = build_task_and_model(load_config(preset, overrides))
    return task, model.to(device=DEVICE, dtype=DTYPE)


@pytest.mark.parametrize("preset", PRESETS)
def test_a_training_step_runs_the_kernels_and_no_loop(preset, monkeypatch):
    from ltdrnn.cells.base import Cell
    from ltdrnn.ops import irnn_torch, irnn_triton, tarnn_triton

    task, model = _model(preset)
    cell = next(m for m in model.modules() if isinstance(m, Cell))
    assert cell.per_time_step, "the copy presets learn a step size per time step"
    module, prefix = (tarnn_triton, "tarnn") if type(cell).__name__ == "TARNN" else (irnn_triton, "irnn")
    calls = []
    for name in (f"{prefix}_forward", f"{prefix}_backward"):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *args, real=real, name=name: calls.append(name) or real(*args))

    def loop(*args, **kwargs):
        raise AssertionError("a loop ran instead of the kernels")

    monkeypatch.setattr(type(cell), "scan_reference", loop)
    monkeypatch.setattr(irnn_torch.IRNNLoop, "apply", loop)
    x = torch.randn(3, cell.steps.max_length, cell.input_size, dtype=DTYPE, device=DEVICE)
    model(x).square().sum().backward()
    assert calls == [f"{prefix}_forward", f"{prefix}_backward"]
    assert (cell.steps.parameter.grad.abs().sum(-1) > 0).all(), "dL/deta missed a time step's row"
