"""VC-RNN: the scheduler's soft mask, limits, budget and sharpening."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ltdrnn
from ltdrnn.cells.masked import skip_fraction


def make(h=10, **options):
    torch.manual_seed(0)
    return ltdrnn.build("vcrnn", 3, h, **options)


def force_fraction(cell, logit):
    with torch.no_grad():
        cell.scheduler_weight_ih.zero_()
        cell.scheduler_weight_hh.zero_()
        cell.scheduler_bias.fill_(logit)


def test_soft_mask_updates_the_first_units():
    cell = make(sharpness=4.0, epsilon=0.1)
    e = cell.soft_mask(torch.tensor([[0.5], [0.0], [1.0]]))
    assert torch.all(e[:, 1:] <= e[:, :-1])  # non-increasing in the unit index
    # m H - i = 5 - i for units i = 1..10: sigmoid(4 * 1) > 0.9 -> 1, sigmoid(0) = 0.5, sigmoid(-4) < 0.1 -> 0
    assert torch.equal(e[0, :4], torch.ones(4)) and torch.equal(e[0, 5:], torch.zeros(5))
    assert e[0, 4] == 0.5
    assert torch.all(e[1] == 0) and torch.equal(e[2, :9], torch.ones(9)) and e[2, 9] == 0.5


def test_limits_of_the_scheduler():
    cell = make(sharpness=50.0)
    x, h0 = torch.randn(8, 2, 3), torch.randn(2, 10)
    force_fraction(cell, -30.0)  # m -> 0: nothing is computed
    out, _ = cell.scan(x, h0)
    assert torch.equal(out, h0.expand(8, 2, 10)) and skip_fraction(cell.aux) == 1
    force_fraction(cell, 30.0)  # m -> 1: every unit, the last by half
    out, _ = cell.scan(x, h0)
    assert skip_fraction(cell.aux) == 0
    torch.testing.assert_close(cell.aux["update_prob"][:, :, :9], torch.ones(8, 2, 9))
    torch.testing.assert_close(cell.aux["update_prob"][:, :, 9], torch.full((8, 2), 0.5))


def test_fully_open_mask_is_a_gru_step():
    cell = make(sharpness=50.0)
    gru = nn.GRUCell(3, 10)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(gru, name).copy_(getattr(cell, name))
    x, h0 = torch.randn(2, 3), torch.randn(2, 10)
    gi = x @ cell.weight_ih.T + cell.bias_ih
    e = torch.ones(2, 10)
    from ltdrnn.ops.common import gru_candidate

    torch.testing.assert_close(
        torch.lerp(h0, gru_candidate(gi, e * h0, h0, cell.weight_hh, cell.bias_hh), e), gru(x, h0)
    )


def test_partial_update_reads_and_writes_only_the_first_units():
    cell = make(sharpness=50.0, epsilon=0.1)
    force_fraction(cell, 0.0)  # m = 0.5: the first 4 units (i < 5)
    h0 = torch.randn(1, 10)
    out, _ = cell.scan(torch.randn(1, 1, 3), h0)
    assert torch.equal(cell.aux["update_mask"][0, 0], (torch.arange(10) < 5).float())
    assert torch.equal(out[0, 0, 5:], h0[0, 5:])
    perturbed = h0.clone()
    perturbed[0, 6:] += 1.0  # units the gates do not read
    out_b, _ = cell.scan(torch.randn(1, 1, 3).copy_(torch.zeros(1)), perturbed)
    out_a, _ = cell.scan(torch.zeros(1, 1, 3), h0)
    torch.testing.assert_close(out_b[0, 0, :4], out_a[0, 0, :4])


def test_budget_penalises_the_distance_to_the_target():
    cell = make(target=0.2)
    force_fraction(cell, 0.0)  # m = 0.5 everywhere
    cell.scan(torch.randn(6, 3, 3), lengths=torch.tensor([6, 2, 4]))
    assert cell.losses()["budget"].item() == pytest.approx(0.3 * (6 + 2 + 4) / 3)
    cell.losses()["budget"].backward()
    assert cell.scheduler_bias.grad.item() > 0  # descent lowers m toward 0.2


def test_sharpening_schedule_and_gradients():
    cell = make(sharpness=1.0, sharpness_increment=0.5)
    cell.set_epoch(4)
    assert cell.sharpness == 3.0
    out, _ = cell.scan(torch.randn(12, 2, 3))
    out.pow(2).sum().backward()
    assert cell.scheduler_weight_ih.grad.abs().sum() > 0 and cell.scheduler_bias.grad.abs() > 0


def test_clear_errors():
    with pytest.raises(ValueError, match="target"):
        ltdrnn.build("vcrnn", 2, 4, target=2)
    with pytest.raises(ValueError, match="epsilon"):
        ltdrnn.build("vcrnn", 2, 4, epsilon=0.7)
    with pytest.raises(ValueError, match="sharpness"):
        ltdrnn.build("vcrnn", 2, 4, sharpness=0)
    with pytest.raises(ValueError, match="sharpness_increment: expected a non-negative finite number"):
        ltdrnn.build("vcrnn", 2, 4, sharpness_increment=-1)
