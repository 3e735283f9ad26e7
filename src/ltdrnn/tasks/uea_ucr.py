"""UCR / UEA time-series classification archives, read from their ``.ts`` files.

``build_task("uea_ucr", dataset="GunPoint")`` (aliases ``"ucr"``, ``"uea"``). Files
``<Name>_TRAIN.ts`` and ``<Name>_TEST.ts`` are looked up in ``path`` if given, else in
``<data_dir>/ucr_uea/<Name>/``, ``<data_dir>/<Name>/``, and finally in the folder of sets that
ship inside the aeon package (``aeon/datasets/data/<Name>/``: e.g. GunPoint, ArrowHead,
ItalyPowerDemand, OSULeaf, BasicMotions, JapaneseVowels, ACSF1); nothing is downloaded.
The reader here is the one code path, aeon installed or not: it reads what aeon's ``load_from_ts_file``
reads on aeon's sets (a test compares them) without importing aeon, and names file and line in errors.

Splits: the official TEST file is the test split; the validation split is a stratified
``val_fraction`` (default 0.2) of the official TRAIN file, drawn with ``split_seed``; the rest trains.
Scaling, both optional: per-series z-normalisation (``znorm=True``: each dimension of each series to
zero mean, unit variance over its observed steps) erases each series' level and scale; per-channel
standardisation (``standardize=True``: each dimension to zero mean, unit variance over every observed
step of the training part, the same shift and scale for every split) keeps them. Missing values
(``?``, or ``NaN`` written out, whatever ``@missing`` says) become 0 after scaling. Every dimension of a
series has one length; TRAIN needs series of 2 classes or more, and a class of TEST needs TRAIN series.
Unequal-length sets yield items of their own length; ``collate`` pads and returns the lengths.

Your own series as arrays: ``arrays="my_series.npz"`` reads ``x_train``, ``y_train``, ``x_test``,
``y_test`` from an ``.npz`` file (``np.savez``; read without unpickling) instead of ``.ts`` files;
``x`` is ``(N, T)`` or ``(N, T, d)``, ``y`` holds the labels (numbers or strings, classes in sorted order).
``dataset`` then only names the set in the results.
"""

from __future__ import annotations

import importlib.util
import io
import math
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch
from torch.utils.data import Dataset

from ..data import MAX_MEMBER_BYTES, DataFileError, DataNotFoundError, read_capped, stratified_split
from ..data import data_dir as resolve_data_dir
from .base import Task, classification_info, register_task

HOW_TO_GET = (
    "UCR/UEA sets are at https://www.timeseriesclassification.com (download the .ts version) "
    "and go in <data_dir>/ucr_uea/<Name>/<Name>_TRAIN.ts and <Name>_TEST.ts."
)


@dataclass
class TsFile:
    """A parsed ``.ts`` file: ``series[i]`` is float32 ``(T_i, d)``; ``labels`` index ``class_names``."""

    series: List[np.ndarray]
    labels: np.ndarray
    class_names: List[str]
    header: Dict[str, str] = field(default_factory=dict)


def _parse_dimension(text: str, path: Path, line_no: int) -> np.ndarray:
    if "(" in text:
        raise DataFileError(
            f"{path}:{line_no}: time-stamped series '(t,v)' are not supported; expected comma-separated values"
        )
    try:
        with np.errstate(over="ignore"):  # beyond float32's range becomes inf, refused below
            values = np.array([np.nan if v.strip() == "?" else float(v) for v in text.split(",")], dtype=np.float32)
    except ValueError as error:
        raise DataFileError(f"{path}:{line_no}: expected comma-separated numbers, got {text[:40]!r}") from error
    if np.isinf(values).any():  # an infinity, or a number beyond float32's range; '?' marks missing values
        raise DataFileError(
            f"{path}:{line_no}: expected finite numbers (or '?' for a missing value), got {text[:40]!r}"
        )
    return values


