"""TARNN: the paper's equations, frozen units (beta = 0), Theorem 1, the regulariser, aux["beta"], the
options, and fused == reference."""

import math

import pytest
import torch
from torch.autograd.functional import jacobian

import ltdrnn
from harness_helpers import train_adding_t100
from ltdrnn.cells.tarnn import TARNN
from stream_helpers import check_streaming_matches_reference

DT = torch.float64


def cell64(d=2, h=4, **options):
    torch.manual_seed(0)
    return TARNN(d, h, dtype=DT, **options)


def one_step(cell, x_t, s_prev, backend="reference"):
    out, _ = cell.scan(x_t.unsqueeze(0), s_prev, backend=backend)
    return out[0]


def explicit_parts(cell, x, s, damping=False):
    """beta and G written out; ``damping`` adds the authors' code's ``-s`` (reading="code")."""
    beta = torch.sigmoid(s @ cell.weight_Us.T + x @ cell.weight_Wx.T + cell.bias_beta)

    def field(z):  # A z + B u + b_lin + phi(U z + W u + b) [- s], without beta
        g = (
            z @ cell.A.T
            + x @ cell.weight_B1.T
            + s @ cell.weight_B2.T
            + cell.bias_linear
            + cell.phi(z @ cell.weight_U.T + x @ cell.weight_W1.T + s @ cell.weight_W2.T + cell.bias)
        )
        return g - s if damping else g

    return beta, field


def randomise(cell, scale=0.3):
    with torch.no_grad():
        for p in cell.parameters():
            p.add_(scale * torch.randn_like(p))


# ---- the equations as written -------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["reference", "cpp"])
@pytest.mark.parametrize("A", ["identity", "coupled"])
@pytest.mark.parametrize("reading", ["paper", "code", "theorem"])
def test_two_euler_steps_with_the_gate_inside(backend, A, reading):
    cell = cell64(K=2, A=A, activation="tanh", reading=reading)
    randomise(cell)
    x, s = torch.randn(3, 2, dtype=DT), torch.randn(3, 4, dtype=DT)
    beta, field = explicit_parts(cell, x, s, damping=reading == "code")
    eta = cell.steps.values()
    z = s + eta[0] * beta * field(s)
    z = z + eta[1] * beta * field(z)
    torch.testing.assert_close(one_step(cell, x, s, backend), z)


@pytest.mark.parametrize("backend", ["reference", "cpp"])
@pytest.mark.parametrize("reading", ["paper", "code", "theorem"])
def test_gate_outside_mixes_after_the_euler_steps(backend, reading):
    cell = cell64(K=2, gate="outside", reading=reading)
    randomise(cell)
    x, s = torch.randn(3, 2, dtype=DT), torch.randn(3, 4, dtype=DT)
    beta, field = explicit_parts(cell, x, s, damping=reading == "code")
    eta = cell.steps.values()
    z = s + eta[0] * field(s)
    z = z + eta[1] * field(z)
    torch.testing.assert_close(one_step(cell, x, s, backend), (1 - beta) * s + beta * z)


@pytest.mark.parametrize("backend", ["reference", "cpp"])
@pytest.mark.parametrize("per_time_step", [False, True])
def test_code_reading_with_the_gate_outside_is_the_authors_body(backend, per_time_step):
    """The authors' default variant: ``z <- (1 - eta) z + eta (phi(U z + W u + b) - z - s + B u + b_lin)``
    then ``s_m = (1 - beta) s + beta z_K``, written here without the cell's ``A`` buffer."""
    options = {"eta_per_time_step": True, "max_length": 8} if per_time_step else {}
    cell = cell64(K=2, gate="outside", reading="code", activation="tanh", **options)
    randomise(cell)
    x, s = torch.randn(3, 2, dtype=DT), torch.randn(3, 4, dtype=DT)
    beta = torch.sigmoid(s @ cell.weight_Us.T + x @ cell.weight_Wx.T + cell.bias_beta)
    inside = x @ cell.weight_W1.T + s @ cell.weight_W2.T + cell.bias
    linear = x @ cell.weight_B1.T + s @ cell.weight_B2.T + cell.bias_linear
    eta = cell.steps.values()
    eta = eta[0] if per_time_step else eta
    z = s
    for k in range(2):
        z = (1 - eta[k]) * z + eta[k] * (torch.tanh(z @ cell.weight_U.T + inside) - z - s + linear)
    state = (s, torch.zeros(3, dtype=torch.long)) if per_time_step else s
    out, _ = cell.scan(x.unsqueeze(0), state, backend=backend)
    torch.testing.assert_close(out[0], (1 - beta) * s + beta * z)


@pytest.mark.parametrize(
    "reading,gate,bias",
    [
        ("paper", "inside", -3.0),
        ("paper", "outside", -3.0),
        ("code", "inside", 0.0),
        ("code", "outside", -3.0),
        ("theorem", "inside", -3.0),
    ],
)
def test_time_constant_bias_init_follows_the_reading(reading, gate, bias):
    assert torch.all(TARNN(2, 8, reading=reading, gate=gate).bias_beta == bias)


@pytest.mark.parametrize("A", ["identity", "coupled"])
def test_theorem_reading_starts_where_the_regulariser_is_zero(A):
    cell = TARNN(2, 8, A=A, reading="theorem")
    assert torch.equal(cell.weight_B2, -cell.A) and torch.equal(cell.weight_W2, -cell.weight_U)
    assert all(v == 0 for v in cell.losses().values())
    paper = TARNN(2, 8, A=A)
    assert all(v > 1 for v in paper.losses().values())


@pytest.mark.parametrize("reading,near_identity", [("theorem", True), ("paper", False)])
def test_theorem_reading_has_an_identity_state_jacobian_at_init(reading, near_identity):
    """On Theorem 1's set the first Euler step does not see s (z_0 = s), so with beta fixed
    ds_m/ds_{m-1} = I; beta's own dependence on s leaves a term of order eta * K * beta' only."""
    torch.manual_seed(0)
    cell = TARNN(2, 16, K=5, eta=0.01, reading=reading, dtype=DT)
    x, s = torch.randn(1, 2, dtype=DT), torch.randn(1, 16, dtype=DT)
    j = jacobian(lambda sp: one_step(cell, x, sp)[0], s)[:, 0, :]
    distance = torch.linalg.matrix_norm(j - torch.eye(16, dtype=DT), 2).item()
    assert (distance < 1e-3) == near_identity, distance


