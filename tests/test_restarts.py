"""``train.restarts``: candidates screened on their training loss, the chosen one trained as its seed's run."""

import pytest
import torch

from harness_helpers import install, tiny_config
from harness_helpers import train_tiny as run
from ltdrnn.config import ConfigError, load_config
from ltdrnn.restarts import restart_seed
from ltdrnn.train import TrainingInterrupted, train

# 20 screened steps of 30: each candidate's score is the mean of its steps 19 and 20; at seed 0 the
# lowest of the three is not the run's own seed, so the choice is visible
SCREEN = ["train.seed=0", "train.restarts=3", "train.restart_steps=20"]
SETTINGS = ["train.steps=30", "train.eval_every=10", "optim.lr=0.05"]


@pytest.fixture(autouse=True)
def tiny(monkeypatch):
    install(monkeypatch)
    torch.set_num_threads(1)


def weights(record, name="last.pt"):
    return torch.load(f"{record['run_dir']}/{name}", weights_only=False)["model"]


def assert_same_weights(a, b):
    for name in ("last.pt", "best.pt"):
        for key, value in weights(a, name).items():
            assert torch.equal(value, weights(b, name)[key]), (name, key)


def test_the_candidate_with_the_lowest_training_loss_is_chosen_and_trains_as_its_seed_s_run(tmp_path):
    record = run(tmp_path / "screened", SETTINGS + SCREEN)
    screen = record["metrics"]["restarts"]
    assert screen["seeds"] == [0, restart_seed(0, 1), restart_seed(0, 2)]
    # each candidate's score is the mean training loss of its plain run's steps 19 and 20
    scores = []
    for i, seed in enumerate(screen["seeds"]):
        losses = []
        plain = run(tmp_path / f"plain{i}", SETTINGS + [f"train.seed={seed}"], [lambda s: losses.append(s["loss"])])
        scores.append(sum(losses[18:20]) / 2)
        if seed == screen["seed"]:
            assert_same_weights(record, plain)
            assert record["metrics"]["test"] == plain["metrics"]["test"]
    assert screen["losses"] == pytest.approx(scores, rel=1e-6)
    assert screen["seed"] == screen["seeds"][scores.index(min(scores))] != 0


def test_one_restart_is_the_run_without_the_option(tmp_path):
    plain = run(tmp_path / "plain", SETTINGS)
    one = run(tmp_path / "one", SETTINGS + ["train.restarts=1"])
    assert_same_weights(plain, one)
    assert one["metrics"]["test"] == plain["metrics"]["test"] and one["metrics"]["restarts"] is None


def test_an_interrupted_screened_run_resumes_its_chosen_candidate_without_screening_again(tmp_path, monkeypatch):
    whole = run(tmp_path / "a", SETTINGS + SCREEN)
    cfg = load_config(tiny_config(tmp_path / "b"), SETTINGS + SCREEN)
    stop_at_25 = lambda state: state["step"] == 25 and (_ for _ in ()).throw(TrainingInterrupted("stop"))  # noqa: E731
    with pytest.raises(TrainingInterrupted):
        train(cfg, callbacks=[stop_at_25])
    checkpoint = torch.load(tmp_path / "b" / "run" / "last.pt", weights_only=False)
    assert checkpoint["step"] == 24 and checkpoint["restarts"]["seed"] == whole["metrics"]["restarts"]["seed"]
    monkeypatch.setattr("ltdrnn.train.screen_restarts", lambda run: pytest.fail("screened again"))
    resumed = train(cfg, resume=True)
    assert_same_weights(whole, resumed)
    assert resumed["metrics"]["test"] == whole["metrics"]["test"]
    assert resumed["metrics"]["restarts"] == checkpoint["restarts"]


def test_a_checkpoint_written_before_the_option_existed_still_resumes(tmp_path):
    whole = run(tmp_path / "a", SETTINGS)
    cfg = load_config(tiny_config(tmp_path / "b"), SETTINGS)
    with pytest.raises(TrainingInterrupted):
        train(cfg, callbacks=[lambda s: s["step"] == 15 and (_ for _ in ()).throw(TrainingInterrupted("stop"))])
    path = tmp_path / "b" / "run" / "last.pt"
    checkpoint = torch.load(path, weights_only=False)
    for key in ("restarts", "restart_steps"):
        del checkpoint["config"]["train"][key]
    del checkpoint["restarts"]
    torch.save(checkpoint, path)
    resumed = train(cfg, resume=True)
    assert_same_weights(whole, resumed)


@pytest.mark.parametrize(
    "settings, message",
    [
        (["train.restarts=0"], "train.restarts: expected a positive number of candidates, got 0"),
        (["train.restarts=3"], "train.restart_steps: expected a positive number of screen steps, got None"),
        (["train.restarts=3", "train.restart_steps=0"], "train.restart_steps: expected a positive .* got 0"),
        (["train.restarts=2", "train.restart_steps=30"], r"train.restart_steps: expected fewer .* \(train.steps=30\)"),
        (["train.restart_steps=5"], "train.restart_steps: only used with train.restarts > 1, got 5"),
    ],
)
def test_bad_restart_settings_are_refused_naming_the_key(tmp_path, settings, message):
    with pytest.raises(ConfigError, match=message):
        load_config(tiny_config(tmp_path), SETTINGS + settings)


def test_a_screen_as_long_as_a_run_counted_in_epochs_is_refused_before_training(tmp_path):
    # the tiny task's 64 training items at batch 8: 8 steps an epoch, 16 in two
    overrides = ["train.steps=null", "train.epochs=2", "train.restarts=2", "train.restart_steps=16"]
    with pytest.raises(ConfigError, match=r"train.restart_steps: expected fewer steps than the run's \(16\), got 16"):
        run(tmp_path, overrides)
    assert not (tmp_path / "run" / "last.pt").exists()
