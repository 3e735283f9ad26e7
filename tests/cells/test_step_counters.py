"""The step counter of per-time-step step sizes (TARNN's and iRNN's ``eta_per_time_step``, ``state[1]``): every
backend, the streaming call and the layer refuse a counter outside ``[0, max_length - T]`` with one error naming
``state[1]``, before any path reads the step sizes (a negative counter read them from the table's end in the
reference, raised raw IndexErrors in the PyTorch and compiled loops and read out of bounds in the Triton kernels).
The Triton path runs in Triton's interpreter on the CPU (tests/triton_helpers.py)."""

from __future__ import annotations

import re

import pytest
import torch

import ltdrnn
from ltdrnn.ops.triton_support import triton_runs_on
from triton_helpers import DEVICE, DTYPE, requires_triton

MAX_LENGTH, T, B = 10, 4, 2
BACKENDS = ["reference", "torch", "cpp", pytest.param("triton", marks=requires_triton)]
CELLS = {"tarnn": {"K": 2}, "irnn": {"K": 1}}  # iRNN's Triton kernel runs K = 1
#: counters that cannot run T = 4 steps within max_length = 10
BAD = {"negative": [-3, -3], "mixed": [-3, 2], "at max_length": [10, 10], "past T's room": [7, 0]}


def cell_for(name: str, backend: str):
    torch.manual_seed(0)
    cell = ltdrnn.build(name, 3, 8, backend=backend, eta_per_time_step=True, max_length=MAX_LENGTH, **CELLS[name])
    return cell.to(device=DEVICE, dtype=DTYPE)


def state(counters) -> tuple:
    return torch.zeros(B, 8, dtype=DTYPE, device=DEVICE), torch.tensor(counters, device=DEVICE)


def refusal(counters, steps: int) -> str:
    low, high = min(counters), max(counters)
    expected = f"state[1]: expected step counters in [0, {MAX_LENGTH - steps}]"
    return re.escape(expected) + ".*" + re.escape(f"got min {low}, max {high}")


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CELLS))
def test_a_scan_refuses_counters_without_room(name, backend, case):
    cell = cell_for(name, backend)
    x = torch.randn(T, B, 3, dtype=DTYPE, device=DEVICE)
    if backend == "triton":
        assert triton_runs_on(x)
    with pytest.raises(ValueError, match=refusal(BAD[case], T)):
        cell.scan(x, state(BAD[case]))
    outputs, (_, moved) = cell.scan(x, state([MAX_LENGTH - T, 0]))  # the last start with room runs
    assert moved.tolist() == [MAX_LENGTH, T] and bool(torch.isfinite(outputs).all())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CELLS))
def test_a_streaming_step_is_one_time_step(name, backend):
    """``cell(x_t, state)`` runs T = 1: a counter at max_length - 1 steps once more, one at max_length or
    below 0 is refused, with or without autograd."""
    cell = cell_for(name, backend)
    x_t = torch.randn(B, 3, dtype=DTYPE, device=DEVICE)
    for bad in ([MAX_LENGTH, 0], [-1, 0]):
        with pytest.raises(ValueError, match=refusal(bad, 1)):
            cell(x_t, state(bad))
        with torch.no_grad(), pytest.raises(ValueError, match=refusal(bad, 1)):
            cell(x_t, state(bad))
    _, (_, moved) = cell(x_t, state([MAX_LENGTH - 1, 3]))
    assert moved.tolist() == [MAX_LENGTH, 4]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CELLS))
def test_the_layer_refuses_counters_without_room(name, backend):
    """``Recurrent`` passes each layer's counters to its cell: its forward and its streaming step refuse them."""
    torch.manual_seed(0)
    layer = ltdrnn.Recurrent(name, 3, 8, num_layers=2, backend=backend, eta_per_time_step=True, max_length=MAX_LENGTH,
                             **CELLS[name]).to(device=DEVICE, dtype=DTYPE)  # fmt: skip
    h = torch.zeros(2, B, 8, dtype=DTYPE, device=DEVICE)
    counters = torch.tensor([[0, 0], [-2, 0]], device=DEVICE)
    x = torch.randn(B, T, 3, dtype=DTYPE, device=DEVICE)
    with pytest.raises(ValueError, match=refusal([-2, 0], T)):
        layer(x, (h, counters))
    with torch.no_grad(), pytest.raises(ValueError, match=refusal([-2, 0], 1)):
        layer.step(x[:, 0], (h, counters))
    _, (_, moved) = layer(x, (h, counters.clamp(min=0)))
    assert moved.tolist() == [[T, T], [T, T]]
