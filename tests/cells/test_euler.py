"""The Euler-step cells' step sizes (cells/euler.py): positive by construction under training, the raw
literal form kept as an option, the projected raw form of the authors' code, per-time-step step sizes
in the fused path, and iRNN's update gate."""

import math

import pytest
import torch

import ltdrnn
from ltdrnn.cells.euler import EulerSteps
from ltdrnn.ops.kernels import load_torch_ops

DT = torch.float64


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


@pytest.mark.parametrize("param", ["exp", "raw", "projected"])
def test_values_and_assign_round_trip(param):
    steps = EulerSteps(3, 0.25, False, None, {}, param)
    torch.testing.assert_close(steps.values(), torch.full((3,), 0.25))
    steps.assign_(torch.tensor([0.1, 0.2, 0.3]))
    torch.testing.assert_close(steps.values(), torch.tensor([0.1, 0.2, 0.3]))
    assert {n for n, _ in steps.named_parameters()} == {"log_eta" if param == "exp" else "eta"}


@pytest.mark.parametrize("name", ["tarnn", "irnn"])
def test_projected_eta_moves_at_adams_pace_and_rests_at_zero(name):
    """Raw step sizes move by about the learning rate per Adam step (exp(log eta) moves ~1% of itself);
    pushed down, the projected ones stop at 0 after the projection, where a raw one goes negative."""
    exp = adam_steps_against_eta(ltdrnn.build(name, 2, 16, eta=0.1), steps=3)
    projected_cell = ltdrnn.build(name, 2, 16, eta=0.1, eta_param="projected")
    projected = adam_steps_against_eta(projected_cell, steps=3)
    assert bool((0.1 - exp < 0.004).all())  # ~3% of 0.1 in three steps
    assert bool((0.1 - projected > 0.025).all())  # ~0.01 per step
    opt = torch.optim.Adam(projected_cell.parameters(), lr=1e-2)
    for _ in range(20):
        opt.zero_grad()
        projected_cell.steps.values().sum().backward()
        opt.step()
        ltdrnn.apply_constraints_(projected_cell)
    assert bool((projected_cell.steps.eta == 0).all())
    projected_cell.steps.eta.grad = None
    projected_cell.steps.values().sum().backward()  # at the bound the clamp still passes the gradient
    assert bool((projected_cell.steps.eta.grad == 1).all())


def test_projected_eta_is_read_clamped_and_checked():
    steps = EulerSteps(2, 0.5, False, None, {}, "projected")
    with torch.no_grad():
        steps.eta.copy_(torch.tensor([-0.2, 1.7]))
    torch.testing.assert_close(steps.values(), torch.tensor([0.0, 1.0]))  # sign-safe in any training loop
    steps.apply_constraints_()
    torch.testing.assert_close(steps.eta.detach(), torch.tensor([0.0, 1.0]))
    with torch.no_grad():
        steps.eta.fill_(float("nan"))
    steps.apply_constraints_()
    assert bool(steps.eta.isnan().all())  # a diverged run stays visible
    with pytest.raises(ValueError, match="eta: expected a value at most eta_max=1.0, got 1.5"):
        EulerSteps(2, 1.5, False, None, {}, "projected")
    with pytest.raises(ValueError, match="eta: expected step sizes >= 0 with eta_param='projected'"):
        EulerSteps(2, 0.5, False, None, {}, "projected").assign_(-0.1)
    for param in ("exp", "raw"):  # without a bound there is no constraint to apply
        other = EulerSteps(2, 0.5, False, None, {}, param)
        before = other.parameter.detach().clone()
        other.apply_constraints_()
        assert torch.equal(other.parameter.detach(), before)


