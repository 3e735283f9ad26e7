"""SA-RNN: coordinator, straight-through gradients, budget, slope annealing, fast and sparse paths."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import ltdrnn
from ltdrnn.cells.masked import hard_sigmoid, skip_fraction
from stream_helpers import check_streaming_matches_reference


def make(seed=0, d=3, h=8, **options):
    torch.manual_seed(seed)
    return ltdrnn.build("sarnn", d, h, **options)


def force_bias(cell, value):
    with torch.no_grad():
        cell.coord_bias.fill_(value)
        cell.coord_weight_ih.zero_()
        cell.coord_weight_hh.zero_()


@pytest.mark.parametrize("recurrence", ["gru", "lstm"])
def test_all_zero_mask_leaves_the_state_unchanged(recurrence):
    cell = make(recurrence=recurrence)
    force_bias(cell, -100.0)
    x = torch.randn(12, 4, 3)
    state = tuple(torch.randn(4, 8) for _ in range(2)) if recurrence == "lstm" else torch.randn(4, 8)
    for backend in cell.backends:
        out, final = cell.scan(x, state, backend=backend)
        h0 = state[0] if recurrence == "lstm" else state
        assert torch.equal(out, h0.expand(12, 4, 8)), backend
        assert (
            all(torch.equal(a, b) for a, b in zip(final, state)) if recurrence == "lstm" else torch.equal(final, state)
        )
        assert torch.all(cell.aux["update_mask"] == 0)


@pytest.mark.parametrize("recurrence,torch_cls", [("gru", nn.GRU), ("lstm", nn.LSTM)])
def test_all_ones_mask_is_the_plain_recurrence(recurrence, torch_cls):
    cell = make(recurrence=recurrence)
    force_bias(cell, 100.0)
    reference = torch_cls(3, 8)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(reference, f"{name}_l0").copy_(getattr(cell, name))
    x = torch.randn(15, 2, 3)
    expected, _ = reference(x)
    for backend in cell.backends:
        out, _ = cell.scan(x, backend=backend)
        torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)
        assert skip_fraction(cell.aux) == 0


@pytest.mark.parametrize("backend", ["reference", "cpp"])
def test_straight_through_gives_the_coordinator_gradients(backend):
    cell = make()
    out, _ = cell.scan(torch.randn(20, 4, 3), backend=backend)
    assert 0 < skip_fraction(cell.aux) < 1
    out[-1].pow(2).sum().backward()  # the task loss only: no budget term
    for name in ("coord_weight_ih", "coord_weight_hh", "coord_bias"):
        grad = getattr(cell, name).grad
        assert grad is not None and grad.abs().sum() > 0, name


def test_skip_fraction_follows_the_coordinator_bias():
    x = torch.randn(30, 5, 3)
    fractions = []
    for bias in (-50.0, -0.3, 0.0, 0.3, 50.0):
        cell = make()
        with torch.no_grad():
            cell.coord_bias.fill_(bias)
        cell.scan(x)
        fractions.append(float(skip_fraction(cell.aux)))
    assert fractions[0] == 1.0 and fractions[-1] == 0.0
    assert fractions == sorted(fractions, reverse=True)


def test_skip_fraction_counts_only_real_steps():
    mask = torch.ones(4, 2, 3)
    mask[2:, 1] = 0  # sequence 1 has length 2: its zeros past the end must not count
    assert skip_fraction(mask) == pytest.approx(1 - 18 / 24)
    assert skip_fraction(mask, torch.tensor([4, 2])) == 0
    mask[0, 0, 0] = 0
    assert skip_fraction({"update_mask": mask}, torch.tensor([4, 2])) == pytest.approx(1 / 18)


def test_update_probability_is_the_hard_sigmoid_of_the_coordinator():
    cell = make(slope=2.5, anneal_slope=False)
    x, h0 = torch.randn(1, 4, 3), torch.randn(4, 8)
    cell.scan(x, h0, backend="reference")
    a = cell.coord_weight_hh * h0 + x[0] @ cell.coord_weight_ih.T + cell.coord_bias
    expected = hard_sigmoid(a, 2.5)
    torch.testing.assert_close(cell.aux["update_prob"][0], expected)
    assert torch.equal(cell.aux["update_mask"][0], (expected > 0.5).float())
    values = hard_sigmoid(torch.tensor([-2.0, -0.5, 0.0, 0.2, 0.5, 3.0]), 2.0)
    assert values.tolist() == pytest.approx([0.0, 0.0, 0.5, 0.7, 1.0, 1.0])


def test_slope_annealing_schedule():
    cell = make()
    schedule = []
    for epoch in (0, 1, 10, 50, 100, 1000):
        cell.set_epoch(epoch)
        schedule.append(cell.slope)
    assert schedule == pytest.approx([1.0, 1.04, 1.4, 3.0, 5.0, 5.0])
    fixed = make(anneal_slope=False, slope=2.0)
    fixed.set_epoch(30)
    assert fixed.slope == 2.0
    steep = make(slope_increment=1.0, max_slope=3.0)
    steep.set_epoch(7)
    assert steep.slope == 3.0


def test_the_annealed_slope_travels_in_the_state_dict_and_through_a_checkpoint(tmp_path):
    from ltdrnn.checkpoint import atomic_save, load_checkpoint

    torch.manual_seed(0)
    trained, restored = ltdrnn.Recurrent("sarnn", 3, 6), ltdrnn.Recurrent("sarnn", 3, 6)
    trained.set_epoch(10)  # slope 1 + 0.04 * 10
    atomic_save({"config": {}, "model": trained.state_dict()}, tmp_path / "c.pt")
    restored.load_state_dict(load_checkpoint(tmp_path / "c.pt")["model"])  # weights_only
    assert restored.cells[0].slope == trained.cells[0].slope == pytest.approx(1.4)
    x = torch.randn(2, 7, 3)
    trained(x), restored(x)
    torch.testing.assert_close(restored.cells[0].aux["update_prob"], trained.cells[0].aux["update_prob"])
    # a state dict saved before the slope was stored still loads; the cell keeps its own slope
    older = {k: v for k, v in trained.state_dict().items() if not k.endswith("_extra_state")}
    fresh = ltdrnn.Recurrent("sarnn", 3, 6)
    fresh.load_state_dict(older)
    assert fresh.cells[0].slope == 1.0


def test_a_steeper_slope_moves_probabilities_away_from_one_half():
    x = torch.randn(5, 4, 3)
    cell = make()
    cell.scan(x)
    shallow = (cell.aux["update_prob"][0] - 0.5).abs()
    cell.set_epoch(50)
    cell.scan(x)
    steep = (cell.aux["update_prob"][0] - 0.5).abs()
    assert torch.all(steep >= shallow - 1e-7) and torch.any(steep > shallow)


@pytest.mark.parametrize("backend", ["reference", "cpp"])
def test_the_slope_changes_the_gradient_and_never_the_forward_pass(backend):
    # u = [clamp((alpha a + 1) / 2) > 1/2] = [a > 0] for every alpha > 0: annealing cannot move a decision
    # (lab/notes/sarnn.md, 2026-11-26), only the straight-through gradient and the budget's value
    x = torch.randn(40, 4, 3, dtype=torch.float64)
    runs = []
    for slope in (1.0, 1.04, 5.0):
        cell = make(slope=slope, anneal_slope=False, backend=backend, dtype=torch.float64)
        out, _ = cell.scan(x)
        out.sum().backward()
        runs.append((out.detach(), cell.aux["update_mask"], cell.coord_bias.grad.clone()))
    (out, mask, grad), others = runs[0], runs[1:]
    assert 0 < mask.mean() < 1
    for other_out, other_mask, other_grad in others:
        assert torch.equal(other_mask, mask) and torch.equal(other_out, out)
        assert not torch.allclose(other_grad, grad)


def test_budget_is_the_sum_over_time_of_the_mean_update_probability():
    cell = make()
    x = torch.randn(6, 3, 3)
    lengths = torch.tensor([6, 2, 4])
    for backend in ("reference", "cpp"):
        cell.scan(x, lengths=lengths, backend=backend)
        prob = cell.aux["update_prob"].detach()
        expected = sum(prob[:n, b].sum(0) for b, n in enumerate(lengths.tolist())).mean() / 3
        torch.testing.assert_close(cell.losses()["budget"], expected)
        cell.scan(x, backend=backend)
        torch.testing.assert_close(cell.losses()["budget"], cell.aux["update_prob"].sum(0).mean())


def test_budget_gradient_lowers_the_update_probability():
    cell = make()
    cell.scan(torch.randn(10, 4, 3))
    cell.losses()["budget"].backward()
    assert cell.coord_bias.grad.sum() > 0  # gradient descent on the budget lowers the bias


def test_fused_equals_reference_with_the_budget_term_and_lengths():
    cell = make(h=16)
    x = torch.randn(300, 3, 3)
    lengths = torch.tensor([300, 120, 7])
    h0 = 0.5 * torch.randn(3, 16)
    results = {}
    for backend in ("reference", "cpp"):
        cell.zero_grad()
        xi, hi = x.clone().requires_grad_(), h0.clone().requires_grad_()
        out, final = cell.scan(xi, hi, lengths=lengths, backend=backend)
        weights = torch.linspace(-1, 1, out.numel()).view_as(out)
        ((out * weights).sum() + final.sum() + 0.1 * cell.losses()["budget"]).backward()
        results[backend] = [out, final, cell.aux["update_mask"], xi.grad, hi.grad] + [
            p.grad.clone() for p in cell.parameters()
        ]
    for got, want in zip(results["cpp"], results["reference"]):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("batch", [1, 4])
def test_sparse_inference_equals_the_dense_path(batch):
    cell = make(h=32)
    with torch.no_grad():
        cell.coord_bias.fill_(-0.2)
    x = torch.randn(200, batch, 3)
    lengths = torch.tensor([200, 150, 3, 77])[:batch]
    with torch.no_grad():
        dense, dense_final = cell.scan(x, lengths=lengths, backend="cpp")
        dense_mask = cell.aux["update_mask"]
        sparse, sparse_final = cell.scan(x, lengths=lengths, backend="sparse")
    assert 0.2 < skip_fraction(dense_mask, lengths) < 0.95
    torch.testing.assert_close(sparse, dense, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(sparse_final, dense_final, atol=1e-5, rtol=1e-4)
    assert torch.equal(cell.aux["update_mask"], dense_mask)


def test_sparse_under_autograd_computes_the_dense_gradient():
    cell = make()
    x = torch.randn(9, 2, 3)
    grads = []
    for backend in ("cpp", "sparse"):
        cell.zero_grad()
        out, _ = cell.scan(x, backend=backend)
        out.sum().backward()
        grads.append(cell.coord_weight_ih.grad.clone())
    assert torch.equal(grads[0], grads[1])


def test_layer_exposes_budget_and_masks():
    layer = ltdrnn.Recurrent("sarnn", 3, 8, num_layers=2)
    layer(torch.randn(4, 7, 3))
    assert set(layer.losses()) == {"budget"}
    assert [a["update_mask"].shape for a in layer.aux] == [torch.Size([7, 4, 8])] * 2
    layer.set_epoch(25)
    assert all(cell.slope == pytest.approx(2.0) for cell in layer.cells)


def test_clear_errors():
    with pytest.raises(TypeError, match="coordinator_state_grad: expected a bool"):
        ltdrnn.build("sarnn", 3, 8, coordinator_state_grad="no")
    with pytest.raises(ValueError, match="recurrence"):
        ltdrnn.build("sarnn", 3, 8, recurrence="rnn")
    with pytest.raises(ValueError, match="slope"):
        ltdrnn.build("sarnn", 3, 8, slope=0)
    with pytest.raises(ValueError, match="backend"):
        ltdrnn.build("sarnn", 3, 8, recurrence="lstm", backend="cpp")


@pytest.mark.parametrize("kernels", [True, False])
@pytest.mark.parametrize("batch", [1, 3, 9])
@pytest.mark.parametrize("backend", ["cpp", "sparse"])
def test_compiled_streaming_step_equals_the_reference(monkeypatch, kernels, batch, backend):
    """The one-call C step (batch <= STREAM_MAX_BATCH, kernels on) and its fallback, through the cell
    and through the layer's step: outputs, masks, probabilities and the budget."""

    def expected(cell):
        mask, prob = cell.aux["update_mask"], cell.aux["update_prob"]
        assert 0 < mask.mean() < 1  # both updated and skipped units occur
        # the budget is the mean update probability; summed over the steps it is the scan's budget
        return {"mask": mask, "prob": prob, "budget": prob.mean(dim=(1, 2))}

    def step(cell):
        return {
            "mask": cell.aux["update_mask"][0],
            "prob": cell.aux["update_prob"][0],
            "budget": cell.losses()["budget"],
        }

    cell = make(slope=1.5, backend=backend)
    check_streaming_matches_reference(
        monkeypatch,
        kernels,
        cell,
        torch.randn(10, batch, 3),
        torch.randn(batch, 8),
        step_records=step,
        expected_records=expected,
    )


