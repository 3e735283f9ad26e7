"""Every cell checks its input once per call, before any fused or compiled path, and keeps
whatever sits past ``lengths`` (NaN, Inf) out of the outputs and the gradients."""

import warnings

import pytest
import torch

import ltdrnn
from ltdrnn.cells.base import GradientGrowthWarning
from ltdrnn.cells.registry import build, list_cells

D, H = 3, 16  # clockwork needs H >= its 10 modules, iRNN H >= its default rank 16


def _cell(name, **options):
    torch.manual_seed(0)
    return build(name, D, H, **options)


@pytest.mark.parametrize("name", list_cells())
def test_a_wrongly_sized_state_is_refused_by_the_per_step_call(name):
    cell = _cell(name)
    good = cell.init_state(4)
    bad = tuple(s[:1] for s in good) if isinstance(good, tuple) else good[:1]
    with torch.no_grad():  # the lean streaming paths run only without autograd
        with pytest.raises(ValueError, match=r"state"):
            cell(torch.randn(4, D), bad)
    with pytest.raises(ValueError, match=r"state"):
        cell.scan(torch.randn(5, 4, D), bad)


def test_lstm_with_a_state_one_unit_too_wide_raises_instead_of_reaching_torchs_op():
    # reported: (4, 17) outputs or free(): invalid next size from torch's internal LSTM op
    cell = _cell("lstm")
    h, c = cell.init_state(4)
    wide = (torch.zeros(4, H + 1), torch.zeros(4, H + 1))
    with pytest.raises(ValueError, match=r"state\[0\]: expected a tensor of shape \(4, 16\)"):
        cell(torch.randn(4, D), wide)


@pytest.mark.parametrize("name", ["srnn", "mist", "sarnn"])
def test_scan_refuses_a_two_dimensional_x_and_a_batch_one_state(name):
    cell = _cell(name)
    with pytest.raises(ValueError, match=r"x: expected 3 dimensions"):
        cell.scan(torch.randn(5, D))
    one = cell.init_state(1)
    with torch.no_grad(), pytest.raises(ValueError, match="state"):
        cell.scan(torch.randn(5, 4, D), one)


def test_state_on_another_dtype_is_named():
    cell = _cell("gru")
    with pytest.raises(TypeError, match=r"state: expected dtype torch.float32"):
        cell(torch.randn(2, D), torch.zeros(2, H, dtype=torch.float64))


@pytest.mark.parametrize(
    "lengths",
    [torch.tensor([True, True]), torch.tensor([1.0, 2.0]), [0, 2], torch.tensor([1, 2, 3]), torch.tensor([[1, 2]])],
)
def test_bad_lengths_are_refused_by_scan_and_the_layer(lengths):
    cell = _cell("gru")
    with pytest.raises(ValueError, match="lengths"):
        cell.scan(torch.randn(4, 2, D), lengths=lengths)
    layer = ltdrnn.Recurrent("gru", D, H)
    with pytest.raises(ValueError, match="lengths"):
        layer(torch.randn(2, 4, D), lengths=lengths)


@pytest.mark.parametrize("name", ["tarnn", "srnn", "lstm"])
def test_an_empty_batch_or_sequence_gets_a_clear_error(name):
    cell = _cell(name)
    with pytest.raises(ValueError, match="x: expected at least one sequence"):
        cell.scan(torch.randn(5, 0, D))
    with pytest.raises(ValueError, match="x_t: expected at least one sequence"):
        cell(torch.randn(0, D))
    layer = ltdrnn.Recurrent(name, D, H)
    with pytest.raises(ValueError, match="input: expected at least one sequence"):
        layer(torch.randn(0, 5, D))


def test_batch_first_must_be_a_bool():
    with pytest.raises(TypeError, match="batch_first: expected a bool, got 'no'"):
        ltdrnn.Recurrent("gru", D, H, batch_first="no")


@pytest.mark.parametrize("name", list_cells())
@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_non_finite_padding_changes_neither_outputs_nor_gradients(name, poison):
    """Outputs and every parameter gradient with NaN/Inf past the lengths equal those with zeros there."""
    lengths = torch.tensor([5, 3, 1])
    x = torch.randn(3, 5, D)
    padded = x.clone()
    for b, n in enumerate(lengths.tolist()):
        padded[b, n:] = poison
    clean = x.clone()
    for b, n in enumerate(lengths.tolist()):
        clean[b, n:] = 0

    def run(inputs):
        torch.manual_seed(0)
        layer = ltdrnn.Recurrent(name, D, H, **_small(name))
        out, final = layer(inputs, lengths=lengths)
        (out.square().sum() + sum(s.square().sum() for s in _tensors(final))).backward()
        return out.detach(), [p.grad.clone() if p.grad is not None else None for p in layer.parameters()]

    out_poisoned, grads_poisoned = run(padded)
    out_clean, grads_clean = run(clean)
    assert torch.isfinite(out_poisoned).all()
    torch.testing.assert_close(out_poisoned, out_clean, rtol=0, atol=0)
    assert (out_poisoned[1, 3:] == 0).all() and (out_poisoned[2, 1:] == 0).all()
    for a, b in zip(grads_poisoned, grads_clean):
        if a is not None:
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def _small(name):
    return {"K": 2} if name in ("tarnn", "irnn") else {}


def _tensors(state):
    return [state] if isinstance(state, torch.Tensor) else list(state)


def test_sarnn_warns_when_trained_past_its_gradient_limit(monkeypatch):
    # only with the authors' gradient path: the default cell's gradients grow about linearly in T
    assert _cell("sarnn").gradient_length_limit is None
    cell = build("sarnn", D, H, coordinator_state_grad=True)
    assert cell.gradient_length_limit == type(cell).authors_gradient_length_limit
    monkeypatch.setattr(cell, "gradient_length_limit", 4)
    with pytest.warns(GradientGrowthWarning, match=r"T=5 .*sarnn|T=5"):
        cell.scan(torch.randn(5, 2, D))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cell.scan(torch.randn(4, 2, D))  # at the limit
        with torch.no_grad():
            cell.scan(torch.randn(5, 2, D))  # inference: gradients are not computed


def test_checking_a_state_draws_no_random_numbers():
    # random_updates' init_state draws its key from torch's generator; the check must leave it alone
    cell = _cell("random_updates")
    state = cell.init_state(2)
    torch.manual_seed(5)
    cell.scan(torch.randn(3, 2, D), state)
    after_check = torch.rand(1)
    torch.manual_seed(5)
    torch.randn(3, 2, D)
    assert torch.equal(after_check, torch.rand(1))
