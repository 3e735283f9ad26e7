"""Noise-padded CIFAR-10 read from pickle batches written here (folder and tar.gz forms)."""

import os
import pickle
import tarfile

import numpy as np
import pytest
import torch

from fixture_data import write_batches
from ltdrnn.data import DataFileError, DataNotFoundError
from ltdrnn.tasks import build_task


def test_rows_are_hwc_image_rows_then_noise(tmp_path):
    batches = write_batches(tmp_path / "cifar10" / "cifar-10-batches-py")
    task = build_task("noisy_cifar10", data_dir=str(tmp_path), verify=False, n_val=4, T=100)
    assert [len(task.dataset(s)) for s in ("train", "val", "test")] == [26, 4, 6]
    x, y = task.dataset("test")[2]
    assert x.shape == (100, 96) and task.info.input_size == 96 and task.info.seq_len == 100
    image = batches["test_batch"][b"data"][2].reshape(3, 32, 32).transpose(1, 2, 0) / 255.0
    expected = ((image - task.mean) / task.std).reshape(32, 96)
    np.testing.assert_allclose(x[:32].numpy(), expected, rtol=1e-5, atol=1e-5)
    assert int(y) == batches["test_batch"][b"labels"][2]
    noise = x[32:]
    assert abs(float(noise.mean())) < 0.1 and abs(float(noise.std()) - 1) < 0.1
    train = torch.stack([task.dataset("train")[i][0][:32] for i in range(26)]).reshape(-1, 32, 3)
    np.testing.assert_allclose(train.mean((0, 1)).numpy(), 0, atol=1e-4)
    labels = np.concatenate([batches[f"data_batch_{i}"][b"labels"] for i in range(1, 6)])[:26]
    assert task.info.baseline == pytest.approx(np.bincount(labels).max() / 26)


def test_archive_is_read_without_extracting(tmp_path):
    source = tmp_path / "src" / "cifar-10-batches-py"
    write_batches(source)
    (tmp_path / "data").mkdir()
    with tarfile.open(tmp_path / "data" / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(source, arcname="cifar-10-batches-py")
    task = build_task("noisy_cifar10", data_dir=str(tmp_path / "data"), verify=False, n_val=4, T=32)
    from_folder = build_task("noisy_cifar10", data_dir=str(tmp_path / "src"), verify=False, n_val=4, T=32)
    torch.testing.assert_close(task.dataset("val")[1][0], from_folder.dataset("val")[1][0])
    assert not list((tmp_path / "data").glob("cifar-10-batches-py"))


def test_checksum_and_format_errors(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    write_batches(folder)
    with pytest.raises(DataFileError, match=r"data_batch_1.*c99cafc152244af753f735de768cd75f"):
        build_task("noisy_cifar10", data_dir=str(tmp_path))
    (folder / "data_batch_3").write_bytes(pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}))
    with pytest.raises(DataFileError, match=r"data_batch_3.*\(n, 3072\)"):
        build_task("noisy_cifar10", data_dir=str(tmp_path), verify=False)
    (folder / "data_batch_3").write_bytes(pickle.dumps({b"data": 1})[:-5])
    with pytest.raises(DataFileError, match="data_batch_3"):
        build_task("noisy_cifar10", data_dir=str(tmp_path), verify=False)


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_pickles_that_would_run_code_are_refused(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    write_batches(folder)
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": Evil(), b"labels": []}))
    with pytest.raises(DataFileError, match="refusing to load"):
        build_task("noisy_cifar10", data_dir=str(tmp_path), verify=False)


def test_missing_data_refuses_download(tmp_path):
    with pytest.raises(DataNotFoundError, match="download=True"):
        build_task("noisy_cifar10", data_dir=str(tmp_path))
