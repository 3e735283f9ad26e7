"""The source cells' Triton operators under torch.compile (one graph, fullgraph=True, forward and backward
through the operators' fake implementations) and torch.export, for every source cell. On the CPU the kernels run
in Triton's interpreter (tests/triton_helpers.py)."""

from __future__ import annotations

import pytest
import torch

from triton_helpers import build, requires_triton, sequence

pytestmark = [requires_triton, pytest.mark.slow]
CELLS = {
    "srnn": {"hyper_size": 5},
    "irnn": {"rank": 4},
    "tarnn": {"K": 2, "eta": 0.3},
    "sarnn": {},
    "mist": {"num_delays": 3},
}


@pytest.mark.parametrize("name", sorted(CELLS))
def test_compiles_in_one_graph_with_the_same_values_and_gradients(name):
    cell = build(name, hidden_size=16, backend="triton", **CELLS[name])
    x, state, _ = sequence(cell, 4, 3)

    def loss(x, state):
        out, final = cell.scan(x, state)
        return out.square().sum() + final.sum()

    x.requires_grad_()
    expected = loss(x, state)  # eager first: it also caches the state layout the check compares against
    (expected_grad,) = torch.autograd.grad(expected, x)
    got = torch.compile(loss, backend="aot_eager", fullgraph=True)(x, state)
    (grad,) = torch.autograd.grad(got, x)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(grad, expected_grad)


@pytest.mark.parametrize("name", sorted(CELLS))
def test_exports_with_torch_export(name):
    cell = build(name, hidden_size=16, backend="triton", **CELLS[name])
    x, state, _ = sequence(cell, 4, 3)

    class Scan(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cell = cell

        def forward(self, x, state):
            return self.cell.scan(x, state)[0]

    program = torch.export.export(Scan(), (x, state))
    assert any("triton_forward" in str(node.target) for node in program.graph.nodes)
    torch.testing.assert_close(program.module()(x, state), cell.scan(x, state)[0])
