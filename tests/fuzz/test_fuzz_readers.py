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

from fuzz_helpers import mutated  # noqa: E402

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


# the UCR edge sets as .ts files, each with the error it must give (None: read): a
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


# ---- UCR standardisation at any scale ------------------------------------------------------
TOY = toy_rows(12, 2, np.random.default_rng(1))
GAP = st.tuples(st.integers(0, 11), st.integers(0, 1), st.integers(0, 5), st.sampled_from(["nan", "?", "inf", "-inf"]))


@settings(max_examples=30)
@given(
    exponent=st.integers(-30, 30),
    gaps=st.lists(GAP, max_size=3),
    options=st.sampled_from([{"standardize": True}, {"znorm": True}, {"standardize": True, "znorm": True}]),
)
def test_ucr_standardisation_is_that_of_the_set_at_scale_one(exponent, gaps, options):
    """A set times 10**exponent (1e-30 .. 1e30), with missing values or infinities here and there, reads as
    the same set at scale 1 (the same NaN marks in both), or is one DataFileError naming the file; never
    all zeros."""
    from fixture_data import write_ts_set
    from ltdrnn.tasks.uea_ucr import UeaUcrTask

    def with_gaps(scale):
        rows = [([[v * scale for v in dim] for dim in series], label) for series, label in TOY]
        for i, dim, t, token in gaps:
            rows[i][0][dim][t] = token
        return rows

    root = Path(tempfile.mkdtemp(prefix="fuzz-scale-", dir=_ROOT.name))
    for name, scale in (("one", 1.0), ("scaled", 10.0**exponent)):
        rows = with_gaps(scale)
        write_ts_set(root / name, rows, rows[:6], name="Toy", dims=2, missing=True)
    if any(token.endswith("inf") for *_, token in gaps):
        with pytest.raises(DataFileError, match=r"Toy_TRAIN.ts:\d+: expected finite numbers"):
            UeaUcrTask("Toy", data_dir=str(root / "scaled"), **options)
        return
    want = UeaUcrTask("Toy", data_dir=str(root / "one"), **options)
    got = UeaUcrTask("Toy", data_dir=str(root / "scaled"), **options)
    for split in ("train", "val", "test"):
        a, b = np.stack(got.splits[split][0]), np.stack(want.splits[split][0])
        assert np.abs(a).max() > 0.5, (split, exponent)  # used to be all zeros from about 1e19 on
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"{split} at 1e{exponent}")


# ---- .npy headers that claim more than their bytes -------------------------------------------
@settings(max_examples=30)
@given(
    shape=st.lists(st.integers(0, 2**40), min_size=1, max_size=3).map(tuple),
    descr=st.sampled_from(["<f4", "<f8", "<i8", "|u1", "<c16"]),
    payload=st.integers(0, 512),
    version=st.sampled_from([(1, 0), (2, 0)]),
)
def test_an_npy_header_is_checked_against_its_bytes_before_allocating(shape, descr, payload, version):
    """An ``.npz`` member whose header claims any shape: refused (DataFileError naming the file and member) unless
    its bytes hold that many values, and never a large allocation."""
    import io
    import math
    import tracemalloc
    import zipfile

    from ltdrnn.tasks.uea_ucr import read_arrays

    header = io.BytesIO()
    write = np.lib.format.write_array_header_1_0 if version == (1, 0) else np.lib.format.write_array_header_2_0
    write(header, {"descr": descr, "fortran_order": False, "shape": shape})
    member = header.getvalue() + bytes(payload)
    good = io.BytesIO()
    np.save(good, np.zeros((4, 3), dtype=np.float32))
    labels = io.BytesIO()
    np.save(labels, np.array([0, 1, 0, 1]))
    path = Path(tempfile.mkdtemp(prefix="fuzz-npz-", dir=_ROOT.name)) / "a.npz"
    with zipfile.ZipFile(path, "w") as archive:
        for name, raw in (("x_train", member), ("y_train", labels), ("x_test", good), ("y_test", labels)):
            archive.writestr(f"{name}.npy", raw if isinstance(raw, bytes) else raw.getvalue())
    claimed = math.prod(shape) * np.dtype(descr).itemsize
    tracemalloc.start()
    try:
        try:
            arrays = read_arrays(str(path))
        except DataFileError as error:
            assert str(path) in str(error) and "x_train" in str(error), error
            arrays = None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, (shape, descr, peak)
    if claimed > payload:
        assert arrays is None, (shape, descr, payload)
