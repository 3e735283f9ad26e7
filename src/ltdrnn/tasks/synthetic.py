"""Generated tasks: adding, copy (Arjovsky and MIST variants), the TARNN toy, and noise padding.

Every item is a pure function of ``(seed, split, index)`` (see ``ltdrnn.data.item_rng``): nothing
is materialised, any index can be read in any order, and the three splits never share a stream.
"""

from __future__ import annotations

import math
from typing import Tuple

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from ..data import GeneratedDataset, item_rng
from .base import Task, TaskInfo, register_task


def _check_int(name: str, value: int, minimum: int = 1) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


class _GeneratedTask(Task):
    """Shared by generated tasks: split sizes, the seed, and ``make(rng) -> (x, y)``.

    ``fresh_train=True`` draws new training items every epoch ("generated on the fly", as SRNN):
    call ``task.set_epoch(epoch)`` before iterating; validation and test never change.
    """

    def __init__(self, n_train: int, n_val: int, n_test: int, seed: int, fresh_train: bool = False):
        self.sizes = {
            "train": _check_int("n_train", n_train, 0),
            "val": _check_int("n_val", n_val, 0),
            "test": _check_int("n_test", n_test, 0),
        }
        self.seed, self.fresh_train = int(seed), bool(fresh_train)

    def make(self, rng: np.random.Generator) -> Tuple[Tensor, Tensor]:
        raise NotImplementedError

    def build_split(self, split: str) -> Dataset:
        return GeneratedDataset(self.sizes[split], self.make, self.seed, split)

    def set_epoch(self, epoch: int) -> None:
        """With ``fresh_train``, make the training split the items of ``epoch``; else do nothing."""
        if self.fresh_train:
            self.dataset("train").epoch = int(epoch)


@register_task("adding")
class AddingTask(_GeneratedTask):
    """Adding problem (Hochreiter & Schmidhuber 1997, as in Arjovsky et al. 2016).

    x: ``(T, 2)``: column 0 values ~ U(0, 1); column 1 a marker, 1 at exactly two steps: one uniform in
    ``[0, T//2)``, one uniform in ``[T//2, T)``. y: ``(1,)`` the sum of the two marked values; MSE at
    the last step. Predicting 1 always scores Var(U1 + U2) = 1/6 ~ 0.167.
    """

    def __init__(
        self,
        T: int = 100,
        n_train: int = 100_000,
        n_val: int = 1_000,
        n_test: int = 10_000,
        seed: int = 0,
        fresh_train: bool = False,
    ):
        super().__init__(n_train, n_val, n_test, seed, fresh_train)
        self.T = _check_int("T", T, 2)
        self.info = TaskInfo(
            name="adding",
            input_size=2,
            output_size=1,
            loss="mse",
            target="terminal",
            metric="mse",
            higher_is_better=False,
            baseline=1.0 / 6.0,
            baseline_note="predict 1 for every sequence: MSE = Var(U1 + U2) = 1/6",
            seq_len=self.T,
            extra={"T": self.T},
        )

    def make(self, rng: np.random.Generator) -> Tuple[Tensor, Tensor]:
        T, half = self.T, self.T // 2
        values = rng.random(T, dtype=np.float32)
        first, second = rng.integers(0, half), rng.integers(half, T)
        x = np.zeros((T, 2), dtype=np.float32)
        x[:, 0] = values
        x[[first, second], 1] = 1.0
        y = np.array([values[first] + values[second]], dtype=np.float32)
        return torch.from_numpy(x), torch.from_numpy(y)


