"""Behaviour of the baseline cells: each test checks a property its paper builds the cell around."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import ltdrnn
from ltdrnn.cells.indrnn import recurrent_bound

F64 = torch.float64


def build(name, d=3, h=6, **options):
    return ltdrnn.build(name, d, h, dtype=F64, **options)


def step_jacobian(cell, x_t, state):
    """``d h_t / d h_{t-1}`` of one step, ``(H, H)``, for a cell with a single-tensor state."""
    p_t = cell.precompute(x_t.unsqueeze(0))
    p_t = tuple(q[0] for q in p_t) if isinstance(p_t, tuple) else p_t[0]
    return torch.autograd.functional.jacobian(lambda h: cell.step(p_t, h.unsqueeze(0))[0][0], state)


# ---- FastRNN / FastGRNN --------------------------------------------------------------------------
def test_fastrnn_is_a_sigmoid_weighted_residual_step():
    torch.manual_seed(0)
    cell = build("fastrnn")
    x, h0 = torch.randn(1, 2, 3, dtype=F64), torch.randn(2, 6, dtype=F64)
    out, _ = cell.scan(x, h0)
    alpha, beta = torch.sigmoid(cell.alpha), torch.sigmoid(cell.beta)
    candidate = torch.tanh(x[0] @ cell.W[0].T + h0 @ cell.U[0].T + cell.bias)
    torch.testing.assert_close(out[0], alpha * candidate + beta * h0)
    assert 0.04 < alpha.item() < 0.05 and 0.95 < beta.item() < 0.96  # EdgeML init: -3, +3


@pytest.mark.parametrize("name", ["fastrnn", "fastgrnn"])
def test_low_rank_equals_full_rank_with_the_product_matrices(name):
    torch.manual_seed(1)
    low = build(name, 5, 6, w_rank=2, u_rank=3)
    full = build(name, 5, 6)
    with torch.no_grad():
        full.W[0].copy_(low.W[0] @ low.W[1])
        full.U[0].copy_(low.U[0] @ low.U[1])
        for n, p in full.named_parameters():
            if not n.startswith(("W.", "U.")):
                p.copy_(dict(low.named_parameters())[n])
    x = torch.randn(7, 2, 5, dtype=F64)
    torch.testing.assert_close(low.scan(x)[0], full.scan(x)[0])
    # W: 6x5 = 30 -> 6x2 + 2x5 = 22;  U: 6x6 = 36 -> 6x3 + 3x6 = 36
    assert sum(p.numel() for p in low.parameters()) == sum(p.numel() for p in full.parameters()) - 30 + 22


def test_fastgrnn_shares_the_preactivation_between_gate_and_update():
    torch.manual_seed(2)
    cell = build("fastgrnn")
    x, h0 = torch.randn(1, 2, 3, dtype=F64), torch.randn(2, 6, dtype=F64)
    a = x[0] @ cell.W[0].T + h0 @ cell.U[0].T
    z = torch.sigmoid(a + cell.bias_gate)
    candidate = torch.tanh(a + cell.bias_update)
    zeta, nu = torch.sigmoid(cell.zeta), torch.sigmoid(cell.nu)
    torch.testing.assert_close(cell.scan(x, h0)[0][0], (zeta * (1 - z) + nu) * candidate + z * h0)
    assert len(list(cell.W)) == 1 and len(list(cell.U)) == 1  # one W and one U for both


@pytest.mark.parametrize("gate_bias", [1.0, 3.0])
def test_fastgrnn_gate_bias_sets_how_much_of_the_state_is_kept_at_the_start(gate_bias):
    """With no input and no recurrent weights the state moves towards a fixed point by the factor
    ``z = sigmoid(gate_bias)`` per step; the default 1 is EdgeML's bias."""
    torch.manual_seed(3)
    cell = build("fastgrnn", gate_bias=gate_bias) if gate_bias != 1.0 else build("fastgrnn")
    with torch.no_grad():
        cell.U[0].zero_()
    h0 = torch.randn(2, 6, dtype=F64)
    out, _ = cell.scan(torch.zeros(3, 2, 3, dtype=F64), h0)
    kept = (out[2] - out[1]) / (out[1] - out[0])
    torch.testing.assert_close(kept, torch.full_like(kept, torch.sigmoid(torch.tensor(gate_bias)).item()))