def test_coupled_a_matrix():
    a = TARNN(1, 6, A="coupled").A
    expected = -torch.eye(6)
    expected[0, 3] = expected[1, 4] = expected[2, 5] = 1.0
    assert torch.equal(a, expected)
    assert torch.equal(TARNN(1, 6).A, -torch.eye(6))


# ---- beta = 0 freezes a unit exactly --------------------------------------------------------------
@pytest.mark.parametrize("backend", ["reference", "cpp"])
@pytest.mark.parametrize("gate", ["inside", "outside"])
def test_a_unit_with_beta_zero_keeps_its_state_exactly(backend, gate):
    torch.manual_seed(0)
    cell = TARNN(3, 6, K=3, gate=gate, eta=0.3)
    frozen = [1, 4]
    with torch.no_grad():
        cell.bias_beta[frozen] = -1e4  # sigmoid underflows to exactly 0
        cell.bias_beta[[0, 2, 3, 5]] = 2.0
    s0 = torch.randn(5, 6)
    out, final = cell.scan(torch.randn(40, 5, 3), s0, backend=backend)
    assert torch.equal(out[:, :, frozen], s0[:, frozen].expand(40, 5, 2))
    assert torch.equal(cell.aux["beta"][:, :, frozen], torch.zeros(40, 5, 2))
    assert (out[-1, :, [0, 2, 3, 5]] - s0[:, [0, 2, 3, 5]]).abs().min() > 1e-3


# ---- Theorem 1: A + B2 = 0, U + W2 = 0, ||U|| < 1 give ds_m/ds_{m-1} -> I as K grows ----------------
def theorem1_jacobian(K, A="identity", constrained=True, reading="paper"):
    cell = cell64(K=K, A=A, activation="tanh", eta=0.5, reading=reading)
    with torch.no_grad():
        cell.bias_beta.zero_()
        cell.weight_Us.mul_(5.0)  # beta away from saturation and sensitive to s
        cell.weight_U.mul_(0.5 / torch.linalg.matrix_norm(cell.weight_U, 2))
        if constrained:  # the whole weight of s in the linear term is -A (B2 - I with the code's damping)
            cell.weight_B2.copy_(-cell.A + (torch.eye(4, dtype=DT) if reading == "code" else 0))
            cell.weight_W2.copy_(-cell.weight_U)
    x, s = torch.randn(1, 2, dtype=DT), torch.randn(1, 4, dtype=DT)
    j = jacobian(lambda sp: one_step(cell, x, sp)[0], s)[:, 0, :]
    return j, cell


@pytest.mark.parametrize("A", ["identity", "coupled"])
@pytest.mark.parametrize("reading", ["paper", "code"])
def test_theorem1_setting_gives_identity_state_jacobian(A, reading):
    j, cell = theorem1_jacobian(300, A, reading=reading)
    assert torch.linalg.matrix_norm(j - torch.eye(4, dtype=DT), 2) < 1e-6
    assert all(v.abs() < 1e-20 for v in cell.losses().values())
    j_few, _ = theorem1_jacobian(2, A, reading=reading)
    assert torch.linalg.matrix_norm(j_few - torch.eye(4, dtype=DT), 2) > 1e-2


def test_without_theorem1_constraint_the_jacobian_is_not_identity():
    j, _ = theorem1_jacobian(300, constrained=False)
    assert torch.linalg.matrix_norm(j - torch.eye(4, dtype=DT), 2) > 0.05


# ---- extra outputs --------------------------------------------------------------------------------
def test_losses_are_the_theorem1_regulariser_terms():
    cell = cell64(A="coupled")
    terms = cell.losses()
    assert set(terms) == {"omega_A", "omega_U"}
    torch.testing.assert_close(terms["omega_A"], torch.linalg.matrix_norm(cell.A + cell.weight_B2) ** 2)
    torch.testing.assert_close(terms["omega_U"], torch.linalg.matrix_norm(cell.weight_U + cell.weight_W2) ** 2)
    terms["omega_U"].backward()
    torch.testing.assert_close(cell.weight_U.grad, 2 * (cell.weight_U + cell.weight_W2).detach())


@pytest.mark.parametrize("backend", ["reference", "cpp"])
def test_aux_beta_is_the_time_constant_of_every_step(backend):
    cell = cell64(K=2)
    randomise(cell)
    x, s0 = torch.randn(7, 3, 2, dtype=DT), torch.randn(3, 4, dtype=DT)
    lengths = torch.tensor([7, 4, 2])
    out, _ = cell.scan(x, s0, lengths=lengths, backend=backend)
    full, _ = cell.scan(x, s0, backend=backend)
    prev = torch.cat([s0.unsqueeze(0), full[:-1]])
    expected = torch.sigmoid(prev @ cell.weight_Us.T + x @ cell.weight_Wx.T + cell.bias_beta)
    torch.testing.assert_close(cell.aux["beta"], expected)
    cell.scan(x, s0, lengths=lengths, backend=backend)
    mask = (torch.arange(7).unsqueeze(1) < lengths).unsqueeze(-1)
    torch.testing.assert_close(cell.aux["beta"], expected * mask)
    assert not cell.aux["beta"].requires_grad


# ---- options, init, counts ------------------------------------------------------------------------
def test_paper_init():
    torch.manual_seed(0)
    cell = TARNN(8, 256, eta=0.08)
    assert torch.all(cell.bias_beta == -3.0)
    assert torch.all(cell.bias == 0) and torch.all(cell.bias_linear == 0)
    assert torch.allclose(cell.steps.values(), torch.tensor(0.08)) and cell.steps.values().shape == (5,)
    assert abs(cell.weight_U.std().item() - 0.1) < 0.005 and abs(cell.weight_U.mean().item()) < 0.005


def test_parameter_count_formula():
    for d, h, K in ((1, 128, 5), (28, 128, 3)):
        count = sum(p.numel() for p in TARNN(d, h, K=K).parameters())
        assert count == 4 * h * h + 3 * h * d + 3 * h + K
    per_step = TARNN(2, 16, K=5, eta_per_time_step=True, max_length=100)
    assert per_step.steps.values().shape == (100, 5)


