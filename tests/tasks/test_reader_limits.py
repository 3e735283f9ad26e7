"""The data readers refuse damaged or crafted files with a DataFileError naming the file,
and never read more than their size cap."""

import gzip
import pickle
import struct
import tracemalloc
import zipfile

import numpy as np
import pytest

from fixture_data import toy_rows, write_batches, write_har, write_ptb, write_seizure, write_ts
from ltdrnn.data import DataFileError, read_capped
from ltdrnn.tasks import build_task
from ltdrnn.tasks.cifar import parse_batch
from ltdrnn.tasks.har import MAX_FILE_BYTES
from ltdrnn.tasks.mnist import read_idx
from ltdrnn.tasks.ptb import read_words
from ltdrnn.tasks.seizure import read_seizure_csv
from ltdrnn.tasks.uea_ucr import read_ts


def test_idx_dimensions_whose_product_overflows_int64_are_a_size_mismatch(tmp_path):
    # 2**32-1 cubed wraps int64 arithmetic; with np.prod it came out small and negative
    dims = (2**32 - 1, 2**32 - 1, 2**32 - 1)
    path = tmp_path / "x-idx3-ubyte"
    path.write_bytes(struct.pack(">BBBB", 0, 0, 0x08, 3) + struct.pack(">3I", *dims) + b"\0" * 16)
    with pytest.raises(DataFileError, match="IDX size mismatch"):
        read_idx(path)


def test_a_gzip_bomb_is_not_unpacked_past_the_cap(tmp_path, monkeypatch):
    import ltdrnn.tasks.mnist as mnist

    monkeypatch.setattr(mnist, "read_capped", lambda stream, name: read_capped(stream, name, limit=1 << 16))
    path = tmp_path / "bomb-idx1-ubyte.gz"
    path.write_bytes(gzip.compress(b"\0" * (1 << 20)))
    with pytest.raises(DataFileError, match="larger than 65536 bytes"):
        read_idx(path)


def test_ts_dimensions_that_are_not_a_number(tmp_path):
    path = tmp_path / "x.ts"
    write_ts(path, toy_rows(3, 1, np.random.default_rng(0)))
    path.write_text(path.read_text().replace("@dimensions 1", "@dimensions abc"))
    with pytest.raises(DataFileError, match="@dimensions <positive integer>"):
        read_ts(path)


@pytest.mark.parametrize("value", ["inf", "-Infinity", "1e39"])
def test_ts_infinities_are_refused_not_clipped(tmp_path, value):
    rows = toy_rows(3, 1, np.random.default_rng(0))
    rows[1][0][0][2] = value
    path = tmp_path / "x.ts"
    write_ts(path, rows)
    with pytest.raises(DataFileError, match=r"x.ts:\d+: expected finite numbers"):
        read_ts(path)


def test_ts_missing_values_are_still_accepted(tmp_path):
    rows = toy_rows(3, 1, np.random.default_rng(0))
    rows[1][0][0][2] = "?"
    path = tmp_path / "x.ts"
    write_ts(path, rows, missing=True)
    assert np.isnan(read_ts(path).series[1][2, 0])


@pytest.mark.parametrize("label", [-1, 10])
def test_cifar_labels_outside_the_ten_classes(tmp_path, label):
    batch = write_batches(tmp_path)["test_batch"]
    batch[b"labels"][0] = label
    with pytest.raises(DataFileError, match="labels 0..9"):
        parse_batch(pickle.dumps(batch), "test_batch")


def test_seizure_labels_must_be_whole_numbers(tmp_path):
    path = tmp_path / "data.csv"
    write_seizure(path)
    lines = path.read_text().splitlines()
    lines[1] = lines[1].rsplit(",", 1)[0] + ",2.9"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFileError, match="whole-number class labels, got 2.9"):
        read_seizure_csv(path)


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_an_empty_or_blank_ptb_file_is_refused(tmp_path, text):
    path = tmp_path / "ptb.train.txt"
    path.write_text(text)
    with pytest.raises(DataFileError, match="no words"):
        read_words(path)


