"""Google Speech Commands, 30 or 12 classes, as 99 frames of 32 log-mel filter-bank energies.

Source: the extracted archive (v0.01, as FastGRNN/iRNN/TARNN; v0.02 has 35 words and serves classes=12 only)
under ``<data_dir>/speech_commands`` or ``path``: one folder per word of 16 kHz mono 16-bit wav
files, ``validation_list.txt``, ``testing_list.txt`` (the official split: files listed there
validate/test, all others train) and ``_background_noise_/`` (long noise recordings).

Classes: ``classes=30``: every word folder (sorted). ``classes=12``: yes, no, up, down, left, right,
on, off, stop, go, plus ``_silence_`` and ``_unknown_`` (the Kaggle challenge set used for Google-12).
For 12 classes, each split gets as many unknown items (drawn with ``seed`` from the other 20 words) and
as many silence items (1 s excerpts of the background-noise files at seeded offsets) as the mean
size of its 10 word classes.

Features (``log_mel``): clips are zero-padded/cut to 1 s; pre-emphasis 0.97; frames of 25 ms (400
samples) every 10 ms (160), the last frame zero-padded, giving 1 + ceil((16000 - 400) / 160) = 99
frames; ``window`` ("rect" by default, or "hamming"/"hann"); power spectrum |FFT_512|^2 / 512;
32 triangular mel filters over 0..8 kHz; natural log with a floor. Then each of the 32 features is
standardised with the mean and std of (up to ``stats_items``) training items (TARNN/iRNN normalise to
zero mean, unit variance).
"""

from __future__ import annotations

import functools
import math
import wave
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from torch.utils.data import Dataset

from ..data import DataFileError, DataNotFoundError, item_rng
from ..data import data_dir as resolve_data_dir
from .base import Task, classification_info, register_task

SAMPLE_RATE = 16000
KAGGLE_WORDS = ["yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go"]
SILENCE, UNKNOWN, NOISE_DIR = "_silence_", "_unknown_", "_background_noise_"
HOW_TO_GET = (
    "Get speech_commands_v0.01.tar.gz from http://download.tensorflow.org/data/ and extract it "
    "into <data_dir>/speech_commands/ (word folders, validation_list.txt, testing_list.txt)."
)


def read_wav(path: Path) -> np.ndarray:
    """Mono 16-bit PCM wav -> float32 samples in [-1, 1); rejects other formats by name."""
    try:
        with wave.open(str(path), "rb") as handle:
            channels, width, rate = handle.getnchannels(), handle.getsampwidth(), handle.getframerate()
            declared = handle.getnframes()
            frames = handle.readframes(declared)
    except (wave.Error, EOFError, RuntimeError) as error:  # the wave module raises a bare RuntimeError
        # on some malformed chunk headers (found by tests/fuzz/test_fuzz_readers.py::test_wav)
        raise DataFileError(f"{path}: not a readable wav file ({error!r}). {HOW_TO_GET}") from error
    if channels != 1 or width != 2 or rate != SAMPLE_RATE:
        raise DataFileError(
            f"{path}: expected mono 16-bit PCM at {SAMPLE_RATE} Hz, got {channels} "
            f"channel(s), {8 * width}-bit, {rate} Hz"
        )
    if len(frames) != 2 * declared:
        raise DataFileError(
            f"{path}: truncated: the header declares {declared} samples, the file holds {len(frames) // 2}"
        )
    return np.frombuffer(frames, "<i2").astype(np.float32) / 32768.0


