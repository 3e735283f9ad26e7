"""Generated tasks match their definitions, are deterministic and lazy, and baselines measure as stated."""

import math

import pytest
import torch
import torch.nn.functional as F

from ltdrnn.tasks import build_task
from ltdrnn.tasks.synthetic import NoisePadded


def items(task, split, n):
    dataset = task.dataset(split)
    xs, ys = zip(*(dataset[i] for i in range(n)))
    return torch.stack(xs), torch.stack(ys)


# --- adding -------------------------------------------------------------------------------------


def test_adding_markers_values_and_targets():
    T = 51
    x, y = items(build_task("adding", T=T, n_train=3000), "train", 3000)
    assert x.shape == (3000, T, 2) and y.shape == (3000, 1)
    values, marker = x[..., 0], x[..., 1]
    assert bool(((values >= 0) & (values < 1)).all())
    assert bool((marker.sum(1) == 2).all()) and set(marker.unique().tolist()) == {0.0, 1.0}
    positions = marker.nonzero()[:, 1].view(-1, 2)
    first, second = positions[:, 0], positions[:, 1]
    assert bool((first < T // 2).all()) and bool((second >= T // 2).all())
    # uniform over each half: every position is hit, no position is heavily favoured
    assert set(first.tolist()) == set(range(T // 2)) and set(second.tolist()) == set(range(T // 2, T))
    torch.testing.assert_close(y[:, 0], (values * marker).sum(1))


def test_adding_predict_one_baseline_measures_one_sixth():
    task = build_task("adding", T=20, n_test=6000)
    _, y = items(task, "test", 6000)
    mse = float(((y - 1.0) ** 2).mean())
    assert task.info.baseline == pytest.approx(1 / 6)
    assert mse == pytest.approx(task.info.baseline, abs=0.01)


def test_generated_items_are_deterministic_lazy_and_split_specific():
    a = build_task("adding", T=750, n_train=100_000, seed=3)
    b = build_task("adding", T=750, n_train=100_000, seed=3)
    train_a, train_b = a.dataset("train"), b.dataset("train")
    later_first = train_b[99_999], train_b[5]  # access order must not matter
    torch.testing.assert_close(train_a[5][0], later_first[1][0])
    torch.testing.assert_close(train_a[99_999][1], later_first[0][1])
    assert not torch.equal(train_a[5][0], a.dataset("test")[5][0])
    assert not torch.equal(train_a[5][0], build_task("adding", T=750, seed=4).dataset("train")[5][0])
    huge = build_task("adding", T=750, n_train=10**12).dataset("train")
    assert len(huge) == 10**12 and huge[10**12 - 1][0].shape == (750, 2)
    with pytest.raises(IndexError):
        huge[10**12]


def test_loader_batches_are_reproducible_by_seed():
    task = build_task("adding", T=10, n_train=64)
    first = next(iter(task.loader("train", 16, seed=1)))
    again = next(iter(task.loader("train", 16, seed=1)))
    other = next(iter(task.loader("train", 16, seed=2)))
    torch.testing.assert_close(first.x, again.x)
    assert not torch.equal(first.x, other.x)
    assert first.lengths is None and first.x.shape == (16, 10, 2)


# --- copy ---------------------------------------------------------------------------------------


def test_copy_layout_symbols_and_targets():
    T = 30
    task = build_task("copy", T=T, n_train=500)
    x, y = items(task, "train", 500)
    assert x.shape == (500, T + 20, 10) and y.shape == (500, T + 20)
    assert bool((x.sum(-1) == 1).all())
    tokens = x.argmax(-1)
    assert bool((tokens[:, :10] < 8).all())
    assert bool((tokens[:, 10 : T + 9] == 8).all()) and bool((tokens[:, T + 9] == 9).all())
    assert bool((tokens[:, T + 10 :] == 8).all())
    assert bool((y[:, : T + 10] == 8).all())
    assert torch.equal(y[:, T + 10 :], tokens[:, :10])
    assert set(tokens[:, :10].unique().tolist()) == set(range(8))
    assert task.info.output_size == 9 and int(y.max()) <= 8


def test_copy_memoryless_cross_entropy_equals_baseline():
    T = 40
    task = build_task("copy", T=T, n_test=200)
    _, y = items(task, "test", 200)
    probs = torch.zeros(T + 20, 9)
    probs[: T + 10, 8] = 1.0  # blank while nothing is to be copied
    probs[T + 10 :, :8] = 1.0 / 8  # uniform guess of each copied symbol
    logits = probs.clamp_min(1e-30).log().expand(200, -1, -1)
    ce = F.cross_entropy(logits.reshape(-1, 9), y.reshape(-1))
    assert float(ce) == pytest.approx(10 * math.log(8) / (T + 20), rel=1e-5)
    assert task.info.baseline == pytest.approx(10 * math.log(8) / (T + 20))


@pytest.mark.parametrize("name, options, recall", [("copy", dict(T=30), 10), ("copy_mist", dict(delay=30), 3)])
def test_copy_evaluation_reports_the_accuracy_on_the_recall_steps_alone(name, options, recall):
    from ltdrnn.metrics import Evaluator

    task = build_task(name, n_test=40, **options)
    _, y = items(task, "test", 40)
    length, classes = y.shape[1], task.info.output_size
    assert task.info.recall_steps == recall
    logits = F.one_hot(y, classes).float() * 10
    wrong = (y + 1) % classes
    # 40 errors on recall steps (one per sequence), 80 on blank steps before them
    logits[:, -1] = F.one_hot(wrong[:, -1], classes).float() * 10
    logits[:, :2] = F.one_hot(wrong[:, :2], classes).float() * 10
    evaluator = Evaluator(task.info)
    evaluator.add(logits[:25], y[:25])
    evaluator.add(logits[25:], y[25:])
    summary = evaluator.summary()
    assert summary["recall_accuracy"] == pytest.approx(1 - 1 / recall)
    assert summary["accuracy"] == pytest.approx(1 - 3 / length)
    adding = build_task("adding", T=10, n_test=4)
    assert adding.info.recall_steps == 0
    assert "recall_accuracy" not in Evaluator(adding.info).summary()


def test_copy_tokens_option():
    task = build_task("copy", T=5, one_hot=False)
    x, y = task.dataset("val")[0]
    assert x.dtype == torch.long and x.shape == (25,) and task.info.input_kind == "tokens"


def test_mist_copy_layout_and_blank_error_rate():
    D = 50
    task = build_task("copy_mist", delay=D, n_train=300)
    L = D // 10
    x, y = items(task, "train", 300)
    tokens = x.argmax(-1)
    assert x.shape == (300, D + 2 * L, 12)
    assert bool((tokens[:, :L] < 10).all()) and bool((tokens[:, L : L + D - 1] == 10).all())
    assert bool((tokens[:, L + D - 1] == 11).all()) and bool((tokens[:, L + D :] == 10).all())
    assert bool((y[:, : L + D] == 10).all()) and torch.equal(y[:, L + D :], tokens[:, :L])
    always_blank_error = float((y != 10).float().mean())
    assert always_blank_error == pytest.approx(1 / 12)
    assert task.info.extra["blank_error_rate"] == pytest.approx(1 / 12)
    assert task.info.baseline == pytest.approx(math.log(10) / 12)
    with pytest.raises(ValueError, match="delay"):
        build_task("copy_mist", delay=55)


# --- TARNN toy ----------------------------------------------------------------------------------


def test_tarnn_toy_definition():
    task = build_task("tarnn_toy", n_train=2000)
    x, y = items(task, "train", 2000)
    assert x.shape == (2000, 16, 1) and task.info.output_size == 4
    bits = x[:, [4, 12], 0]
    assert set(bits.unique().tolist()) <= {0.0, 1.0}
    torch.testing.assert_close(y, (2 * bits[:, 0] + bits[:, 1]).long())
    others = x[:, [t for t in range(16) if t not in (4, 12)], 0]
    assert bool(((others > 0) & (others < 1)).all())
    frequencies = torch.bincount(y, minlength=4).float() / len(y)
    assert bool(((frequencies - 0.25).abs() < 0.04).all())
    assert task.info.baseline == 0.25 and len(build_task("tarnn_toy").dataset("train")) == 50_000


def test_bad_options_are_rejected_with_their_names():
    with pytest.raises(ValueError, match="T"):
        build_task("adding", T=1)
    with pytest.raises(ValueError, match="positions"):
        build_task("tarnn_toy", positions=(4, 16))
    with pytest.raises(ValueError, match="n_train"):
        build_task("copy", n_train=-1)


# --- noise padding ------------------------------------------------------------------------------


def test_noise_padding_keeps_rows_and_adds_standard_normal_noise():
    base = [(torch.full((3, 4), float(i)), torch.tensor(i)) for i in range(200)]
    padded = NoisePadded(base, T=100, seed=0, split="train")
    x, y = padded[7]
    assert x.shape == (100, 4) and int(y) == 7
    assert bool((x[:3] == 7).all())
    noise = torch.stack([padded[i][0][3:] for i in range(200)])
    assert abs(float(noise.mean())) < 0.02 and abs(float(noise.std()) - 1) < 0.02
    torch.testing.assert_close(padded[7][0], x)
    assert not torch.equal(NoisePadded(base, 100, 0, "test")[7][0], x)
    with pytest.raises(ValueError, match="T"):
        NoisePadded(base, T=2, seed=0, split="train")[0]


def test_fresh_training_items_each_epoch_only_when_asked():
    fixed = build_task("tarnn_toy", n_train=10)
    fresh = build_task("tarnn_toy", n_train=10, fresh_train=True)
    first = fresh.dataset("train")[3][0]
    test_before = fresh.dataset("test")[3][0]
    torch.testing.assert_close(first, fixed.dataset("train")[3][0])  # epoch 0 is the fixed data
    fresh.set_epoch(1)
    fixed.set_epoch(1)
    assert not torch.equal(fresh.dataset("train")[3][0], first)
    torch.testing.assert_close(fixed.dataset("train")[3][0], first)
    torch.testing.assert_close(fresh.dataset("test")[3][0], test_before)
    fresh.set_epoch(0)
    torch.testing.assert_close(fresh.dataset("train")[3][0], first)