def read_ts(path: Path, class_names: Optional[List[str]] = None) -> TsFile:
    """Parse a classification ``.ts`` file (univariate or multivariate, equal or unequal length).

    Header lines start with ``@`` (``@problemName``, ``@univariate``, ``@dimensions``,
    ``@equalLength``, ``@seriesLength``, ``@classLabel true <names>``, ``@data``); ``#`` lines are
    comments. After ``@data`` each line holds the dimensions separated by ``:`` and then the class.
    ``class_names`` fixes the label order (pass the TRAIN file's when reading TEST).
    """
    path = Path(path)
    try:  # UTF-8 whatever the locale (labels may be any text), a byte-order mark allowed
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as error:
        raise DataFileError(f"{path}: not a text .ts file ({error}). {HOW_TO_GET}") from error
    header: Dict[str, str] = {}
    series, raw_labels = [], []
    in_data = False
    for line_no, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not in_data:
            if not line.startswith("@"):
                raise DataFileError(
                    f"{path}:{line_no}: expected a '@' header line before @data, got {line[:40]!r}. {HOW_TO_GET}"
                )
            key, _, value = line[1:].partition(" ")
            header[key.lower()] = value.strip()
            in_data = key.lower() == "data"
            continue
        *dims, label = line.split(":")
        if not dims:
            raise DataFileError(f"{path}:{line_no}: expected '<values>[:<values>...]:<class>', got {line[:40]!r}")
        if not label.strip():
            raise DataFileError(f"{path}:{line_no}: the class label is missing (expected '<values>:<class>')")
        columns = [_parse_dimension(d, path, line_no) for d in dims]
        if len({len(c) for c in columns}) > 1:  # lengths differ between cases, never within one
            raise DataFileError(
                f"{path}:{line_no}: the dimensions of one series have different lengths "
                f"{[len(c) for c in columns]}; expected one length per series"
            )
        series.append(np.stack(columns, axis=1))
        raw_labels.append((label.strip(), line_no))
    if not in_data:
        raise DataFileError(f"{path}: no @data line; not a .ts file. {HOW_TO_GET}")
    class_spec = header.get("classlabel", "").split()
    if not class_spec or class_spec[0].lower() != "true":
        said = f"'@classLabel {header['classlabel']}'" if header.get("classlabel") else "no @classLabel line"
        raise DataFileError(
            f"{path}: the set has no class labels ({said}; a regression or unlabelled set); the UCR/UEA task "
            "reads classification sets, whose header says '@classLabel true <classes>'"
        )
    names = class_names if class_names is not None else class_spec[1:]
    unknown = [(label, line_no) for label, line_no in raw_labels if label not in names]
    if unknown:
        label, line_no = unknown[0]
        raise DataFileError(
            f"{path}:{line_no}: label {label!r} is not among the declared classes {names} "
            f"({len(unknown)} series with undeclared labels)"
        )
    dims = {s.shape[1] for s in series}
    if len(dims) > 1:
        raise DataFileError(f"{path}: series have different numbers of dimensions {sorted(dims)}")
    if "dimensions" in header and not header["dimensions"].isdigit():
        raise DataFileError(f"{path}: expected '@dimensions <positive integer>', got {header['dimensions'][:40]!r}")
    if "dimensions" in header and series and int(header["dimensions"]) != dims.pop():
        raise DataFileError(f"{path}: @dimensions says {header['dimensions']} but the data has {series[0].shape[1]}")
    if header.get("equallength", "").lower() == "true" and len({len(s) for s in series}) > 1:
        raise DataFileError(
            f"{path}: @equalLength true but the series lengths differ ({sorted({len(s) for s in series})[:5]})"
        )
    lookup = {name: i for i, name in enumerate(names)}
    return TsFile(series, np.array([lookup[v] for v, _ in raw_labels], dtype=np.int64), list(names), header)


def check_classes(train: TsFile, test: TsFile, name: str) -> None:
    """A DataFileError naming ``name`` unless TRAIN holds series of at least 2 classes and every class of
    TEST has training series (a class seen only in TEST cannot be learnt; its series would only count as
    errors)."""
    seen = sorted(set(train.labels.tolist()))
    if len(seen) < 2:
        raise DataFileError(
            f"{name}: TRAIN holds {len(train.series)} series of {len(seen)} class "
            f"{[train.class_names[i] for i in seen]}; a classifier needs series of at least 2 classes"
        )
    only_test = sorted(set(test.labels.tolist()) - set(seen))
    if only_test:
        counts = ", ".join(f"{test.class_names[i]!r} ({int((test.labels == i).sum())} series)" for i in only_test)
        raise DataFileError(f"{name}: classes only in TEST, with no TRAIN series to learn from: {counts}")


def aeon_data_dir() -> Optional[Path]:
    """The folder of datasets shipped in the aeon package, found without importing aeon."""
    spec = importlib.util.find_spec("aeon")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data"
    return folder if folder.is_dir() else None