def test_eta_per_time_step_carries_a_counter_and_checks_max_length():
    cell = cell64(eta_per_time_step=True, max_length=5, K=2)
    x = torch.randn(5, 3, 2, dtype=DT)
    before, _ = cell.scan(x)
    with torch.no_grad():
        cell.steps.log_eta[3].fill_(math.log(0.4))
    after, state = cell.scan(x)
    torch.testing.assert_close(after[:3], before[:3])
    assert not torch.allclose(after[3], before[3])
    assert state[1].tolist() == [5, 5, 5]
    with pytest.raises(ValueError, match="max_length"):
        cell.scan(x[:1], state)
    with pytest.raises(ValueError, match="max_length"):  # too long from the first step
        cell.scan(torch.randn(6, 3, 2, dtype=DT))


@pytest.mark.parametrize(
    "options,match",
    [
        ({"A": "skew"}, "A"),
        ({"gate": "both"}, "gate"),
        ({"activation": "elu"}, "activation"),
        ({"K": 0}, "K"),
        ({"eta": 0.0}, "eta"),
        ({"eta_per_time_step": True}, "max_length"),
        ({"max_length": 100}, "max_length"),
    ],
)
def test_option_errors_name_the_option(options, match):
    with pytest.raises(ValueError, match=match):
        TARNN(3, 8, **options)


def test_coupled_needs_an_even_hidden_size():
    with pytest.raises(ValueError, match="even hidden_size"):
        TARNN(3, 7, A="coupled")


def test_registered_as_a_source_cell():
    entry = ltdrnn.entry("tarnn")
    assert entry.family == "source" and entry.cls is TARNN and "Kag" in entry.paper


# ---- fused == reference at long T ---------------------------------------------------------------
@pytest.mark.parametrize(
    "options",
    [{}, {"K": 1, "A": "coupled", "activation": "tanh"}, {"K": 3, "gate": "outside", "activation": "sigmoid"}],
)
def test_fused_equals_reference_at_T_1000(options):
    torch.manual_seed(1)
    cell = TARNN(3, 16, eta=0.1, **options)
    x = torch.randn(1000, 3, 3)
    s0 = 0.1 * torch.randn(3, 16)
    results = {}
    for backend in ("reference", "cpp"):
        cell.zero_grad()
        xi, si = x.clone().requires_grad_(), s0.clone().requires_grad_()
        out, final = cell.scan(xi, si, backend=backend)
        weights = torch.linspace(-1, 1, out.numel()).view_as(out)
        ((out * weights).sum() + final.square().sum()).backward()
        results[backend] = {
            "out": out.detach(),
            "beta": cell.aux["beta"],
            "grad x": xi.grad,
            "grad s0": si.grad,
            **{n: p.grad.clone() for n, p in cell.named_parameters()},
        }
    for key, ref in results["reference"].items():
        torch.testing.assert_close(results["cpp"][key], ref, atol=1e-4, rtol=1e-3, msg=key)


# ---- the compiled time loop (K = 1, csrc/tarnn.cpp) == the PyTorch loop == the reference ----------
def compiled_loop_available():
    from ltdrnn.ops.kernels import load_torch_ops

    return load_torch_ops("tarnn")


def run_and_differentiate(cell, x, s0, backend, loss):
    """Outputs, betas and every gradient of ``loss(outputs, final)`` through ``cell.scan``."""
    cell.zero_grad()
    xi, si = x.clone().requires_grad_(), s0.clone().requires_grad_()
    out, final = cell.scan(xi, si, backend=backend)
    loss(out, final).backward()
    grads = {n: p.grad.clone() for n, p in cell.named_parameters()}
    return {"out": out.detach(), "beta": cell.aux["beta"], "grad x": xi.grad, "grad s0": si.grad, **grads}


def weighted_loss(out, final):
    return (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum() + final.square().sum()


def mean_loss(out, final):
    return out.mean()  # its gradient reaches the backward expanded (stride 0)


@pytest.mark.parametrize("loss", [weighted_loss, mean_loss], ids=["weighted", "mean"])
@pytest.mark.parametrize(
    "options",
    [{"K": 1}, {"K": 1, "A": "coupled", "activation": "tanh"}, {"K": 1, "activation": "sigmoid", "reading": "code"}],
)
def test_compiled_k1_loop_equals_the_reference_and_the_pytorch_loop_at_T_1000(monkeypatch, options, loss):
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/tarnn.cpp")
    import ltdrnn.ops.tarnn_torch as tarnn_module

    calls = []
    real = tarnn_module._compiled_forward
    monkeypatch.setattr(tarnn_module, "_compiled_forward", lambda *a: calls.append(1) or real(*a))
    torch.manual_seed(2)
    cell = TARNN(3, 16, eta=0.1, **options)
    x, s0 = torch.randn(1000, 3, 3), 0.1 * torch.randn(3, 16)
    compiled = run_and_differentiate(cell, x, s0, "cpp", loss)
    assert calls, "the compiled loop did not run"
    reference = run_and_differentiate(cell, x, s0, "reference", loss)
    monkeypatch.setenv("LTDRNN_NO_KERNELS", "1")
    pytorch_loop = run_and_differentiate(cell, x, s0, "cpp", loss)
    assert len(calls) == 1, "LTDRNN_NO_KERNELS=1 must take the PyTorch loop"
    for key, expected in reference.items():
        # float32 over 1,000 steps: both loops sit ~1e-6 of each gradient's largest entry from float64
        # (weight gradients reach ~500), so the absolute tolerance scales with that entry; entries near 0
        # would otherwise fail on rounding alone, depending on how BLAS splits its sums
        scale = max(1.0, expected.abs().max().item())
        torch.testing.assert_close(compiled[key], expected, atol=1e-4 * scale, rtol=1e-3, msg=key)
        torch.testing.assert_close(compiled[key], pytorch_loop[key], atol=1e-5 * scale, rtol=1e-4, msg=key)


def test_compiled_k1_loop_in_float64_matches_the_reference_tightly_and_backward_twice():
    """Float64 agreement to 1e-10, and a second backward (retain_graph) gives the same gradients again
    (the K = 1 backward leaves P intact: nothing is recomputed)."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/tarnn.cpp")
    torch.manual_seed(3)
    out, reference = assert_a_second_backward_repeats_the_reference(TARNN(2, 8, K=1, eta=0.3, dtype=DT))
    torch.testing.assert_close(out.detach(), reference["out"], atol=1e-12, rtol=1e-12)


def assert_a_second_backward_repeats_the_reference(cell):
    """Backward twice through one compiled scan (retain_graph): the first matches the reference to 1e-10, the
    second the first exactly. Returns the scan's output and the reference's outputs and gradients."""
    x, s0 = torch.randn(300, 2, 2, dtype=DT), 0.1 * torch.randn(2, 8, dtype=DT)
    reference = run_and_differentiate(cell, x, s0, "reference", weighted_loss)
    cell.zero_grad()
    out, final = cell.scan(x, s0)
    loss = weighted_loss(out, final)
    loss.backward(retain_graph=True)
    first = {n: p.grad.clone() for n, p in cell.named_parameters()}
    cell.zero_grad()
    loss.backward()
    for name, p in cell.named_parameters():
        torch.testing.assert_close(first[name], reference[name], atol=1e-10, rtol=1e-9, msg=name)
        torch.testing.assert_close(p.grad, first[name], atol=0, rtol=0, msg=name)
    return out, reference


@pytest.mark.parametrize(
    "batch, options, loss",
    [
        (3, {}, weighted_loss),
        (3, {"A": "coupled", "activation": "tanh"}, mean_loss),
        (1, {"activation": "sigmoid", "reading": "code"}, weighted_loss),
    ],
    ids=["B3-relu", "B3-coupled-tanh-mean", "B1-sigmoid-code"],
)
def test_compiled_k1_loop_at_2_threads_equals_the_reference_and_the_pytorch_loop_in_float64(
    monkeypatch, batch, options, loss
):
    """One block of rows per thread: B = 3 splits into blocks of 2 and 1 rows (their parts of d eta are
    added), B = 1 leaves the second thread without rows."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/tarnn.cpp")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.manual_seed(9)
        cell = TARNN(3, 16, K=1, eta=0.1, dtype=DT, **options)
        randomise(cell, 0.05)
        x, s0 = torch.randn(1000, batch, 3, dtype=DT), 0.1 * torch.randn(batch, 16, dtype=DT)
        calls = counting_compiled_loops(monkeypatch)
        compiled = run_and_differentiate(cell, x, s0, "cpp", loss)
        assert calls, "the compiled loop did not run"
        reference = run_and_differentiate(cell, x, s0, "reference", loss)
        monkeypatch.setenv("LTDRNN_NO_KERNELS", "1")
        pytorch_loop = run_and_differentiate(cell, x, s0, "cpp", loss)
        assert len(calls) == 1, "LTDRNN_NO_KERNELS=1 must take the PyTorch loop"
    finally:
        torch.set_num_threads(threads)
    assert compiled["grad x"].abs().max() > 0 and compiled["steps.log_eta"].abs().max() > 0
    for key, expected in reference.items():
        torch.testing.assert_close(compiled[key], expected, atol=1e-10, rtol=1e-9, msg=key)
        torch.testing.assert_close(compiled[key], pytorch_loop[key], atol=1e-10, rtol=1e-9, msg=key)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("options", [{}, {"A": "coupled", "activation": "tanh"}], ids=["relu", "coupled-tanh"])
