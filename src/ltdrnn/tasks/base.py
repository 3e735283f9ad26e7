"""The contract every task fulfils, and the table of task names.

A task is a benchmark: its datasets (train / validation / test) and the metadata a model and a
trainer need (input size, outputs, loss, whether targets are per step or terminal, and the trivial
baseline a model must beat). Items are ``(x, y)``:

    x: float ``(T, d)``, or int64 ``(T,)`` token ids when ``info.input_kind == "tokens"``;
    y: int64 class ``()`` or per-step classes ``(T,)``; float ``(o,)`` or ``(T, o)`` for regression.

Sequences of one task may differ in length; ``collate`` pads them and returns their lengths.
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from ..data import majority_accuracy

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class TaskInfo:
    """What a model and a trainer need to know about a task.

    Attributes:
        name: registry name, e.g. ``"adding"``.
        input_size: d (for token input: the vocabulary size).
        output_size: number of classes, or of regression outputs.
        loss: ``"cross_entropy"`` or ``"mse"``.
        target: ``"terminal"`` (one target per sequence, read at its last true step) or ``"per_step"``.
        metric: the headline metric: ``"accuracy"``, ``"mse"``, ``"cross_entropy"`` or ``"perplexity"``.
        higher_is_better: direction of ``metric``.
        baseline: the metric value of the trivial predictor (adding: 0.167; copy: 10 ln 8 / (T+20)).
        baseline_note: how ``baseline`` is obtained.
        seq_len: T when every sequence has the same length, else None.
        input_kind: ``"float"`` or ``"tokens"``.
        ignore_index: per-step target value that the loss ignores (padding), if any.
        recall_steps: the last steps whose targets must be recalled from far back (copy tasks: the copied
            symbols); evaluation then also reports ``recall_accuracy``, the accuracy on those steps alone.
    """

    name: str
    input_size: int
    output_size: int
    loss: str
    target: str
    metric: str
    higher_is_better: bool
    baseline: float
    baseline_note: str
    seq_len: Optional[int] = None
    input_kind: str = "float"
    ignore_index: Optional[int] = None
    recall_steps: int = 0
    extra: Dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


def classification_info(
    name: str,
    input_size: int,
    output_size: int,
    train_labels,
    seq_len: Optional[int],
    extra: Dict[str, Any],
    baseline_note: str = "majority class of the training split",
) -> TaskInfo:
    """The info of a task that gives each sequence one of ``output_size`` classes, scored by accuracy;
    its trivial baseline always predicts the most frequent class of ``train_labels``."""
    return TaskInfo(
        name=name,
        input_size=input_size,
        output_size=output_size,
        loss="cross_entropy",
        target="terminal",
        metric="accuracy",
        higher_is_better=True,
        baseline=majority_accuracy(train_labels),
        baseline_note=baseline_note,
        seq_len=seq_len,
        extra=extra,
    )


class Batch(NamedTuple):
    """A padded batch, batch-first: ``x (B, T, d)`` or ``(B, T)``; ``y``; ``lengths (B,)`` or None."""

    x: Tensor
    y: Tensor
    lengths: Optional[Tensor]


class Task:
    """Base class: subclasses set ``info`` and implement ``build_split``."""

    info: TaskInfo

    def build_split(self, split: str) -> Dataset:
        """The dataset of ``split`` (one of ``SPLITS``)."""
        raise NotImplementedError

    def dataset(self, split: str) -> Dataset:
        if split not in SPLITS:
            raise ValueError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
        cache = self.__dict__.setdefault("_splits", {})
        if split not in cache:
            cache[split] = self.build_split(split)
        return cache[split]

    def set_epoch(self, epoch: int) -> None:
        """Called by the trainer before each training epoch; tasks that redraw data override it."""

    def collate(self, items: List[tuple]) -> Batch:
        """Stack equal-length items; pad unequal ones with zeros and return their lengths."""
        xs, ys = zip(*items)
        lengths = torch.tensor([len(x) for x in xs], dtype=torch.long)
        if bool((lengths == lengths[0]).all()):
            return Batch(torch.stack(xs), torch.stack(ys), None)
        x = torch.nn.utils.rnn.pad_sequence(list(xs), batch_first=True)
        if self.info.target == "per_step":
            pad = self.info.ignore_index if self.info.ignore_index is not None else 0
            y = torch.nn.utils.rnn.pad_sequence(list(ys), batch_first=True, padding_value=pad)
        else:
            y = torch.stack(ys)
        return Batch(x, y, lengths)

    def loader(
        self, split: str, batch_size: int, shuffle: bool | None = None, seed: int = 0, **kwargs: Any
    ) -> DataLoader:
        """A DataLoader over ``split`` (shuffled for train unless told otherwise, seeded)."""
        shuffle = (split == "train") if shuffle is None else shuffle
        generator = torch.Generator().manual_seed(seed)
        return DataLoader(
            self.dataset(split),
            batch_size=batch_size,
            shuffle=shuffle,
            collate_fn=self.collate,
            generator=generator,
            **kwargs,
        )


_TASKS: Dict[str, Callable[..., Task]] = {}


def register_task(name: str):
    """Decorator adding a Task class (or factory) under ``name``."""

    def add(factory):
        if name in _TASKS:
            raise ValueError(f"task name {name!r} is registered twice")
        _TASKS[name] = factory
        return factory

    return add


def build_task(name: str, **options: Any) -> Task:
    """Construct the task called ``name`` with its options (e.g. ``build_task("adding", T=750)``)."""
    _load_all()
    if name not in _TASKS:
        raise ValueError(f"task: unknown name {name!r}; expected one of {', '.join(sorted(_TASKS))}")
    return _TASKS[name](**options)


def option_defaults(name: str) -> Dict[str, Any]:
    """The options task ``name`` takes when a config leaves them out (its constructor's keyword defaults;
    {} for an unknown name): what the config's caps on work count (``limits.check_work``)."""
    _load_all()
    if name not in _TASKS:
        return {}
    parameters = inspect.signature(_TASKS[name]).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def list_tasks() -> List[str]:
    _load_all()
    return sorted(_TASKS)


def _load_all() -> None:
    import pkgutil
    from importlib import import_module

    package = import_module(__package__)
    for module in pkgutil.iter_modules(package.__path__):
        if module.name != "base":
            import_module(f"{__package__}.{module.name}")
