"""What the benchmark measures: input shapes, the named variants of registry cells that the speed
targets need, the targets themselves, and the subjects (a registry cell through ``Recurrent``, or
``nn.LSTM`` / ``nn.GRU``)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

LSTM, GRU = "nn.LSTM", "nn.GRU"
TORCH_SUBJECTS = (LSTM, GRU)


@dataclass(frozen=True)
class Shape:
    """A benchmark input: ``steps`` (T) time steps of ``input_size`` (d) features per sequence."""

    name: str
    steps: int
    input_size: int
    one_hot: bool = False

    def batch(self, batch_size: int, steps: int | None = None, seed: int | None = None) -> Tensor:
        """``(B, T, d)`` float input; one-hot symbols for the copy task. With ``seed``, drawn from a generator
        of its own, so that another process draws the same input whatever it drew before."""
        steps = self.steps if steps is None else steps
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        if self.one_hot:
            symbols = torch.randint(0, self.input_size, (batch_size, steps), generator=generator)
            return nn.functional.one_hot(symbols, self.input_size).float()
        return torch.randn(batch_size, steps, self.input_size, generator=generator)


SHAPES = {
    "pixel_mnist": Shape("pixel_mnist", 784, 1),
    "noisy_mnist": Shape("noisy_mnist", 1000, 28),
    "adding": Shape("adding", 750, 2),
    "copy": Shape("copy", 520, 10, one_hot=True),
}


@dataclass(frozen=True)
class Variant:
    """A named configuration of a registered cell that a speed target needs."""

    cell: str
    label: str
    options: Dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.cell}[{self.label}]"


VARIANTS = (
    Variant("srnn", "relu", {"activation": "relu"}),
    Variant("irnn", "K=1,lowrank", {"K": 1, "rank": 16}),
    Variant("tarnn", "K=1", {"K": 1}),
    Variant("tarnn", "K=5", {"K": 5}),
    Variant("sarnn", "gru", {"recurrence": "gru"}),
)


@dataclass(frozen=True)
class Target:
    """``record[key](subject) / record[baseline_key](baseline) <= limit`` in ``section`` (``>= limit`` when
    ``at_least``), at every measured shape; ``baseline_key`` defaults to ``key``."""

    label: str
    subject: str
    section: str
    baseline: str
    limit: float
    key: str = "median"
    baseline_key: Optional[str] = None
    at_least: bool = False

    def passes(self, measured: float) -> bool:
        return measured >= self.limit if self.at_least else measured <= self.limit


#: The CPU speed targets, as limits for an nn.LSTM at its best (a quiet AVX-512 host, where oneDNN's LSTM reaches
#: ~100 % of the sgemm peak), training at 2 threads with the same allocator tuning: the faster of its time in the
#: benchmark's process and its time alone in a fresh one (bench/alone.py).
TRAIN_TARGETS = (
    Target("SRNN (relu) training step", "srnn[relu]", "train", LSTM, 0.10),
    Target("iRNN K=1 low-rank training step", "irnn[K=1,lowrank]", "train", LSTM, 0.15),
    Target("MIST training step", "mist", "train", LSTM, 0.60),
    Target("TARNN K=1 training step", "tarnn[K=1]", "train", LSTM, 0.85),
    Target("TARNN K=5 training step", "tarnn[K=5]", "train", LSTM, 2.0),
    Target("SA-RNN (GRU) training step", "sarnn[gru]", "train", GRU, 0.6),
)

#: The cells whose training step is mostly matrix products: their GFLOP/s are held to nn.LSTM's.
GEMM_BOUND = ("mist", "tarnn[K=1]", "tarnn[K=5]", "sarnn[gru]")
RATE_TARGETS = tuple(
    Target(f"{name} training GFLOP/s", name, "flops", LSTM, 0.85, key="train_gflops", at_least=True)
    for name in GEMM_BOUND
)


def stream_targets(source_cells: Iterable[str]) -> Tuple[Target, ...]:
    """Every source-paper cell's streaming ``Recurrent.step`` at batch 1 takes no longer than nn.LSTMCell's
    step."""
    return tuple(
        Target(f"{name} streaming step, batch 1", name, "stream", LSTM, 1.0, "layer_median", "cell_median")
        for name in source_cells
    )


@dataclass
class Subject:
    """One thing to time: a registry cell with options (through Recurrent), or a torch.nn baseline.

    ``aliases`` are variant names whose options equal this subject's, so they share its numbers.
    """

    name: str
    cell: Optional[str]
    options: Dict[str, Any] = field(default_factory=dict)
    family: str = "torch"
    aliases: List[str] = field(default_factory=list)
    error: Optional[str] = None

    def layer(self, input_size: int, hidden_size: int) -> nn.Module:
        """A batch-first layer ``(B, T, d) -> ((B, T, H), state)``."""
        if self.cell is None:
            return getattr(nn, self.name.split(".")[1])(input_size, hidden_size, batch_first=True)
        from ..layers import Recurrent

        return Recurrent(self.cell, input_size, hidden_size, batch_first=True, **self.options)

    def describe(self, input_size: int, hidden_size: int) -> Dict[str, Any]:
        """Registry metadata, parameter count and the backend ``scan`` resolves to (:func:`ltdrnn.ops.resolve`)."""
        info: Dict[str, Any] = {
            "cell": self.cell,
            "options": self.options,
            "family": self.family,
            "aliases": self.aliases,
            "error": self.error,
        }
        if self.error is None:
            layer = self.layer(input_size, hidden_size)
            info["parameters"] = sum(p.numel() for p in layer.parameters())
            info["backend"] = layer.cells[0].resolved_backend() if self.cell else "torch"
        return info


def registry_subjects(cells: Sequence[str] | None, options: Dict[str, Dict[str, Any]]) -> List[Subject]:
    """Subjects for the chosen registry entries and the target variants, plus nn.LSTM and nn.GRU.

    ``cells`` holds registry names and variant names (None: every entry and every variant).
    ``options`` maps a cell or subject name to constructor options (``--option``); a variant's own
    options win over cell-wide ones. A variant whose options are the cell's defaults becomes an alias
    of the plain subject. A name that is neither a registry entry nor a variant raises ValueError; a
    variant whose cell is not registered, or an option its constructor does not take, is recorded in
    the subject's ``error`` instead, so one missing cell cannot stop the benchmark.
    """
    from ..cells.registry import entry, list_cells

    known = list_cells()
    variants = {v.name: v for v in VARIANTS}
    wanted = list(known) + list(variants) if cells is None else list(dict.fromkeys(cells))
    unknown = [n for n in wanted if n not in known and n not in variants]
    if unknown:
        raise ValueError(
            f"--cells: unknown name(s) {', '.join(unknown)}; expected registry names "
            f"({', '.join(known)}) or variants ({', '.join(variants)})"
        )
    subjects: Dict[str, Subject] = {}
    # plain cells first, so that a variant equal to a plain cell becomes the alias, not the reverse
    for name in sorted(wanted, key=lambda n: n in variants):
        variant = variants.get(name)
        cell = variant.cell if variant else name
        if cell not in known:
            subjects[name] = Subject(
                name, cell, dict(variant.options), "source", error=f"cell {cell!r} is not registered"
            )
            continue
        chosen = {**options.get(cell, {}), **(variant.options if variant else {}), **options.get(name, {})}
        subject = Subject(name, cell, chosen, entry(cell).family, error=unaccepted_options(cell, chosen))
        same = next(
            (
                s
                for s in subjects.values()
                if s.cell == cell
                and s.error is None
                and subject.error is None
                and same_options(cell, s.options, chosen)
            ),
            None,
        )
        if same is not None:
            same.aliases.append(name)
        else:
            subjects[name] = subject
    return [Subject(LSTM, None), Subject(GRU, None)] + list(subjects.values())


def constructor_defaults(cell: str) -> Dict[str, Any]:
    from ..cells.registry import entry

    signature = inspect.signature(entry(cell).cls.__init__)
    return {k: p.default for k, p in signature.parameters.items() if p.default is not inspect.Parameter.empty}


def same_options(cell: str, a: Dict[str, Any], b: Dict[str, Any]) -> bool:
    defaults = constructor_defaults(cell)
    return {**defaults, **a} == {**defaults, **b}


def unaccepted_options(cell: str, options: Dict[str, Any]) -> Optional[str]:
    from ..cells.registry import entry

    parameters = inspect.signature(entry(cell).cls.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return None
    missing = sorted(k for k in options if k not in parameters)
    if missing:
        return f"{cell} does not take option(s) {', '.join(missing)}"
    return None