def test_compiled_k1_loop_without_an_input_gradient_equals_the_reference_in_float64(monkeypatch, threads, options):
    """x not requiring grad (pixel MNIST's case): the backward forms no gradient of x, and every other
    gradient equals the reference's and the PyTorch loop's, at 1 thread and at 2 (B = 5: blocks of 3 and
    2 rows, whose parameter-gradient sums are added)."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/tarnn.cpp")
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(14)
        cell = TARNN(2, 16, K=1, eta=0.1, dtype=DT, **options)
        randomise(cell, 0.05)
        x, s0 = torch.randn(1000, 5, 2, dtype=DT), 0.1 * torch.randn(5, 16, dtype=DT)

        def run(backend):
            cell.zero_grad()
            si = s0.clone().requires_grad_()
            out, final = cell.scan(x, si, backend=backend)
            weighted_loss(out, final).backward()
            return {"out": out.detach(), "grad s0": si.grad, **{n: p.grad.clone() for n, p in cell.named_parameters()}}

        calls = counting_compiled_loops(monkeypatch)
        compiled = run("cpp")
        assert calls, "the compiled loop did not run"
        reference = run("reference")
        monkeypatch.setenv("LTDRNN_NO_KERNELS", "1")
        pytorch_loop = run("cpp")
    finally:
        torch.set_num_threads(previous)
    assert compiled["weight_Wx"].abs().max() > 0 and compiled["weight_Us"].abs().max() > 0
    for key, expected in reference.items():
        torch.testing.assert_close(compiled[key], expected, atol=1e-10, rtol=1e-9, msg=key)
        torch.testing.assert_close(compiled[key], pytorch_loop[key], atol=1e-10, rtol=1e-9, msg=key)


def test_compiled_k1_loop_reads_batch_first_input_through_recurrent_in_float64(monkeypatch):
    """ltdrnn.Recurrent hands the cell batch-first input as a transposed, non-contiguous (T, B, d) view: the
    compiled loop gives the reference's outputs and gradients, x's included, at 2 threads (B = 3)."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/tarnn.cpp")
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.manual_seed(15)
        cell = TARNN(3, 16, K=1, A="coupled", eta=0.1, dtype=DT)
        randomise(cell, 0.05)
        layer = ltdrnn.Recurrent(lambda d, h: cell, 3, 16, batch_first=True)
        x = torch.randn(3, 1000, 3, dtype=DT)  # (B, T, d)
        calls = counting_compiled_loops(monkeypatch)
        xi = x.clone().requires_grad_()
        out, _ = layer(xi)
        weighted_loss(out, out[:, -1]).backward()
        compiled = {"out": out.detach(), "grad x": xi.grad, **{n: p.grad.clone() for n, p in cell.named_parameters()}}
        assert calls, "the compiled loop did not run"
        cell.zero_grad()
        xr = x.clone().requires_grad_()
        ref, _ = cell.scan(xr.transpose(0, 1), backend="reference")
        ref = ref.transpose(0, 1)
        weighted_loss(ref, ref[:, -1]).backward()
        reference = {"out": ref.detach(), "grad x": xr.grad, **{n: p.grad.clone() for n, p in cell.named_parameters()}}
    finally:
        torch.set_num_threads(previous)
    for key, expected in reference.items():
        torch.testing.assert_close(compiled[key], expected, atol=1e-10, rtol=1e-9, msg=key)


def test_compiled_k1_loop_without_autograd_equals_the_reference():
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/tarnn.cpp")
    torch.manual_seed(4)
    cell = TARNN(3, 8, K=1, eta=0.2)
    x, s0 = torch.randn(40, 2, 3), 0.1 * torch.randn(2, 8)
    expected, expected_final = cell.scan(x, s0, backend="reference")
    with torch.no_grad():
        out, final = cell.scan(x, s0)
    torch.testing.assert_close(out, expected.detach())
    torch.testing.assert_close(final, expected_final.detach())