# ---- AntisymmetricRNN ----------------------------------------------------------------------------
@pytest.mark.parametrize("gamma", [0.0, 0.05])
def test_antisymmetric_recurrent_matrix_has_real_parts_minus_gamma(gamma):
    torch.manual_seed(3)
    cell = build("antisymmetric", h=8, gamma=gamma, init_std=3.0)
    eigenvalues = torch.linalg.eigvals(cell.recurrent_matrix())
    torch.testing.assert_close(eigenvalues.real, torch.full((8,), -gamma, dtype=F64))
    assert eigenvalues.imag.abs().max() > 0.1  # the antisymmetric part does rotate


@pytest.mark.parametrize("name", ["antisymmetric", "antisymmetric_gated"])
def test_antisymmetric_jacobian_is_near_identity_with_real_parts_one_minus_eps_gamma(name):
    """At a state where tanh' = 1 (zero pre-activation) the step Jacobian is ``I + eps M``
    (ungated; ``I + eps/2 M`` gated, as sigmoid(0) = 1/2), whose eigenvalues lie on the vertical line
    ``Re = 1 - eps gamma`` (``1 - eps gamma / 2``): neither exploding nor vanishing when eps*gamma is small."""
    torch.manual_seed(4)
    eps, gamma = 0.1, 0.2
    cell = build(name, h=8, eps=eps, gamma=gamma)
    with torch.no_grad():
        cell.bias.zero_()
    jac = step_jacobian(cell, torch.zeros(1, 3, dtype=F64), torch.zeros(8, dtype=F64))
    scale = 0.5 if name.endswith("gated") else 1.0
    torch.testing.assert_close(jac, torch.eye(8, dtype=F64) + eps * scale * cell.recurrent_matrix())
    eigenvalues = torch.linalg.eigvals(jac)
    torch.testing.assert_close(eigenvalues.real, torch.full((8,), 1 - eps * gamma * scale, dtype=F64))


def test_antisymmetric_initialisation_scales():
    torch.manual_seed(5)
    cell = ltdrnn.build("antisymmetric", 400, 400, init_std=2.0)
    assert abs(cell.weight_hh.std().item() - 2.0 / 20) < 0.005
    assert abs(cell.weight_ih.std().item() - 1.0 / 20) < 0.003
    assert cell.bias.abs().max() == 0


# ---- IndRNN ---------------------------------------------------------------------------------------
def test_indrnn_recurrence_is_elementwise():
    torch.manual_seed(6)
    cell = build("indrnn")
    h = torch.rand(6, dtype=F64) + 0.5
    x = torch.randn(1, 3, dtype=F64)
    with torch.no_grad():
        cell.bias.fill_(5.0)  # every unit active, so relu' = 1
    jac = step_jacobian(cell, x, h)
    torch.testing.assert_close(jac, torch.diag(cell.weight_hh))
    assert cell.weight_hh.shape == (6,)


def test_indrnn_clipping_limits_the_recurrent_weights():
    cell = build("indrnn", recurrent_max=0.5, recurrent_init=(0.0, 1.0))
    assert cell.weight_hh.max() <= 0.5  # clipped at initialisation
    with torch.no_grad():
        cell.weight_hh.fill_(3.0)
    assert torch.equal(cell.recurrent_weights(), torch.full((6,), 0.5, dtype=F64))
    cell.clip_recurrent_()
    assert torch.equal(cell.weight_hh, torch.full((6,), 0.5, dtype=F64))
    assert recurrent_bound(100) == pytest.approx(2**0.01)


