"""SRNN's Triton kernels (ltdrnn.cells.fused.srnn_triton) against the reference loop: outputs, final state
and every gradient, with lengths, several T and batches that do not fill a program's block; the operators'
fake implementations and torch.compile. On the CPU they run in Triton's interpreter (tests/triton_helpers.py)."""

from __future__ import annotations

import pytest
import torch

from triton_helpers import DEVICE, DTYPE, assert_triton_matches_reference, build, requires_triton, sequence

pytestmark = requires_triton


@pytest.mark.parametrize("steps, batch", [(1, 3), (6, 5), (9, 17)])
@pytest.mark.parametrize("options", [{}, {"activation": "tanh", "gate": False}])
def test_triton_equals_the_reference(steps, batch, options):
    cell = build("srnn", hidden_size=20, hyper_size=5, **options)
    assert_triton_matches_reference(cell, *sequence(cell, steps, batch))


def test_nan_input_propagates_as_in_the_reference():
    cell = build("srnn", hidden_size=16, hyper_size=5)
    x, state, _ = sequence(cell, 4, 3)
    x[1, 0, 0] = float("nan")
    with torch.no_grad():
        out, _ = cell.scan(x, state, impl="triton")
        ref, _ = cell.scan(x, state, impl="reference")
    assert torch.equal(out.isnan(), ref.isnan()) and out[1:, 0].isnan().any()


def test_fake_implementations_and_autograd_registration_pass_opcheck():
    from ltdrnn.cells.fused import srnn_triton  # noqa: F401  (registers the operators)

    beta = torch.randn(3, 5, 8, dtype=DTYPE, device=DEVICE, requires_grad=True)
    h0 = torch.randn(5, 8, dtype=DTYPE, device=DEVICE, requires_grad=True)
    torch.library.opcheck(torch.ops.ltdrnn.srnn_triton_forward, (beta, h0, torch.tensor([3, 1, 2, 3, 2]), 0))


def test_compiles_with_torch_compile_in_one_graph():
    cell = build("srnn", hidden_size=16, hyper_size=5)
    x, state, _ = sequence(cell, 5, 3)

    def loss(x, state):
        out, final = cell.scan(x, state, impl="triton")
        return out.square().sum() + final.sum()

    expected = loss(x, state)
    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x, state), expected)
