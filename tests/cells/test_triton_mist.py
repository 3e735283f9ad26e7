"""MIST's Triton kernels (ltdrnn.ops.mist_triton) against the reference loop: outputs, final history and
every gradient (the initial history's included), with lengths shorter and longer than the longest delay, several
T and batches that do not fill a program's block. On the CPU they run in Triton's interpreter
(tests/triton_helpers.py)."""

from __future__ import annotations

import pytest
import torch

from triton_helpers import DEVICE, DTYPE, assert_triton_matches_reference, build, requires_triton, sequence

pytestmark = requires_triton


@pytest.mark.parametrize("steps, batch", [(1, 3), (7, 5), (6, 17)])
def test_triton_equals_the_reference(steps, batch):
    cell = build("mist", hidden_size=20, num_delays=3)  # delays 1, 2, 4: T = 7 reaches past the history
    assert_triton_matches_reference(cell, *sequence(cell, steps, batch))


@pytest.mark.parametrize("delays", [1, 5])
def test_one_and_many_delays(delays):
    cell = build("mist", hidden_size=17, num_delays=delays)
    assert_triton_matches_reference(cell, *sequence(cell, 5, 4))


def test_hidden_size_above_one_product_chunk():
    cell = build("mist", input_size=2, hidden_size=70, num_delays=2)
    assert_triton_matches_reference(cell, *sequence(cell, 3, 2))


def test_fake_implementations_and_autograd_registration_pass_opcheck():
    from ltdrnn.ops import mist_triton  # noqa: F401  (registers the operators)

    def tensor(*shape, scale=1.0):
        return (torch.randn(*shape, dtype=DTYPE, device=DEVICE) * scale).requires_grad_()

    lengths = torch.tensor([3, 1, 2, 3, 2])
    args = (tensor(3, 5, 2 + 32), tensor(5, 2, 16), tensor(18, 16, scale=0.2), tensor(16, 16, scale=0.2), lengths)
    torch.library.opcheck(torch.ops.ltdrnn.mist_triton_forward, args)
