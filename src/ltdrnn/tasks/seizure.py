"""Epileptic Seizure Recognition as prepared in the SA-RNN paper (sec. 4.1).

Source: the UCI csv ``Epileptic Seizure Recognition.csv`` (or ``data.csv``) in ``<data_dir>/seizure``:
a header ``"",X1,...,X178,y`` and 11,500 rows of an id, 178 EEG samples and a class 1..5 (1 = seizure
activity). SA-RNN: keep all 2,300 seizure rows and as many rows drawn at random (``seed``) from the
other classes, a balanced 4,600; centre each series around zero (``center="series"``, its own mean;
``"dataset"`` uses the mean of all kept samples); average every 10 consecutive samples, giving 17 steps
(samples 170..177 are dropped); split 80/10/10 at random (stratified, ``seed``).
x ``(17, 1)``; y ``()`` 1 for seizure, else 0.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from torch.utils.data import Dataset

from ..data import (
    ArrayDataset,
    DataFileError,
    DataNotFoundError,
    find_first,
    integer_labels,
    stratified_split,
)
from ..data import data_dir as resolve_data_dir
from .base import Task, classification_info, register_task

NAMES = ["Epileptic Seizure Recognition.csv", "data.csv"]
SAMPLES, CHUNK = 178, 10
HOW_TO_GET = (
    "Get 'Epileptic Seizure Recognition.csv' from https://archive.ics.uci.edu/dataset/388 "
    "and put it in <data_dir>/seizure/."
)


def read_seizure_csv(path: Path):
    """``x (n, 178) float32`` and ``y (n,) int64`` in 1..5, checked against the UCI layout."""
    try:
        rows = list(csv.reader(io.StringIO(path.read_text())))
    except UnicodeDecodeError as error:
        raise DataFileError(f"{path}: expected a UTF-8 csv ({error}). {HOW_TO_GET}") from error
    if not rows:
        raise DataFileError(f"{path}: empty file. {HOW_TO_GET}")
    header = [h.strip() for h in rows[0]]
    wanted = [f"X{i}" for i in range(1, SAMPLES + 1)]
    if not set(wanted + ["y"]) <= set(header):
        raise DataFileError(
            f"{path}: expected header columns X1..X{SAMPLES} and y (the UCI layout), got "
            f"{header[:4]}... ({len(header)} columns). {HOW_TO_GET}"
        )
    columns = [header.index(c) for c in wanted]
    label_col = header.index("y")
    try:
        body = [r for r in rows[1:] if r]
        x = np.array([[float(r[c]) for c in columns] for r in body], dtype=np.float32)
        raw_labels = [float(r[label_col]) for r in body]
    except (ValueError, IndexError) as error:
        raise DataFileError(f"{path}: a data row is malformed or truncated ({error}). {HOW_TO_GET}") from error
    y = integer_labels(raw_labels, f"{path}: column y")
    if not set(np.unique(y)) <= set(range(1, 6)):
        raise DataFileError(f"{path}: y must hold classes 1..5, got {sorted(set(np.unique(y)))[:8]}")
    return x, y


def chunk_means(x: np.ndarray, chunk: int = CHUNK) -> np.ndarray:
    """``(n, S) -> (n, S // chunk)``: the mean of each complete chunk of ``chunk`` samples."""
    steps = x.shape[1] // chunk
    return x[:, : steps * chunk].reshape(len(x), steps, chunk).mean(-1)


@register_task("seizure")
class SeizureTask(Task):
    """Balanced binary seizure detection on 17-step summaries of 178-sample EEG rows."""

    def __init__(
        self, data_dir: Optional[str] = None, seed: int = 0, center: str = "series", path: Optional[str] = None
    ):
        if center not in ("series", "dataset"):
            raise ValueError(f"center: expected 'series' or 'dataset', got {center!r}")
        folder = resolve_data_dir(data_dir) / "seizure"
        file = Path(path) if path is not None else find_first(folder, NAMES)
        if file is None or not file.exists():
            raise DataNotFoundError(f"Seizure: none of {NAMES} found in {folder}. {HOW_TO_GET}")
        x, y = read_seizure_csv(file)
        rng = np.random.default_rng(seed)
        positive, negative = np.flatnonzero(y == 1), np.flatnonzero(y != 1)
        keep = np.sort(
            np.concatenate([positive, rng.choice(negative, min(len(positive), len(negative)), replace=False)])
        )
        x, labels = x[keep], (y[keep] == 1).astype(np.int64)
        x = x - (x.mean(1, keepdims=True) if center == "series" else x.mean())
        x = chunk_means(x)[..., None].astype(np.float32)
        parts = stratified_split(labels, (0.8, 0.1, 0.1), seed)
        self.splits = {s: (x[idx], labels[idx]) for s, idx in zip(("train", "val", "test"), parts)}
        self.info = classification_info(
            name="seizure",
            input_size=1,
            output_size=2,
            train_labels=self.splits["train"][1],
            seq_len=x.shape[1],
            extra={"center": center, "n": len(labels)},
            baseline_note="majority class of the (balanced) training split",
        )

    def build_split(self, split: str) -> Dataset:
        x, y = self.splits[split]
        return ArrayDataset(x, y, lambda row, index: torch.from_numpy(row))