def mel_filterbank(
    n_filters: int = 32,
    n_fft: int = 512,
    sample_rate: int = SAMPLE_RATE,
    low_hz: float = 0.0,
    high_hz: Optional[float] = None,
) -> np.ndarray:
    """``(n_filters, n_fft // 2 + 1)`` triangular filters equally spaced on the mel scale."""
    high_hz = sample_rate / 2 if high_hz is None else high_hz
    to_mel = lambda hz: 2595.0 * np.log10(1.0 + hz / 700.0)
    to_hz = lambda mel: 700.0 * (10.0 ** (mel / 2595.0) - 1.0)
    edges_hz = to_hz(np.linspace(to_mel(low_hz), to_mel(high_hz), n_filters + 2))
    bins = np.floor((n_fft + 1) * edges_hz / sample_rate).astype(int)
    bank = np.zeros((n_filters, n_fft // 2 + 1), dtype=np.float64)
    for m in range(n_filters):
        left, centre, right = bins[m], bins[m + 1], bins[m + 2]
        for k in range(left, centre):
            bank[m, k] = (k - left) / max(centre - left, 1)
        for k in range(centre, right):
            bank[m, k] = (right - k) / max(right - centre, 1)
    return bank


WINDOWS = {"rect": np.ones, "hamming": np.hamming, "hann": np.hanning}


def log_mel(
    signal: np.ndarray,
    n_filters: int = 32,
    win_ms: float = 25.0,
    hop_ms: float = 10.0,
    n_fft: int = 512,
    window: str = "rect",
    preemphasis: float = 0.97,
    sample_rate: int = SAMPLE_RATE,
    bank: Optional[np.ndarray] = None,
) -> np.ndarray:
    """``(frames, n_filters)`` log mel energies; frames = 1 + ceil((len - win) / hop) (last one padded).

    Equivalent to: for each frame f, e = bank @ |rfft(w * s[f*hop : f*hop+win], n_fft)|^2 / n_fft;
    out[f] = log(max(e, eps)).
    """
    if window not in WINDOWS:
        raise ValueError(f"window: expected one of {sorted(WINDOWS)}, got {window!r}")
    win, hop = round(sample_rate * win_ms / 1000), round(sample_rate * hop_ms / 1000)
    emphasised = np.append(signal[:1], signal[1:] - preemphasis * signal[:-1]).astype(np.float64)
    frames = 1 if len(emphasised) <= win else 1 + math.ceil((len(emphasised) - win) / hop)
    padded = np.zeros((frames - 1) * hop + win)
    padded[: len(emphasised)] = emphasised
    index = np.arange(win)[None, :] + hop * np.arange(frames)[:, None]
    spectrum = np.abs(np.fft.rfft(padded[index] * WINDOWS[window](win), n_fft)) ** 2 / n_fft
    bank = mel_filterbank(n_filters, n_fft, sample_rate) if bank is None else bank
    return np.log(np.maximum(spectrum @ bank.T, np.finfo(np.float64).eps)).astype(np.float32)


@functools.lru_cache(maxsize=16)
def _noise_recording(path: Path) -> np.ndarray:
    return read_wav(path)


def fit_to_one_second(signal: np.ndarray) -> np.ndarray:
    out = np.zeros(SAMPLE_RATE, dtype=np.float32)
    out[: min(len(signal), SAMPLE_RATE)] = signal[:SAMPLE_RATE]
    return out


Entry = Tuple[Path, int, Optional[int]]  # (wav, label, start of a 1 s excerpt or None for the whole clip)


def _split_of(rel: str, val: set, test: set) -> str:
    return "val" if rel in val else "test" if rel in test else "train"


def scan_corpus(root: Path) -> Tuple[Dict[str, List[Path]], set, set, List[Path]]:
    """Word folders -> wav paths, the validation/testing relative paths, and the noise files."""
    lists = {}
    for name in ("validation_list.txt", "testing_list.txt"):
        path = root / name
        if not path.exists():
            raise DataNotFoundError(f"Speech Commands: {path} is missing. {HOW_TO_GET}")
        lists[name] = {line.strip() for line in path.read_text().splitlines() if line.strip()}
    words = {
        d.name: sorted(d.glob("*.wav"))
        for d in sorted(root.iterdir())
        if d.is_dir() and d.name != NOISE_DIR and not d.name.startswith(".")
    }
    words = {w: files for w, files in words.items() if files}
    noise = sorted((root / NOISE_DIR).glob("*.wav")) if (root / NOISE_DIR).is_dir() else []
    return words, lists["validation_list.txt"], lists["testing_list.txt"], noise


@register_task("speech_commands")
class SpeechCommandsTask(Task):
    """x ``(99, 32)`` float log-mel frames; y ``()`` class index (see ``info.extra["classes"]``)."""

    def __init__(
        self,
        classes: int = 30,
        data_dir: Optional[str] = None,
        path: Optional[str] = None,
        seed: int = 0,
        window: str = "rect",
        n_filters: int = 32,
        stats_items: int = 2000,
    ):
        if classes not in (12, 30):
            raise ValueError(f"classes: expected 12 or 30, got {classes}")
        if window not in WINDOWS:
            raise ValueError(f"window: expected one of {sorted(WINDOWS)}, got {window!r}")
        root = Path(path) if path is not None else resolve_data_dir(data_dir) / "speech_commands"
        if not root.is_dir():
            raise DataNotFoundError(f"Speech Commands: folder {root} not found. {HOW_TO_GET}")
        self.seed, self.window, self.n_filters = int(seed), window, int(n_filters)
        self.bank = mel_filterbank(self.n_filters)
        words, val, test, self.noise_files = scan_corpus(root)
        self.class_names, self.entries = self._entries(classes, root, words, val, test)
        self._stats: Optional[Tuple[np.ndarray, np.ndarray]] = None
        self.stats_items = int(stats_items)
        train_labels = np.array([label for _, label, _ in self.entries["train"]], dtype=np.int64)
        self.info = classification_info(
            name="speech_commands",
            input_size=self.n_filters,
            output_size=len(self.class_names),
            train_labels=train_labels,
            seq_len=99,
            extra={"classes": self.class_names, "window": window, "root": str(root)},
        )

    def _entries(self, classes, root, words, val, test):
        split_files: Dict[str, Dict[str, List[Path]]] = {s: {} for s in ("train", "val", "test")}
        for word, files in words.items():
            for f in files:
                split_files[_split_of(f"{word}/{f.name}", val, test)].setdefault(word, []).append(f)
        if classes == 30:
            names = sorted(words)
            if len(names) != 30:
                raise DataFileError(f"{root}: expected 30 word folders for classes=30, found {len(names)}")
            return names, {
                s: [(f, names.index(w), None) for w in names for f in files.get(w, [])]
                for s, files in split_files.items()
            }
        absent = [w for w in KAGGLE_WORDS if w not in words]
        if absent:
            raise DataFileError(f"{root}: classes=12 needs the word folders {absent}")
        if not self.noise_files:
            raise DataNotFoundError(f"{root / NOISE_DIR}: background noise wavs are needed for '_silence_'")
        names = KAGGLE_WORDS + [SILENCE, UNKNOWN]
        rng = np.random.default_rng(self.seed)
        noise_lengths = [len(_noise_recording(p)) for p in self.noise_files]
        entries = {}
        for split, files in split_files.items():
            known = [(f, names.index(w), None) for w in KAGGLE_WORDS for f in files.get(w, [])]
            per_class = max(1, round(len(known) / len(KAGGLE_WORDS)))
            others = [f for w, fs in sorted(files.items()) if w not in KAGGLE_WORDS for f in fs]
            picked = (
                [others[i] for i in sorted(rng.choice(len(others), min(per_class, len(others)), replace=False))]
                if others
                else []
            )
            unknown = [(f, names.index(UNKNOWN), None) for f in picked]
            silence = []
            for _ in range(per_class):
                which = int(rng.integers(len(self.noise_files)))
                offset = int(rng.integers(0, max(1, noise_lengths[which] - SAMPLE_RATE)))
                silence.append((self.noise_files[which], names.index(SILENCE), offset))
            entries[split] = known + unknown + silence
        return names, entries

    def features(self, entry: Entry) -> np.ndarray:
        path, _, start = entry
        if start is None:
            signal = read_wav(path)
        else:  # excerpts of the few long noise recordings: keep them in memory
            signal = _noise_recording(path)[start : start + SAMPLE_RATE]
        return log_mel(fit_to_one_second(signal), self.n_filters, window=self.window, bank=self.bank)

    def stats(self) -> Tuple[np.ndarray, np.ndarray]:
        """Per-filter mean and std over up to ``stats_items`` training items (seeded choice)."""
        if self._stats is None:
            train = self.entries["train"]
            rng = item_rng(self.seed, "train", 0, stream=7)
            chosen = rng.choice(len(train), min(self.stats_items, len(train)), replace=False)
            feats = np.concatenate([self.features(train[i]) for i in chosen])
            self._stats = feats.mean(0), np.maximum(feats.std(0), 1e-8)
        return self._stats

    def build_split(self, split: str) -> Dataset:
        return _SpeechDataset(self, self.entries[split])


class _SpeechDataset(Dataset):
    def __init__(self, task: SpeechCommandsTask, entries: List[Entry]):
        self.task, self.entries = task, entries

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, index: int):
        mean, std = self.task.stats()
        x = (self.task.features(self.entries[index]) - mean) / std
        return torch.from_numpy(x.astype(np.float32)), torch.tensor(self.entries[index][1])


@register_task("google30")
def google30(**options) -> SpeechCommandsTask:
    """Google-30: ``speech_commands`` with ``classes=30``."""
    return SpeechCommandsTask(classes=30, **options)


@register_task("google12")
def google12(**options) -> SpeechCommandsTask:
    """Google-12: ``speech_commands`` with ``classes=12`` (10 words, silence, unknown)."""
    return SpeechCommandsTask(classes=12, **options)
