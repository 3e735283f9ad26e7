"""iRNN: the paper's equations (Eq. 5, 6, 8), Theorem 1, the options, and fused == reference."""
import math

import pytest
import torch
from torch.autograd.functional import jacobian

import ltdrnn
from ltdrnn.cells.irnn import IRNN

DT = torch.float64


def cell64(d=2, h=4, **options):
    torch.manual_seed(0)
    return IRNN(d, h, dtype=DT, **options)


def one_step(cell, x_t, h_prev):
    out, _ = cell.scan(x_t.unsqueeze(0), h_prev, impl="reference")
    return out[0]


def set_spectral_norm(matrix, norm):
    with torch.no_grad():
        matrix.mul_(norm / torch.linalg.matrix_norm(matrix, 2))


# ---- the equations as written -------------------------------------------------------------------
def test_sirnn_is_eq6():
    cell = cell64(rank=None, projection=False, activation="tanh", alpha=0.7)
    x, h = torch.randn(3, 2, dtype=DT), torch.randn(3, 4, dtype=DT)
    eta = cell.steps.values()[0]
    expected = eta * (torch.tanh(h @ cell.weight_u.T + x @ cell.weight_x.T + cell.bias) - 0.7 * h)
    torch.testing.assert_close(one_step(cell, x, h), expected)


def test_eq8_applies_p_after_the_sum_with_p_equal_to_low_rank_u():
    cell = cell64(rank=2, K=1)
    x, h = torch.randn(3, 2, dtype=DT), torch.randn(3, 4, dtype=DT)
    u = torch.eye(4, dtype=DT) + cell.weight_v @ cell.weight_h
    inner = h @ u.T + x @ cell.weight_x.T + cell.bias
    eta = cell.steps.values()[0]
    expected = eta * (torch.relu(inner @ u.T) - h)
    torch.testing.assert_close(one_step(cell, x, h), expected)


def test_euler_steps_start_at_zero_or_at_the_state():
    for start, g0 in (("zero", lambda h: torch.zeros_like(h)), ("state", lambda h: h)):
        cell = cell64(rank=None, projection=False, K=3, start=start)
        with torch.no_grad():
            cell.steps.assign_(torch.tensor([0.1, 0.2, 0.3], dtype=DT))
        x, h = torch.randn(3, 2, dtype=DT), torch.randn(3, 4, dtype=DT)
        g = g0(h)
        for eta in (0.1, 0.2, 0.3):
            y = g + h
            g = g + eta * (torch.relu(y @ cell.weight_u.T + x @ cell.weight_x.T + cell.bias) - y)
        torch.testing.assert_close(one_step(cell, x, h), g)


# ---- Theorem 1: with ||U|| < alpha, dh_k/dh_{k-1} -> -I as K grows ------------------------------------
def theorem1_error(K, start="zero", projection=False, rank=None, alpha=1.0):
    cell = cell64(rank=rank, projection=projection, K=K, start=start, activation="tanh", alpha=alpha)
    with torch.no_grad():
        cell.steps.assign_(0.5)
        if rank is None:
            set_spectral_norm(cell.weight_u, 0.5)
    x, h = torch.randn(1, 2, dtype=DT), torch.randn(1, 4, dtype=DT)
    j = jacobian(lambda hp: one_step(cell, x, hp)[0], h)[:, 0, :]
    return torch.linalg.matrix_norm(j + torch.eye(4, dtype=DT), 2).item()


def test_theorem1_jacobian_tends_to_minus_identity():
    errors = [theorem1_error(K) for K in (1, 5, 20, 80)]
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 1e-6, errors


@pytest.mark.parametrize("options", [{"start": "state"},
                                     {"projection": True, "rank": 2, "alpha": 3.0}])
def test_theorem1_holds_for_the_other_start_and_for_eq8(options):
    # Eq. 8's operator is P U = U^2; with U = I + V H its norm is about 1, below alpha = 3
    assert theorem1_error(200, **options) < 1e-6


def test_large_K_reaches_the_equilibrium_of_eq5():
    cell = cell64(rank=None, projection=False, K=150, activation="tanh")
    with torch.no_grad():
        cell.steps.assign_(0.5)
        set_spectral_norm(cell.weight_u, 0.5)
    x, h = torch.randn(3, 2, dtype=DT), torch.randn(3, 4, dtype=DT)
    y = one_step(cell, x, h) + h
    residual = torch.tanh(y @ cell.weight_u.T + x @ cell.weight_x.T + cell.bias) - y
    assert residual.abs().max() < 1e-10


# ---- options --------------------------------------------------------------------------------------
def test_learnable_alpha_stays_positive_and_gets_a_gradient():
    cell = cell64(learn_alpha=True, alpha=2.0, rank=2)
    assert torch.isclose(cell.alpha(), torch.tensor(2.0, dtype=DT))
    with torch.no_grad():
        cell.log_alpha.fill_(-30.0)
    assert cell.alpha() > 0
    for impl in cell.impls:
        cell.zero_grad()
        out, _ = cell.scan(torch.randn(5, 2, 2, dtype=DT), impl=impl)
        out.sum().backward()
        assert cell.log_alpha.grad is not None and cell.log_alpha.grad != 0


def test_fixed_alpha_is_not_a_parameter():
    names = {n for n, _ in cell64(rank=2).named_parameters()}
    assert names == {"weight_x", "bias", "weight_v", "weight_h", "steps.log_eta"}


