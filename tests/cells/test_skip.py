"""Skip RNN (GRU and LSTM) and Random Updates: behaviour of the update gates and masks."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import ltdrnn
from ltdrnn.cells.masked import skip_fraction


def constant_increment(cell, delta):
    """Make the update-probability increment a constant ``delta`` (independent of the state)."""
    with torch.no_grad():
        cell.update_weight.zero_()
        cell.update_bias.fill_(math.log(delta / (1 - delta)))


@pytest.mark.parametrize("name", ["skiprnn_gru", "skiprnn_lstm"])
def test_cumulative_probability_gives_the_expected_update_pattern(name):
    torch.manual_seed(0)
    cell = ltdrnn.build(name, 2, 5)
    constant_increment(cell, 0.2)
    x = torch.randn(10, 3, 2)
    out, _ = cell.scan(x)
    # u~: 1 -> update, then 0.2, 0.4 (skip), 0.6 -> update, ...: updates every third step
    expected = torch.tensor([1, 0, 0, 1, 0, 0, 1, 0, 0, 1], dtype=torch.float)
    assert torch.equal(cell.aux["update_mask"][:, 0, 0], expected)
    assert torch.equal(cell.aux["update_mask"], expected.view(10, 1, 1).expand(10, 3, 5))
    torch.testing.assert_close(cell.aux["update_prob"][:4, 0, 0], torch.tensor([1.0, 0.2, 0.4, 0.6]))
    skipped = expected == 0
    assert torch.equal(out[1:][skipped[1:]], out[:-1][skipped[1:]])  # copied state on skipped steps
    assert skip_fraction(cell.aux) == pytest.approx(0.6)
    assert cell.losses()["budget"].item() == pytest.approx(4.0)


@pytest.mark.parametrize("name", ["skiprnn_gru", "skiprnn_lstm"])
def test_skipped_steps_keep_the_whole_state(name):
    torch.manual_seed(1)
    cell = ltdrnn.build(name, 2, 4)
    constant_increment(cell, 0.01)  # after the first update, ~50 steps of skipping
    state = cell.init_state(2)
    _, state = cell.scan(torch.randn(1, 2, 2), state)
    _, later = cell.scan(torch.randn(20, 2, 2), state)
    for a, b in zip(state[:-1], later[:-1]):
        assert torch.equal(a, b)


def test_always_updating_skip_gru_is_a_gru():
    torch.manual_seed(2)
    cell = ltdrnn.build("skiprnn_gru", 3, 6)
    constant_increment(cell, 0.999)
    gru = nn.GRU(3, 6)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(gru, f"{name}_l0").copy_(getattr(cell, name))
    x = torch.randn(12, 2, 3)
    torch.testing.assert_close(cell.scan(x)[0], gru(x)[0], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", ["skiprnn_gru", "skiprnn_lstm"])
def test_straight_through_reaches_the_update_gate(name):
    torch.manual_seed(3)
    cell = ltdrnn.build(name, 2, 5)
    with torch.no_grad():
        cell.update_bias.fill_(-0.5)  # increments ~0.38: updates every other step or so
    out, _ = cell.scan(torch.randn(15, 4, 2))
    assert 0 < skip_fraction(cell.aux) < 1
    (out[-1].pow(2).sum() + cell.losses()["budget"]).backward()
    assert cell.update_weight.grad.abs().sum() > 0 and cell.update_bias.grad.abs() > 0


def test_budget_respects_lengths():
    torch.manual_seed(4)
    cell = ltdrnn.build("skiprnn_gru", 2, 5)
    constant_increment(cell, 0.999)  # every step updates
    cell.scan(torch.randn(8, 3, 2), lengths=torch.tensor([8, 3, 5]))
    assert cell.losses()["budget"].item() == pytest.approx((8 + 3 + 5) / 3)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_random_update_rate_matches_p_in_training_and_eval(p):
    torch.manual_seed(5)
    cell = ltdrnn.build("random_updates", 2, 64, update_prob=p)
    x = torch.randn(100, 2, 2)
    for mode in (cell.train, cell.eval):
        mode()
        cell.scan(x)
        rate = cell.aux["update_mask"].mean().item()
        assert abs(rate - p) < 4 * math.sqrt(p * (1 - p) / cell.aux["update_mask"][:, 0].numel())


def test_random_updates_skip_exactly_the_masked_units():
    torch.manual_seed(6)
    cell = ltdrnn.build("random_updates", 2, 16, update_prob=0.3)
    h0 = torch.randn(3, 16)
    state = (h0, cell.init_state(3)[1])
    out, _ = cell.scan(torch.randn(20, 3, 2), state)
    mask = cell.aux["update_mask"].bool()
    previous = torch.cat([h0.unsqueeze(0), out[:-1]])
    assert torch.equal(out[~mask], previous[~mask])
    assert torch.all(out[mask] != previous[mask])
    patterns = mask[:, 0].float()
    assert 0 < patterns.mean() < 1 and not torch.equal(patterns[0], patterns[1])


def test_random_updates_draw_a_new_pattern_per_sequence_batch():
    torch.manual_seed(7)
    cell = ltdrnn.build("random_updates", 2, 16)
    x = torch.randn(10, 2, 2)
    cell.scan(x)
    first = cell.aux["update_mask"].clone()
    cell.scan(x)
    assert not torch.equal(first, cell.aux["update_mask"])


@pytest.mark.parametrize("p,expected", [(0.0, "state"), (1.0, "gru")])
def test_random_updates_limits(p, expected):
    torch.manual_seed(8)
    cell = ltdrnn.build("random_updates", 3, 6, update_prob=p)
    gru = nn.GRU(3, 6)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(gru, f"{name}_l0").copy_(getattr(cell, name))
    x = torch.randn(9, 2, 3)
    out, _ = cell.scan(x)
    if expected == "gru":
        torch.testing.assert_close(out, gru(x)[0], atol=1e-6, rtol=1e-5)
    else:
        assert torch.all(out == 0)


def test_clear_errors():
    with pytest.raises(ValueError, match="update_prob"):
        ltdrnn.build("random_updates", 2, 4, update_prob=1.5)
    with pytest.raises(ValueError, match="recurrence"):
        ltdrnn.build("random_updates", 2, 4, recurrence="rnn")
