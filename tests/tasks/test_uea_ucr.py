"""The .ts reader on files written here, the task's splits, and the sets shipped inside aeon."""

import numpy as np
import pytest
import torch

from fixture_data import toy_rows, write_ts, write_ts_set
from ltdrnn.data import DataFileError, DataNotFoundError
from ltdrnn.tasks import build_task
from ltdrnn.tasks.uea_ucr import UeaUcrTask, read_ts


def test_reader_multivariate_unequal_length_and_missing(tmp_path):
    rng = np.random.default_rng(0)
    rows = toy_rows(5, 2, rng, lengths=[3, 7])
    rows[1][0][0][2] = "?"
    write_ts(tmp_path / "x.ts", rows, dims=2, equal=False, missing=True)
    parsed = read_ts(tmp_path / "x.ts")
    assert parsed.class_names == ["a", "b", "c"] and parsed.labels.tolist() == [0, 1, 2, 0, 1]
    assert [s.shape for s in parsed.series] == [(3, 2), (7, 2), (3, 2), (7, 2), (3, 2)]
    np.testing.assert_allclose(parsed.series[0][:, 1], rows[0][0][1], rtol=1e-6)
    assert np.isnan(parsed.series[1][2, 0])


def test_reader_rejects_bad_files(tmp_path):
    (tmp_path / "plain.ts").write_text("1,2,3:a\n")
    with pytest.raises(DataFileError, match=r"plain.ts:1: expected a '@' header"):
        read_ts(tmp_path / "plain.ts")
    (tmp_path / "nodata.ts").write_text("@problemName X\n@classLabel true a\n")
    with pytest.raises(DataFileError, match="no @data"):
        read_ts(tmp_path / "nodata.ts")
    write_ts(tmp_path / "bad.ts", [([[1.0, "x"]], "a")])
    with pytest.raises(DataFileError, match=r"bad.ts:\d+: expected comma-separated numbers"):
        read_ts(tmp_path / "bad.ts")
    write_ts(tmp_path / "label.ts", [([[1.0, 2.0]], "zzz")])
    with pytest.raises(DataFileError, match="not among the declared classes"):
        read_ts(tmp_path / "label.ts")
    write_ts(tmp_path / "uneq.ts", [([[1.0, 2.0]], "a"), ([[1.0]], "b")], equal=True)
    with pytest.raises(DataFileError, match="equalLength"):
        read_ts(tmp_path / "uneq.ts")


def test_task_splits_znorm_and_padding(tmp_path):
    rng = np.random.default_rng(1)
    write_ts_set(tmp_path, toy_rows(30, 2, rng, lengths=[4, 9]), toy_rows(9, 2, rng, lengths=[5]), dims=2, equal=False)
    task = build_task("ucr", dataset="Toy", data_dir=str(tmp_path), val_fraction=0.2, znorm=True)
    assert [len(task.dataset(s)) for s in ("train", "val", "test")] == [24, 6, 9]
    assert task.info.input_size == 2 and task.info.output_size == 3 and task.info.seq_len is None
    val_labels = [int(task.dataset("val")[i][1]) for i in range(6)]
    assert sorted(val_labels) == [0, 0, 1, 1, 2, 2]  # stratified
    x, _ = task.dataset("train")[0]
    np.testing.assert_allclose(x.mean(0).numpy(), 0, atol=1e-5)
    np.testing.assert_allclose(x.std(0, unbiased=False).numpy(), 1, atol=1e-4)
    batch = task.collate([task.dataset("train")[i] for i in range(4)])
    assert batch.lengths is not None and batch.x.shape == (4, int(batch.lengths.max()), 2)
    for row, length in zip(batch.x, batch.lengths):
        assert bool((row[length:] == 0).all())
    assert task.info.baseline == pytest.approx(8 / 24)


def test_standardize_uses_the_training_part_statistics_for_every_split(tmp_path):
    rng = np.random.default_rng(2)
    rows = [([list(rng.normal(5.0, 3.0, 6)), list(rng.normal(-2.0, 0.5, 6))], "abc"[i % 3]) for i in range(30)]
    tests = [([list(rng.normal(5.0, 3.0, 6)), list(rng.normal(-2.0, 0.5, 6))], "abc"[i % 3]) for i in range(6)]
    write_ts_set(tmp_path, rows, tests, dims=2)
    raw = build_task("ucr", dataset="Toy", data_dir=str(tmp_path))
    scaled = build_task("ucr", dataset="Toy", data_dir=str(tmp_path), standardize=True)
    steps = torch.cat([raw.dataset("train")[i][0] for i in range(len(raw.dataset("train")))]).double()
    mean, std = steps.mean(0), steps.std(0, unbiased=False)
    fitted = torch.cat([scaled.dataset("train")[i][0] for i in range(len(scaled.dataset("train")))]).double()
    np.testing.assert_allclose(fitted.mean(0).numpy(), 0, atol=1e-5)  # over the training part as a whole ...
    np.testing.assert_allclose(fitted.std(0, unbiased=False).numpy(), 1, atol=1e-5)
    levels = [float(scaled.dataset("train")[i][0][:, 0].mean()) for i in range(len(scaled.dataset("train")))]
    assert max(abs(v) for v in levels) > 0.1  # ... not per series: each series keeps its own level
    for split in ("val", "test"):  # the same shift and scale, fitted on the training part only
        x_raw, x = raw.dataset(split)[0][0].double(), scaled.dataset(split)[0][0].double()
        np.testing.assert_allclose(x.numpy(), ((x_raw - mean) / std).numpy(), rtol=1e-5, atol=1e-5)
    assert scaled.info.extra["standardize"] is True and raw.info.extra["standardize"] is False