def test_eta_per_time_step_uses_the_row_of_each_true_time_step():
    cell = cell64(rank=2, eta_per_time_step=True, max_length=6, K=2)
    assert cell.steps.values().shape == (6, 2)
    x = torch.randn(6, 3, 2, dtype=DT)
    before, _ = cell.scan(x)
    with torch.no_grad():
        cell.steps.log_eta[4].fill_(math.log(0.5))
    after, state = cell.scan(x)
    torch.testing.assert_close(after[:4], before[:4])
    assert not torch.allclose(after[4], before[4])
    assert state[1].tolist() == [6, 6, 6]
    with pytest.raises(ValueError, match="max_length"):
        cell.scan(x[:1], state)
    with pytest.raises(ValueError, match="max_length"):  # too long from the first step
        cell.scan(torch.randn(7, 3, 2, dtype=DT))


def test_parameter_count_formula():
    for d, h, r, K in ((1, 128, 15, 1), (9, 80, 20, 5)):
        cell = IRNN(d, h, rank=r, K=K)
        assert sum(p.numel() for p in cell.parameters()) == 2 * h * r + h * d + h + K
    assert sum(p.numel() for p in IRNN(3, 8, rank=None).parameters()) == 8 * 8 + 8 * 3 + 8 + 1


def test_paper_init():
    cell = IRNN(3, 64, eta=0.02)
    assert torch.allclose(cell.steps.values(), torch.tensor(0.02))
    bound = 64 ** -0.5
    assert all(p.abs().max() <= bound for n, p in cell.named_parameters() if n != "steps.log_eta")


@pytest.mark.parametrize("options,match", [
    ({"K": 0}, "K"), ({"rank": 0}, "rank"), ({"rank": 9}, "rank"), ({"alpha": 0.0}, "alpha"),
    ({"eta": -1e-2}, "eta"), ({"start": "middle"}, "start"), ({"activation": "gelu"}, "activation"),
    ({"eta_per_time_step": True}, "max_length"), ({"max_length": 10}, "max_length"),
    ({"eta_per_time_step": True, "max_length": 0}, "max_length"),
])
def test_option_errors_name_the_option(options, match):
    with pytest.raises(ValueError, match=match):
        IRNN(3, 8, **{"rank": 2, **options})


@pytest.mark.parametrize("options", [{"projection": 1}, {"learn_alpha": "yes"}, {"eta_per_time_step": 1}])
def test_flags_must_be_bools(options):
    with pytest.raises(TypeError):
        IRNN(3, 8, rank=2, **options)


def test_registered_as_a_source_cell():
    entry = ltdrnn.entry("irnn")
    assert entry.family == "source" and entry.cls is IRNN and "Kag" in entry.paper


# ---- fused == reference at long T ---------------------------------------------------------------
@pytest.mark.parametrize("options", [{}, {"K": 3, "start": "state", "activation": "tanh"},
                                     {"rank": None, "projection": False, "learn_alpha": True, "K": 2}])
def test_fused_equals_reference_at_T_1000(options):
    torch.manual_seed(1)
    cell = IRNN(3, 24, **options)
    with torch.no_grad():
        cell.steps.assign_(torch.empty(cell.steps.values().shape).uniform_(0.05, 0.3))
    x = torch.randn(1000, 3, 3)
    h0 = 0.1 * torch.randn(3, 24)
    results = {}
    for impl in ("reference", "fused"):
        cell.zero_grad()
        xi, hi = x.clone().requires_grad_(), h0.clone().requires_grad_()
        out, final = cell.scan(xi, hi, impl=impl)
        weights = torch.linspace(-1, 1, out.numel()).view_as(out)
        ((out * weights).sum() + final.square().sum()).backward()
        results[impl] = {"out": out.detach(), "grad x": xi.grad, "grad h0": hi.grad,
                         **{n: p.grad.clone() for n, p in cell.named_parameters()}}
    for key, ref in results["reference"].items():
        torch.testing.assert_close(results["fused"][key], ref, atol=1e-4, rtol=1e-3, msg=key)


# ---- streaming without autograd ---------------------------------------------------------------------
@pytest.mark.parametrize("options", [{"rank": 3}, {"rank": None, "K": 3, "start": "state", "alpha": 1.3}])
def test_no_grad_streaming_equals_the_reference_and_follows_parameter_updates(options):
    torch.manual_seed(0)
    cell = IRNN(3, 8, **options)
    x = torch.randn(12, 2, 3)
    for _ in range(2):
        expected, expected_final = cell.scan(x, impl="reference")
        with torch.no_grad():
            state, outputs = None, []
            for x_t in x:
                h, state = cell(x_t, state)
                outputs.append(h)
            torch.testing.assert_close(torch.stack(outputs), expected.detach())
            torch.testing.assert_close(state, expected_final.detach())
            for p in cell.parameters():     # an optimiser step: the cached operator must follow
                p.mul_(1.1)


def test_no_grad_streaming_still_rejects_bad_input_clearly():
    cell = IRNN(3, 8, rank=2)
    with torch.no_grad():
        with pytest.raises(ValueError, match="input_size"):
            cell(torch.randn(2, 4), torch.zeros(2, 8))
        with pytest.raises(TypeError, match="dtype"):
            cell(torch.randn(2, 3, dtype=DT), torch.zeros(2, 8, dtype=DT))


@pytest.mark.parametrize("options", [{"rank": 3}, {"rank": None, "K": 3, "start": "state"}])
def test_fused_sequence_without_autograd_equals_the_reference(options):
    torch.manual_seed(0)
    cell = IRNN(3, 8, **options)
    x, h0 = torch.randn(30, 2, 3), 0.1 * torch.randn(2, 8)
    expected, expected_final = cell.scan(x, h0, impl="reference")
    with torch.no_grad():
        out, final = cell.scan(x, h0, impl="fused")
    torch.testing.assert_close(out, expected.detach())
    torch.testing.assert_close(final, expected_final.detach())
