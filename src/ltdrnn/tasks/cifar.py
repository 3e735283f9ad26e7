"""Noise-padded CIFAR-10 (Chang et al. 2019, as used by TARNN and iRNN) from the python pickle batches.

Files: ``cifar-10-batches-py/{data_batch_1..5,test_batch}`` under ``<data_dir>/cifar10`` or
``<data_dir>``, or the archive ``cifar-10-python.tar.gz`` in either place (read without extracting).
Each step is one image row: the 32 pixels of row r with their three channels interleaved
(pixel-major, i.e. the row of the H x W x C image flattened), 96 features; then i.i.d. N(0, 1) rows
up to ``T`` = 1000. Normalisation: per channel with the training split's mean and std (``"dataset"``)
or pixels / 255 (``"none"``). Validation: the last ``n_val`` (default 5,000) training images.
"""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np
import torch
from torch.utils.data import Dataset

from ..data import (
    ArrayDataset,
    DataFileError,
    check_normalize,
    download,
    feature_statistics,
    find_first,
    load_data_pickle,
    md5sum,
    missing,
    read_capped,
)
from ..data import data_dir as resolve_data_dir
from .base import Task, classification_info, register_task
from .synthetic import NoisePadded

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
ARCHIVE = "cifar-10-python.tar.gz"
ARCHIVE_MD5 = "c58f30108f718f92721af3b95e74349a"
FOLDER = "cifar-10-batches-py"
BATCH_MD5 = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
}
TRAIN_BATCHES = [f"data_batch_{i}" for i in range(1, 6)]
HOW_TO_GET = (
    f"Get {ARCHIVE} (CIFAR-10 python version) from {URL} and put it, or its extracted "
    f"{FOLDER}/ folder, in <data_dir>/cifar10/; or build the task with download=True."
)


def parse_batch(raw: bytes, source: str) -> Tuple[np.ndarray, np.ndarray]:
    """One pickled batch -> ``images (n, 32, 32, 3) uint8`` (HWC) and ``labels (n,) int64``."""
    batch = load_data_pickle(raw, source)
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise DataFileError(f"{source}: expected a CIFAR-10 batch (a dict with b'data' and b'labels'). " + HOW_TO_GET)
    data, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"], dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise DataFileError(
            f"{source}: expected b'data' uint8 (n, 3072) and n labels, got data "
            f"{data.dtype} {data.shape} and {len(labels)} labels. " + HOW_TO_GET
        )
    if len(labels) and (labels.min() < 0 or labels.max() >= 10):
        raise DataFileError(
            f"{source}: expected labels 0..9 (the ten CIFAR-10 classes), got values in "
            f"[{labels.min()}, {labels.max()}]. " + HOW_TO_GET
        )
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels


def _read_batches(root: Path, verify: bool, allow_download: bool) -> Dict[str, bytes]:
    """Raw bytes of the six batch files, from the extracted folder or the archive."""
    places = [root / "cifar10", root]
    folder = next((p / FOLDER for p in places if (p / FOLDER).is_dir()), None)
    if folder is not None:
        raw = {}
        for name in TRAIN_BATCHES + ["test_batch"]:
            path = folder / name
            if not path.exists():
                raise missing("CIFAR-10", folder, [name], HOW_TO_GET)
            if verify and md5sum(path) != BATCH_MD5[name]:
                raise DataFileError(
                    f"{path}: md5 checksum mismatch: expected {BATCH_MD5[name]}, got {md5sum(path)}. " + HOW_TO_GET
                )
            with open(path, "rb") as stream:
                raw[name] = read_capped(stream, str(path))
        return raw
    archive = next((p for place in places if (p := find_first(place, [ARCHIVE])) is not None), None)
    if archive is None:
        archive = download(URL, root / "cifar10" / ARCHIVE, ARCHIVE_MD5 if verify else None, allow_download, HOW_TO_GET)
    elif verify and md5sum(archive) != ARCHIVE_MD5:
        raise DataFileError(
            f"{archive}: md5 checksum mismatch: expected {ARCHIVE_MD5}, got {md5sum(archive)}. " + HOW_TO_GET
        )
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
            absent = [n for n in TRAIN_BATCHES + ["test_batch"] if n not in members]
            if absent:
                raise DataFileError(f"{archive}: archive lacks {', '.join(absent)}. " + HOW_TO_GET)
            return {
                name: read_capped(tar.extractfile(members[name]), f"{archive}: {name}")
                for name in TRAIN_BATCHES + ["test_batch"]
            }
    except (tarfile.TarError, OSError, EOFError) as error:
        raise DataFileError(f"{archive}: not a readable tar.gz ({error}). " + HOW_TO_GET) from error


def load_cifar10(root: Path, verify: bool = True, allow_download: bool = False):
    """``(train_images, train_labels, test_images, test_labels)``; images HWC uint8."""
    raw = _read_batches(root, verify, allow_download)
    train = [parse_batch(raw[name], name) for name in TRAIN_BATCHES]
    test_images, test_labels = parse_batch(raw["test_batch"], "test_batch")
    return (np.concatenate([b[0] for b in train]), np.concatenate([b[1] for b in train]), test_images, test_labels)


@register_task("noisy_cifar10")
class NoisyCifar10(Task):
    """x ``(T, 96)``: 32 normalised image rows then N(0, 1) noise rows; y ``()`` in 0..9."""

    def __init__(
        self,
        T: int = 1000,
        seed: int = 0,
        n_val: int = 5000,
        normalize: str = "dataset",
        data_dir: Optional[str] = None,
        verify: bool = True,
        download: bool = False,
    ):
        if T < 32:
            raise ValueError(f"T: expected at least the 32 image rows, got {T}")
        check_normalize(normalize)
        self.T, self.seed = int(T), int(seed)
        train_x, train_y, test_x, test_y = load_cifar10(resolve_data_dir(data_dir), verify, download)
        if not 0 <= n_val < len(train_x):
            raise ValueError(f"n_val: expected 0 <= n_val < {len(train_x)}, got {n_val}")
        cut = len(train_x) - n_val
        self.splits = {
            "train": (train_x[:cut], train_y[:cut]),
            "val": (train_x[cut:], train_y[cut:]),
            "test": (test_x, test_y),
        }
        pixels = self.splits["train"][0].reshape(-1, 3).astype(np.float64) / 255
        self.mean, self.std = feature_statistics(pixels, normalize)
        self.info = classification_info(
            "noisy_cifar10", 96, 10, self.splits["train"][1], self.T, {"normalize": normalize, "n_val": n_val}
        )

    def rows(self, image: np.ndarray, index: int) -> torch.Tensor:
        x = (image.astype(np.float32) / 255 - self.mean.astype(np.float32)) / self.std.astype(np.float32)
        return torch.from_numpy(np.ascontiguousarray(x.reshape(32, 96)))

    def build_split(self, split: str) -> Dataset:
        images, labels = self.splits[split]
        return NoisePadded(ArrayDataset(images, labels, self.rows), self.T, self.seed, split)