def test_indrnn_keeps_a_unit_with_weight_one_for_a_long_time():
    """With u = 1, relu and zero input after the first step a unit holds its value for any T."""
    cell = build("indrnn", h=2)
    with torch.no_grad():
        cell.weight_hh.fill_(1.0)
        cell.bias.zero_()
        cell.weight_ih.fill_(1.0)
    x = torch.zeros(3000, 1, 3, dtype=F64)
    x[0] = 0.25
    out, final = cell.scan(x)
    torch.testing.assert_close(final, torch.full((1, 2), 0.75, dtype=F64))


# ---- expRNN / nnRNN -------------------------------------------------------------------------------
@pytest.mark.parametrize("init", ["henaff", "cayley", "identity"])
def test_exprnn_matrix_stays_orthogonal_after_gradient_steps(init):
    torch.manual_seed(7)
    cell = build("exprnn", h=8, init=init)
    eye = torch.eye(8, dtype=F64)
    before = cell.recurrent_matrix().detach().clone()
    torch.testing.assert_close(before.T @ before, eye)
    optimiser = torch.optim.SGD(cell.parameters(), lr=0.05)
    for _ in range(3):
        optimiser.zero_grad()
        out, _ = cell.scan(torch.randn(10, 4, 3, dtype=F64))
        out.pow(2).sum().backward()
        optimiser.step()
    after = cell.recurrent_matrix().detach()
    assert (after - before).abs().max() > 1e-3
    torch.testing.assert_close(after.T @ after, eye)


def test_exprnn_henaff_init_is_block_diagonal_rotations():
    torch.manual_seed(8)
    w = build("exprnn", h=6).recurrent_matrix().detach()
    block = torch.arange(6) // 2
    assert w[block.unsqueeze(0) != block.unsqueeze(1)].abs().max() < 1e-12
    for k in range(3):
        b = w[2 * k : 2 * k + 2, 2 * k : 2 * k + 2]
        torch.testing.assert_close(b[0, 0], b[1, 1])
        torch.testing.assert_close(b[0, 1], -b[1, 0])


def test_exprnn_rebase_keeps_the_matrix():
    torch.manual_seed(9)
    cell = build("exprnn", h=6)
    with torch.no_grad():
        cell.recurrent.linear.parametrizations.weight.original.add_(0.3 * torch.randn(6, 6, dtype=F64))
    before = cell.recurrent_matrix().detach().clone()
    cell.recurrent.rebase_()
    torch.testing.assert_close(cell.recurrent_matrix(), before)


def test_exprnn_modrelu():
    cell = build("exprnn", d=1, h=2)
    with torch.no_grad():
        cell.bias.copy_(torch.tensor([-0.5, 0.25], dtype=F64))
        cell.weight_ih.fill_(1.0)
    out, _ = cell.scan(torch.tensor([[[-2.0]], [[0.0]]], dtype=F64), torch.zeros(1, 2, dtype=F64))
    torch.testing.assert_close(out[0, 0], torch.tensor([-1.5, -2.25], dtype=F64))


def test_nnrnn_eigenvalues_come_from_the_schur_blocks_despite_the_non_normal_part():
    torch.manual_seed(10)
    cell = build("nnrnn", h=6)
    v0 = cell.recurrent_matrix().detach()
    torch.testing.assert_close(v0.T @ v0, torch.eye(6, dtype=F64))  # T = 0, radius 1: orthogonal
    with torch.no_grad():
        cell.non_normal.copy_(torch.randn(6, 6, dtype=F64))
        cell.radius.copy_(torch.tensor([0.9, 1.0, 1.2], dtype=F64))
    v = cell.recurrent_matrix().detach()
    assert (v.T @ v - v @ v.T).abs().max() > 1e-2  # non-normal now
    expected = torch.polar(cell.radius.detach(), cell.angle.detach())
    expected = torch.cat([expected, expected.conj()])
    got = torch.linalg.eigvals(v)
    key = lambda z: sorted(zip(z.real.tolist(), z.imag.tolist()))
    for a, b in zip(key(got), key(expected)):
        assert a == pytest.approx(b, abs=1e-8)
    assert cell.losses()["eigenvalue_radius"].item() == pytest.approx(0.01 + 0.04)


