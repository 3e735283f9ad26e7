"""Phased LSTM: the time gate's shape, closed gates keep the state, time stamps, LSTM when open."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ltdrnn
from ltdrnn.cells.masked import skip_fraction


def make(h=4, **options):
    torch.manual_seed(0)
    return ltdrnn.build("phased_lstm", 2, h, **options)


def set_gate(cell, period, shift, r_on):
    with torch.no_grad():
        cell.period.fill_(period)
        cell.shift.fill_(shift)
        cell.r_on.fill_(r_on)


def test_time_gate_is_the_papers_piecewise_linear_oscillation():
    cell = make(h=1)
    set_gate(cell, period=10.0, shift=0.0, r_on=0.2)
    t = torch.tensor([[0.0], [0.5], [1.0], [1.5], [2.0], [5.0], [10.5], [-9.5]])
    cell.train()
    torch.testing.assert_close(
        cell.time_gate(t)[:, 0], torch.tensor([0.0, 0.5, 1.0, 0.5, 0.001 * 0.2, 0.001 * 0.5, 0.5, 0.5])
    )
    cell.eval()
    torch.testing.assert_close(cell.time_gate(t)[:, 0], torch.tensor([0.0, 0.5, 1.0, 0.5, 0, 0, 0.5, 0.5]))


def test_closed_gate_keeps_the_state_in_eval():
    cell = make(peepholes=True).eval()
    set_gate(cell, period=1000.0, shift=-10.0, r_on=0.005)  # open for t in (-10, -5): never here
    h0, c0 = torch.randn(3, 4), torch.randn(3, 4)
    out, (h, c, steps) = cell.scan(torch.randn(50, 3, 2), (h0, c0, torch.zeros(3, dtype=torch.long)))
    assert torch.equal(h, h0) and torch.equal(c, c0) and torch.equal(out, h0.expand(50, 3, 4))
    assert skip_fraction(cell.aux) == 1 and torch.equal(steps, torch.full((3,), 50))
    cell.train()  # the leak lets a little through
    _, (h, _, _) = cell.scan(torch.randn(50, 3, 2), (h0, c0, torch.zeros(3, dtype=torch.long)))
    assert not torch.equal(h, h0)


def test_fully_open_gate_is_an_lstm():
    cell = make(peepholes=False)
    lstm = nn.LSTMCell(2, 4)
    with torch.no_grad():
        lstm.weight_ih.copy_(cell.weight_ih)
        lstm.weight_hh.copy_(cell.weight_hh)
        lstm.bias_ih.copy_(cell.bias)
        lstm.bias_hh.zero_()
    # k = 1 where phase = r_on / 2 = 0.5, i.e. t - s = 2 (mod 4): at t = 0 with s = -2
    set_gate(cell, period=4.0, shift=-2.0, r_on=1.0)
    x = torch.randn(1, 3, 2)
    out, (h, c, _) = cell.scan(x)
    expected_h, expected_c = lstm(x[0])
    torch.testing.assert_close(h, expected_h)
    torch.testing.assert_close(c, expected_c)
    assert torch.all(cell.aux["update_prob"] == 1)


def test_time_stamps_from_the_input_equal_the_step_index():
    index_cell = make()
    time_cell = ltdrnn.build("phased_lstm", 3, 4, time_input=True)
    time_cell.load_state_dict(index_cell.state_dict())
    x = torch.randn(30, 2, 2)
    stamps = torch.arange(30.0).view(30, 1, 1).expand(30, 2, 1)
    out_index, _ = index_cell.scan(x)
    out_time, _ = time_cell.scan(torch.cat([x, stamps], -1))
    torch.testing.assert_close(out_time, out_index)
    shifted, _ = time_cell.scan(torch.cat([x, stamps + 0.37], -1))
    assert not torch.allclose(shifted, out_index)


def test_gradients_reach_period_shift_and_r_on():
    cell = make(h=8)
    out, _ = cell.scan(torch.randn(40, 2, 2))
    out.pow(2).sum().backward()
    for name in ("period", "shift", "r_on"):
        assert getattr(cell, name).grad.abs().sum() > 0, name
    fixed = make(learn_r_on=False)
    assert not fixed.r_on.requires_grad


def test_initialisation_follows_the_paper():
    cell = ltdrnn.build("phased_lstm", 2, 2000, period_range=(2.0, 50.0))
    log_period = cell.period.log()
    assert log_period.min() >= torch.log(torch.tensor(2.0)) - 1e-5 and log_period.max() <= 50.0
    assert abs(log_period.mean().item() - (torch.tensor(2.0).log() + torch.tensor(50.0).log()).item() / 2) < 0.1
    assert torch.all((cell.shift >= 0) & (cell.shift <= cell.period))
    assert torch.all(cell.r_on == 0.05)


def test_clear_errors():
    with pytest.raises(ValueError, match="r_on"):
        ltdrnn.build("phased_lstm", 2, 4, r_on=1.5)
    with pytest.raises(ValueError, match="period_range"):
        ltdrnn.build("phased_lstm", 2, 4, period_range=(10.0, 1.0))
    with pytest.raises(ValueError, match="input_size"):
        ltdrnn.build("phased_lstm", 1, 4, time_input=True)
    with pytest.raises(ValueError, match="leak"):
        ltdrnn.build("phased_lstm", 2, 4, leak=-0.1)