def test_compiled_k1_operators_reject_malformed_operands_with_a_clear_error():
    """The Python path hands over only checked tensors; the operators check again before any pointer."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/tarnn.cpp")
    forward = torch.ops.ltdrnn.tarnn_k1_forward
    x, weight, bias = torch.zeros(5, 2, 3), torch.zeros(12, 3), torch.zeros(12)
    saved, s0, w_t = torch.zeros(5, 2, 8), torch.zeros(2, 4), torch.zeros(4, 12)  # saved: each step's [G | phi]
    out, beta = torch.zeros(5, 2, 4), torch.zeros(5, 2, 4)
    forward(x, weight, bias, saved, s0, w_t, 0.1, 0, out, beta)  # well-formed: runs
    for args, message in (
        ((x, weight, bias, saved, torch.zeros(3, 4), w_t, 0.1, 0, out, beta), "s0 must be a contiguous \\[2, 4\\]"),
        ((x, weight, bias, saved, s0, torch.zeros(4, 9), 0.1, 0, out, beta), "w_t must be a contiguous \\[4, 12\\]"),
        ((x, weight, bias, saved, s0, w_t, 0.1, 3, out, beta), "activation code"),
        ((x, weight, bias, saved, s0, w_t, 0.1, 0, torch.zeros(5, 2, 3), beta), "outputs must be"),
        ((x, weight, bias, saved.double(), s0, w_t, 0.1, 0, out, beta), "s0 must be"),
        ((x, weight, bias, saved.transpose(0, 1), s0, w_t, 0.1, 0, out, beta), "saved must be a contiguous \\(T, B"),
        ((x[:4], weight, bias, saved, s0, w_t, 0.1, 0, out, beta), "tarnn_k1_forward: x must be a contiguous"),
        (
            (x.transpose(0, 1).contiguous().transpose(0, 1), weight, bias, saved, s0, w_t, 0.1, 0, out, beta),
            "tarnn_k1_forward: x must be a contiguous",
        ),  # fmt: skip
        ((x.double(), weight, bias, saved, s0, w_t, 0.1, 0, out, beta), "tarnn_k1_forward: x must be a CPU tensor of"),
        ((x, weight[:, :2], bias, saved, s0, w_t, 0.1, 0, out, beta), "tarnn_k1_forward: weight must be a contiguous"),
        ((x, weight, bias[:11], saved, s0, w_t, 0.1, 0, out, beta), "tarnn_k1_forward: bias must be a contiguous"),
    ):
        with pytest.raises(RuntimeError, match=message):
            forward(*args)


def k1_operands(batch=2, steps=5, hidden=4, dim=3):
    """A forward of tarnn_k1_forward on random float64 operands, and the operands of its backward (its
    results in fresh, unfilled tensors)."""
    x = torch.randn(steps, batch, dim, dtype=DT)
    weight, bias = 0.5 * torch.randn(3 * hidden, dim, dtype=DT), 0.1 * torch.randn(3 * hidden, dtype=DT)
    saved = torch.empty(steps, batch, 2 * hidden, dtype=DT)
    state_weights = 0.3 * torch.randn(3 * hidden, hidden, dtype=DT)
    out, beta = torch.empty(steps, batch, hidden, dtype=DT), torch.empty(steps, batch, hidden, dtype=DT)
    s0 = 0.1 * torch.randn(batch, hidden, dtype=DT)
    torch.ops.ltdrnn.tarnn_k1_forward(x, weight, bias, saved, s0, state_weights.t().contiguous(), 0.2, 1, out, beta)
    return dict(
        saved=saved, betas=beta, grad_outputs=torch.randn(steps, batch, hidden, dtype=DT), outputs=out, s0=s0, x=x,
        weight=weight, state_weights=state_weights, eta=0.2, act=1, carry=torch.empty_like(s0),
        grad_x=torch.empty_like(x), grad_state_weights=torch.empty_like(state_weights),
        grad_weight=torch.empty_like(weight), grad_bias=torch.empty_like(bias),
    )  # fmt: skip


K1_RESULTS = ("carry", "grad_x", "grad_state_weights", "grad_weight", "grad_bias")


def run_k1_backward(operands, **change):
    """tarnn_k1_backward on the operands (with `change`), into fresh result tensors: (d eta, results)."""
    run = {**operands, **{name: torch.empty_like(operands[name]) for name in K1_RESULTS}, **change}
    grad_eta = torch.ops.ltdrnn.tarnn_k1_backward(**run)
    return grad_eta, {name: run[name] for name in K1_RESULTS}


def test_compiled_k1_backward_rejects_malformed_operands_and_runs_an_empty_batch():
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/tarnn.cpp")
    torch.manual_seed(11)
    backward = torch.ops.ltdrnn.tarnn_k1_backward
    operands = k1_operands()
    saved = operands["saved"].clone()
    backward(**operands)  # well-formed: runs, and leaves saved as the forward wrote it
    assert torch.equal(operands["saved"], saved)
    empty = k1_operands(batch=0)
    assert backward(**empty) == 0.0 and empty["carry"].shape == (0, 4)
    for name in ("grad_state_weights", "grad_weight", "grad_bias"):
        assert torch.equal(empty[name], torch.zeros_like(empty[name])), name
    for change, message in (
        ({"state_weights": operands["state_weights"].t().contiguous().t()}, "state_weights must be a contiguous"),
        ({"state_weights": torch.zeros(12, 5, dtype=DT)}, "state_weights must be"),
        ({"betas": operands["betas"][:, :, :3]}, "betas must be"),
        ({"outputs": operands["outputs"][:4]}, "outputs must be"),
        ({"grad_outputs": torch.zeros(5, 2, 3, dtype=DT)}, "grad_outputs must be"),
        ({"grad_outputs": operands["grad_outputs"].float()}, "grad_outputs must be"),
        ({"s0": torch.zeros(3, 4, dtype=DT)}, "s0 must be a contiguous"),
        ({"carry": torch.zeros(3, 4, dtype=DT)}, "tarnn_k1_backward: carry must be a contiguous"),
        ({"x": operands["x"][:, :1]}, "tarnn_k1_backward: x must be a contiguous"),
        ({"weight": operands["weight"][:11]}, "tarnn_k1_backward: weight must be a contiguous"),
        ({"grad_x": torch.zeros(5, 2, 2, dtype=DT)}, "tarnn_k1_backward: grad_x must be a contiguous"),
        ({"grad_state_weights": torch.zeros(4, 12, dtype=DT)}, "tarnn_k1_backward: grad_state_weights must be"),
        ({"grad_weight": torch.zeros(12, 3)}, "tarnn_k1_backward: grad_weight must be a CPU tensor of"),
        ({"grad_bias": torch.zeros(11, dtype=DT)}, "tarnn_k1_backward: grad_bias must be a contiguous"),
        ({"act": 3}, "activation code"),
    ):
        with pytest.raises(RuntimeError, match=message):
            backward(**{**operands, **change})


def test_compiled_k1_backward_without_an_input_gradient_gives_the_same_other_gradients():
    """grad_x as an empty tensor: x's gradient is not formed, every other result is exactly the same."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/tarnn.cpp")
    torch.manual_seed(13)
    operands = k1_operands(batch=3)
    with_x = run_k1_backward(operands)
    without_x = run_k1_backward(operands, grad_x=torch.empty(0, dtype=DT))
    assert with_x[0] == without_x[0] and with_x[1]["grad_x"].abs().max() > 0
    for name in K1_RESULTS:
        if name != "grad_x":
            assert torch.equal(with_x[1][name], without_x[1][name]), name