def test_nnrnn_rejects_odd_hidden_size():
    with pytest.raises(ValueError, match="hidden_size"):
        build("nnrnn", h=5)


# ---- uRNN -----------------------------------------------------------------------------------------
def test_urnn_recurrent_map_is_unitary():
    torch.manual_seed(11)
    cell = build("urnn", h=16)
    n = cell.complex_size
    basis = torch.eye(n, dtype=torch.complex128)
    w = cell.unitary(basis).T  # column j = W e_j
    torch.testing.assert_close(w.conj().T @ w, basis)
    assert (w - torch.diag(torch.diagonal(w))).abs().max() > 0.1  # it does mix units


def test_urnn_state_is_real_and_imaginary_parts():
    torch.manual_seed(12)
    cell = build("urnn", h=8)
    with torch.no_grad():
        cell.bias.fill_(10.0)  # modReLU scales |z| by (|z| + 10) / |z|
    h0 = torch.randn(1, 8, dtype=F64)
    p = torch.randn(1, 8, dtype=F64)
    h, _ = cell.step(p, h0)
    z = cell.unitary(torch.complex(h0[:, :4], h0[:, 4:])) + torch.complex(p[:, :4], p[:, 4:])
    expected = z * (z.abs() + 10) / z.abs()
    # the cell divides by |z| + 1e-6 (finite gradient at z = 0): relative difference ~1e-6 / |z|
    torch.testing.assert_close(h, torch.cat([expected.real, expected.imag], -1), rtol=1e-5, atol=0.0)


# ---- coRNN / LEM ----------------------------------------------------------------------------------
def _free_oscillator(**options):
    cell = build("cornn", d=1, h=4, **options)
    with torch.no_grad():
        for p in cell.parameters():
            p.zero_()  # no coupling, no drive: y'' = -gamma y - eps y'
    return cell


