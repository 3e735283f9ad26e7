"""SA-RNN's Triton kernels (ltdrnn.ops.sarnn_triton) against the reference loop: outputs, final state,
update masks and probabilities, and every gradient (the budget term's included), with lengths, several T and
batches that do not fill a program's block. On the CPU they run in Triton's interpreter (tests/triton_helpers.py)."""

from __future__ import annotations

import pytest
import torch

from triton_helpers import (
    DEVICE,
    DTYPE,
    TOLERANCE,
    assert_triton_matches_reference,
    build,
    requires_triton,
    sequence,
)

pytestmark = requires_triton


@pytest.mark.parametrize("steps, batch", [(1, 3), (6, 5), (5, 17)])
def test_triton_equals_the_reference(steps, batch):
    cell = build("sarnn", hidden_size=20, slope=2.0, anneal_slope=False)
    assert_triton_matches_reference(cell, *sequence(cell, steps, batch))


def test_the_authors_coordinator_gradient_equals_the_reference():
    # the default cuts the coordinator's path into h (test_triton_equals_the_reference); True keeps it
    cell = build("sarnn", hidden_size=20, slope=2.0, anneal_slope=False, coordinator_state_grad=True)
    assert_triton_matches_reference(cell, *sequence(cell, 6, 5))


def test_masks_probabilities_and_the_budget_gradient_equal_the_reference():
    cell = build("sarnn", hidden_size=18)
    x, state, lengths = sequence(cell, 6, 5)
    results = {}
    for backend in ("triton", "reference"):
        cell.zero_grad()
        out, _ = cell.scan(x, state, lengths, backend=backend)
        valid = (torch.arange(6).unsqueeze(1) < lengths.unsqueeze(0)).to(DEVICE).unsqueeze(-1)
        masks = torch.where(valid, cell.aux["update_mask"], 0)
        probs = torch.where(valid, cell.aux["update_prob"], 0)
        (cell.losses()["budget"] + out.sum()).backward()
        results[backend] = (masks.detach(), probs.detach(), [p.grad.clone() for p in cell.parameters()])
    masks, probs, grads = results["triton"]
    ref_masks, ref_probs, ref_grads = results["reference"]
    assert torch.equal(masks, ref_masks) and 0 < masks.mean() < 1  # some units update, some skip
    torch.testing.assert_close(probs, ref_probs, **TOLERANCE)
    for grad, ref in zip(grads, ref_grads):
        torch.testing.assert_close(grad, ref, **TOLERANCE)


def test_hidden_size_above_one_product_chunk():
    cell = build("sarnn", input_size=2, hidden_size=65)
    assert_triton_matches_reference(cell, *sequence(cell, 3, 2))


def test_fake_implementations_and_autograd_registration_pass_opcheck():
    from ltdrnn.ops import sarnn_triton  # noqa: F401  (registers the operators)

    def tensor(*shape, scale=1.0):
        return (torch.randn(*shape, dtype=DTYPE, device=DEVICE) * scale).requires_grad_()

    lengths = torch.tensor([3, 1, 2, 3, 2])
    args = (
        tensor(3, 5, 48),
        tensor(3, 5, 16),
        tensor(5, 16),
        tensor(48, 16, scale=0.2),
        tensor(48),
        tensor(16),
        lengths,
    )
    torch.library.opcheck(torch.ops.ltdrnn.sarnn_triton_forward, args)