# ---- the compiled time loop (csrc/sarnn.cpp) == the PyTorch loop == the reference ---------------
def compiled_loop_available():
    from ltdrnn.ops.kernels import load_torch_ops

    return load_torch_ops("sarnn")


def differentiate(cell, x, h0, backend, loss, lengths=None):
    """Outputs, masks and every gradient of ``loss`` through ``cell.scan`` (budget term included)."""
    cell.zero_grad()
    xi, hi = x.clone().requires_grad_(), h0.clone().requires_grad_()
    out, final = cell.scan(xi, hi, lengths=lengths, backend=backend)
    (loss(out, final) + 0.1 * cell.losses()["budget"]).backward()
    grads = {n: p.grad.clone() for n, p in cell.named_parameters()}
    return {"out": out.detach(), "mask": cell.aux["update_mask"], "grad x": xi.grad, "grad h0": hi.grad, **grads}


def weighted_loss(out, final):
    return (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum() + final.square().sum()


def mean_loss(out, final):
    return out.mean()  # its gradient reaches the backward expanded (stride 0)


@pytest.mark.parametrize(
    "dtype,steps,batch,loss",
    [
        pytest.param(torch.float64, 1000, 3, weighted_loss, marks=pytest.mark.slow),
        pytest.param(torch.float64, 1000, 1, weighted_loss, marks=pytest.mark.slow),
        (torch.float32, 300, 3, mean_loss),
    ],
    ids=["f64-T1000-B3-weighted", "f64-T1000-B1-weighted", "f32-T300-B3-mean"],
)
def test_compiled_loop_equals_the_reference_and_the_pytorch_loop(monkeypatch, dtype, steps, batch, loss):
    """At 2 threads: the compiled loops split the batch into one block of rows per thread (batch 3:
    blocks of 2 and 1 rows; batch 1: one block)."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/sarnn.cpp")
    import ltdrnn.ops.sarnn_torch as sarnn_module

    calls = []
    real = sarnn_module._compiled_forward
    monkeypatch.setattr(sarnn_module, "_compiled_forward", lambda *a: calls.append(1) or real(*a))
    cell = make(seed=3, h=16).to(dtype)
    with torch.no_grad():  # a coordinator that updates some units and skips others, and changes with h
        cell.coord_bias.uniform_(-1.0, 1.0)
        cell.coord_weight_hh.uniform_(-2.0, 2.0)
    x, h0 = torch.randn(steps, batch, 3, dtype=dtype), 0.3 * torch.randn(batch, 16, dtype=dtype)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        compiled = differentiate(cell, x, h0, "cpp", loss)
    finally:
        torch.set_num_threads(threads)
    assert calls, "the compiled loop did not run"
    skipped = 1 - compiled["mask"].mean().item()
    assert 0.1 < skipped < 0.9, f"the test needs both decisions, skip fraction {skipped:.2f}"
    reference = differentiate(cell, x, h0, "reference", loss)
    monkeypatch.setenv("LTDRNN_NO_KERNELS", "1")
    pytorch_loop = differentiate(cell, x, h0, "cpp", loss)
    assert len(calls) == 1, "LTDRNN_NO_KERNELS=1 must take the PyTorch loop"
    tight = dict(atol=1e-9, rtol=1e-8) if dtype == torch.float64 else dict(atol=1e-5, rtol=1e-4)
    for key, expected in reference.items():
        torch.testing.assert_close(compiled[key], expected, **tight, msg=key)
        torch.testing.assert_close(compiled[key], pytorch_loop[key], **tight, msg=key)


@pytest.mark.parametrize("state_grad", [True, False])
@pytest.mark.parametrize("used", ["outputs", "probabilities", "both"])
def test_compiled_backward_reads_a_batch_first_gradient_in_place_and_an_unused_one_as_none(
    monkeypatch, used, state_grad
):
    """Through a batch-first layer the output's gradient reaches the loop as a transposed view, and an
    output nobody used as None (no zero tensor is filled): the gradients stay the reference's. (Where only
    the probabilities are used and their path into the state is cut, the recurrence gets no gradient: None
    in the reference, zeros from the compiled loop.)"""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/sarnn.cpp")
    import ltdrnn.ops.sarnn_torch as sarnn_module

    seen = []
    real = sarnn_module._compiled_backward
    monkeypatch.setattr(
        sarnn_module, "_compiled_backward", lambda ctx, d_o, d_p: seen.append((d_o, d_p)) or real(ctx, d_o, d_p)
    )
    x = torch.randn(4, 60, 3, dtype=torch.float64)

    def gradients(backend):
        torch.manual_seed(3)
        layer = ltdrnn.Recurrent("sarnn", 3, 16, backend=backend, coordinator_state_grad=state_grad).double()
        with torch.no_grad():  # some units update, others skip
            layer.cells[0].coord_bias.uniform_(-1.0, 1.0)
            layer.cells[0].coord_weight_hh.uniform_(-2.0, 2.0)
        out, _ = layer(x)
        loss = {"outputs": out.mean(), "probabilities": layer.losses()["budget"]}
        loss["both"] = loss["outputs"] + loss["probabilities"]
        loss[used].backward()
        return {name: p.grad for name, p in layer.named_parameters() if p.grad is not None}

    compiled, reference = gradients("cpp"), gradients("reference")
    ((d_outputs, d_probs),) = seen
    assert (d_probs is None) == (used == "outputs")
    if used != "probabilities":
        assert not d_outputs.is_contiguous(), "a batch-first gradient arrives transposed"
    unreached = set(compiled) - set(reference)
    assert unreached == (set() if state_grad or used != "probabilities" else {f"cells.0.{n}" for n in GRU_NAMES})
    assert all(not compiled[name].any() for name in unreached)
    assert set(reference) <= set(compiled)
    for name, expected in reference.items():
        torch.testing.assert_close(compiled[name], expected, atol=1e-9, rtol=1e-8, msg=name)


GRU_NAMES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def test_compiled_backward_operator_reads_strided_and_absent_incoming_gradients():
    """The operator itself: a (T, B, H) gradient at batch-first strides equals its contiguous copy, and
    d_probs None equals d_probs of zeros, in every buffer it writes."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/sarnn.cpp")
    weight_hh = 0.4 * torch.randn(15, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(14))
    base = run_gru_operators(weight_hh.t(), weight_hh, batch=3)
    strided = run_gru_operators(weight_hh.t(), weight_hh, batch=3, incoming="batch-first")
    absent = run_gru_operators(weight_hh.t(), weight_hh, batch=3, incoming="no-probs")
    zeros = run_gru_operators(weight_hh.t(), weight_hh, batch=3, incoming="zero-probs")
    for key in base:
        torch.testing.assert_close(strided[key], base[key], rtol=0, atol=0, msg=key)
        # an add of zero may be fused into a multiply-add there: equal to rounding, not bit for bit
        torch.testing.assert_close(absent[key], zeros[key], rtol=1e-12, atol=1e-14, msg=key)
    assert not torch.equal(absent["d_coord"], base["d_coord"]), "the probabilities' gradient must matter"