def test_compiled_backwards_read_grad_outputs_of_any_strides():
    """The loops read grad_outputs in place: a view whose entries are B apart (stride(2) = B, neither the
    unit stride nor a mean's 0) gives exactly what its contiguous copy gives."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/tarnn.cpp")
    torch.manual_seed(12)
    operands = k1_operands(batch=3)
    strided = torch.randn(5, 4, 3, dtype=DT).transpose(1, 2)  # (T, B, H), strides (H B, 1, B)
    results = []
    for grad in (strided, strided.contiguous()):
        grad_eta, k1_results = run_k1_backward(operands, grad_outputs=grad)
        results.append((grad_eta, *k1_results.values()))
    forward, backward = euler_operands(batch=3, dtype=DT)
    forward["w_t"], forward["u_t"] = 0.3 * torch.randn(4, 12, dtype=DT), 0.3 * torch.randn(4, 4, dtype=DT)
    torch.ops.ltdrnn.tarnn_euler_forward(**forward)
    backward.update(phis=forward["phis"], betas=forward["betas"], state_weights=forward["w_t"].t().contiguous())
    backward["u"] = forward["u_t"].t().contiguous()
    for grad in (strided, strided.contiguous()):
        run = {**backward, "p": forward["p"].clone(), "grad_outputs": grad, "grad_u": torch.zeros(4, 4, dtype=DT)}
        results.append((torch.ops.ltdrnn.tarnn_euler_backward(**run), run["p"], run["carry"], run["grad_u"]))
    for first, second in (results[:2], results[2:]):
        assert first[0] == second[0]
        for a, b in zip(first[1:], second[1:]):
            assert a.abs().max() > 0 and torch.equal(a, b)


def test_compiled_k1_build_is_cached_and_reused_without_compiling(monkeypatch):
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/tarnn.cpp")
    from ltdrnn.ops import kernels

    built = kernels._build("tarnn")
    monkeypatch.setattr(kernels.subprocess, "run", lambda *a, **k: pytest.fail("recompiled a cached build"))
    assert kernels._build("tarnn") == built and kernels._is_intact(built)
    assert built.parent == kernels.kernel_cache_dir() and built.name.startswith("tarnn-")


# ---- the compiled time loop for any K (csrc/tarnn.cpp, tarnn_euler_*) ------------------------------
EULER_OPTIONS = [
    {"K": 2},
    {"K": 5},
    {"K": 5, "activation": "tanh"},
    {"K": 5, "A": "coupled", "activation": "tanh"},
    {"K": 2, "A": "coupled"},
    {"K": 3, "gate": "outside", "activation": "sigmoid"},
    {"K": 2, "gate": "outside", "A": "coupled", "activation": "tanh"},
    {"K": 1, "gate": "outside"},
]


def counting_compiled_loops(monkeypatch):
    """Counts the calls of the compiled forward (with K > 1 or the gate outside: tarnn_euler_forward)."""
    import ltdrnn.ops.tarnn_torch as tarnn_module

    calls = []
    real = tarnn_module._compiled_forward
    monkeypatch.setattr(tarnn_module, "_compiled_forward", lambda *a: calls.append(1) or real(*a))
    return calls


@pytest.mark.parametrize("options", EULER_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_compiled_euler_loop_equals_the_reference_and_the_pytorch_loop_in_float64_at_T_1000(monkeypatch, options):
    """Every output and gradient (all parameters, x, s0), at 2 threads (blocks of 2 and 1 rows: the
    per-block gradients of U and eta are added up); for K = 5 and the gate outside also with an expanded
    (mean) gradient."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/tarnn.cpp")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.manual_seed(6)
        cell = TARNN(3, 16, eta=0.1, dtype=DT, **options)
        randomise(cell, 0.05)
        x, s0 = torch.randn(1000, 3, 3, dtype=DT), 0.1 * torch.randn(3, 16, dtype=DT)
        calls = counting_compiled_loops(monkeypatch)
        losses = (
            (weighted_loss, mean_loss) if options in EULER_OPTIONS[1:2] + EULER_OPTIONS[-3:-2] else (weighted_loss,)
        )
        compiled = {loss: run_and_differentiate(cell, x, s0, "cpp", loss) for loss in losses}
        assert len(calls) == len(losses), "the compiled loop did not run"
        reference = {loss: run_and_differentiate(cell, x, s0, "reference", loss) for loss in compiled}
        monkeypatch.setenv("LTDRNN_NO_KERNELS", "1")
        pytorch_loop = {loss: run_and_differentiate(cell, x, s0, "cpp", loss) for loss in compiled}
        assert len(calls) == len(losses), "LTDRNN_NO_KERNELS=1 must take the PyTorch loop"
    finally:
        torch.set_num_threads(threads)
    for loss in compiled:
        assert compiled[loss]["grad x"].abs().max() > 0 and compiled[loss]["weight_U"].abs().max() > 0
        for key, expected in reference[loss].items():
            msg = f"{key} ({loss.__name__})"
            torch.testing.assert_close(compiled[loss][key], expected, atol=1e-10, rtol=1e-9, msg=msg)
            torch.testing.assert_close(compiled[loss][key], pytorch_loop[loss][key], atol=1e-10, rtol=1e-9, msg=msg)


