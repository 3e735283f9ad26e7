"""Small files in the real formats of the data-set tasks, written by the task tests (tests/tasks) and by
the trainer's smoke test (tests/test_train.py) so that no test needs the real data sets."""

import csv
import gzip
import pickle
import struct
import wave

import numpy as np

from ltdrnn.tasks.har import SIGNALS


# ---- CIFAR-10 ------------------------------------------------------------------------------------
def write_batches(folder, per_batch=6, seed=0):
    """The six CIFAR-10 python pickle batches in ``folder``; returns them by name."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {
            b"batch_label": name.encode(),
            b"labels": [int(v) for v in rng.integers(0, 10, per_batch)],
            b"data": rng.integers(0, 256, (per_batch, 3072)).astype(np.uint8),
            b"filenames": [b"x.png"] * per_batch,
        }
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
        batches[name] = batch
    return batches


# ---- UCI HAR -------------------------------------------------------------------------------------
def write_har(root, n_train=24, n_test=6, seed=0):
    """UCI HAR inertial signals, labels and subjects under ``root/UCI HAR Dataset``; returns the arrays."""
    rng = np.random.default_rng(seed)
    base = root / "UCI HAR Dataset"
    data = {}
    for part, n in (("train", n_train), ("test", n_test)):
        folder = base / part / "Inertial Signals"
        folder.mkdir(parents=True)
        signals = rng.normal(size=(9, n, 128)).round(6)
        for name, values in zip(SIGNALS, signals):
            (folder / f"{name}_{part}.txt").write_text(
                "\n".join("  " + " ".join(f"{v:.7e}" for v in row) for row in values) + "\n"
            )
        activity = np.arange(n) % 6 + 1
        subject = np.arange(n) % 6 + (1 if part == "train" else 7)
        (base / part / f"y_{part}.txt").write_text("\n".join(map(str, activity)) + "\n")
        (base / part / f"subject_{part}.txt").write_text("\n".join(map(str, subject)) + "\n")
        data[part] = (signals.transpose(1, 2, 0), activity, subject)
    return data


# ---- Speech Commands -----------------------------------------------------------------------------
RATE = 16000


def write_wav(path, samples, rate=RATE, channels=1, width=2):
    """A PCM wav of ``samples`` in [-1, 1]."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(channels)
        handle.setsampwidth(width)
        handle.setframerate(rate)
        handle.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())


def tone(hz, seconds=1.0, amplitude=0.5):
    """A sine of ``hz`` at the corpus rate."""
    t = np.arange(int(RATE * seconds)) / RATE
    return amplitude * np.sin(2 * np.pi * hz * t)


def write_corpus(root, words, per_word=3, noise=True):
    """A Speech Commands folder: ``per_word`` tones per word, the official split lists, background noise."""
    val, test = [], []
    for w, word in enumerate(words):
        for k in range(per_word):
            name = f"{word}/{k:04d}_nohash_0.wav"
            write_wav(root / name, tone(200 + 50 * w, seconds=0.6 + 0.2 * k))
            (val if k == 1 else test if k == 2 else []).append(name)
    (root / "validation_list.txt").write_text("\n".join(val) + "\n")
    (root / "testing_list.txt").write_text("\n".join(test) + "\n")
    if noise:
        write_wav(root / "_background_noise_" / "white.wav", np.random.default_rng(0).uniform(-0.3, 0.3, 3 * RATE))


# ---- Penn Treebank -------------------------------------------------------------------------------
def write_ptb(folder):
    """The three PTB text files, with a 7-word vocabulary."""
    folder.mkdir(parents=True, exist_ok=True)
    train = " the cat sat on the mat \n the dog sat <unk> \n"
    (folder / "ptb.train.txt").write_text(train * 5)
    (folder / "ptb.valid.txt").write_text(" the dog sat on the mat \n")
    (folder / "ptb.test.txt").write_text(" the cat sat \n a b c \n")


# ---- Epileptic seizure ---------------------------------------------------------------------------
def write_seizure(path, n_per_class=(12, 9, 9, 9, 9), seed=0):
    """The Epileptic Seizure Recognition csv with ``n_per_class`` rows per class; returns the rows."""
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for cls, n in enumerate(n_per_class, 1):
        for k in range(n):
            rows.append([f"X{k}.V1.{cls}"] + rng.integers(-500, 500, 178).tolist() + [cls])
    rng.shuffle(rows)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([""] + [f"X{i}" for i in range(1, 179)] + ["y"])
        writer.writerows(rows)
    return rows


# ---- MNIST ---------------------------------------------------------------------------------------
def idx_bytes(array: np.ndarray) -> bytes:
    """``array`` as an unsigned-byte IDX file."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_mnist(folder, n_train=40, n_test=10, gz=True, seed=0):
    """The four MNIST IDX files in ``folder`` (gzipped or raw); returns the arrays."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28)),
        "train-labels-idx1-ubyte": np.arange(n_train) % 10,
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28)),
        "t10k-labels-idx1-ubyte": (np.arange(n_test) * 3) % 10,
    }
    for stem, array in arrays.items():
        raw = idx_bytes(array)
        if gz:
            (folder / (stem + ".gz")).write_bytes(gzip.compress(raw))
        else:
            (folder / stem).write_bytes(raw)
    return {k: v.astype(np.uint8) for k, v in arrays.items()}


# ---- UCR/UEA -------------------------------------------------------------------------------------
TS_HEADER = """# a comment line
@problemName {name}
@timeStamps false
@missing {missing}
@univariate {uni}
@dimensions {dims}
@equalLength {equal}
@classLabel true a b c
@data
"""


def write_ts(path, rows, dims=1, equal=True, missing=False, name="Toy"):
    """A .ts file of ``rows`` = [(per-dimension values, label)] with classes a, b, c."""
    text = TS_HEADER.format(
        name=name, missing=str(missing).lower(), uni=str(dims == 1).lower(), dims=dims, equal=str(equal).lower()
    )
    lines = [":".join(",".join(str(v) for v in dim) for dim in series) + f":{label}" for series, label in rows]
    path.write_text(text + "\n".join(lines) + "\n")


def toy_rows(n, dims, rng, lengths=None):
    """``n`` rows of ``dims`` normal series cycling through labels a, b, c."""
    labels = ["a", "b", "c"]
    out = []
    for i in range(n):
        length = lengths[i % len(lengths)] if lengths else 6
        out.append(([rng.normal(size=length).round(4).tolist() for _ in range(dims)], labels[i % 3]))
    return out


def write_ts_set(root, train_rows, test_rows, name="Toy", **layout):
    """A UCR/UEA set as ``root/ucr_uea/<name>/<name>_TRAIN.ts`` and ``<name>_TEST.ts``."""
    folder = root / "ucr_uea" / name
    folder.mkdir(parents=True)
    write_ts(folder / f"{name}_TRAIN.ts", train_rows, name=name, **layout)
    write_ts(folder / f"{name}_TEST.ts", test_rows, name=name, **layout)
