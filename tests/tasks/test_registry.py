"""Every registered task either builds offline and agrees with its TaskInfo, or says what data it needs."""

import math

import pytest
import torch

from ltdrnn.data import DataNotFoundError
from ltdrnn.tasks import SPLITS, build_task, list_tasks

SMALL = {
    "adding": dict(T=30),
    "copy": dict(T=20),
    "copy_mist": dict(delay=20),
    "noisy_mnist": dict(T=60),
    "mnist_random_labels": dict(n=50),
}
NEEDS_FILES = {"noisy_cifar10", "har2", "speech_commands", "google12", "google30", "ptb", "seizure"}


def test_expected_tasks_are_registered():
    assert {
        "adding",
        "copy",
        "copy_mist",
        "tarnn_toy",
        "pixel_mnist",
        "pmnist",
        "noisy_mnist",
        "big_pmnist",
        "mnist_random_labels",
        "digits",
        "noisy_cifar10",
        "uea_ucr",
        "har2",
        "speech_commands",
        "google12",
        "google30",
        "ptb",
        "seizure",
    } <= set(list_tasks())


def test_unknown_task_name_is_rejected():
    with pytest.raises(ValueError, match="unknown name 'nope'"):
        build_task("nope")


@pytest.mark.parametrize("name", sorted(NEEDS_FILES))
def test_file_tasks_without_files_explain_where_to_put_them(name):
    with pytest.raises(DataNotFoundError, match="data directory|data_dir"):
        build_task(name)


@pytest.mark.parametrize("name", [n for n in list_tasks() if n not in NEEDS_FILES])
def test_offline_task_batches_agree_with_info(name):
    try:
        task = build_task(name, **SMALL.get(name, {}))
    except DataNotFoundError as error:
        pytest.skip(f"optional offline source not installed: {error}")
    info = task.info
    assert info.loss in ("mse", "cross_entropy") and info.target in ("terminal", "per_step")
    assert math.isfinite(info.baseline)
    for split in SPLITS:
        assert len(task.dataset(split)) > 0
    batch = next(iter(task.loader("test", 3, shuffle=False)))
    if info.input_kind == "tokens":
        assert batch.x.dtype == torch.long and int(batch.x.max()) < info.input_size
    else:
        assert batch.x.dtype == torch.float32 and batch.x.shape[-1] == info.input_size
    if info.seq_len is not None:
        assert batch.x.shape[1] == info.seq_len and batch.lengths is None
    if info.loss == "cross_entropy":
        assert batch.y.dtype == torch.long and int(batch.y.max()) < info.output_size
        assert batch.y.shape == ((3, batch.x.shape[1]) if info.target == "per_step" else (3,))
    else:
        assert batch.y.shape[-1] == info.output_size
