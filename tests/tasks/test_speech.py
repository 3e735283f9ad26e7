"""Speech commands: wav reading, log-mel features against torch.stft, corpora written here."""

import numpy as np
import pytest
import torch

from fixture_data import RATE, tone, write_corpus, write_wav
from ltdrnn.data import DataFileError, DataNotFoundError
from ltdrnn.tasks import build_task
from ltdrnn.tasks.speech import KAGGLE_WORDS, log_mel, mel_filterbank, read_wav


def test_read_wav_round_trip_and_rejections(tmp_path):
    signal = tone(440, 0.1)
    write_wav(tmp_path / "a.wav", signal)
    np.testing.assert_allclose(read_wav(tmp_path / "a.wav"), signal, atol=1e-4)
    write_wav(tmp_path / "b.wav", signal, rate=8000)
    with pytest.raises(DataFileError, match=r"b.wav: expected mono 16-bit PCM at 16000 Hz"):
        read_wav(tmp_path / "b.wav")
    whole = (tmp_path / "a.wav").read_bytes()
    (tmp_path / "short.wav").write_bytes(whole[:-100])
    with pytest.raises(DataFileError, match=r"short.wav: truncated: the header declares 1600 samples"):
        read_wav(tmp_path / "short.wav")
    (tmp_path / "c.wav").write_bytes(b"RIFF\x00\x00not a wave")
    with pytest.raises(DataFileError, match="c.wav: not a readable wav"):
        read_wav(tmp_path / "c.wav")


def test_log_mel_matches_torch_stft_and_has_99_frames():
    signal = np.random.default_rng(0).normal(size=RATE).astype(np.float32) * 0.1
    ours = log_mel(signal, preemphasis=0.0)
    assert ours.shape == (99, 32)
    # torch.stft centres the 400-sample window inside 512 bins: pad 56 zeros so frames line up.
    padded = torch.zeros(56 + 98 * 160 + 512)
    padded[56 : 56 + RATE] = torch.from_numpy(signal).double()
    stft = torch.stft(
        padded.double(),
        n_fft=512,
        hop_length=160,
        win_length=400,
        window=torch.ones(400, dtype=torch.float64),
        center=False,
        return_complex=True,
    )
    power = stft.abs().T[:99] ** 2 / 512
    reference = torch.log((power @ torch.from_numpy(mel_filterbank()).T).clamp_min(2.2e-16))
    np.testing.assert_allclose(ours, reference.numpy(), rtol=1e-4, atol=1e-4)


def test_mel_filters_pick_the_tone_frequency():
    bank = mel_filterbank()
    assert bank.shape == (32, 257) and np.all(bank.max(1) > 0.5) and np.all(bank >= 0)
    low, high = log_mel(tone(300)), log_mel(tone(3000))
    assert low.mean(0).argmax() < high.mean(0).argmax()


def test_google30_official_lists_define_the_splits(tmp_path):
    words = [f"w{i:02d}" for i in range(30)]
    write_corpus(tmp_path / "speech_commands", words)
    task = build_task("google30", data_dir=str(tmp_path))
    assert [len(task.dataset(s)) for s in ("train", "val", "test")] == [30, 30, 30]
    x, y = task.dataset("val")[4]
    assert x.shape == (99, 32) and int(y) == 4 and task.info.extra["classes"] == words
    train = torch.stack([task.dataset("train")[i][0] for i in range(30)])
    np.testing.assert_allclose(train.mean((0, 1)).numpy(), 0, atol=1e-3)
    assert task.info.baseline == pytest.approx(1 / 30)


def test_google12_adds_silence_and_unknown(tmp_path):
    words = KAGGLE_WORDS + ["bed", "cat", "dog"]
    write_corpus(tmp_path / "sc", words, per_word=3)
    task = build_task("speech_commands", classes=12, path=str(tmp_path / "sc"))
    names = task.info.extra["classes"]
    assert names[-2:] == ["_silence_", "_unknown_"] and len(names) == 12
    labels = [int(task.dataset("train")[i][1]) for i in range(len(task.dataset("train")))]
    assert np.bincount(labels, minlength=12).tolist() == [1] * 12
    silence = [i for i, label in enumerate(labels) if label == 10][0]
    x, _ = task.dataset("train")[silence]
    assert x.shape == (99, 32) and torch.isfinite(x).all()
    with pytest.raises(DataFileError, match="classes=30"):
        build_task("speech_commands", classes=30, path=str(tmp_path / "sc"))


def test_missing_corpus(tmp_path):
    with pytest.raises(DataNotFoundError, match="speech_commands"):
        build_task("google30", data_dir=str(tmp_path))
    (tmp_path / "speech_commands").mkdir()
    with pytest.raises(DataNotFoundError, match="validation_list.txt"):
        build_task("google30", data_dir=str(tmp_path))