def test_compiled_loops_add_a_separate_input_bias_and_sum_both_biases_gradients():
    """b_ih handed to the forward loop instead of added to gi gives the same step (to rounding), and the
    backward's bias_sums are the sums of d_gi's and d_gh_n's columns over time and batch (d_gh_n = d_n r,
    from d_gi and the saved gates)."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/sarnn.cpp")
    weight_hh = 0.4 * torch.randn(15, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(14))
    joined = run_gru_operators(weight_hh.t(), weight_hh, batch=3)
    apart = run_gru_operators(weight_hh.t(), weight_hh, batch=3, separate_input_bias=True)
    assert torch.equal(apart["masks"], joined["masks"]), "the same decisions"
    for key in joined:
        torch.testing.assert_close(apart[key], joined[key], rtol=1e-12, atol=1e-12, msg=key)
    hidden = 5
    expected = torch.cat([joined["d_gi"].sum((0, 1)), gh_n_gradient(joined).sum((0, 1))])
    torch.testing.assert_close(joined["bias_sums"], expected, rtol=1e-12, atol=1e-13)
    assert joined["bias_sums"][3 * hidden :].abs().sum() > 0


def gh_n_gradient(run):
    """d_gh_n = d_n r per step, (T, B, H), from a run of the compiled loops (run_gru_operators)."""
    hidden = run["outputs"].shape[-1]
    return run["d_gi"][..., 2 * hidden :] * run["gates"][..., :hidden]


@pytest.mark.parametrize("batch", [1, 3, 7])
def test_the_backward_loop_sums_the_weight_gradients_over_steps_as_the_products_of_their_factors(batch):
    """d_weight_hh and d_weight_ih, summed inside the loop per block of rows and step, equal sum_t
    [d_r | d_z | d_gh_n]_t^T h_{t-1} and sum_t d_gi_t^T x_t formed afterwards from the loop's own d_gi, gates
    and outputs (float64, 2 threads: odd batches give blocks of unequal size)."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/sarnn.cpp")
    weight_hh = 0.4 * torch.randn(15, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(21))
    run = run_gru_operators(weight_hh.t(), weight_hh, batch=batch)
    hidden = 5
    d_gh = torch.cat([run["d_gi"][..., : 2 * hidden], gh_n_gradient(run)], dim=-1)
    previous = torch.cat([run["h0"].unsqueeze(0), run["outputs"][:-1]])
    expected = torch.einsum("tbg,tbh->gh", d_gh, previous)
    torch.testing.assert_close(run["d_weight_hh"], expected, rtol=1e-12, atol=1e-12)
    assert expected.abs().amax() > 0.1, "a gradient that cannot be zero"
    # and W_ih's: sum_t d_gi_t^T x_t
    expected_ih = torch.einsum("tbg,tbd->gd", run["d_gi"], run["x"])
    torch.testing.assert_close(run["d_weight_ih"], expected_ih, rtol=1e-12, atol=1e-12)
    assert expected_ih.abs().amax() > 0.1


