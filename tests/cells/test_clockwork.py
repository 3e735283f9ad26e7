"""Clockwork RNN: module schedule, block upper-triangular recurrence, FLOPs of the schedule."""

from __future__ import annotations

import math

import pytest
import torch

import ltdrnn
from ltdrnn.cells.masked import skip_fraction
from ltdrnn.flops import flops_per_sequence


def make(**options):
    torch.manual_seed(0)
    return ltdrnn.build("clockwork", 2, 10, num_modules=4, **options)


def test_module_k_updates_exactly_every_2_to_the_k_steps():
    cell = make()
    assert cell.module_sizes == [3, 3, 2, 2] and cell.periods == [1, 2, 4, 8]
    h0 = torch.randn(2, 10)
    out, _ = cell.scan(torch.randn(17, 2, 2), (h0, torch.zeros(2, dtype=torch.long)))
    previous = torch.cat([h0.unsqueeze(0), out[:-1]])
    changed = (out != previous).all(1)  # (T, H): every sequence changed
    start = 0
    for size, period in zip(cell.module_sizes, cell.periods):
        ticks = torch.tensor([t % period == 0 for t in range(17)])
        assert torch.equal(cell.aux["update_mask"][:, 0, start], ticks.float())
        assert torch.equal(changed[:, start : start + size], ticks.unsqueeze(1).expand(17, size))
        start += size


def test_skip_fraction_of_the_exponential_schedule():
    cell = ltdrnn.build("clockwork", 1, 50, num_modules=10)
    cell.scan(torch.randn(1024, 1, 1))
    expected = 1 - sum(1 / 2**i for i in range(10)) / 10
    assert skip_fraction(cell.aux) == pytest.approx(expected)
    assert expected == pytest.approx(0.80, abs=0.01)  # the SA-RNN paper's 81 % at H = 50


def test_slow_modules_never_read_fast_modules():
    cell = make()
    x = torch.randn(12, 1, 2)
    h0 = torch.randn(1, 10)
    perturbed = h0.clone()
    perturbed[:, :3] += 1.0  # the fastest module only
    steps = torch.zeros(1, dtype=torch.long)
    out_a, _ = cell.scan(x, (h0, steps))
    out_b, _ = cell.scan(x, (perturbed, steps))
    assert torch.equal(out_a[:, :, 3:], out_b[:, :, 3:])
    assert not torch.equal(out_a[:, :, :3], out_b[:, :, :3])


def test_masked_recurrent_weights_get_no_gradient():
    cell = make()
    out, _ = cell.scan(torch.randn(9, 3, 2))
    out.sum().backward()
    mask = cell.recurrent_mask.bool()
    assert torch.all(cell.weight_hh.grad[~mask] == 0) and torch.any(cell.weight_hh.grad[mask] != 0)
    assert torch.equal(mask, torch.block_diag(*[torch.ones(s, s) for s in cell.module_sizes]).bool() | mask.triu())


def test_custom_periods_and_counter_carry_across_chunks():
    cell = make(periods=[1, 3, 3, 5])
    x = torch.randn(11, 2, 2)
    whole, (_, steps) = cell.scan(x)
    mask_whole = cell.aux["update_mask"]
    first, state = cell.scan(x[:4])
    second, state = cell.scan(x[4:], state)
    torch.testing.assert_close(torch.cat([first, second]), whole)
    assert torch.equal(steps, torch.tensor([11, 11])) and torch.equal(state[1], steps)
    assert torch.equal(cell.aux["update_mask"], mask_whole[4:])


def test_flops_follow_the_schedule():
    cell = make()
    steps = 20
    reads = cell.recurrent_mask.sum(1)
    unit_period = cell.unit_periods
    brute = sum(float(2 + reads[j]) for t in range(steps) for j in range(10) if t % unit_period[j] == 0)
    assert flops_per_sequence(cell, steps) == pytest.approx(brute)
    assert flops_per_sequence(cell, steps, skip_fraction=0.0) == pytest.approx(steps * float((2 + reads).sum()))


def test_init_and_errors():
    cell = ltdrnn.build("clockwork", 4, 200, num_modules=2)
    assert abs(cell.weight_hh.std().item() - 0.1) < 0.01
    with pytest.raises(ValueError, match="num_modules"):
        ltdrnn.build("clockwork", 2, 3, num_modules=4)
    with pytest.raises(ValueError, match="periods"):
        ltdrnn.build("clockwork", 2, 6, num_modules=2, periods=[4, 1])
    with pytest.raises(ValueError, match="periods"):
        ltdrnn.build("clockwork", 2, 6, num_modules=2, periods=[1])
    assert math.isfinite(flops_per_sequence(cell, 5))