def find_ts_pair(name: str, path: Optional[str] = None, data_dir: Optional[str] = None) -> Dict[str, Path]:
    """``{"train": ..., "test": ...}`` paths of the named set, searching the documented places."""
    root = resolve_data_dir(data_dir)
    places = [Path(path)] if path is not None else [root / "ucr_uea" / name, root / name]
    if path is None and (aeon := aeon_data_dir()) is not None:
        places.append(aeon / name)
    for place in places:
        train, test = place / f"{name}_TRAIN.ts", place / f"{name}_TEST.ts"
        if train.exists() and test.exists():
            return {"train": train, "test": test}
    raise DataNotFoundError(
        f"UCR/UEA set {name!r}: {name}_TRAIN.ts and {name}_TEST.ts not found in "
        f"{', '.join(str(p) for p in places)}. {HOW_TO_GET}"
    )


ARRAY_KEYS = ("x_train", "y_train", "x_test", "y_test")


def read_arrays(path: str) -> Dict[str, TsFile]:
    """``{"train": TsFile, "test": TsFile}`` from an ``.npz`` file holding :data:`ARRAY_KEYS`."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = [m for m in archive.namelist() if m.endswith(".npy")]
            data = {m[:-4]: _npy(archive, m, f"arrays {path}: {m}") for m in members}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        if isinstance(error, DataFileError):
            raise
        raise DataFileError(f"arrays {path}: not a readable .npz file without pickled objects ({error})") from error
    if any(k not in data for k in ARRAY_KEYS):
        raise DataFileError(f"arrays {path}: expected arrays {', '.join(ARRAY_KEYS)}, got {', '.join(data) or 'none'}")
    names = sorted(set(data["y_train"].tolist()))
    lookup = {name: i for i, name in enumerate(names)}
    unknown = sorted(set(data["y_test"].tolist()) - set(names), key=str)
    if unknown:
        raise DataFileError(f"arrays {path}: y_test labels {unknown[:5]} are not among the y_train classes")
    files = {}
    for split in ("train", "test"):
        x, y = data[f"x_{split}"], data[f"y_{split}"]
        if x.ndim not in (2, 3) or len(x) != len(y):
            raise DataFileError(
                f"arrays {path}: expected x_{split} of shape (N, T) or (N, T, d) with N = "
                f"len(y_{split}) = {len(y)}, got {x.shape}"
            )
        series = x.astype(np.float32).reshape(*x.shape[:2], -1)
        files[split] = TsFile(
            list(series), np.array([lookup[v] for v in y.tolist()], dtype=np.int64), [str(n) for n in names]
        )
    return files


def _npy(archive: zipfile.ZipFile, member: str, name: str) -> np.ndarray:
    """One ``.npy`` member, read through :func:`~ltdrnn.data.read_capped` (a 4 MB archive may claim
    gigabytes), its header's shape checked against the bytes there before numpy allocates it."""
    raw = read_capped(archive.open(member), name, MAX_MEMBER_BYTES)
    stream = io.BytesIO(raw)
    version = np.lib.format.read_magic(stream)
    read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    if version not in read_header:
        raise DataFileError(f"{name}: .npy format version {version} is not read (1.0 and 2.0 are)")
    shape, _, dtype = read_header[version](stream)
    if dtype.hasobject:
        raise DataFileError(f"{name}: holds Python objects; arrays are read without pickled objects")
    data_bytes = len(raw) - stream.tell()  # what follows the header
    if math.prod(shape) * dtype.itemsize > data_bytes:
        raise DataFileError(f"{name}: its header claims shape {shape}, more than its {data_bytes} bytes of data hold")
    return np.load(io.BytesIO(raw), allow_pickle=False)


def znormalise(series: np.ndarray) -> np.ndarray:
    """One series to zero mean, unit variance per channel, in float64 (float32 squares overflow from
    about 1e19, which made such a series all zeros)."""
    series = series.astype(np.float64)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-missing channel: NaN, checked by the caller
        mean = np.nanmean(series, axis=0, keepdims=True)
        std = spread(np.nanstd(series, axis=0, keepdims=True), np.nanmax(np.abs(series), axis=0, keepdims=True))
    return (series - mean) / std


def spread(std: np.ndarray, peak: np.ndarray) -> np.ndarray:
    """``std``, or 1 where a channel is constant: its spread is below 1e-8 of its largest magnitude ``peak``
    (float rounding, not signal). Relative, so that a set of values about 1e-30 is scaled like the same set
    at 1 (an absolute floor of 1e-8 left such sets as they were: all but zero)."""
    return np.where(std > 1e-8 * peak, std, 1.0)


