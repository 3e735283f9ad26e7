"""TARNN's Triton kernels (ltdrnn.ops.tarnn_triton) against the reference loop at K = 1 and K > 1, both
gates, both A, every activation: outputs, final state, beta and every gradient (eta included), with lengths,
several T and batches that do not fill a program's block. On the CPU they run in Triton's interpreter
(tests/triton_helpers.py)."""

from __future__ import annotations

import pytest
import torch

from triton_helpers import (
    DEVICE,
    DTYPE,
    assert_per_time_step_kernel_matches_reference,
    assert_triton_matches_reference,
    build,
    requires_triton,
    sequence,
)

pytestmark = requires_triton


@pytest.mark.parametrize("steps, batch", [(1, 3), (6, 5), (5, 17)])
def test_k1_equals_the_reference(steps, batch):
    cell = build("tarnn", hidden_size=20, K=1, eta=0.3)
    assert_triton_matches_reference(cell, *sequence(cell, steps, batch))


@pytest.mark.parametrize(
    "options",
    [
        {"K": 3, "eta": 0.3},
        {"K": 2, "A": "coupled", "activation": "tanh", "eta": 0.4},
        {"K": 3, "gate": "outside", "activation": "sigmoid", "eta": 0.5},
        {"K": 1, "A": "coupled", "gate": "outside", "reading": "code"},  # doubly damped: A = -2I + coupling
        {"K": 2, "reading": "code"},
    ],
)
def test_any_k_gate_and_a_equal_the_reference(options):
    cell = build("tarnn", hidden_size=18, **options)
    assert_triton_matches_reference(cell, *sequence(cell, 5, 4))


def test_beta_is_recorded_as_by_the_reference():
    cell = build("tarnn", hidden_size=16, K=2)
    x, state, lengths = sequence(cell, 4, 3)
    with torch.no_grad():
        cell.scan(x, state, lengths, backend="triton")
        beta = cell.aux["beta"]
        cell.scan(x, state, lengths, backend="reference")
    torch.testing.assert_close(beta, cell.aux["beta"])


def test_hidden_size_above_one_product_chunk():
    cell = build("tarnn", input_size=2, hidden_size=66, K=2, A="coupled", eta=0.3)
    assert_triton_matches_reference(cell, *sequence(cell, 3, 2))


@pytest.mark.parametrize("eta_shape", [(2,), (3, 2)], ids=["shared", "per_time_step"])
def test_fake_implementations_and_autograd_registration_pass_opcheck(eta_shape):
    from ltdrnn.ops import tarnn_triton  # noqa: F401  (registers the operators)

    def tensor(*shape, scale=1.0):
        return (torch.randn(*shape, dtype=DTYPE, device=DEVICE) * scale).requires_grad_()

    eta = torch.full(eta_shape, 0.3, dtype=DTYPE, device=DEVICE, requires_grad=True)
    lengths = torch.tensor([3, 1, 2, 3, 2])
    args = (
        tensor(3, 5, 48),
        tensor(5, 16),
        tensor(48, 16, scale=0.2),
        tensor(16, 16, scale=0.2),
        eta,
        lengths,
        0,
        True,
        -1.0,
        True,
    )
    torch.library.opcheck(torch.ops.ltdrnn.tarnn_triton_forward, args)


@pytest.mark.parametrize("options", [{"K": 2, "eta_param": "raw"}, {"K": 1, "gate": "outside", "eta_param": "exp"}])
def test_per_time_step_step_sizes_run_in_the_kernel_and_equal_the_reference(options, monkeypatch):
    """The copy presets' eta_k^i: each call reads its rows eta[c : c + T]."""
    from ltdrnn.ops import tarnn_triton

    cell = build("tarnn", hidden_size=18, eta=0.2, eta_per_time_step=True, max_length=9, **options)
    assert_per_time_step_kernel_matches_reference(cell, tarnn_triton, "tarnn_forward", monkeypatch)
