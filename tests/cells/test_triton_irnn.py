"""iRNN's Triton kernels at any K (ltdrnn.ops.irnn_triton) against the reference loop: outputs, final
state and every gradient (the low-rank factors, eta and a learned alpha included), with lengths, several T and
batches that do not fill a program's block. On the CPU they run in Triton's interpreter (tests/triton_helpers.py)."""

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


@pytest.mark.parametrize("gated, eta_shape", [(False, (1,)), (True, (3, 1))], ids=["plain", "gated_per_step"])
def test_fake_implementations_and_autograd_registration_pass_opcheck(gated, eta_shape):
    from ltdrnn.ops import irnn_triton  # noqa: F401  (registers the operators)

    def tensor(*shape, scale=1.0):
        return (torch.randn(*shape, dtype=DTYPE, device=DEVICE) * scale).requires_grad_()

    eta = torch.full(eta_shape, 0.3, dtype=DTYPE, device=DEVICE)
    alpha = torch.ones((), dtype=DTYPE, device=DEVICE)
    empty = torch.empty(0, dtype=DTYPE, device=DEVICE)
    args = (
        tensor(3, 5, 16),
        tensor(3, 5, 16) if gated else empty,
        tensor(5, 16),
        tensor(16, 16, scale=0.2),
        tensor(16, 16, scale=0.2) if gated else empty,
        eta,
        alpha,
        torch.tensor([3, 1, 2, 3, 2]),
        0,
        1.0,
        0.0,
    )
    torch.library.opcheck(torch.ops.ltdrnn.irnn_triton_forward, args)


@pytest.mark.parametrize("options", [{"gate": "outside"}, {"gate": "outside", "activation": "tanh", "rank": None}])
def test_the_authors_gate_equals_the_reference(options):
    cell = build("irnn", hidden_size=18, eta=0.3, **options)
    with torch.no_grad():  # an open gate, so that both of its branches carry weight
        cell.bias_gate.fill_(0.5)
    assert_triton_matches_reference(cell, *sequence(cell, 6, 5))


@pytest.mark.parametrize("gate", ["none", "outside"])
def test_per_time_step_step_sizes_run_in_the_kernel_and_equal_the_reference(gate, monkeypatch):
    """The copy preset's eta^i (projected) with and without the gate."""
    from ltdrnn.ops import irnn_triton

    cell = build("irnn", hidden_size=18, eta=0.2, eta_per_time_step=True, max_length=9, eta_param="projected",
                 gate=gate, u_init="identity")  # fmt: skip
    assert_per_time_step_kernel_matches_reference(cell, irnn_triton, "irnn_forward", monkeypatch)


@pytest.mark.parametrize(
    "options",
    [
        {"K": 2, "eta": 0.3},
        {"K": 3, "gate": "outside", "rank": None, "activation": "tanh", "eta": 0.3},
        {"K": 2, "reading": "paper", "learn_alpha": True, "alpha": 1.5, "activation": "sigmoid", "eta": 0.4},
    ],
    ids=["low_rank", "gated_dense", "paper_reading"],
)
def test_several_euler_steps_run_in_the_kernel_and_equal_the_reference(options, monkeypatch):
    from ltdrnn.ops import irnn_torch, irnn_triton

    def loop(*args):
        raise AssertionError("the PyTorch loop ran instead of the kernels")

    monkeypatch.setattr(irnn_torch.IRNNLoop, "apply", loop)
    monkeypatch.setattr(irnn_torch.FusedIRNN, "apply", loop)
    cell = build("irnn", hidden_size=18, **options)
    if cell.gated:
        with torch.no_grad():
            cell.bias_gate.fill_(0.5)
    calls, real = [], irnn_triton.irnn_forward
    monkeypatch.setattr(irnn_triton, "irnn_forward", lambda *args: calls.append(1) or real(*args))
    assert_triton_matches_reference(cell, *sequence(cell, 5, 4))
    assert calls == [1]


def test_several_euler_steps_with_per_time_step_step_sizes(monkeypatch):
    """The iRNN preset eta_per_time_step's K = 2, with the gate: dL/deta on the call's rows alone."""
    from ltdrnn.ops import irnn_triton

    cell = build("irnn", hidden_size=18, K=2, eta=0.2, eta_per_time_step=True, max_length=9, eta_param="projected",
                 gate="outside", u_init="identity")  # fmt: skip
    assert_per_time_step_kernel_matches_reference(cell, irnn_triton, "irnn_forward", monkeypatch)
