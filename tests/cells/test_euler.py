"""The Euler-step cells' step sizes (cells/euler.py): positive by construction under training, the raw
literal form kept as an option."""

import pytest
import torch

import ltdrnn
from ltdrnn.cells.euler import EulerSteps


def adam_steps_against_eta(cell, steps=5, lr=1e-2):
    """Adam steps on a loss that pushes every step size down: a raw eta of 1e-3 changes sign."""
    opt = torch.optim.Adam(cell.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        cell.steps.values().sum().backward()
        opt.step()
    return cell.steps.values().detach()


@pytest.mark.parametrize("name", ["tarnn", "irnn"])
def test_eta_stays_positive_where_a_raw_parameter_changes_sign(name):
    positive = adam_steps_against_eta(ltdrnn.build(name, 2, 16, eta=1e-3))
    raw = adam_steps_against_eta(ltdrnn.build(name, 2, 16, eta=1e-3, eta_param="raw"))
    assert bool((positive > 0).all())
    assert bool((raw < 0).all())  # the literal parametrisation flips, as measured in training


@pytest.mark.parametrize("param", ["exp", "raw"])
def test_values_and_assign_round_trip(param):
    steps = EulerSteps(3, 0.25, False, None, {}, param)
    torch.testing.assert_close(steps.values(), torch.full((3,), 0.25))
    steps.assign_(torch.tensor([0.1, 0.2, 0.3]))
    torch.testing.assert_close(steps.values(), torch.tensor([0.1, 0.2, 0.3]))
    assert {n for n, _ in steps.named_parameters()} == {"log_eta" if param == "exp" else "eta"}


def test_exp_parametrisation_rejects_a_non_positive_assignment_and_a_bad_name():
    with pytest.raises(ValueError, match="eta: expected positive"):
        EulerSteps(2, 0.1, False, None, {}, "exp").assign_(0.0)
    with pytest.raises(ValueError, match="eta_param: expected one of 'exp', 'raw', got 'softplus'"):
        EulerSteps(2, 0.1, False, None, {}, "softplus")


@pytest.mark.parametrize("name", ["tarnn", "irnn"])
def test_fused_gradient_reaches_log_eta(name):
    torch.manual_seed(0)
    cell = ltdrnn.build(name, 2, 16, K=2, dtype=torch.float64)
    x = torch.randn(30, 3, 2, dtype=torch.float64)
    grads = []
    for impl in ("reference", "fused"):
        cell.zero_grad()
        out, _ = cell.scan(x, impl=impl)
        out.square().sum().backward()
        grads.append(cell.steps.log_eta.grad.clone())
    torch.testing.assert_close(grads[0], grads[1])
    assert grads[0].abs().min() > 0