def test_eta_max_bounds_exp_and_projected_step_sizes_and_is_refused_for_raw():
    """exp(log eta) with eta_max: read clamped, stored log eta projected onto (-inf, log eta_max]; the
    projected interval follows eta_max; the literal raw parametrisation takes no bound."""
    bounded = EulerSteps(2, 0.1, False, None, {}, "exp", maximum=0.5)
    with torch.no_grad():
        bounded.log_eta.copy_(torch.tensor([0.3, -1.0]))  # eta = 1.35 and 0.37
    torch.testing.assert_close(bounded.values(), torch.tensor([0.5, math.exp(-1.0)]))
    bounded.apply_constraints_()
    torch.testing.assert_close(bounded.log_eta.detach(), torch.tensor([math.log(0.5), -1.0]))
    bounded.values().sum().backward()  # at the bound the clamp still passes the gradient
    assert bool((bounded.log_eta.grad > 0).all())
    wide = EulerSteps(2, 1.5, False, None, {}, "projected", maximum=2.0)
    with torch.no_grad():
        wide.eta.fill_(3.0)
    torch.testing.assert_close(wide.values(), torch.full((2,), 2.0))
    with pytest.raises(ValueError, match="eta_max: the raw step sizes are unconstrained"):
        EulerSteps(2, 0.1, False, None, {}, "raw", maximum=1.0)
    with pytest.raises(ValueError, match="eta_max: expected a positive"):
        EulerSteps(2, 0.1, False, None, {}, "exp", maximum=-1.0)
    with pytest.raises(ValueError, match="eta: expected step sizes at most eta_max=0.5"):
        bounded.assign_(0.7)
    cell = ltdrnn.build("tarnn", 2, 4, eta_max=0.2)
    assert cell.steps.maximum == 0.2 and "maximum=0.2" in repr(cell.steps)


def test_the_trainer_projects_the_step_sizes_after_each_optimiser_step(tmp_path):
    """One training step at a learning rate that pushes raw step sizes far below 0 leaves them in [0, 1]."""
    from ltdrnn.config import load_config
    from ltdrnn.train import train

    cfg = load_config(
        "reproduce/copy200-tarnn",
        [
            "task.options.T=4", "task.options.n_train=16", "task.options.n_val=8", "task.options.n_test=8",
            "model.hidden_size=8", "model.options.K=1", "model.options.eta_param=projected",
            "optim.lr=5.0", "optim.clip_norm=null",
            "train.batch_size=8", "train.steps=2", "train.eval_every=2", "train.progress=false",
            "train.latency=false", f"run_dir={tmp_path / 'run'}", "results=null",
        ],
    )  # fmt: skip
    train(cfg)
    state = torch.load(tmp_path / "run" / "last.pt", weights_only=True)["model"]
    (eta,) = [v for k, v in state.items() if k.endswith("steps.eta")]
    assert eta.shape == (24, 1)  # max_length: task -> the copy task's T + 20
    assert bool((eta >= 0).all() & (eta <= 1).all()) and bool((eta == 0).any() | (eta == 1).any())


def test_exp_parametrisation_rejects_a_non_positive_assignment_and_a_bad_name():
    with pytest.raises(ValueError, match="eta: expected positive"):
        EulerSteps(2, 0.1, False, None, {}, "exp").assign_(0.0)
    with pytest.raises(ValueError, match="eta_param: expected one of 'exp', 'raw', 'projected', got 'softplus'"):
        EulerSteps(2, 0.1, False, None, {}, "softplus")


@pytest.mark.parametrize("name", ["tarnn", "irnn"])
def test_fused_gradient_reaches_log_eta(name):
    torch.manual_seed(0)
    cell = ltdrnn.build(name, 2, 16, K=2, dtype=torch.float64)
    x = torch.randn(30, 3, 2, dtype=torch.float64)
    grads = []
    for backend in ("reference", "cpp"):
        cell.zero_grad()
        out, _ = cell.scan(x, backend=backend)
        out.square().sum().backward()
        grads.append(cell.steps.log_eta.grad.clone())
    torch.testing.assert_close(grads[0], grads[1])
    assert grads[0].abs().min() > 0


# ---- per-time-step step sizes in TARNN's fused path ---------------------------------------------------
def scan_with_gradients(cell, x, state, backend, lengths=None):
    cell.zero_grad()
    xi = x.clone().requires_grad_()
    out, final = cell.scan(xi, state, lengths=lengths, backend=backend)
    h = final[0] if isinstance(final, tuple) else final
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    ((out * weights).sum() + h.square().sum()).backward()
    grads = {n: p.grad.clone() for n, p in cell.named_parameters() if p.grad is not None}
    return out.detach(), final, xi.grad, grads


