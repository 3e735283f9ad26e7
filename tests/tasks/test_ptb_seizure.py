"""PTB word language modelling and the SA-RNN seizure task, from files written here."""

import math

import numpy as np
import pytest
import torch

from fixture_data import write_ptb, write_seizure
from ltdrnn.data import DataFileError, DataNotFoundError
from ltdrnn.tasks import build_task


def test_ptb_windows_vocabulary_and_targets(tmp_path):
    write_ptb(tmp_path / "ptb")
    task = build_task("ptb", data_dir=str(tmp_path), seq_len=4, expect_vocab=None)
    vocab = task.vocab
    assert list(vocab)[:2] == ["the", "<eos>"] and len(vocab) == 8
    stream = task.streams["train"]
    assert len(stream) == 5 * (7 + 5) and len(task.dataset("train")) == (len(stream) - 1) // 4
    x, y = task.dataset("train")[2]
    assert x.dtype == torch.long and x.shape == (4,)
    torch.testing.assert_close(x, torch.from_numpy(stream[8:12]))
    torch.testing.assert_close(y, torch.from_numpy(stream[9:13]))
    assert task.streams["test"][-2] == vocab["<unk>"]  # unseen words map to <unk>
    assert task.info.input_kind == "tokens" and task.info.target == "per_step"
    assert task.info.metric == "perplexity" and task.info.input_size == task.info.output_size == 8


def test_ptb_unigram_baseline(tmp_path):
    write_ptb(tmp_path / "ptb")
    task = build_task("ptb", data_dir=str(tmp_path), seq_len=3, expect_vocab=None)
    counts = np.bincount(task.streams["train"], minlength=8) + 1.0
    targets = task.streams["test"][1:]
    expected = math.exp(-np.mean(np.log(counts[targets] / counts.sum())))
    assert task.info.baseline == pytest.approx(expected)


def test_ptb_checks_vocabulary_size_and_presence(tmp_path):
    write_ptb(tmp_path / "ptb")
    with pytest.raises(DataFileError, match="expected a 10000-word vocabulary"):
        build_task("ptb", data_dir=str(tmp_path))
    with pytest.raises(DataNotFoundError, match="ptb.train.txt"):
        build_task("ptb", data_dir=str(tmp_path / "none"))
    (tmp_path / "ptb" / "ptb.valid.txt").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(DataFileError, match="ptb.valid.txt: expected UTF-8"):
        build_task("ptb", data_dir=str(tmp_path), expect_vocab=None)


def test_seizure_balancing_centering_and_chunk_means(tmp_path):
    rows = write_seizure(tmp_path / "seizure" / "Epileptic Seizure Recognition.csv")
    task = build_task("seizure", data_dir=str(tmp_path), seed=1)
    sizes = [len(task.dataset(s)) for s in ("train", "val", "test")]
    assert sum(sizes) == 24 and task.info.seq_len == 17 and task.info.input_size == 1
    labels = np.concatenate([task.splits[s][1] for s in ("train", "val", "test")])
    assert labels.sum() == 12  # all 12 seizure rows and 12 others
    raw = np.array([r[1:-1] for r in rows if r[-1] == 1], dtype=np.float64)
    centred = raw - raw.mean(1, keepdims=True)
    expected = centred[:, :170].reshape(-1, 17, 10).mean(-1)
    seizure_items = [x[:, 0] for s in ("train", "val", "test") for x, y in zip(*task.splits[s]) if y == 1]
    for item in seizure_items:
        assert np.abs(expected - item).max(1).min() < 1e-3
    assert task.info.baseline == pytest.approx(0.5, abs=0.1)


def test_seizure_rejects_wrong_layout_and_truncation(tmp_path):
    path = tmp_path / "seizure" / "data.csv"
    path.parent.mkdir(parents=True)
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(DataFileError, match=r"data.csv: expected header columns X1..X178 and y"):
        build_task("seizure", data_dir=str(tmp_path))
    write_seizure(path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1] + [lines[-1][:50]]))
    with pytest.raises(DataFileError, match="malformed or truncated"):
        build_task("seizure", data_dir=str(tmp_path))
    with pytest.raises(DataNotFoundError, match="Epileptic Seizure Recognition.csv"):
        build_task("seizure", data_dir=str(tmp_path / "none"))
