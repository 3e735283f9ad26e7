"""Penn Treebank word-level language modelling (Mikolov's preprocessed text, 10K vocabulary).

Files ``ptb.train.txt``, ``ptb.valid.txt``, ``ptb.test.txt`` in ``<data_dir>/ptb`` (or
``<data_dir>/ptb/simple-examples/data``, or ``path``). Every line ends with ``<eos>``; the vocabulary is
the training words (10,000 including ``<unk>`` for the official files), numbered by decreasing training
frequency (ties alphabetically). Each split's token stream is cut into consecutive, non-overlapping
windows: item i is ``x = s[i L : (i+1) L]`` and ``y = s[i L + 1 : (i+1) L + 1]`` with ``L = seq_len``
(300 in TARNN/iRNN, after Kusupati et al.; 35 is the usual setting); the last incomplete window is dropped.
The trivial baseline is the perplexity of the training unigram distribution on the test stream.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch
from torch.utils.data import Dataset

from ..data import DataFileError, DataNotFoundError
from ..data import data_dir as resolve_data_dir
from .base import Task, TaskInfo, register_task

FILES = {"train": "ptb.train.txt", "val": "ptb.valid.txt", "test": "ptb.test.txt"}
EOS, UNK = "<eos>", "<unk>"
HOW_TO_GET = (
    "Get simple-examples.tgz from http://www.fit.vutbr.cz/~imikolov/rnnlm/ and copy "
    "data/ptb.{train,valid,test}.txt into <data_dir>/ptb/."
)


def read_words(path: Path) -> List[str]:
    """Whitespace tokens of each line followed by ``<eos>``."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DataFileError(f"{path}: expected UTF-8 text ({error}). {HOW_TO_GET}") from error
    words = [w for line in text.splitlines() for w in line.split() + [EOS]]
    if all(w == EOS for w in words):
        raise DataFileError(f"{path}: no words (an empty or blank file). {HOW_TO_GET}")
    return words


def build_vocabulary(words: List[str]) -> Dict[str, int]:
    counts = Counter(words)
    return {w: i for i, (w, _) in enumerate(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))}


def find_ptb(root: Path, path: Optional[str]) -> Dict[str, Path]:
    places = [Path(path)] if path is not None else [root / "ptb", root / "ptb" / "simple-examples" / "data"]
    for place in places:
        found = {split: place / name for split, name in FILES.items()}
        if all(p.exists() for p in found.values()):
            return found
    raise DataNotFoundError(
        f"PTB: {', '.join(FILES.values())} not found in {', '.join(str(p) for p in places)}. {HOW_TO_GET}"
    )


class WindowDataset(Dataset):
    def __init__(self, stream: np.ndarray, seq_len: int):
        self.stream, self.seq_len = stream, seq_len

    def __len__(self) -> int:
        return max(0, (len(self.stream) - 1) // self.seq_len)

    def __getitem__(self, index: int):
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} windows")
        start = index * self.seq_len
        chunk = torch.from_numpy(self.stream[start : start + self.seq_len + 1])
        return chunk[:-1], chunk[1:]


@register_task("ptb")
class PtbTask(Task):
    """x ``(L,)`` int64 word ids; y ``(L,)`` int64 next-word ids; per-step cross-entropy."""

    def __init__(
        self,
        seq_len: int = 300,
        data_dir: Optional[str] = None,
        path: Optional[str] = None,
        expect_vocab: Optional[int] = 10000,
    ):
        if seq_len < 1:
            raise ValueError(f"seq_len: expected a positive integer, got {seq_len}")
        files = find_ptb(resolve_data_dir(data_dir), path)
        words = {split: read_words(p) for split, p in files.items()}
        self.vocab = build_vocabulary(words["train"])
        if expect_vocab is not None and len(self.vocab) != expect_vocab:
            raise DataFileError(
                f"{files['train']}: expected a {expect_vocab}-word vocabulary (Mikolov's "
                f"PTB), got {len(self.vocab)}; pass expect_vocab=None for other corpora. " + HOW_TO_GET
            )
        unk = self.vocab.get(UNK)
        self.streams = {}
        for split, tokens in words.items():
            unseen = {w for w in tokens if w not in self.vocab}
            if unseen and unk is None:
                raise DataFileError(
                    f"{files[split]}: words {sorted(unseen)[:5]} are not in the training "
                    f"vocabulary and there is no {UNK} token"
                )
            self.streams[split] = np.array([self.vocab.get(w, unk) for w in tokens], dtype=np.int64)
            if len(tokens) <= seq_len:
                raise DataFileError(
                    f"{files[split]}: {len(tokens)} tokens, too few for one window of "
                    f"seq_len={seq_len} (needs {seq_len + 1}). {HOW_TO_GET}"
                )
        self.seq_len = int(seq_len)
        self.info = TaskInfo(
            name="ptb",
            input_size=len(self.vocab),
            output_size=len(self.vocab),
            loss="cross_entropy",
            target="per_step",
            metric="perplexity",
            higher_is_better=False,
            baseline=self.unigram_perplexity(),
            baseline_note="training unigram distribution on the test words",
            seq_len=self.seq_len,
            input_kind="tokens",
            extra={"tokens": {s: len(v) for s, v in self.streams.items()}},
        )

    def unigram_perplexity(self) -> float:
        counts = np.bincount(self.streams["train"], minlength=len(self.vocab)) + 1.0  # add-one: no zero
        log_p = np.log(counts / counts.sum())
        targets = self.streams["test"][1:]
        return float(math.exp(-log_p[targets].mean()))

    def build_split(self, split: str) -> Dataset:
        return WindowDataset(self.streams[split], self.seq_len)