def test_parameter_gradients_without_an_input_gradient_are_the_references():
    """x that needs no gradient (a data batch, as in training): no d_x is formed, and W_ih's gradient (summed
    inside the compiled backward loop) and every other parameter's equal the reference loop's."""
    cell = make(seed=6, h=8)
    x, h0 = torch.randn(60, 3, 3), 0.3 * torch.randn(3, 8)
    grads = {}
    for backend in ("reference", "cpp"):
        cell.zero_grad()
        out, final = cell.scan(x, h0, backend=backend)
        weighted_loss(out, final).backward()
        grads[backend] = {n: p.grad.clone() for n, p in cell.named_parameters()}
    assert grads["cpp"]["weight_ih"].abs().amax() > 1e-3, "W_ih's gradient must not be zero here"
    for name, expected in grads["reference"].items():
        torch.testing.assert_close(grads["cpp"][name], expected, atol=1e-5, rtol=1e-4, msg=name)


def test_compiled_backward_checks_the_input_map_operands():
    """The backward's x and d_weight_ih are checked before any pointer is read."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/sarnn.cpp")
    weight_hh = 0.4 * torch.randn(15, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(14))
    run = run_gru_operators(weight_hh.t(), weight_hh, batch=3)
    steps, batch, hidden = run["outputs"].shape
    args = [run["gates"], run["news"], run["outputs"], run["h0"], run["masks"], run["probs"], torch.zeros_like(
        run["outputs"]), None, weight_hh, torch.zeros(hidden, dtype=torch.float64), torch.empty_like(run["gates"]),
        torch.empty(3 * hidden, hidden, dtype=torch.float64), torch.empty_like(run["outputs"]),
        torch.empty(batch, hidden, dtype=torch.float64), torch.empty(batch, 3 * hidden, dtype=torch.float64),
        torch.empty(batch, hidden, dtype=torch.float64), torch.empty(4 * hidden, dtype=torch.float64)]  # fmt: skip
    backward = torch.ops.ltdrnn.sarnn_gru_backward
    x = torch.zeros(steps, batch, 2, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="x must be"):
        backward(*args, torch.zeros(steps, batch + 1, 2, dtype=torch.float64), torch.empty(3 * hidden, 2))
    with pytest.raises(RuntimeError, match="d_weight_ih must be"):
        backward(*args, x, torch.empty(3 * hidden, 3, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="d_weight_ih must be empty without x"):
        backward(*args, None, torch.empty(3 * hidden, 2, dtype=torch.float64))
    backward(*args, None, torch.empty(0, dtype=torch.float64))  # well-formed: runs


def test_compiled_loop_with_lengths_and_without_autograd_equals_the_reference():
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/sarnn.cpp")
    cell = make(seed=4, h=8)
    x, h0, lengths = torch.randn(50, 3, 3), 0.3 * torch.randn(3, 8), torch.tensor([50, 20, 1])
    expected = differentiate(cell, x, h0, "reference", weighted_loss, lengths)
    got = differentiate(cell, x, h0, "cpp", weighted_loss, lengths)
    for key, want in expected.items():
        torch.testing.assert_close(got[key], want, atol=1e-5, rtol=1e-4, msg=key)
    with torch.no_grad():
        out, final = cell.scan(x, h0, lengths=lengths)
    torch.testing.assert_close(out, expected["out"])


def test_without_a_compiler_the_loop_falls_back_to_pytorch(monkeypatch, tmp_path):
    from ltdrnn.ops import kernels

    monkeypatch.delenv("LTDRNN_NO_KERNELS", raising=False)
    monkeypatch.setenv("LTDRNN_CACHE", str(tmp_path))  # nothing cached: a build is needed
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(kernels, "_TORCH_OPS", {})
    cell = make(seed=5, h=8)
    x, h0 = torch.randn(30, 2, 3), 0.3 * torch.randn(2, 8)
    with pytest.warns(RuntimeWarning, match="sarnn.*pure-PyTorch"):
        fused = differentiate(cell, x, h0, "cpp", weighted_loss)
    assert kernels._TORCH_OPS == {"sarnn": False}
    reference = differentiate(cell, x, h0, "reference", weighted_loss)
    for key, expected in reference.items():
        torch.testing.assert_close(fused[key], expected, atol=1e-5, rtol=1e-4, msg=key)


def test_compiled_operators_reject_malformed_operands_with_a_clear_error():
    """The Python path hands over only checked tensors; the operators check again before any pointer."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/sarnn.cpp")
    forward = torch.ops.ltdrnn.sarnn_gru_forward
    T, B, H = 5, 2, 4
    gi, coord, h0 = torch.zeros(T, B, 3 * H), torch.zeros(T, B, H), torch.zeros(B, H)
    w_t, bias, cw = torch.zeros(H, 3 * H), torch.zeros(3 * H), torch.zeros(H)
    out, probs, masks = (torch.zeros(T, B, H) for _ in range(3))
    gates, news = torch.zeros(T, B, 3 * H), torch.zeros(T, B, H)
    good = [gi, coord, h0, w_t, bias, cw, out, probs, masks, gates, news]
    forward(*good)  # well-formed: runs
    for index, bad, message in (
        (0, gi.transpose(0, 1), "gi must be a contiguous CPU"),
        (0, torch.zeros(T, B, 3 * H + 1), "gi's last axis must be 3H"),
        (1, torch.zeros(T, B + 1, H), "coord_in must be"),
        (2, h0.double(), "h0 must be a CPU tensor of dtype Float"),
        (3, torch.zeros(H, 2 * H), "w_t must be"),
        (9, torch.zeros(2, B, 3 * H), "gates must be a contiguous \\(T or 1"),
        (10, torch.zeros(1, B, H), "gates and news must have the same number of rows"),
    ):
        args = list(good)
        args[index] = bad
        with pytest.raises(RuntimeError, match=message):
            forward(*args)
    with pytest.raises(RuntimeError, match="bias_ih must be"):
        forward(*good, torch.zeros(3 * H + 1))