@pytest.mark.parametrize(
    "options",
    [{"K": 1}, {"K": 3}, {"K": 2, "gate": "outside"}, {"K": 3, "A": "coupled", "activation": "tanh"}],
    ids=["K1", "K3", "outside", "coupled"],
)
def test_tarnn_per_time_step_eta_runs_fused_and_equals_the_reference(monkeypatch, options):
    """The compiled loops read row t of the (max_length, K) step sizes at time step t: outputs, final state,
    counter and every gradient (row by row of eta) equal the reference loop, also from a later start
    (a chunked run) and with lengths."""
    if not load_torch_ops("tarnn"):
        pytest.skip("no C++ compiler for csrc/tarnn.cpp")
    import ltdrnn.ops.tarnn_torch as tarnn_module

    calls = []
    real = tarnn_module._compiled_forward
    monkeypatch.setattr(tarnn_module, "_compiled_forward", lambda *a: calls.append(1) or real(*a))
    torch.manual_seed(3)
    cell = ltdrnn.build(
        "tarnn", 3, 6, eta_per_time_step=True, max_length=20, eta_param="projected", dtype=DT, **options
    )
    cell.steps.assign_(torch.rand(20, options["K"], dtype=DT) * 0.6)
    x = torch.randn(7, 5, 3, dtype=DT)
    h0 = 0.3 * torch.randn(5, 6, dtype=DT)
    for start, lengths in ((0, None), (4, torch.tensor([7, 3, 1, 7, 5]))):
        state = (h0, torch.full((5,), start))
        fused = scan_with_gradients(cell, x, state, "cpp", lengths)
        reference = scan_with_gradients(cell, x, state, "reference", lengths)
        torch.testing.assert_close(fused[0], reference[0])
        torch.testing.assert_close(fused[1][0], reference[1][0])
        assert torch.equal(fused[1][1], reference[1][1])
        torch.testing.assert_close(fused[2], reference[2])
        assert fused[3].keys() == reference[3].keys()
        for name, grad in reference[3].items():
            torch.testing.assert_close(fused[3][name], grad, msg=name)
        eta_grad = reference[3]["steps.eta"]
        assert eta_grad[start : start + 7].abs().min() > 0 and eta_grad[start + 7 :].abs().max() == 0
    assert len(calls) == 2  # both fused runs took the compiled loops


def test_tarnn_per_time_step_eta_with_uneven_starts_takes_the_reference_loop():
    torch.manual_seed(4)
    cell = ltdrnn.build("tarnn", 2, 4, K=2, eta_per_time_step=True, max_length=12, dtype=DT)
    cell.steps.assign_(torch.rand(12, 2, dtype=DT) * 0.5)
    x = torch.randn(5, 3, 2, dtype=DT)
    state = (torch.zeros(3, 4, dtype=DT), torch.tensor([0, 2, 1]))
    fused, fused_final = cell.scan(x, state, backend="cpp")
    reference, reference_final = cell.scan(x, state, backend="reference")
    torch.testing.assert_close(fused, reference)
    assert torch.equal(fused_final[1], torch.tensor([5, 7, 6]))


# ---- iRNN's update gate (the authors' convention) ------------------------------------------------------
def gated_irnn_by_hand(cell, x, h):
    """The gated iRNN written out: Eq. 8 (residual or state reading, K Euler steps), then
    h_k = (1 - u) h_{k-1} + u h_new with u = sigmoid(U_g h_{k-1} + W_g x_k + b_g)."""
    eye = torch.eye(cell.hidden_size, dtype=x.dtype)
    u_mat = eye + cell.weight_v @ cell.weight_h
    eta, alpha = cell.steps.values(), cell.alpha()
    outputs = []
    for t, x_t in enumerate(x):
        eta_t = eta[t] if cell.per_time_step else eta
        g = h if cell.reading == "state" else torch.zeros_like(h)
        for i in range(cell.K):
            y = g + h
            pre = (y @ u_mat.T + x_t @ cell.weight_x.T + cell.bias) @ u_mat.T
            g = g + eta_t[i] * (torch.relu(pre) - alpha * y)
        new = h + g if cell.reading == "residual" else g
        u = torch.sigmoid(h @ cell.weight_gate_h.T + x_t @ cell.weight_gate_x.T + cell.bias_gate)
        h = (1 - u) * h + u * new
        outputs.append(h)
    return torch.stack(outputs)