@pytest.mark.parametrize("options", [{"K": 5}, {"K": 2, "A": "coupled", "activation": "tanh"}], ids=["K5", "K2"])
def test_compiled_euler_loop_in_float32_is_close_to_the_float64_reference(options):
    """float32 against the float64 reference of the same parameters; the error allowed scales with each
    tensor's largest entry (float32 sums over T * B terms)."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/tarnn.cpp")
    torch.manual_seed(7)
    cell = TARNN(3, 16, eta=0.1, **options)
    x, s0 = torch.randn(1000, 3, 3), 0.1 * torch.randn(3, 16)
    single = run_and_differentiate(cell, x, s0, "cpp", weighted_loss)
    reference = run_and_differentiate(cell.double(), x.double(), s0.double(), "reference", weighted_loss)
    for key, expected in reference.items():
        assert single[key].dtype == torch.float32, key
        scale = expected.abs().max().item()
        torch.testing.assert_close(single[key].double(), expected, atol=1e-5 * scale, rtol=1e-4, msg=key)


def test_compiled_euler_loop_backward_twice_gives_the_same_gradients():
    """retain_graph: the first backward overwrote P with its gradient; the second recomputes it."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/tarnn.cpp")
    torch.manual_seed(8)
    assert_a_second_backward_repeats_the_reference(TARNN(2, 8, K=5, eta=0.3, A="coupled", dtype=DT))


