"""``train.qat_steps``: the last steps train through the int8 export's weights, and the run's model is them."""

import numpy as np
import pytest
import torch
from torch import nn

from harness_helpers import install, tiny_config
from harness_helpers import train_tiny as run
from ltdrnn.config import ConfigError, load_config
from ltdrnn.evaluation import evaluate_checkpoint
from ltdrnn.export.c_fixed import quantize_rows
from ltdrnn.int8_training import Int8Matrices, int8_rows

SETTINGS = ["train.steps=30", "train.eval_every=10", "optim.lr=0.05", "train.seed=3"]


@pytest.fixture(autouse=True)
def tiny(monkeypatch):
    install(monkeypatch)
    torch.set_num_threads(1)


def on_grid(weight: torch.Tensor) -> bool:
    """Whether the exporter's int8 rows of ``weight`` give ``weight`` back exactly."""
    q, scale = quantize_rows(weight)
    return torch.equal(torch.from_numpy(q.astype(np.float32) * scale[:, None]), weight.float())


def test_int8_rows_are_the_exporter_s_rows_and_quantise_to_themselves():
    torch.manual_seed(0)
    weight = torch.randn(6, 9) * torch.logspace(-3, 2, 6)[:, None]
    weight[2] = 0.0
    weight[4, 3] = 1e-9  # a row whose other entries round to 0
    q, scale = quantize_rows(weight)
    snapped = int8_rows(weight)
    assert torch.equal(snapped, torch.from_numpy(q.astype(np.float64) * scale[:, None].astype(np.float64)).float())
    again_q, again_scale = quantize_rows(snapped)
    assert np.array_equal(again_q, q) and np.array_equal(again_scale, scale)
    assert not torch.equal(snapped, weight) and torch.equal(snapped[2], weight[2])


def test_inside_the_block_the_matrices_are_rounded_and_vectors_are_not_and_after_it_all_are_as_before():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with Int8Matrices(model).applied():
        for key, value in model.state_dict().items():
            expected = int8_rows(before[key]) if value.dim() == 2 else before[key]
            assert torch.equal(value, expected), key
            assert value.dim() != 2 or not torch.equal(value, before[key]), key
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_a_step_inside_the_block_applies_the_gradient_at_the_rounded_weights_to_the_float_ones():
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    rounded = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
    rounded.load_state_dict({k: int8_rows(v) if v.dim() == 2 else v for k, v in model.state_dict().items()})
    nn.functional.mse_loss(rounded(x), y).backward()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Int8Matrices(model).applied():
        nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    for (key, p), q in zip(model.named_parameters(), rounded.parameters()):
        assert torch.allclose(p.detach(), before[key] - 0.1 * q.grad, rtol=0, atol=1e-7), key


def test_the_run_s_model_is_on_the_int8_grid_and_its_test_is_that_model_s(tmp_path):
    record = run(tmp_path / "qat", SETTINGS + ["train.qat_steps=10"])
    best = torch.load(f"{record['run_dir']}/best.pt", weights_only=True)["model"]
    matrices = [v for v in best.values() if v.dim() == 2]
    assert matrices and all(on_grid(v) for v in matrices)
    again = evaluate_checkpoint(f"{record['run_dir']}/best.pt", split="test")
    assert again["metric"] == record["metrics"]["test"]["metric"]
    plain = run(tmp_path / "plain", SETTINGS)
    plain_best = torch.load(f"{plain['run_dir']}/best.pt", weights_only=True)["model"]
    assert not all(on_grid(v) for v in plain_best.values() if v.dim() == 2)


def test_only_the_last_steps_train_through_int8_weights(tmp_path):
    losses = {}
    for name, qat in (("plain", 0), ("qat", 10)):
        losses[name] = []
        run(tmp_path / name, SETTINGS + [f"train.qat_steps={qat}"], [lambda s, out=losses[name]: out.append(s["loss"])])
    assert losses["qat"][:20] == losses["plain"][:20]
    assert losses["qat"][20] != losses["plain"][20]


def test_selection_and_the_moving_average_see_the_int8_weights(tmp_path):
    record = run(tmp_path / "ema", SETTINGS + ["train.qat_steps=30", "train.ema_decay=0.9", "train.select_on=last"])
    best = torch.load(f"{record['run_dir']}/best.pt", weights_only=True)["model"]
    assert all(on_grid(v) for v in best.values() if v.dim() == 2)
    last = torch.load(f"{record['run_dir']}/last.pt", weights_only=True)["model"]
    assert not all(on_grid(v) for v in last.values() if v.dim() == 2)  # the float weights go on training


def test_a_negative_count_is_refused_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"train\.qat_steps: expected a non-negative value, got -1"):
        load_config(tiny_config(tmp_path), ["train.qat_steps=-1"])