class _CopyBase(_GeneratedTask):
    """Copy tasks as token sequences; ``one_hot`` turns inputs into float one-hot vectors."""

    vocab: int
    length: int
    DATA: int
    BLANK: int

    def __init__(self, one_hot: bool, n_train: int, n_val: int, n_test: int, seed: int, fresh_train: bool):
        super().__init__(n_train, n_val, n_test, seed, fresh_train)
        self.one_hot = bool(one_hot)

    def copy_info(
        self, name: str, output_size: int, baseline: float, baseline_note: str, copied: int, extra: dict
    ) -> TaskInfo:
        """A copy task's info: a class per step, scored by cross-entropy over all ``length`` steps, the last
        ``copied`` of them the recall steps; the input is ``vocab`` one-hot floats or token ids."""
        return TaskInfo(
            name=name,
            input_size=self.vocab,
            output_size=output_size,
            loss="cross_entropy",
            target="per_step",
            metric="cross_entropy",
            higher_is_better=False,
            baseline=baseline,
            baseline_note=baseline_note,
            seq_len=self.length,
            input_kind="float" if self.one_hot else "tokens",
            recall_steps=copied,
            extra=extra,
        )

    def tokens(self, rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def copy_tokens(
        self, rng: np.random.Generator, copied: int, marker: int, marker_at: int
    ) -> Tuple[np.ndarray, np.ndarray]:
        """Inputs: ``copied`` uniform data symbols, blanks, ``marker`` at index ``marker_at``, blanks.
        Targets: blanks, then the same symbols as the last ``copied`` steps."""
        symbols = rng.integers(0, self.DATA, size=copied)
        inputs = np.full(self.length, self.BLANK, dtype=np.int64)
        inputs[:copied] = symbols
        inputs[marker_at] = marker
        targets = np.full(self.length, self.BLANK, dtype=np.int64)
        targets[-copied:] = symbols
        return inputs, targets

    def make(self, rng: np.random.Generator) -> Tuple[Tensor, Tensor]:
        inputs, targets = self.tokens(rng)
        x = torch.from_numpy(inputs)
        if self.one_hot:
            x = torch.nn.functional.one_hot(x, self.vocab).float()
        return x, torch.from_numpy(targets)


@register_task("copy")
class CopyTask(_CopyBase):
    """Copy memory (Arjovsky et al. 2016; used by TARNN, iRNN, SRNN).

    Categories 0..9: data symbols 0..7, blank 8, delimiter 9. Input, length ``T + 20``: 10 data symbols
    (uniform, with replacement), ``T - 1`` blanks, the delimiter, 10 blanks. Target: ``T + 10`` blanks,
    then the 10 data symbols. Loss: cross-entropy averaged over all ``T + 20`` steps. The memoryless
    strategy (blank, then uniform over 8) scores ``10 ln 8 / (T + 20)``.

    x: ``(T + 20, 10)`` one-hot floats (or ``(T + 20,)`` int64 tokens with ``one_hot=False``);
    y: ``(T + 20,)`` int64 in 0..8 (the delimiter is never a target, so output_size is 9).
    """

    DATA, BLANK, DELIMITER, COPIED = 8, 8, 9, 10

    def __init__(
        self,
        T: int = 100,
        one_hot: bool = True,
        n_train: int = 100_000,
        n_val: int = 1_000,
        n_test: int = 10_000,
        seed: int = 0,
        fresh_train: bool = False,
    ):
        super().__init__(one_hot, n_train, n_val, n_test, seed, fresh_train)
        self.T = _check_int("T", T, 1)
        self.vocab, self.length = 10, self.T + 2 * self.COPIED
        self.info = self.copy_info(
            name="copy",
            output_size=self.DATA + 1,
            baseline=self.COPIED * math.log(self.DATA) / self.length,
            baseline_note="memoryless: predict blank for T+10 steps, then uniform over the 8 data "
            "symbols: 10 ln 8 / (T + 20)",
            copied=self.COPIED,
            extra={"T": self.T, "blank": self.BLANK, "delimiter": self.DELIMITER, "data_symbols": self.DATA},
        )

    def tokens(self, rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray]:
        return self.copy_tokens(rng, self.COPIED, self.DELIMITER, marker_at=self.T + self.COPIED - 1)


@register_task("copy_mist")
class MistCopyTask(_CopyBase):
    """The copy problem as set up in the MIST RNN paper (DiPietro et al. 2018, sec. 5.2 and 8.3).

    Categories: data 0..9, blank 10, go 11. With delay D (a multiple of 10) and L = D / 10 symbols
    (``num_symbols`` overrides L): input = L data symbols (uniform with replacement), D - 1 blanks, go,
    L blanks (length D + 2L); target = L + D blanks, then the L symbols. Always predicting blank has
    error rate L / (D + 2L) = 1/12 for every D; the memoryless cross-entropy is L ln 10 / (D + 2L).
    The paper generates 100,000 training and 1,000 validation examples.

    x: ``(D + 2L, 12)`` one-hot (or int64 tokens); y: ``(D + 2L,)`` int64 in 0..10 (output_size 11).
    """

    DATA, BLANK, GO = 10, 10, 11

    def __init__(
        self,
        delay: int = 100,
        num_symbols: int | None = None,
        one_hot: bool = True,
        n_train: int = 100_000,
        n_val: int = 1_000,
        n_test: int = 1_000,
        seed: int = 0,
        fresh_train: bool = False,
    ):
        super().__init__(one_hot, n_train, n_val, n_test, seed, fresh_train)
        self.delay = _check_int("delay", delay, 1)
        if num_symbols is None:
            if self.delay % 10:
                raise ValueError(
                    f"delay: expected a multiple of 10 when num_symbols is not given (L = D / 10), got {delay}"
                )
            num_symbols = self.delay // 10
        self.L = _check_int("num_symbols", num_symbols, 1)
        self.vocab, self.length = 12, self.delay + 2 * self.L
        self.info = self.copy_info(
            name="copy_mist",
            output_size=self.vocab - 1,
            baseline=self.L * math.log(self.DATA) / self.length,
            baseline_note="memoryless: blank for L + D steps, then uniform over 10 symbols: "
            "L ln 10 / (D + 2L); always-blank error rate L / (D + 2L)",
            copied=self.L,
            extra={
                "delay": self.delay,
                "L": self.L,
                "blank": self.BLANK,
                "go": self.GO,
                "blank_error_rate": self.L / self.length,
            },
        )

    def tokens(self, rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray]:
        return self.copy_tokens(rng, self.L, self.GO, marker_at=self.L + self.delay - 1)


@register_task("tarnn_toy")
class TarnnToyTask(_GeneratedTask):
    """TARNN's toy example (Kag & Saligrama, sec. 3): length 16, 4 classes, one feature.

    Two steps (``positions``, default 4 and 12, 0-based as on the paper's time axis 0..15) carry bits
    b0, b1 in {0, 1}; every other step is U(0, 1). Class = 2 b0 + b1. 50K training sequences. The
    classes are equiprobable, so a constant prediction scores 0.25 (the paper's "random guess").

    x: ``(16, 1)`` float; y: ``()`` int64 in 0..3.
    """

    def __init__(
        self,
        T: int = 16,
        positions: Tuple[int, int] = (4, 12),
        n_train: int = 50_000,
        n_val: int = 5_000,
        n_test: int = 10_000,
        seed: int = 0,
        fresh_train: bool = False,
    ):
        super().__init__(n_train, n_val, n_test, seed, fresh_train)
        self.T = _check_int("T", T, 2)
        positions = tuple(int(p) for p in positions)
        if len(positions) != 2 or positions[0] == positions[1] or not all(0 <= p < self.T for p in positions):
            raise ValueError(f"positions: expected two distinct steps in [0, {self.T}), got {positions}")
        self.positions = positions
        self.info = TaskInfo(
            name="tarnn_toy",
            input_size=1,
            output_size=4,
            loss="cross_entropy",
            target="terminal",
            metric="accuracy",
            higher_is_better=True,
            baseline=0.25,
            baseline_note="constant class; the 4 classes are equiprobable",
            seq_len=self.T,
            extra={"positions": list(positions)},
        )

    def make(self, rng: np.random.Generator) -> Tuple[Tensor, Tensor]:
        x = rng.random(self.T, dtype=np.float32)
        bits = rng.integers(0, 2, size=2)
        x[list(self.positions)] = bits
        label = 2 * int(bits[0]) + int(bits[1])
        return torch.from_numpy(x).unsqueeze(-1), torch.tensor(label, dtype=torch.long)


class NoisePadded(Dataset):
    """Appends i.i.d. N(0, 1) rows to each item of ``base`` until it is ``T`` steps long.

    The noise of item ``i`` depends only on ``(seed, split, i)``, so a split is the same every epoch
    and every run (as a fixed dataset would be). x: ``(t0, d) -> (T, d)``; y unchanged.
    """

    def __init__(self, base: Dataset, T: int, seed: int, split: str):
        self.base, self.T, self.seed, self.split = base, _check_int("T", T, 1), int(seed), split

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int):
        x, y = self.base[index]
        if x.shape[0] > self.T:
            raise ValueError(f"T: expected at least the item's length {x.shape[0]}, got {self.T}")
        rng = item_rng(self.seed, self.split, int(index), stream=1)
        noise = rng.standard_normal((self.T - x.shape[0], x.shape[1]), dtype=np.float32)
        return torch.cat([x, torch.from_numpy(noise).to(x.dtype)]), y
