"""iRNN's Triton kernels at K = 1 (ltdrnn.cells.fused.irnn_triton) against the reference loop: outputs, final
state and every gradient (the low-rank factors, eta and a learned alpha included), with lengths, several T and
batches that do not fill a program's block. On the CPU they run in Triton's interpreter (tests/triton_helpers.py)."""

from __future__ import annotations

import pytest
import torch

from triton_helpers import DEVICE, DTYPE, assert_triton_matches_reference, build, requires_triton, sequence

pytestmark = requires_triton


@pytest.mark.parametrize("steps, batch", [(1, 3), (6, 5), (7, 17)])
def test_triton_equals_the_reference(steps, batch):
    cell = build("irnn", hidden_size=20, rank=4)
    assert_triton_matches_reference(cell, *sequence(cell, steps, batch))


@pytest.mark.parametrize(
    "options",
    [
        {"rank": None, "projection": False, "reading": "paper", "activation": "tanh"},
        {"reading": "state", "learn_alpha": True, "alpha": 1.5, "activation": "sigmoid"},
        {"contractive": True, "eta": 0.5},
    ],
)
def test_triton_equals_the_reference_for_every_reading_and_activation(options):
    cell = build("irnn", hidden_size=18, **options)
    assert_triton_matches_reference(cell, *sequence(cell, 5, 4))


def test_hidden_size_above_one_product_chunk():
    cell = build("irnn", input_size=2, hidden_size=70, rank=8)  # HP = 128: two chunks of the state per product
    assert_triton_matches_reference(cell, *sequence(cell, 3, 2))


def test_fake_implementations_and_autograd_registration_pass_opcheck():
    from ltdrnn.cells.fused import irnn_triton  # noqa: F401  (registers the operators)

    def tensor(*shape):
        return torch.randn(*shape, dtype=DTYPE, device=DEVICE, requires_grad=True)

    eta, alpha = torch.full((1,), 0.3, dtype=DTYPE, device=DEVICE), torch.ones((), dtype=DTYPE, device=DEVICE)
    args = (
        tensor(3, 5, 16),
        tensor(5, 16),
        tensor(16, 16) * 0.2,
        eta,
        alpha,
        torch.tensor([3, 1, 2, 3, 2]),
        0,
        1.0,
        0.0,
    )
    torch.library.opcheck(torch.ops.ltdrnn.irnn_triton_forward, args)