def run_gru_operators(w_t, weight_hh, batch, steps=40, hidden=5, incoming="contiguous", separate_input_bias=False):
    """Forward then backward of the compiled GRU loops at 2 threads on fixed random float64 operands
    (a coordinator that updates some units and skips others); every buffer they write. ``incoming``:
    the gradients d_outputs, d_probs as contiguous tensors, at batch-first strides (the same values), with
    d_probs None, or with d_probs zero. ``separate_input_bias``: gi minus a bias b_ih, given to the loop."""
    generator = torch.Generator().manual_seed(13)

    def randn(*shape, scale=1.0):
        return scale * torch.randn(*shape, dtype=torch.float64, generator=generator)

    gi, coord_in = randn(steps, batch, 3 * hidden), 0.5 + randn(steps, batch, hidden, scale=0.3)
    h0, bias_hh, coord_weight = randn(batch, hidden, scale=0.5), randn(3 * hidden), randn(hidden)
    d_outputs, d_probs = randn(steps, batch, hidden), randn(steps, batch, hidden)
    if incoming == "batch-first":
        d_outputs, d_probs = (g.transpose(0, 1).contiguous().transpose(0, 1) for g in (d_outputs, d_probs))
    elif incoming == "no-probs":
        d_probs = None
    elif incoming == "zero-probs":
        d_probs = torch.zeros_like(d_probs)
    outputs, probs, masks, news, d_coord = (torch.empty_like(coord_in) for _ in range(5))
    gates, d_gi, d_weight_hh = torch.empty_like(gi), torch.empty_like(gi), weight_hh.new_empty(weight_hh.shape)
    d_coord_weight, carry, d_gh = torch.empty_like(h0), torch.empty_like(h0), h0.new_empty(batch, 3 * hidden)
    bias_sums = torch.empty(4 * hidden, dtype=torch.float64)
    x, d_weight_ih = randn(steps, batch, 2), gi.new_empty(3 * hidden, 2)  # the input map's input (d = 2)
    bias_ih = None
    if separate_input_bias:  # the same map, its bias handed over apart: gi without it
        bias_ih = randn(3 * hidden)
        gi = gi - bias_ih
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.ops.ltdrnn.sarnn_gru_forward(
            gi, coord_in, h0, w_t, bias_hh, coord_weight, outputs, probs, masks, gates, news, bias_ih
        )
        torch.ops.ltdrnn.sarnn_gru_backward(
            gates, news, outputs, h0, masks, probs, d_outputs, d_probs, weight_hh, coord_weight, d_gi, d_weight_hh,
            d_coord, d_coord_weight, d_gh, carry, bias_sums, x, d_weight_ih,
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    return {
        "outputs": outputs, "probs": probs, "masks": masks, "gates": gates, "news": news, "d_gi": d_gi,
        "d_weight_hh": d_weight_hh, "d_coord": d_coord, "d_coord_weight": d_coord_weight, "carry": carry,
        "bias_sums": bias_sums, "h0": h0, "x": x, "d_weight_ih": d_weight_ih,
    }  # fmt: skip


def strided_copy(matrix):
    """``matrix`` as a view with neither stride 1: every other column of a buffer whose gaps hold NaN."""
    buffer = torch.full((matrix.shape[0], 2 * matrix.shape[1]), float("nan"), dtype=matrix.dtype)
    buffer[:, ::2] = matrix
    return buffer[:, ::2]


@pytest.mark.parametrize(
    "layout",
    [lambda m: m.t().contiguous().t(), strided_copy, lambda m: m.contiguous()],
    ids=["transposed", "no-unit-stride", "contiguous"],
)
def test_compiled_loops_read_the_recurrent_weight_at_any_strides(layout):
    """The loops' products read w_t = W_hh^T (the Python path passes W_hh.t(), a transposed view) and
    weight_hh as raw memory: other layouts of the same matrices must give what those give (B = 3 at 2
    threads: two blocks of rows)."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/sarnn.cpp")
    weight_hh = 0.4 * torch.randn(15, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(14))
    expected = run_gru_operators(weight_hh.t(), weight_hh, batch=3)
    skipped = 1 - expected["masks"].mean().item()
    assert 0.1 < skipped < 0.9, f"the test needs both decisions, skip fraction {skipped:.2f}"
    got = run_gru_operators(layout(weight_hh.t()), layout(weight_hh), batch=3)
    for key, want in expected.items():
        torch.testing.assert_close(got[key], want, atol=1e-12, rtol=1e-12, msg=key)


def test_compiled_loops_accept_an_empty_batch(capfd):
    """B = 0: one empty block, no product (BLAS rejects the leading dimensions of empty operands, and
    MKL only prints that it did)."""
    if not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/sarnn.cpp")
    weight_hh = torch.ones(15, 5, dtype=torch.float64)
    got = run_gru_operators(weight_hh.t(), weight_hh, batch=0)
    assert got["outputs"].shape == (40, 0, 5) and got["carry"].shape == (0, 5)
    printed = capfd.readouterr()
    assert "ERROR" not in printed.out + printed.err


# ---- coordinator_state_grad: False (the default) stops the straight-through gradient at the coordinator's
# read of h; True (the authors' code) lets it flow on into h ------------------------------------------------
def hand_written_loop(cell, x, h0, state_grad):
    """SA-RNN (GRU) from its equations: a_t = w_u h + W_i x_t + b (``h`` detached unless ``state_grad``),
    u~ = clamp((alpha a + 1) / 2), u = [u~ > 1/2] with du/du~ = 1, h_t = h + u (GRU(x_t, h) - h)."""
    gru = nn.GRUCell(cell.input_size, cell.hidden_size, dtype=x.dtype)
    gru.weight_ih, gru.weight_hh, gru.bias_ih, gru.bias_hh = cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh
    h, outputs, probs = h0, [], []
    for x_t in x:
        a = cell.coord_weight_hh * (h if state_grad else h.detach()) + x_t @ cell.coord_weight_ih.t() + cell.coord_bias
        prob = torch.clamp((cell.slope * a + 1) / 2, 0.0, 1.0)
        u = (prob > 0.5).to(x.dtype) + prob - prob.detach()
        h = h + u * (gru(x_t, h) - h)
        outputs.append(h)
        probs.append(prob)
    return torch.stack(outputs), torch.stack(probs)


def coordinated_cell(seed=5, state_grad=False):
    cell = make(seed=seed, h=16, coordinator_state_grad=state_grad, anneal_slope=False, slope=1.5, dtype=torch.float64)
    with torch.no_grad():  # a coordinator that updates some units and skips others, and changes with h
        cell.coord_bias.uniform_(-1.0, 1.0)
        cell.coord_weight_hh.uniform_(-2.0, 2.0)
    return cell


@pytest.mark.parametrize("state_grad", [False, True])
def test_the_reference_is_the_hand_written_loop_with_or_without_the_coordinator_s_state_path(state_grad):
    cell = coordinated_cell(state_grad=state_grad)
    x = torch.randn(25, 3, 3, dtype=torch.float64, requires_grad=True)
    h0 = (0.3 * torch.randn(3, 16, dtype=torch.float64)).requires_grad_()
    expected_out, expected_prob = hand_written_loop(cell, x, h0, state_grad)
    loss = weighted_loss(expected_out, expected_out[-1]) + 0.1 * expected_prob.mean(-1).sum(0).mean()
    names = ("x", "h0", *dict(cell.named_parameters()))
    expected = dict(zip(names, torch.autograd.grad(loss, [x, h0, *cell.parameters()])))
    got = differentiate(cell, x.detach(), h0.detach(), "reference", weighted_loss)
    assert 0.1 < 1 - got["mask"].mean() < 0.9
    torch.testing.assert_close(got["out"], expected_out.detach(), atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(got["grad x"], expected["x"], atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(got["grad h0"], expected["h0"], atol=1e-10, rtol=1e-8)
    for name, _ in cell.named_parameters():
        torch.testing.assert_close(got[name], expected[name], atol=1e-10, rtol=1e-8, msg=name)


def test_the_coordinator_s_state_path_changes_the_gradient_and_never_the_forward_pass():
    assert make().coordinator_state_grad is False  # the default since 2026-11-27
    x, h0 = torch.randn(25, 3, 3, dtype=torch.float64), 0.3 * torch.randn(3, 16, dtype=torch.float64)
    local = differentiate(coordinated_cell(), x, h0, "reference", weighted_loss)
    full = differentiate(coordinated_cell(state_grad=True), x, h0, "reference", weighted_loss)
    assert torch.equal(local["out"], full["out"]) and torch.equal(local["mask"], full["mask"])
    for key in ("grad h0", "coord_weight_hh", "weight_hh"):
        assert not torch.allclose(local[key], full[key]), key


@pytest.mark.parametrize("state_grad", [False, True])
@pytest.mark.parametrize("kernels", [True, False], ids=["compiled", "pytorch-loop"])
def test_fused_loops_equal_the_reference_with_or_without_the_coordinator_s_state_path(monkeypatch, kernels, state_grad):
    if kernels and not compiled_loop_available():
        pytest.skip("no C++ compiler for csrc/sarnn.cpp")
    if not kernels:
        monkeypatch.setenv("LTDRNN_NO_KERNELS", "1")
    import ltdrnn.ops.sarnn_torch as sarnn_module

    calls = []
    real = sarnn_module._compiled_forward
    monkeypatch.setattr(sarnn_module, "_compiled_forward", lambda *a: calls.append(1) or real(*a))
    cell = coordinated_cell(state_grad=state_grad)
    x, h0 = torch.randn(40, 3, 3, dtype=torch.float64), 0.3 * torch.randn(3, 16, dtype=torch.float64)
    lengths = torch.tensor([40, 17, 29])
    fused = differentiate(cell, x, h0, "cpp", weighted_loss, lengths)
    assert bool(calls) == kernels
    reference = differentiate(cell, x, h0, "reference", weighted_loss, lengths)
    for key, expected in reference.items():
        torch.testing.assert_close(fused[key], expected, atol=1e-10, rtol=1e-8, msg=key)


def test_without_the_coordinator_s_state_path_gradients_grow_slowly_where_they_explode_with_it():
    """docs/reliability.md, "SA-RNN's gradients with the authors' surrogate path grow with T": seed 1 at
    T = 3,000, the largest parameter gradient of the last output 3.3e7 with the path and 866 without it. A
    cell without the path has no gradient-length limit, so it does not warn."""
    largest = {}
    for state_grad in (True, False):
        torch.manual_seed(1)
        layer = ltdrnn.Recurrent("sarnn", 1, 64, coordinator_state_grad=state_grad)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore" if state_grad else "error")
            out, _ = layer(torch.randn(8, 3000, 1))
        out[:, -1].sum().backward()
        largest[state_grad] = max(p.grad.norm().item() for p in layer.parameters())
    assert largest[True] > 1e6 and largest[False] < 1e4
