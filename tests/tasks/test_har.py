"""HAR-2 read from UCI HAR text files written here (folder and zip), with the 6 -> 2 class merge."""

import zipfile

import numpy as np
import pytest

from fixture_data import write_har
from ltdrnn.data import DataFileError, DataNotFoundError
from ltdrnn.tasks import build_task
from ltdrnn.tasks.har import two_class_label


def test_merge_follows_irnn():
    # 1 Walking, 2 Upstairs, 3 Downstairs, 4 Sitting, 5 Standing, 6 Laying
    assert two_class_label(np.arange(1, 7)).tolist() == [0, 1, 0, 1, 0, 1]


def test_reads_signals_labels_and_holds_out_subjects(tmp_path):
    data = write_har(tmp_path / "har")
    task = build_task("har2", data_dir=str(tmp_path), val_subjects=2, normalize="none")
    assert task.info.input_size == 9 and task.info.seq_len == 128 and task.info.output_size == 2
    held = set(task.info.extra["val_subjects"])
    x_train, activity, subject = data["train"]
    val_rows = np.flatnonzero(np.isin(subject, list(held)))
    assert len(held) == 2 and len(task.dataset("val")) == len(val_rows) == 8
    x, y = task.dataset("val")[1]
    np.testing.assert_allclose(x.numpy(), x_train[val_rows[1]], rtol=1e-5)
    assert int(y) == int(activity[val_rows[1]] % 2 == 0)
    assert len(task.dataset("test")) == 6


def test_normalisation_uses_training_statistics(tmp_path):
    write_har(tmp_path / "har")
    task = build_task("har2", data_dir=str(tmp_path))
    train = np.stack([task.dataset("train")[i][0].numpy() for i in range(len(task.dataset("train")))])
    np.testing.assert_allclose(train.reshape(-1, 9).mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(train.reshape(-1, 9).std(0), 1, atol=1e-3)


def test_zip_is_read_in_place(tmp_path):
    write_har(tmp_path / "src")
    (tmp_path / "data" / "har").mkdir(parents=True)
    with zipfile.ZipFile(tmp_path / "data" / "har" / "UCI HAR Dataset.zip", "w") as archive:
        for path in (tmp_path / "src").rglob("*.txt"):
            archive.write(path, path.relative_to(tmp_path / "src").as_posix())
    from_zip = build_task("har2", data_dir=str(tmp_path / "data"))
    from_folder = build_task("har2", data_dir=str(tmp_path / "src"))
    np.testing.assert_allclose(from_zip.dataset("test")[3][0].numpy(), from_folder.dataset("test")[3][0].numpy())


def test_bad_and_missing_files(tmp_path):
    write_har(tmp_path)
    path = tmp_path / "UCI HAR Dataset" / "test" / "Inertial Signals" / "body_gyro_y_test.txt"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1] + [lines[-1][:100]]))
    with pytest.raises(DataFileError, match=r"body_gyro_y_test.txt: expected 128 numbers per line"):
        build_task("har2", data_dir=str(tmp_path))
    path.unlink()
    with pytest.raises(DataNotFoundError, match="body_gyro_y_test.txt"):
        build_task("har2", data_dir=str(tmp_path))
    with pytest.raises(DataNotFoundError, match="UCI HAR Dataset"):
        build_task("har2", data_dir=str(tmp_path / "nothing"))
