"""HAR-2: UCI Human Activity Recognition, raw inertial signals, 6 activities merged into 2 (iRNN/TARNN).

Source: the "UCI HAR Dataset" folder (or its zip, ``UCI HAR Dataset.zip``) under ``<data_dir>/har``
or ``<data_dir>``: ``{train,test}/Inertial Signals/<signal>_{train,test}.txt`` for the nine signals
``body_acc_{x,y,z}``, ``body_gyro_{x,y,z}``, ``total_acc_{x,y,z}`` (each line 128 numbers), plus
``y_{train,test}.txt`` (activity 1..6) and ``subject_{train,test}.txt``.

Classes (iRNN appendix): {Sitting, Laying, Walking_Upstairs} vs {Standing, Walking,
Walking_Downstairs}. With UCI's codes 1 Walking, 2 Upstairs, 3 Downstairs, 4 Sitting, 5 Standing,
6 Laying, the first group is exactly the even codes: label = 1 for codes 2, 4, 6, else 0.
Validation: the windows of ``val_subjects`` training subjects (default 3 of 21, as the EdgeML
HAR preprocessing behind FastGRNN/iRNN: int(0.1 * 21 + 1); drawn with
``split_seed``), so overlapping windows of one person never straddle train and validation.
Normalisation: each of the 9 channels to zero mean, unit variance with training-split statistics.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Callable, Dict, Optional

import numpy as np
import torch
from torch.utils.data import Dataset

from ..data import (
    ArrayDataset,
    DataFileError,
    DataNotFoundError,
    check_normalize,
    feature_statistics,
    integer_labels,
    read_capped,
)
from ..data import data_dir as resolve_data_dir
from .base import Task, classification_info, register_task

SIGNALS = [f"{kind}_{axis}" for kind in ("body_acc", "body_gyro", "total_acc") for axis in "xyz"]
FOLDER = "UCI HAR Dataset"
STEPS = 128
#: Most bytes read from one HAR file; the largest real one (a training signal) has about 15 MB
MAX_FILE_BYTES = 64 << 20
HOW_TO_GET = (
    "Get 'UCI HAR Dataset.zip' from https://archive.ics.uci.edu/dataset/240 and put the zip or "
    "the extracted 'UCI HAR Dataset' folder in <data_dir>/har/."
)


def two_class_label(activity: np.ndarray) -> np.ndarray:
    """Sitting (4), Laying (6), Walking_Upstairs (2) -> 1; Standing, Walking, Walking_Downstairs -> 0."""
    return (activity % 2 == 0).astype(np.int64)


def _opener(root: Path) -> Callable[[str], bytes]:
    """Read ``relative path`` inside the HAR folder, from the extracted tree or the zip."""
    for place in (root / "har", root):
        if (place / FOLDER).is_dir():
            base = place / FOLDER
            return lambda rel: _read_file(base / rel)
    for place in (root / "har", root):
        archive = place / f"{FOLDER}.zip"
        if archive.exists():
            try:
                handle = zipfile.ZipFile(archive)
            except zipfile.BadZipFile as error:
                raise DataFileError(f"{archive}: not a readable zip ({error}). {HOW_TO_GET}") from error
            names = {n.split(FOLDER + "/", 1)[-1]: n for n in handle.namelist() if FOLDER + "/" in n}
            return lambda rel: _read_member(handle, names, archive, rel)
    raise DataNotFoundError(
        f"HAR: neither '{FOLDER}/' nor '{FOLDER}.zip' found in {root / 'har'} or {root}. {HOW_TO_GET}"
    )


def _read_file(path: Path) -> bytes:
    with open(path, "rb") as stream:
        return read_capped(stream, str(path), MAX_FILE_BYTES)


def _read_member(handle: zipfile.ZipFile, names: Dict[str, str], archive: Path, rel: str) -> bytes:
    if rel not in names:
        raise DataFileError(f"{archive}: lacks {FOLDER}/{rel}. {HOW_TO_GET}")
    try:
        with handle.open(names[rel]) as stream:
            return read_capped(stream, f"{archive}: {rel}", MAX_FILE_BYTES)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as error:
        raise DataFileError(f"{archive}: {rel} cannot be read ({error}). {HOW_TO_GET}") from None


def _numbers(raw: bytes, name: str, columns: Optional[int]) -> np.ndarray:
    """The ``(lines, columns)`` float32 table of a text file of whitespace-separated finite numbers."""
    try:
        # numpy's C parser: no Python object per number, so memory stays a small multiple of the file
        table = np.loadtxt(io.BytesIO(raw), dtype=np.float32, ndmin=2)
    except (ValueError, UnicodeDecodeError) as error:
        reason = " ".join(str(error).split(";")[0].split())[:200]  # numpy's advice after ';' does not apply
        raise DataFileError(
            f"{name}: expected {columns or 1} numbers per line, whitespace-separated "
            f"({reason}; truncated file?). {HOW_TO_GET}"
        ) from None
    if table.shape[0] == 0 or table.shape[1] != (columns or 1):
        raise DataFileError(
            f"{name}: expected {columns or 1} numbers per line, got a table of shape "
            f"{table.shape} (truncated file?). {HOW_TO_GET}"
        )
    if not np.isfinite(table).all():
        raise DataFileError(f"{name}: expected finite numbers, got NaN or infinity. {HOW_TO_GET}")
    return table


def read_har_part(read: Callable[[str], bytes], part: str) -> Dict[str, np.ndarray]:
    """``x (n, 128, 9) float32``, ``activity (n,)`` 1..6 and ``subject (n,)`` of ``part``."""

    def load(rel, columns=None):
        try:
            raw = read(rel)
        except FileNotFoundError as error:
            raise DataNotFoundError(f"HAR: {rel} is missing ({error}). {HOW_TO_GET}") from error
        return _numbers(raw, rel, columns)

    signals = [load(f"{part}/Inertial Signals/{s}_{part}.txt", STEPS) for s in SIGNALS]
    activity = integer_labels(load(f"{part}/y_{part}.txt")[:, 0], f"HAR {part}/y_{part}.txt")
    subject = integer_labels(load(f"{part}/subject_{part}.txt")[:, 0], f"HAR {part}/subject_{part}.txt")
    counts = {len(s) for s in signals} | {len(activity), len(subject)}
    if len(counts) != 1:
        raise DataFileError(
            f"HAR {part}: signal, label and subject files disagree on the number of "
            f"windows ({sorted(counts)}). {HOW_TO_GET}"
        )
    if not set(np.unique(activity)) <= set(range(1, 7)):
        raise DataFileError(f"HAR {part}: y_{part}.txt must hold activity codes 1..6")
    return {"x": np.stack(signals, axis=-1), "activity": activity, "subject": subject}


@register_task("har2")
class Har2Task(Task):
    """x ``(128, 9)`` float; y ``()`` in {0, 1} (see the module docstring for the merge)."""

    def __init__(
        self, data_dir: Optional[str] = None, val_subjects: int = 3, split_seed: int = 0, normalize: str = "dataset"
    ):
        check_normalize(normalize)
        read = _opener(resolve_data_dir(data_dir))
        train, test = read_har_part(read, "train"), read_har_part(read, "test")
        subjects = np.unique(train["subject"])
        if not 0 <= val_subjects < len(subjects):
            raise ValueError(f"val_subjects: expected 0..{len(subjects) - 1}, got {val_subjects}")
        held_out = np.random.default_rng(split_seed).choice(subjects, val_subjects, replace=False)
        is_val = np.isin(train["subject"], held_out)
        parts = {
            "train": (train["x"][~is_val], train["activity"][~is_val]),
            "val": (train["x"][is_val], train["activity"][is_val]),
            "test": (test["x"], test["activity"]),
        }
        fit = parts["train"][0].reshape(-1, len(SIGNALS))
        self.mean, self.std = feature_statistics(fit, normalize)
        self.splits = {
            k: (((x - self.mean) / self.std).astype(np.float32), two_class_label(a)) for k, (x, a) in parts.items()
        }
        self.info = classification_info(
            name="har2",
            input_size=len(SIGNALS),
            output_size=2,
            train_labels=self.splits["train"][1],
            seq_len=STEPS,
            extra={"signals": SIGNALS, "val_subjects": sorted(held_out.tolist())},
        )

    def build_split(self, split: str) -> Dataset:
        x, y = self.splits[split]
        return ArrayDataset(x, y, lambda row, index: torch.from_numpy(row))
