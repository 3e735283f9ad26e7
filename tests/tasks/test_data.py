"""ltdrnn.data: data directory precedence, checksummed downloads (file:// only), splits, baselines."""

import hashlib
from pathlib import Path

import numpy as np
import pytest

from ltdrnn import data
from ltdrnn.data import DataFileError, DataNotFoundError, download, majority_accuracy, stratified_split


def test_data_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("LTDRNN_DATA", str(tmp_path / "env"))
    assert data.data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert data.data_dir() == tmp_path / "env"
    monkeypatch.delenv("LTDRNN_DATA")
    assert data.data_dir() == Path("~/.cache/ltdrnn").expanduser()


def test_download_verifies_checksum_and_leaves_nothing_on_failure(tmp_path):
    source = tmp_path / "payload.bin"
    source.write_bytes(b"some dataset bytes")
    good = hashlib.md5(source.read_bytes()).hexdigest()
    dest = tmp_path / "out" / "payload.bin"
    with pytest.raises(DataFileError, match=r"payload.bin.*expected 0{32}"):
        download(source.as_uri(), dest, "0" * 32, allow=True, how_to_get="(test)")
    assert not dest.exists() and not list(dest.parent.glob("*.part"))
    assert download(source.as_uri(), dest, good, allow=True, how_to_get="(test)") == dest
    assert dest.read_bytes() == source.read_bytes()


def test_download_refused_unless_allowed(tmp_path):
    with pytest.raises(DataNotFoundError, match="downloading is off.*how to get it"):
        download("file:///nonexistent", tmp_path / "x", None, allow=False, how_to_get="how to get it")
    with pytest.raises(DataNotFoundError, match="could not download"):
        download((tmp_path / "absent").as_uri(), tmp_path / "x", None, allow=True, how_to_get="")


def test_stratified_split_is_deterministic_disjoint_and_proportional():
    labels = np.repeat(np.arange(4), [10, 20, 30, 40])
    parts = stratified_split(labels, (0.5, 0.3, 0.2), seed=3)
    again = stratified_split(labels, (0.5, 0.3, 0.2), seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    assert sorted(np.concatenate(parts).tolist()) == list(range(100))
    assert np.bincount(labels[parts[1]]).tolist() == [3, 6, 9, 12]
    with pytest.raises(ValueError, match="fractions"):
        stratified_split(labels, (0.5, 0.4), seed=0)


def test_majority_accuracy():
    assert majority_accuracy(np.array([0, 1, 1, 2])) == 0.5