@pytest.mark.parametrize("options", [{"K": 5}, {"K": 3, "gate": "outside", "A": "coupled"}], ids=["K5", "outside"])
def test_compiled_euler_loop_without_autograd_equals_the_reference(monkeypatch, options):
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/tarnn.cpp")
    torch.manual_seed(9)
    cell = TARNN(3, 8, eta=0.2, dtype=DT, **options)
    x, s0 = torch.randn(200, 5, 3, dtype=DT), 0.1 * torch.randn(5, 8, dtype=DT)
    expected, expected_final = cell.scan(x, s0, backend="reference")
    calls = counting_compiled_loops(monkeypatch)
    with torch.no_grad():
        out, final = cell.scan(x, s0)
    assert calls, "the compiled loop did not run"
    torch.testing.assert_close(out, expected.detach(), atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(final, expected_final.detach(), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("k, seed", [(1, 5), (5, 10)], ids=["K=1", "K=5"])
def test_without_a_compiler_the_compiled_loop_falls_back_to_pytorch(monkeypatch, tmp_path, k, seed):
    from ltdrnn.ops import kernels

    monkeypatch.delenv("LTDRNN_NO_KERNELS", raising=False)
    monkeypatch.setenv("LTDRNN_CACHE", str(tmp_path))  # nothing cached: a build is needed
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(kernels, "_TORCH_OPS", {})
    torch.manual_seed(seed)
    cell = TARNN(3, 8, K=k, eta=0.2)
    x, s0 = torch.randn(30, 2, 3), 0.1 * torch.randn(2, 8)
    with pytest.warns(RuntimeWarning, match="tarnn.*pure-PyTorch"):
        fused = run_and_differentiate(cell, x, s0, "cpp", weighted_loss)
    assert kernels._TORCH_OPS == {"tarnn": False}
    reference = run_and_differentiate(cell, x, s0, "reference", weighted_loss)
    for key, expected in reference.items():
        torch.testing.assert_close(fused[key], expected, atol=1e-5, rtol=1e-4, msg=key)


def euler_operands(steps=5, batch=2, hidden=4, k=3, dtype=torch.float32):
    """Well-formed operands of tarnn_euler_forward and _backward."""
    p = 0.1 * torch.randn(steps, batch, 3 * hidden, dtype=dtype)
    zeros = lambda *shape: torch.zeros(*shape, dtype=dtype)  # noqa: E731
    forward = dict(
        p=p, s0=zeros(batch, hidden), w_t=zeros(hidden, 3 * hidden), u_t=zeros(hidden, hidden), etas=[0.1] * k,
        k=k, act=0, coupled=False, inside=True, outputs=zeros(steps, batch, hidden), betas=zeros(steps, batch, hidden),
        phis=zeros(steps, k, batch, hidden),
    )  # fmt: skip
    backward = dict(
        p=p.clone(), phis=zeros(steps, k, batch, hidden), betas=zeros(steps, batch, hidden),
        grad_outputs=torch.ones(steps, batch, hidden, dtype=dtype), state_weights=zeros(3 * hidden, hidden),
        u=zeros(hidden, hidden), etas=[0.1] * k, k=k, act=0, coupled=False, inside=True, carry=zeros(batch, hidden),
        grad_u=zeros(hidden, hidden),
    )  # fmt: skip
    return forward, backward


def test_compiled_euler_operators_reject_malformed_operands_with_a_clear_error():
    """The Python path hands over only checked tensors; the operators check again before any pointer."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/tarnn.cpp")
    forward, backward = euler_operands()
    torch.ops.ltdrnn.tarnn_euler_forward(**forward)  # well-formed: runs
    grad_eta = torch.ops.ltdrnn.tarnn_euler_backward(**backward)
    assert len(grad_eta) == 3
    empty_forward, empty_backward = euler_operands(batch=0)  # an empty batch runs, and gives zero gradients
    torch.ops.ltdrnn.tarnn_euler_forward(**empty_forward)
    assert torch.ops.ltdrnn.tarnn_euler_backward(**empty_backward) == [0.0] * 3
    meta = torch.zeros(2, 4, device="meta")
    for change, message in (
        ({"s0": torch.zeros(3, 4)}, "s0 must be a contiguous \\(B, H\\)"),
        ({"s0": meta}, "(s0 must be|Meta tensors)"),  # the dispatcher may see the Meta key first
        ({"w_t": torch.zeros(4, 9)}, "w_t must be a contiguous CPU \\[4, 12\\]"),
        ({"u_t": torch.zeros(4, 4).t()[:, :3]}, "u_t must be"),
        ({"u_t": torch.zeros(4, 4, dtype=torch.float64)}, "u_t must be .* of p's dtype"),
        ({"etas": []}, "etas must hold K = 3 or T \\* K = 15"),
        ({"k": 0}, "k must be >= 1"),
        ({"act": 3}, "activation code"),
        ({"coupled": True, "p": torch.zeros(5, 2, 9)}, "(coupled A needs an even H|s0 must be)"),
        ({"outputs": torch.zeros(5, 2, 3)}, "outputs must be"),
        ({"phis": torch.zeros(5, 2, 2, 4)}, "phis must be"),
        ({"p": forward["p"].transpose(0, 1)}, "p must be a contiguous CPU"),
        ({"p": forward["p"].to(torch.int32)}, "expected float32 or float64"),
    ):
        with pytest.raises(RuntimeError, match=message):
            torch.ops.ltdrnn.tarnn_euler_forward(**{**forward, **change})
    odd = euler_operands(hidden=3)[0]
    with pytest.raises(RuntimeError, match="coupled A needs an even H"):
        torch.ops.ltdrnn.tarnn_euler_forward(**{**odd, "coupled": True})
    for change, message in (
        ({"phis": torch.zeros(0)}, "phis must be"),
        ({"grad_outputs": torch.zeros(5, 2, 3)}, "grad_outputs must be"),
        ({"grad_outputs": torch.zeros(5, 2, 4, device="meta")}, "(grad_outputs must be|Meta tensors)"),
        ({"state_weights": torch.zeros(12, 5)}, "state_weights must be"),
        ({"u": torch.zeros(3, 3)}, "u must be"),
        ({"grad_u": torch.zeros(4, 4, dtype=torch.float64)}, "grad_u must be"),
        ({"carry": torch.zeros(2, 5)}, "s0 must be a contiguous"),
        ({"k": 2, "etas": [0.1, 0.1]}, "phis must be"),
        ({"etas": [0.1, 0.1]}, "etas must hold K = 3"),
    ):
        with pytest.raises(RuntimeError, match=message):
            torch.ops.ltdrnn.tarnn_euler_backward(**{**backward, **change})


# ---- streaming without autograd ---------------------------------------------------------------------
@pytest.mark.parametrize("options", [{}, {"K": 1}, {"K": 2, "gate": "outside", "A": "coupled"}])
def test_no_grad_streaming_equals_the_reference_and_follows_parameter_updates(options):
    torch.manual_seed(0)
    cell = TARNN(3, 8, eta=0.2, **options)
    x = torch.randn(12, 2, 3)
    for _ in range(2):
        expected, expected_final = cell.scan(x, backend="reference")
        expected_beta = cell.aux["beta"]
        with torch.no_grad():
            state, outputs, betas = None, [], []
            for x_t in x:
                h, state = cell(x_t, state)
                outputs.append(h)
                betas.append(cell.aux["beta"][0])
            torch.testing.assert_close(torch.stack(outputs), expected.detach())
            torch.testing.assert_close(state, expected_final.detach())
            torch.testing.assert_close(torch.stack(betas), expected_beta)
            for p in cell.parameters():  # an optimiser step: the cached matrices must follow
                p.mul_(1.1)


@pytest.mark.parametrize("backend", ["cpp", "torch"])
@pytest.mark.parametrize("batch", [2, 12])
def test_the_layer_streams_the_doubly_damped_body_as_its_sequence(backend, batch):
    """The authors' gate-outside body with the code reading has A = -2I, which the lean streaming steps (the
    compiled one and its PyTorch twin, both A = -I) do not know: a streamed step takes the sequence path."""
    torch.manual_seed(0)
    layer = ltdrnn.Recurrent("tarnn", 3, 8, K=2, reading="code", gate="outside", eta=0.3, backend=backend)
    x = torch.randn(batch, 5, 3)
    with torch.no_grad():
        expected, _ = layer(x)
        state, outputs = None, []
        for t in range(x.shape[1]):
            y, state = layer.step(x[:, t], state)
            outputs.append(y)
    torch.testing.assert_close(torch.stack(outputs, 1), expected)


def test_no_grad_streaming_still_rejects_bad_input_clearly():
    cell = TARNN(3, 8)
    with torch.no_grad():
        with pytest.raises(ValueError, match="input_size"):
            cell(torch.randn(2, 4), torch.zeros(2, 8))
        with pytest.raises(TypeError, match="dtype"):
            cell(torch.randn(2, 3, dtype=DT), torch.zeros(2, 8, dtype=DT))


@pytest.mark.parametrize("options", [{}, {"K": 1}, {"K": 2, "gate": "outside"}])
def test_fused_sequence_without_autograd_equals_the_reference(options):
    torch.manual_seed(0)
    cell = TARNN(3, 8, eta=0.2, **options)
    x, s0 = torch.randn(30, 2, 3), 0.1 * torch.randn(2, 8)
    expected, expected_final = cell.scan(x, s0, backend="reference")
    with torch.no_grad():
        out, final = cell.scan(x, s0, backend="cpp")
    torch.testing.assert_close(out, expected.detach())
    torch.testing.assert_close(final, expected_final.detach())


@pytest.mark.parametrize("kernels", [True, False])
@pytest.mark.parametrize("batch", [1, 3, 9])
@pytest.mark.parametrize(
    "options",
    [{}, {"K": 1, "activation": "sigmoid"}, {"K": 3, "gate": "outside", "A": "coupled", "activation": "tanh"}],
)
def test_compiled_streaming_step_equals_the_reference(monkeypatch, kernels, batch, options):
    """The one-call C step (batch <= STREAM_MAX_BATCH, kernels on) and its PyTorch fallback."""
    torch.manual_seed(0)
    cell = TARNN(3, 8, eta=0.2, **options)
    check_streaming_matches_reference(
        monkeypatch,
        kernels,
        cell,
        torch.randn(10, batch, 3),
        None,
        step_records=lambda c: {"beta": c.aux["beta"][0]},
        expected_records=lambda c: {"beta": c.aux["beta"]},
    )


# ---- it learns: a short run of the adding task -------------------------------------------------------
@pytest.mark.slow
def test_default_reading_learns_adding_well_below_the_trivial_baseline(tmp_path):
    """400 Adam steps (lr 1e-2) of adding T=100: the three seeds we measured ended at test MSE 0.015,
    0.024 and 0.031 (H=64, K=1, eta_0=0.05); predicting 1 scores 0.167. Half the baseline is far
    from both."""
    result = train_adding_t100(
        tmp_path, {"cell": "tarnn", "hidden_size": 64, "options": {"K": 1, "eta": 0.05}}, {"name": "adam", "lr": 0.01}
    )
    assert result["metrics"]["metric"] < 0.5 * result["metrics"]["baseline"]