def test_cornn_without_damping_conserves_the_discrete_energy():
    """With zero weights and eps = 0 the scheme is symplectic Euler, which conserves
    ``z^2 + gamma y^2 - dt gamma y z`` exactly."""
    cell = _free_oscillator(eps=0.0)
    state = (torch.randn(2, 4, dtype=F64), torch.randn(2, 4, dtype=F64))
    energy = lambda y, z: z * z + cell.gamma * y * y - cell.dt * cell.gamma * y * z
    _, (y, z) = cell.scan(torch.zeros(5000, 2, 1, dtype=F64), state)
    torch.testing.assert_close(energy(y, z), energy(*state), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("scheme", ["imex", "explicit"])
def test_cornn_damping_dissipates_energy(scheme):
    cell = _free_oscillator(eps=4.7, scheme=scheme)
    state = (torch.randn(2, 4, dtype=F64), torch.randn(2, 4, dtype=F64))
    energy = lambda y, z: (z * z + cell.gamma * y * y - cell.dt * cell.gamma * y * z).sum()
    values = [energy(*state)]
    for _ in range(400):
        _, state = cell.scan(torch.zeros(1, 2, 1, dtype=F64), state)
        values.append(energy(*state))
    values = torch.stack(values)
    assert (values[1:] <= values[:-1] + 1e-12).all()
    assert values[-1] < 1e-3 * values[0]


def test_cornn_imex_and_explicit_differ_only_in_the_damping_term():
    torch.manual_seed(13)
    imex = build("cornn")
    explicit = build("cornn", scheme="explicit")
    explicit.load_state_dict(imex.state_dict())
    x = torch.randn(5, 2, 3, dtype=F64)
    assert (imex.scan(x)[0] - explicit.scan(x)[0]).abs().max() > 1e-6
    imex.eps = explicit.eps = 0.0
    torch.testing.assert_close(imex.scan(x)[0], explicit.scan(x)[0])


def test_lem_states_stay_in_the_unit_box_and_move_at_most_dt():
    """Each LEM update is a convex combination (dt <= 1) of the old value and a tanh, so a state
    that starts in [-1, 1] stays there, and one step moves it by at most 2 dt."""
    torch.manual_seed(14)
    cell = build("lem", dt=0.3)
    x = 50 * torch.randn(300, 3, 3, dtype=F64)
    out, _ = cell.scan(x)
    assert out.abs().max() <= 1
    assert (out[1:] - out[:-1]).abs().max() <= 2 * 0.3
    p = cell.precompute(x[:1])[0]
    _, (y, z) = cell.step(p, cell.init_state(3))
    assert z.abs().max() <= 0.3 and y.abs().max() <= 0.3  # first step from zero: at most dt


# ---- NRU ------------------------------------------------------------------------------------------
def test_nru_memory_vectors_have_unit_p_norm():
    torch.manual_seed(15)
    cell = build("nru", memory_size=9, heads=4)
    v = cell._memory_vectors(torch.randn(5, 2 * cell.side, dtype=F64))
    assert v.shape == (5, 4, 9)
    torch.testing.assert_close(v.abs().pow(5).sum(-1), torch.ones(5, 4, dtype=F64))


def test_nru_memory_accumulates_without_saturating():
    """With constant write strength and no erase, the memory grows linearly and without bound."""
    cell = build("nru", memory_size=4, heads=1)
    k, s = cell.heads, cell.side
    with torch.no_grad():
        cell.weight_heads.zero_()
        cell.bias_heads.zero_()
        cell.bias_heads[0] = 3.0  # alpha
        cell.bias_heads[2 * k : 2 * k + 2 * s] = 1.0  # write vector: all ones, normalised
    _, (h, m) = cell.scan(torch.randn(200, 2, 3, dtype=F64))
    per_step = 3.0 / 4 ** (1 / 5)
    torch.testing.assert_close(m, torch.full((2, 4), 200 * per_step, dtype=F64))
    assert (h >= 0).all()


def test_nru_rejects_non_square_memory():
    with pytest.raises(ValueError, match="perfect square"):
        build("nru", memory_size=6, heads=4)


# ---- option validation ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, option, value, expected",
    [
        ("fastrnn", "alpha_init", float("nan"), "a finite number"),
        ("fastgrnn", "nu_init", True, "a finite number"),
        ("fastgrnn", "gate_bias", float("nan"), "a finite number"),
        ("lstm", "forget_bias", float("inf"), "a finite number"),
        ("ugrnn", "gate_bias", "1", "a finite number"),
        ("antisymmetric", "gamma", -0.1, "a non-negative finite number"),
        ("cornn", "eps", float("inf"), "a non-negative finite number"),
    ],
)
def test_float_options_are_checked_and_named(name, option, value, expected):
    with pytest.raises(ValueError, match=rf"{option}: expected {expected}, got {value!r}"):
        build(name, **{option: value})


def test_recurrent_bound_needs_a_positive_integer_number_of_steps():
    with pytest.raises(ValueError, match="steps: expected a positive integer, got 0"):
        recurrent_bound(0)


def test_accepted_float_options_are_stored_as_floats():
    assert build("fastrnn", alpha_init=-3).alpha_init == -3.0
    assert build("antisymmetric", gamma=0).gamma == 0.0
    assert build("lstm", forget_bias=1).forget_bias == 1.0


BASELINE_MODULES = ("gated", "fast", "antisymmetric", "indrnn", "orthogonal", "nru", "oscillator")


def test_every_baseline_of_these_families_has_a_docs_page_naming_it():
    docs = Path(__file__).resolve().parents[2] / "docs" / "cells"
    names = [
        n
        for n in ltdrnn.list_cells("baseline")
        if ltdrnn.entry(n).cls.__module__.rsplit(".", 1)[-1] in BASELINE_MODULES
    ]
    assert len(names) == 16
    for name in names:
        entry = ltdrnn.entry(name)
        page = docs / f"{entry.cls.__module__.rsplit('.', 1)[-1]}.md"
        assert page.is_file(), f"{name}: missing {page}"
        assert f"`{name}`" in page.read_text(), f"{name}: not described in {page.name}"
        assert entry.paper and entry.cls.__doc__, name
