"""Fuzz: every data reader on mutated fixture files (bytes flipped, cut, inserted, duplicated).

Property: a DataFileError naming the file, or arrays that hold what the format promises (finite
values, whole-number labels within the declared classes, consistent lengths). Never another
exception, never a silently damaged array.
"""

import pickle
import tempfile
from pathlib import Path

import numpy as np
import pytest

from fixture_data import idx_bytes, toy_rows, write_batches, write_har, write_ptb, write_seizure, write_ts, write_wav
from ltdrnn.data import DataFileError
from ltdrnn.tasks.cifar import parse_batch
from ltdrnn.tasks.har import read_har_part
from ltdrnn.tasks.mnist import read_idx
from ltdrnn.tasks.ptb import EOS, read_words
from ltdrnn.tasks.seizure import read_seizure_csv
from ltdrnn.tasks.speech import read_wav
from ltdrnn.tasks.uea_ucr import read_ts

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def mutated(draw, raw: bytes) -> bytes:
    """``raw`` after a few random edits; the edits favour digits, separators and header bytes."""
    data = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "duplicate", "digit"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            data = data[:at] if draw(st.booleans()) else data[:at] + data[at + draw(st.integers(1, 64)) :]
        elif kind == "insert":
            data[at:at] = draw(
                st.one_of(
                    st.binary(min_size=1, max_size=8),
                    st.sampled_from(
                        [b"nan", b"inf", b"-", b"2.9", b"1e39", b"?", b",", b":", b"\n", b"\xff\xfe", b"\0\0\0\x09"]
                    ),
                )
            )
        elif kind == "duplicate" and data:
            data[at:at] = data[at : at + draw(st.integers(1, 256))]
        elif kind == "digit" and data:
            data[at] = ord(str(draw(st.integers(0, 9))))
    return bytes(data)


# every file the examples write lives under one directory, removed when the module is released
_ROOT = tempfile.TemporaryDirectory(prefix="ltdrnn-fuzz-")


def _write(raw: bytes, name: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="fuzz-reader-", dir=_ROOT.name))
    path = folder / name
    path.write_bytes(raw)
    return path


def _fixture(write, name):
    folder = Path(tempfile.mkdtemp(prefix="fuzz-fixture-", dir=_ROOT.name))
    path = folder / name
    write(path)
    return path.read_bytes()


IDX = idx_bytes(np.arange(2 * 4 * 4).reshape(2, 4, 4) % 256)
TS = _fixture(lambda p: write_ts(p, toy_rows(4, 2, np.random.default_rng(0))), "x.ts")
SEIZURE = _fixture(lambda p: write_seizure(p, n_per_class=(2, 1, 1, 1, 1)), "data.csv")
PTB = _fixture(lambda p: write_ptb(p.parent) or (p.parent / "ptb.train.txt").rename(p), "ptb.txt")
WAV = _fixture(lambda p: write_wav(p, np.zeros(800)), "a.wav")
CIFAR = pickle.dumps(write_batches(Path(tempfile.mkdtemp(dir=_ROOT.name)), per_batch=2)["test_batch"], protocol=2)


@settings(max_examples=40)
@given(data=st.data())
def test_idx(data):
    path = _write(data.draw(mutated(IDX)), "x-idx3-ubyte")
    try:
        array = read_idx(path)
    except DataFileError as error:
        assert str(path) in str(error)
        return
    assert array.size * array.dtype.itemsize + 4 + 4 * array.ndim == path.stat().st_size


@settings(max_examples=40)
@given(data=st.data())
def test_ts(data):
    _check_ts(_write(data.draw(mutated(TS)), "x.ts"))


