"""Analytic FLOPs: every registered cell reports them; the conditional cells count only updates."""

from __future__ import annotations

import math

import pytest
import torch

import ltdrnn
from ltdrnn.flops import flops_per_sequence, generic_flops


@pytest.mark.parametrize("name", ltdrnn.list_cells())
def test_every_registered_cell_reports_positive_finite_flops(name):
    entry = ltdrnn.entry(name)
    options = {k: v for k, v in entry.test_options.items() if k not in ("input_size", "hidden_size")}
    cell = ltdrnn.build(
        name, entry.test_options.get("input_size", 3), entry.test_options.get("hidden_size", 6), **options
    )
    dense = flops_per_sequence(cell, 50)
    assert math.isfinite(dense) and dense > 0
    assert flops_per_sequence(cell, 100, skip_fraction=0.0) == pytest.approx(2 * flops_per_sequence(cell, 50, 0.0))
    assert flops_per_sequence(cell, 50, skip_fraction=0.9) < flops_per_sequence(cell, 50, skip_fraction=0.0)


def test_generic_rule_counts_matrix_weights_per_step():
    gru = ltdrnn.build("gru", 2, 128)
    assert generic_flops(gru, 500) == 500 * 3 * 128 * (2 + 128)
    assert flops_per_sequence(gru, 500, skip_fraction=0.5) == 250 * 3 * 128 * 130


@pytest.mark.parametrize(
    "options, per_step",
    [
        ({"K": 1}, 3 * 128 * 1 + 3 * 128**2 + 2 * 128),  # 0.754 of nn.LSTM's 4H(d + H) at d=1, H=128
        ({"K": 5}, 3 * 128 * 1 + 7 * 128**2 + 10 * 128),  # four more products with U and eta beta G
        ({"K": 3, "gate": "outside"}, 3 * 128 * 1 + 5 * 128**2 + 3 * 128 + 2 * 128),
        ({"K": 1, "A": "coupled", "reading": "code"}, 3 * 128 * 1 + 3 * 128**2 + 2 * 128),  # A, damping: free
    ],
)
def test_tarnn_counts_the_fused_products_per_euler_step(options, per_step):
    cell = ltdrnn.build("tarnn", 1, 128, **options)
    assert flops_per_sequence(cell, 784) == 784 * per_step
    lstm_per_step = generic_flops(torch.nn.LSTM(1, 128), 1)
    assert lstm_per_step == 4 * 128 * (1 + 128)
    if options == {"K": 1}:
        assert flops_per_sequence(cell, 784) / (784 * lstm_per_step) == pytest.approx(0.754, abs=1e-3)


def test_sarnn_counts_the_coordinator_always_and_the_gru_only_for_updates():
    cell = ltdrnn.build("sarnn", 2, 128)
    coordinator = 500 * 128 * (2 + 2)
    unit = 3 * (2 + 128) + 3
    assert flops_per_sequence(cell, 500) == coordinator + 500 * 128 * unit
    assert flops_per_sequence(cell, 500, skip_fraction=1.0) == coordinator
    assert flops_per_sequence(cell, 500, skip_fraction=0.75) == pytest.approx(coordinator + 0.25 * 500 * 128 * unit)
    # the dense count is within 1 % of a plain GRU's matrix products plus the coordinator
    assert flops_per_sequence(cell, 500) == pytest.approx(
        generic_flops(ltdrnn.build("gru", 2, 128), 500) + coordinator, rel=0.01
    )


def test_skip_rnn_counts_whole_updated_steps():
    cell = ltdrnn.build("skiprnn_gru", 2, 8)
    per_step = 8 * (3 * (2 + 8) + 3 + 1)
    assert flops_per_sequence(cell, 10) == 10 * per_step
    assert flops_per_sequence(cell, 10, skip_fraction=0.7) == pytest.approx(3 * per_step)


def test_random_updates_default_to_their_update_probability():
    cell = ltdrnn.build("random_updates", 2, 8, update_prob=0.25)
    assert flops_per_sequence(cell, 40) == pytest.approx(flops_per_sequence(cell, 40, skip_fraction=0.75))


def test_phased_lstm_default_uses_the_eval_schedule():
    torch.manual_seed(0)
    cell = ltdrnn.build("phased_lstm", 2, 16)
    cell.eval()
    steps = 300
    cell.scan(torch.randn(steps, 1, 2))
    open_fraction = cell.aux["update_mask"].mean().item()
    assert flops_per_sequence(cell, steps) == pytest.approx(
        flops_per_sequence(cell, steps, skip_fraction=1 - open_fraction)
    )
    assert open_fraction < 0.2


def test_measured_skip_fraction_feeds_the_count():
    torch.manual_seed(1)
    cell = ltdrnn.build("sarnn", 3, 16)
    cell.scan(torch.randn(40, 2, 3))
    from ltdrnn.cells.masked import skip_fraction

    skip = float(skip_fraction(cell.aux))
    assert 0 < skip < 1
    assert flops_per_sequence(cell, 40) > flops_per_sequence(cell, 40, skip) > flops_per_sequence(cell, 40, 1.0)


def test_clear_errors():
    cell = ltdrnn.build("gru", 2, 4)
    with pytest.raises(ValueError, match="steps"):
        flops_per_sequence(cell, 0)
    with pytest.raises(ValueError, match="skip_fraction"):
        flops_per_sequence(cell, 5, skip_fraction=1.5)