REGRESSION_HEADER = """@problemName Prices
@timeStamps false
@missing false
@univariate true
@equalLength true
@seriesLength 4
@classLabel false
@targetLabel true
@data
"""


def test_a_set_without_class_labels_is_refused_as_such_not_as_missing(tmp_path):
    """A regression set (``@classLabel false``, or no @classLabel line) is found, and the error says it
    has no class labels; it was refused as if the header were damaged."""
    folder = tmp_path / "ucr_uea" / "Prices"
    folder.mkdir(parents=True)
    for part in ("TRAIN", "TEST"):
        (folder / f"Prices_{part}.ts").write_text(REGRESSION_HEADER + "1.0,2.5,3.0,4.0:3.5\n2.0,1.5,0.5,0.0:-1.25\n")
    with pytest.raises(DataFileError) as info:
        build_task("ucr", dataset="Prices", data_dir=str(tmp_path))
    assert str(info.value) == (
        f"{folder / 'Prices_TRAIN.ts'}: the set has no class labels ('@classLabel false'; a regression or "
        "unlabelled set); the UCR/UEA task reads classification sets, whose header says '@classLabel true <classes>'"
    )
    (tmp_path / "bare.ts").write_text(REGRESSION_HEADER.replace("@classLabel false\n", "") + "1,2,3,4:3.5\n")
    with pytest.raises(DataFileError, match=r"bare\.ts: the set has no class labels \(no @classLabel line;"):
        read_ts(tmp_path / "bare.ts")


def test_missing_set_names_places_searched(tmp_path):
    with pytest.raises(DataNotFoundError, match="NoSuchSet_TRAIN.ts"):
        build_task("ucr", dataset="NoSuchSet", data_dir=str(tmp_path))


@pytest.mark.parametrize(
    "name, dims, classes, length",
    [("GunPoint", 1, 2, 150), ("BasicMotions", 6, 4, 100), ("JapaneseVowels", 12, 9, None)],
)
def test_sets_shipped_in_aeon_load_offline(name, dims, classes, length):
    pytest.importorskip("aeon", reason="aeon is not installed")
    task = build_task("uea", dataset=name)
    assert (task.info.input_size, task.info.output_size, task.info.seq_len) == (dims, classes, length)
    assert "aeon" in task.info.extra["files"]["train"]
    x, y = task.dataset("test")[0]
    assert x.shape[1] == dims and 0 <= int(y) < classes and torch.isfinite(x).all()


@pytest.mark.slow
def test_our_reader_equals_aeons_loader_on_every_set_aeon_ships():
    """Why the task keeps its own reader (one code path, with or without aeon): on every classification
    set in aeon's folder it reads the same values and labels as aeon's ``load_from_ts_file``, without
    importing aeon (seconds of numba set-up) and with errors that name the file and line. The one
    difference: aeon lower-cases class labels (BasicMotions' ``Standing``), ours keep the file's spelling."""
    pytest.importorskip("aeon", reason="aeon is not installed")
    from aeon.datasets import load_from_ts_file

    from ltdrnn.tasks.uea_ucr import aeon_data_dir

    # UnitTest/ holds aeon's own fixtures (time-stamped series, which our reader refuses by name)
    files = sorted(
        p
        for p in aeon_data_dir().glob("*/*_T*.ts")
        if p.parent.name != "UnitTest" and "@classlabel true" in p.read_text(errors="replace").lower()
    )
    assert len(files) >= 10  # GunPoint, ArrowHead, ItalyPowerDemand, OSULeaf, BasicMotions, ... TRAIN and TEST
    for path in files:
        ours = read_ts(path)
        x, y = load_from_ts_file(str(path))
        assert len(ours.series) == len(x) == len(y), path
        for mine, theirs in zip(ours.series, x):
            assert np.allclose(mine.T, np.asarray(theirs, dtype=np.float64), rtol=1e-6, equal_nan=True), path
        assert [ours.class_names[i].lower() for i in ours.labels] == [str(v).lower() for v in y], path


# ---- standardisation in float64, non-finite statistics refused ------------------------------
@pytest.mark.parametrize("scale", [1.0, 1e19, 1e30])
def test_standardisation_of_huge_values_is_that_of_the_same_set_scaled_down(tmp_path, scale):

    rows = toy_rows(24, 2, np.random.default_rng(0))
    scaled = [([[v * scale for v in dim] for dim in series], label) for series, label in rows]
    write_ts_set(tmp_path / "a", rows, rows[:9], dims=2)
    write_ts_set(tmp_path / "b", scaled, scaled[:9], dims=2)
    for options in ({"standardize": True}, {"znorm": True}):
        small = UeaUcrTask("Toy", data_dir=str(tmp_path / "a"), **options)
        huge = UeaUcrTask("Toy", data_dir=str(tmp_path / "b"), **options)
        for split in ("train", "test"):
            got, want = np.stack(huge.splits[split][0]), np.stack(small.splits[split][0])
            assert np.abs(got).max() > 0.5  # used to be all zeros from about 1e19 on
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_channel_without_observed_values_is_refused_naming_the_set(tmp_path):

    rows = toy_rows(12, 2, np.random.default_rng(0))
    missing = [([series[0], ["?"] * len(series[1])], label) for series, label in rows]
    write_ts_set(tmp_path, missing, missing[:6], dims=2, missing=True, name="Gappy")
    with pytest.raises(DataFileError, match=r"dataset 'Gappy': channel 1's mean and std .* are not finite"):
        UeaUcrTask("Gappy", data_dir=str(tmp_path), standardize=True)
    assert UeaUcrTask("Gappy", data_dir=str(tmp_path)).info.input_size == 2  # unstandardised: zeros