def test_a_ptb_split_shorter_than_one_window_is_refused(tmp_path):
    write_ptb(tmp_path / "ptb")
    with pytest.raises(DataFileError, match=r"ptb.valid.txt: 7 tokens, too few for one window of seq_len=8"):
        build_task("ptb", seq_len=8, data_dir=str(tmp_path), expect_vocab=None)


def _har_zip(tmp_path, replace=None):
    write_har(tmp_path / "src")
    archive = tmp_path / "har" / "UCI HAR Dataset.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as handle:
        for path in sorted((tmp_path / "src").rglob("*.txt")):
            name = str(path.relative_to(tmp_path / "src"))
            swapped = replace(name) if replace else None
            handle.writestr(name, swapped if swapped is not None else path.read_bytes())
    return archive


def test_a_har_zip_bomb_stops_at_the_cap_without_filling_memory(tmp_path):
    bomb = b"0 " * (MAX_FILE_BYTES // 2 + 1024)  # compresses ~1000x
    archive = _har_zip(tmp_path, lambda name: bomb if name.endswith("body_acc_x_train.txt") else None)
    assert archive.stat().st_size < 2 << 20
    tracemalloc.start()
    try:
        with pytest.raises(DataFileError, match=f"body_acc_x_train.txt: larger than {MAX_FILE_BYTES} bytes"):
            build_task("har2", data_dir=str(tmp_path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_FILE_BYTES  # the probe saw 5.6 GB


def test_har_labels_must_be_whole_numbers(tmp_path):
    _har_zip(tmp_path, lambda name: b"2.9\n" * 24 if name.endswith("/y_train.txt") else None)
    with pytest.raises(DataFileError, match="whole-number class labels, got 2.9"):
        build_task("har2", data_dir=str(tmp_path))


# ---- .npz members given with arrays= ----------------------------------------------------------------------
def _npz(path, **members):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, raw in members.items():
            archive.writestr(f"{name}.npy", raw)
    return path


def _npy(array) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_an_npz_member_past_the_cap_is_not_unpacked(tmp_path, monkeypatch):
    import ltdrnn.tasks.uea_ucr as uea_ucr

    monkeypatch.setattr(uea_ucr, "MAX_MEMBER_BYTES", 1 << 20)
    y = _npy(np.zeros(4, dtype=np.int64))
    big = _npy(np.zeros((4, 1 << 16), dtype=np.float32))  # 1 MB of zeros: a few KB compressed
    path = _npz(tmp_path / "bomb.npz", x_train=big, y_train=y, x_test=_npy(np.zeros((4, 3))), y_test=y)
    assert path.stat().st_size < 20_000
    with pytest.raises(DataFileError, match=r"arrays .*bomb.npz: x_train.npy: larger than 1048576 bytes"):
        uea_ucr.read_arrays(str(path))


def test_an_npy_header_claiming_more_than_its_bytes_is_refused_before_allocating(tmp_path):
    import io

    from ltdrnn.tasks.uea_ucr import read_arrays

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (10**9, 64)})
    y = _npy(np.zeros(4, dtype=np.int64))
    path = _npz(
        tmp_path / "lie.npz", x_train=header.getvalue() + b"\0" * 64, y_train=y, x_test=_npy(np.zeros((4, 3))), y_test=y
    )
    tracemalloc.start()
    try:
        with pytest.raises(DataFileError, match=r"x_train.npy: its header claims shape \(1000000000, 64\)"):
            read_arrays(str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 << 20
    # a well-formed file still reads
    good = _npz(tmp_path / "good.npz", x_train=_npy(np.ones((4, 3))), y_train=y, x_test=_npy(np.ones((4, 3))), y_test=y)
    assert len(read_arrays(str(good))["train"].series) == 4
