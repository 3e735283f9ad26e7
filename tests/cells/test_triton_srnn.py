"""SRNN's Triton kernels (ltdrnn.ops.srnn_triton) against the reference loop: outputs, final state
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


def test_fake_implementations_and_autograd_registration_pass_opcheck():
    from ltdrnn.ops import srnn_triton  # noqa: F401  (registers the operators)

    beta = torch.randn(3, 5, 8, dtype=DTYPE, device=DEVICE, requires_grad=True)
    h0 = torch.randn(5, 8, dtype=DTYPE, device=DEVICE, requires_grad=True)
    torch.library.opcheck(torch.ops.ltdrnn.srnn_triton_forward, (beta, h0, torch.tensor([3, 1, 2, 3, 2]), 0))