@pytest.mark.parametrize("per_time_step", [False, True])
@pytest.mark.parametrize("reading", ["residual", "state"])
def test_irnn_gate_equals_its_equations_in_every_path(per_time_step, reading):
    """The gated iRNN's reference step, its fused PyTorch loop (IRNNLoop) and its streaming step equal the
    equations written out, and the fused loop's gradients (gate, eta per time step, alpha) the reference's."""
    torch.manual_seed(5)
    options = {"eta_per_time_step": True, "max_length": 9, "eta_param": "projected"} if per_time_step else {}
    cell = ltdrnn.build(
        "irnn", 3, 6, rank=2, K=2, gate="outside", eta=0.3, reading=reading, learn_alpha=True, dtype=DT, **options
    )
    assert float(cell.bias_gate.detach().mean()) == -3.0 and 0.05 < float(cell.weight_gate_h.detach().std()) < 0.15
    x = torch.randn(9, 4, 3, dtype=DT)
    h0 = torch.randn(4, 6, dtype=DT)
    state = (h0, torch.zeros(4, dtype=torch.long)) if per_time_step else h0
    expected = gated_irnn_by_hand(cell, x, h0)
    for backend in ("reference", "cpp"):
        out, _ = cell.scan(x, state, backend=backend)
        torch.testing.assert_close(out, expected)
    with torch.no_grad():  # streaming, one step at a time
        stepped, s = [], state
        for x_t in x:
            h, s = cell(x_t, s)
            stepped.append(h)
    torch.testing.assert_close(torch.stack(stepped), expected)
    grads = [scan_with_gradients(cell, x, state, backend) for backend in ("reference", "cpp")]
    torch.testing.assert_close(grads[1][2], grads[0][2])  # the gradient of x
    assert grads[1][3].keys() == grads[0][3].keys() and "bias_gate" in grads[0][3]
    for name, grad in grads[0][3].items():
        torch.testing.assert_close(grads[1][3][name], grad, msg=name)
    ungated = ltdrnn.build("irnn", 3, 6, rank=2, K=2, eta=0.3, reading=reading, learn_alpha=True, dtype=DT, **options)
    ungated.load_state_dict({k: v for k, v in cell.state_dict().items() if "gate" not in k})
    assert (ungated.scan(x, state)[0] - expected).abs().max() > 1e-3  # the gate changes the result


def test_irnn_gate_rejects_unknown_values():
    with pytest.raises(ValueError, match="gate: expected one of 'none', 'outside', got 'inside'"):
        ltdrnn.build("irnn", 2, 4, gate="inside")


def test_irnn_per_time_step_eta_without_the_gate_runs_the_fused_loop_from_a_later_start():
    torch.manual_seed(6)
    cell = ltdrnn.build("irnn", 2, 5, K=1, rank=None, eta_per_time_step=True, max_length=12, dtype=DT)
    cell.steps.assign_(torch.rand(12, 1, dtype=DT) * 0.5)
    x = torch.randn(6, 3, 2, dtype=DT)
    state = (0.2 * torch.randn(3, 5, dtype=DT), torch.full((3,), 5))
    lengths = torch.tensor([6, 2, 4])
    fused = scan_with_gradients(cell, x, state, "cpp", lengths)
    reference = scan_with_gradients(cell, x, state, "reference", lengths)
    torch.testing.assert_close(fused[0], reference[0])
    torch.testing.assert_close(fused[1][0], reference[1][0])
    assert torch.equal(fused[1][1], torch.tensor([11, 7, 9])) and torch.equal(reference[1][1], fused[1][1])
    for name, grad in reference[3].items():
        torch.testing.assert_close(fused[3][name], grad, msg=name)
    eta_grad = reference[3]["steps.log_eta"]
    assert eta_grad[5:11].abs().min() > 0 and eta_grad[:5].abs().max() == 0 and eta_grad[11:].abs().max() == 0
