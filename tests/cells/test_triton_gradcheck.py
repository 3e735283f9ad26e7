"""Each Triton operator on its own, in float64 through the interpreter: its backward against numerical
derivatives (torch.autograd.gradcheck, every differentiable operand: the step sizes per time step and the
gate's operands included), and lengths inside the kernels: whatever the input rows past a sequence's length
hold, NaN included, neither the outputs nor any gradient change.

SA-RNN's operator is left to the comparison with its reference loop (tests/cells/test_triton_sarnn.py): its
update mask is a hard threshold with a straight-through gradient, which no numerical derivative matches.
"""

from __future__ import annotations

import pytest
import torch

from triton_helpers import DEVICE, requires_triton  # sets TRITON_INTERPRET=1 first

pytestmark = [
    requires_triton,
    pytest.mark.skipif(DEVICE != "cpu", reason="float64 numerical derivatives: the interpreter's exact arithmetic"),
]

STEPS, BATCH, HIDDEN = 3, 17, 16  # two programs of 16 rows: the per-program shares of dL/deta are summed
LENGTHS = torch.tensor([3, 1, 2] * 5 + [3, 2])


def _tensor(*shape, scale=1.0, seed=0):
    generator = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=generator, dtype=torch.float64) * scale


def _tarnn(eta_shape, activation, coupled, a_diag, inside):
    from ltdrnn.ops import tarnn_triton

    k = eta_shape[-1]
    tensors = [
        _tensor(STEPS, BATCH, 3 * HIDDEN),
        _tensor(BATCH, HIDDEN, scale=0.5),
        _tensor(3 * HIDDEN, HIDDEN, scale=0.2),
        _tensor(HIDDEN, HIDDEN, scale=0.2),
        0.2 + 0.3 * torch.rand(*eta_shape, generator=torch.Generator().manual_seed(k), dtype=torch.float64),
    ]
    return tensors, lambda *t: tarnn_triton.tarnn_forward(*t, LENGTHS, activation, coupled, a_diag, inside)[0]


def _irnn(gated, per_step, activation, s, r, k=1):
    from ltdrnn.ops import irnn_triton

    empty = torch.empty(0, dtype=torch.float64)
    tensors = [
        _tensor(STEPS, BATCH, HIDDEN),
        _tensor(STEPS, BATCH, HIDDEN, seed=1) if gated else empty,
        _tensor(BATCH, HIDDEN, scale=0.5),
        _tensor(HIDDEN, HIDDEN, scale=0.2),
        _tensor(HIDDEN, HIDDEN, scale=0.2, seed=2) if gated else empty,
        0.3 + 0.05 * _tensor(STEPS, k)[: STEPS if per_step else 1].reshape((STEPS, k) if per_step else (k,)),
        torch.tensor(1.2, dtype=torch.float64),
    ]
    return tensors, lambda *t: irnn_triton.irnn_forward(*t, LENGTHS, activation, s, r)[0]


def _srnn(activation):
    from ltdrnn.ops import srnn_triton

    tensors = [_tensor(STEPS, BATCH, HIDDEN), _tensor(BATCH, HIDDEN, scale=0.5)]
    return tensors, lambda *t: srnn_triton.srnn_forward(*t, LENGTHS, activation)


def _mist(delays):
    from ltdrnn.ops import mist_triton

    past = 1 << (delays - 1)
    tensors = [
        _tensor(STEPS, BATCH, delays + 2 * HIDDEN),
        _tensor(BATCH, past, HIDDEN, scale=0.5),
        _tensor(delays + HIDDEN, HIDDEN, scale=0.2),
        _tensor(HIDDEN, HIDDEN, scale=0.2, seed=3),
    ]
    return tensors, lambda *t: mist_triton.mist_forward(*t, LENGTHS)[0]


def _sarnn():
    from ltdrnn.ops import sarnn_triton

    tensors = [
        _tensor(STEPS, BATCH, 3 * HIDDEN),
        _tensor(STEPS, BATCH, HIDDEN, seed=1),
        _tensor(BATCH, HIDDEN, scale=0.5),
        _tensor(3 * HIDDEN, HIDDEN, scale=0.2),
        _tensor(3 * HIDDEN, scale=0.1),
        _tensor(HIDDEN, scale=0.5),
    ]
    return tensors, lambda *t: sarnn_triton.sarnn_forward(*t, LENGTHS, True)[0]


OPERATORS = {  # activation codes: 0 relu, 1 tanh, 2 sigmoid
    "tarnn_inside_coupled": lambda: _tarnn((2,), 1, True, -1.0, True),
    "tarnn_outside_per_step": lambda: _tarnn((STEPS, 2), 2, False, -1.0, False),
    "tarnn_doubly_damped_per_step": lambda: _tarnn((STEPS, 1), 1, True, -2.0, False),
    "irnn_gated_per_step": lambda: _irnn(True, True, 0, 1.0, 0.0),
    "irnn_shared_paper_reading": lambda: _irnn(False, False, 1, 1.0, 1.0),
    "irnn_k3_gated_per_step": lambda: _irnn(True, True, 1, 1.0, 0.0, k=3),
    "irnn_k2_shared": lambda: _irnn(False, False, 2, 1.0, 1.0, k=2),
    "srnn": lambda: _srnn(1),
    "mist": lambda: _mist(2),
}


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_every_gradient_equals_the_numerical_derivative(name):
    tensors, operator = OPERATORS[name]()
    inputs = [t.requires_grad_() if t.numel() else t for t in tensors]
    assert torch.autograd.gradcheck(operator, inputs, fast_mode=True, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("name", sorted([*OPERATORS, "sarnn"]))
def test_input_rows_past_the_lengths_change_nothing(name):
    """The operands with a row per step and sequence (the input maps) hold NaN past each length in one run
    and zeros in the other: outputs and every gradient are the same."""
    tensors, operator = _sarnn() if name == "sarnn" else OPERATORS[name]()
    past = (torch.arange(STEPS)[:, None] >= LENGTHS[None, :])[..., None]  # (T, B, 1)
    results = []
    for filler in (0.0, float("nan")):
        inputs = [
            (t.masked_fill(past, filler) if t.shape[:2] == (STEPS, BATCH) else t.clone()).requires_grad_()
            if t.numel()
            else t
            for t in tensors
        ]
        out = operator(*inputs)
        weights = _tensor(*out.shape, seed=4)
        (out * weights).sum().backward()
        results.append([out.detach()] + [t.grad for t in inputs if t.requires_grad])
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, atol=0, rtol=0)
