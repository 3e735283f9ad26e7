"""The source cells' defaults on long random inputs at initialisation: finite outputs and
gradients over 10,000 steps, and iRNN's identity init keeping its state from growing geometrically
(the measurements up to T = 100,000 are lab/2026-11-26-long-inputs/long_inputs.py's; docs/cells/*.md, "Long
inputs")."""

import pytest
import torch

import ltdrnn

SOURCE_CELLS = ["tarnn", "srnn", "mist", "irnn", "sarnn"]


def last_step(cell: str, steps: int, **options):
    torch.manual_seed(0)
    rnn = ltdrnn.Recurrent(cell, input_size=3, hidden_size=16, **options)
    out, _ = rnn(torch.randn(2, steps, 3))
    out[:, -1].sum().backward()
    return out, [p.grad for p in rnn.parameters() if p.grad is not None]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::ltdrnn.cells.base.GradientGrowthWarning")
@pytest.mark.parametrize("cell", SOURCE_CELLS)
def test_every_source_cell_stays_finite_over_10000_steps_at_init(cell):
    out, grads = last_step(cell, 10_000)
    assert bool(torch.isfinite(out).all())
    assert grads and all(bool(torch.isfinite(g).all()) for g in grads)


def test_irnn_identity_init_does_not_grow_where_the_uniform_init_explodes():
    """U = I at init (u_init='identity'): the state drifts at most linearly (about 0.01 per step); the
    uniform init's ||P U|| of about 1.7 makes it grow geometrically (here past 1e6 by T = 8,000)."""
    identity, _ = last_step("irnn", 8_000)
    uniform, _ = last_step("irnn", 8_000, u_init="uniform")
    assert identity.abs().max() < 50
    assert not uniform.abs().max() < 1e6