def channel_statistics(series: List[np.ndarray], name: str = "series"):
    """``[(T_i, d)] -> (mean, std)``, each ``(d,)`` float64, over every observed step of every series; a
    constant channel (:func:`spread`) gets std 1 (it is shifted, not blown up). A DataFileError naming ``name`` when a
    channel's statistics are not finite (no observed value)."""
    steps = np.concatenate(series, axis=0).astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, std, peak = np.nanmean(steps, axis=0), np.nanstd(steps, axis=0), np.nanmax(np.abs(steps), axis=0)
    bad = ~(np.isfinite(mean) & np.isfinite(std))
    if bad.any():
        channel = int(np.flatnonzero(bad)[0])
        raise DataFileError(
            f"{name}: channel {channel}'s mean and std over the training part are not finite (mean {mean[channel]}, "
            f"std {std[channel]}: no observed value?); it cannot be standardised"
        )
    return mean, spread(std, peak)


def _as_float32(series: np.ndarray, name: str) -> np.ndarray:
    """Missing values (NaN) as 0, in float32; a DataFileError naming ``name`` if a value does not fit."""
    out = np.nan_to_num(series, nan=0.0).astype(np.float32)
    if not np.isfinite(out).all():
        raise DataFileError(f"{name}: a value beyond float32 after scaling ({float(series[~np.isfinite(out)][0])})")
    return out


class SeriesDataset(Dataset):
    def __init__(self, series: List[np.ndarray], labels: np.ndarray):
        self.series, self.labels = series, labels

    def __len__(self) -> int:
        return len(self.series)

    def __getitem__(self, index: int):
        return torch.from_numpy(self.series[index]), torch.tensor(int(self.labels[index]))


class UeaUcrTask(Task):
    """x ``(T_i, d)`` float; y ``()`` class index (classes in the file's ``@classLabel`` order)."""

    def __init__(
        self,
        dataset: str = "GunPoint",
        path: Optional[str] = None,
        data_dir: Optional[str] = None,
        val_fraction: float = 0.2,
        split_seed: int = 0,
        znorm: bool = False,
        standardize: bool = False,
        arrays: Optional[str] = None,
    ):
        if not 0 <= val_fraction < 1:
            raise ValueError(f"val_fraction: expected a value in [0, 1), got {val_fraction}")
        if arrays is not None:
            files = {"arrays": Path(arrays)}
            loaded = read_arrays(arrays)
            train, test = loaded["train"], loaded["test"]
        else:
            files = find_ts_pair(dataset, path, data_dir)
            train = read_ts(files["train"])
            test = read_ts(files["test"], class_names=train.class_names)
        label = repr(dataset) if arrays is None else f"arrays {arrays}"
        check_classes(train, test, f"dataset {label}")
        scaled = lambda s: znormalise(s) if znorm else s
        train_series = [scaled(s) for s in train.series]
        test_series = [scaled(s) for s in test.series]
        fit, val = stratified_split(train.labels, (1 - val_fraction, val_fraction), split_seed)
        mean = std = None
        if standardize:  # statistics of the training part only: validation and test stay unseen
            mean, std = channel_statistics([train_series[i] for i in fit], f"dataset {label}")
            train_series = [(s.astype(np.float64) - mean) / std for s in train_series]
            test_series = [(s.astype(np.float64) - mean) / std for s in test_series]
        train_series = [_as_float32(s, f"dataset {label}") for s in train_series]
        test_series = [_as_float32(s, f"dataset {label}") for s in test_series]
        self.splits = {
            "train": ([train_series[i] for i in fit], train.labels[fit]),
            "val": ([train_series[i] for i in val], train.labels[val]),
            "test": (test_series, test.labels),
        }
        lengths = {len(s) for s in train_series + test_series}
        self.info = classification_info(
            name="uea_ucr",
            input_size=train_series[0].shape[1],
            output_size=len(train.class_names),
            train_labels=self.splits["train"][1],
            seq_len=lengths.pop() if len(lengths) == 1 else None,
            extra={
                "dataset": dataset,
                "classes": train.class_names,
                "znorm": znorm,
                "standardize": standardize,
                # the per-channel statistics, so that a deployed model can apply them to a raw stream
                "channel_mean": None if mean is None else [float(v) for v in mean],
                "channel_std": None if std is None else [float(v) for v in std],
                "val_fraction": val_fraction,
                "files": {k: str(v) for k, v in files.items()},
            },
        )

    def build_split(self, split: str) -> Dataset:
        return SeriesDataset(*self.splits[split])


for _name in ("uea_ucr", "ucr", "uea"):
    register_task(_name)(UeaUcrTask)