# the UCR edge sets of issue 38 (L6) as .ts files, each with the error it must give (None: read): a
# missing label, ragged dimensions, NaN values, one row, unicode labels behind a byte-order mark, a label
# the header does not declare (the one-row set and a class only in TEST are refused by the task, whole)
TS_EDGES = {
    "missing-label": (b"@classLabel true a b\n@data\n1,2,3:a\n4,5,6:\n", r":4: the class label is missing"),
    "ragged": (
        b"@dimensions 2\n@classLabel true a b\n@data\n1,2,3:4,5,6:a\n1,2,3:4,5:b\n",
        r":5: the dimensions of one series have different lengths \[3, 2\]",
    ),
    "nan": (b"@missing false\n@classLabel true a b\n@data\n1,NaN,3:a\nnan,5,6:b\n", None),
    "one-row": (b"@classLabel true a b\n@data\n1,2,3:a\n", None),
    "unicode": ("\ufeff@classLabel true caf\u00e9 \u72ac\n@data\n1,2:caf\u00e9\n3,4:\u72ac\n".encode(), None),
    "undeclared": (b"@classLabel true a\n@data\n1,2:a\n3,4:b\n", r":4: label 'b' is not among the declared"),
}


@pytest.mark.parametrize("case", sorted(TS_EDGES))
def test_ts_edge_sets(case):
    raw, error = TS_EDGES[case]
    path = _write(raw, "x.ts")
    if error is None:
        read_ts(path)  # raises if the reader refuses it
    else:
        with pytest.raises(DataFileError, match=error):
            read_ts(path)
    _check_ts(path)


def _check_ts(path: Path) -> None:
    """A DataFileError naming ``path``, or series without infinities and labels among the declared
    classes (named, not empty)."""
    try:
        parsed = read_ts(path)
    except DataFileError as error:
        assert str(path) in str(error)
        return
    assert len(parsed.series) == len(parsed.labels)
    assert ((parsed.labels >= 0) & (parsed.labels < len(parsed.class_names))).all()
    assert all(name for name in parsed.class_names)
    for series in parsed.series:
        assert not np.isinf(series).any()  # NaN marks a missing value; infinities are refused


@settings(max_examples=25)
@given(data=st.data())
def test_seizure(data):
    path = _write(data.draw(mutated(SEIZURE)), "data.csv")
    try:
        x, y = read_seizure_csv(path)
    except DataFileError as error:
        assert str(path) in str(error)
        return
    assert len(x) == len(y) and x.shape[1:] == (178,) and set(np.unique(y)) <= {1, 2, 3, 4, 5}


@settings(max_examples=25)
@given(data=st.data())
def test_ptb(data):
    path = _write(data.draw(mutated(PTB)), "ptb.train.txt")
    try:
        words = read_words(path)
    except DataFileError as error:
        assert str(path) in str(error)
        return
    assert any(w != EOS for w in words) and all(w and not any(c.isspace() for c in w) for w in words)


@settings(max_examples=25)
@given(data=st.data())
def test_cifar_batch(data):
    raw = data.draw(mutated(CIFAR))
    try:
        images, labels = parse_batch(raw, "test_batch")
    except DataFileError as error:
        assert "test_batch" in str(error)
        return
    assert images.shape[1:] == (32, 32, 3) and len(images) == len(labels)
    assert ((labels >= 0) & (labels < 10)).all()


@settings(max_examples=25)
@given(data=st.data())
def test_wav(data):
    path = _write(data.draw(mutated(WAV)), "a.wav")
    try:
        signal = read_wav(path)
    except DataFileError as error:
        assert str(path) in str(error)
        return
    assert signal.ndim == 1 and np.isfinite(signal).all() and np.abs(signal).max(initial=0) <= 1


HAR_ROOT = Path(tempfile.mkdtemp(prefix="fuzz-har-", dir=_ROOT.name))
write_har(HAR_ROOT, n_train=3, n_test=1)
HAR_FILES = {
    str(p.relative_to(HAR_ROOT / "UCI HAR Dataset")): p.read_bytes()
    for p in (HAR_ROOT / "UCI HAR Dataset" / "train").rglob("*.txt")
}


@settings(max_examples=25)
@given(data=st.data())
def test_har(data):
    name = data.draw(st.sampled_from(sorted(HAR_FILES)))
    files = dict(HAR_FILES, **{name: data.draw(mutated(HAR_FILES[name]))})
    try:
        part = read_har_part(files.__getitem__, "train")
    except DataFileError as error:
        assert name.rsplit("/", 1)[-1] in str(error) or "HAR train" in str(error)
        return
    assert part["x"].shape == (len(part["activity"]), 128, 9) and np.isfinite(part["x"]).all()
    assert set(np.unique(part["activity"])) <= set(range(1, 7))
