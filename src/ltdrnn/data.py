"""Where datasets live, how their files are checked, and small dataset building blocks.

Data directory, in order of precedence: the ``data_dir`` argument of a task, the environment
variable ``LTDRNN_DATA``, then ``~/.cache/ltdrnn``. Every reader verifies what it reads (checksum for
files whose official digest is known, header and size for the rest) and raises ``DataFileError``
naming the file, what was expected and how to obtain the right one. Downloads happen only when a task
is built with ``download=True`` and the network answers; otherwise ``DataNotFoundError`` says which
files to place where.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import pickle
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.data import Dataset

log = logging.getLogger("ltdrnn.data")

PathLike = Union[str, os.PathLike]
ENV_VAR = "LTDRNN_DATA"
DEFAULT_DIR = Path("~/.cache/ltdrnn")
SPLIT_CODES = {"train": 0, "val": 1, "test": 2}


class DataNotFoundError(FileNotFoundError):
    """A dataset file is missing and was not (or could not be) downloaded."""


class DataFileError(ValueError):
    """A dataset file exists but has the wrong checksum, format or size."""


#: Most bytes a reader takes from one file or archive member. The largest real one, a CIFAR-10 batch,
#: is 31 MB; the cap keeps a small crafted archive (a zip bomb) from filling the memory.
MAX_MEMBER_BYTES = 256 << 20


def integer_labels(values, name: str) -> np.ndarray:
    """``values`` as int64 class labels, or a DataFileError naming ``name`` if one is not a whole number
    (a label 2.9 is a damaged file, not class 2)."""
    values = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(values) | (values != np.round(values))
    if bad.any():
        raise DataFileError(f"{name}: expected whole-number class labels, got {float(values[bad][0])!r}")
    return values.astype(np.int64)


def read_capped(stream, name: str, limit: int = MAX_MEMBER_BYTES) -> bytes:
    """All bytes of the open binary ``stream`` (a file, a zip or tar member, a gzip stream), or a
    DataFileError naming ``name`` if there are more than ``limit``; never reads more than ``limit + 1``."""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise DataFileError(
            f"{name}: larger than {limit} bytes (uncompressed), far beyond the real dataset's files; not read"
        )
    return data


def data_dir(path: Optional[PathLike] = None) -> Path:
    """The data root: ``path`` if given, else ``$LTDRNN_DATA``, else ``~/.cache/ltdrnn``."""
    if path is not None:
        return Path(path).expanduser()
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    return DEFAULT_DIR.expanduser()


def md5sum(path: PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_md5(path: PathLike, expected: Optional[str], how_to_get: str) -> None:
    """Raise ``DataFileError`` unless ``path`` has md5 ``expected`` (None skips the check)."""
    if expected is None:
        return
    got = md5sum(path)
    if got != expected:
        raise DataFileError(
            f"{path}: md5 checksum mismatch: expected {expected}, got {got} (truncated or a different "
            f"file). {how_to_get}"
        )


def find_first(directory: Path, names: Sequence[str]) -> Optional[Path]:
    """The first of ``names`` that exists under ``directory``, or None."""
    for name in names:
        candidate = directory / name
        if candidate.exists():
            return candidate
    return None


def missing(what: str, directory: Path, names: Iterable[str], how_to_get: str) -> DataNotFoundError:
    listed = ", ".join(names)
    return DataNotFoundError(
        f"{what}: none of [{listed}] found in {directory}. {how_to_get} (data directory: the task's "
        f"data_dir argument, else ${ENV_VAR}, else {DEFAULT_DIR})."
    )


def download(url: str, dest: Path, md5: Optional[str], allow: bool, how_to_get: str, timeout: float = 30.0) -> Path:
    """Fetch ``url`` to ``dest`` atomically and verify its md5; refuse unless ``allow``.

    Raises ``DataNotFoundError`` when downloading is not allowed or the network fails, and
    ``DataFileError`` when the downloaded file has the wrong checksum (it is then deleted).
    """
    if not allow:
        raise DataNotFoundError(
            f"{dest} is missing and downloading is off (pass download=True to allow it, or place the "
            f"file there yourself). {how_to_get}"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    log.info("downloading %s -> %s", url, dest)
    handle, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=dest.name, suffix=".part")
    try:
        with os.fdopen(handle, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            shutil.copyfileobj(response, out)
        verify_md5(tmp_name, md5, how_to_get)
        os.replace(tmp_name, dest)
    except (urllib.error.URLError, OSError) as error:
        raise DataNotFoundError(
            f"could not download {url} to {dest} ({error}); the network may be unavailable. {how_to_get}"
        ) from error
    finally:
        if os.path.exists(tmp_name):
            os.remove(tmp_name)
    return dest


class _ArraysOnlyUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays only (dataset pickles must not run code)."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("_codecs", "encode"),
        ("builtins", "bytearray"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a data pickle")


def load_data_pickle(raw: bytes, source: str):
    """Unpickle a dataset file (python-2 pickles decoded as bytes) without running arbitrary code."""
    try:
        return _ArraysOnlyUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as error:  # any unpickling failure means the file is not what we expect
        raise DataFileError(f"{source}: not a readable dataset pickle ({error})") from error


# ---------------------------------------------------------------------------------------------
# Splits, baselines and normalisation shared by the readers.


def stratified_split(labels: np.ndarray, fractions: Sequence[float], seed: int) -> List[np.ndarray]:
    """Split indices into parts with the given fractions, keeping class proportions; deterministic.

    Each class's indices are shuffled with ``seed`` and cut by cumulative fraction; the parts are
    returned sorted. Fractions must sum to 1.
    """
    if abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError(f"fractions: expected values summing to 1, got {list(fractions)}")
    rng = np.random.default_rng(seed)
    parts: List[List[int]] = [[] for _ in fractions]
    for cls in np.unique(labels):
        idx = np.flatnonzero(labels == cls)
        rng.shuffle(idx)
        cuts = np.round(np.cumsum(fractions)[:-1] * len(idx)).astype(int)
        for part, chunk in zip(parts, np.split(idx, cuts)):
            part.extend(chunk.tolist())
    return [np.sort(np.asarray(part, dtype=np.int64)) for part in parts]


def check_normalize(normalize: str) -> None:
    """The ``normalize`` option of the readers that standardise with training statistics or not at all."""
    if normalize not in ("dataset", "none"):
        raise ValueError(f"normalize: expected 'dataset' or 'none', got {normalize!r}")


def feature_statistics(rows: np.ndarray, normalize: str) -> Tuple[np.ndarray, np.ndarray]:
    """``(mean, std)`` per feature of the training ``rows (N, d)`` with ``normalize="dataset"``; zeros
    and ones (no change) with ``"none"``."""
    if normalize == "dataset":
        return rows.mean(0), rows.std(0)
    return np.zeros(rows.shape[1]), np.ones(rows.shape[1])


def majority_accuracy(labels: np.ndarray) -> float:
    """Accuracy of always predicting the most frequent class of ``labels``."""
    labels = np.asarray(labels)
    if labels.size == 0:
        return float("nan")
    return float(np.bincount(labels.astype(np.int64)).max() / labels.size)


def item_rng(seed: int, split: str, index: int, stream: int = 0, epoch: int = 0) -> np.random.Generator:
    """A generator determined by (seed, split, index, stream, epoch) alone: items never depend on order."""
    return np.random.default_rng([seed, SPLIT_CODES[split], index, stream, epoch])


# ---------------------------------------------------------------------------------------------
# Datasets


class GeneratedDataset(Dataset):
    """``n`` items, item ``i`` = ``make(item_rng(seed, split, i, epoch=epoch))``; nothing is stored.

    ``epoch`` stays 0 unless the owner changes it (fresh training data each epoch).
    """

    def __init__(
        self, n: int, make: Callable[[np.random.Generator], Tuple[torch.Tensor, torch.Tensor]], seed: int, split: str
    ):
        self.n, self.make, self.seed, self.split, self.epoch = int(n), make, int(seed), split, 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        if not 0 <= index < self.n:
            raise IndexError(f"index {index} out of range for {self.n} items")
        return self.make(item_rng(self.seed, self.split, int(index), epoch=self.epoch))


class ArrayDataset(Dataset):
    """Items ``(transform(x[i]), y[i])`` over stored arrays (raw dtype kept; transform per item)."""

    def __init__(
        self,
        x: np.ndarray,
        y: np.ndarray,
        transform: Callable[[np.ndarray, int], torch.Tensor],
        y_dtype: torch.dtype = torch.long,
    ):
        if len(x) != len(y):
            raise ValueError(f"x and y: expected the same length, got {len(x)} and {len(y)}")
        self.x, self.y, self.transform, self.y_dtype = x, y, transform, y_dtype

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int):
        return self.transform(self.x[index], int(index)), torch.as_tensor(self.y[index], dtype=self.y_dtype)
