"""The one table of cells: name -> class, with the metadata the tests and benchmarks need.

The CLI, the test-suite and the benchmarks look cells up here and never import them by hand.
Each cell family registers its classes at import time of its module (see ``cells/__init__.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Tuple, Type

from .base import Cell


@dataclass(frozen=True)
class ParamCount:
    """A parameter count reported by a paper for one configuration of a cell.

    ``low <= count <= high`` must hold for ``build(name, input_size, hidden_size, **options)``.
    """

    input_size: int
    hidden_size: int
    low: int
    high: int
    options: Dict[str, Any] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True)
class Entry:
    """One registry row.

    Attributes:
        name: registry name (lower case, e.g. ``"tarnn"``).
        cls: the Cell subclass.
        family: ``"source"`` for the five paper cells, ``"baseline"`` otherwise.
        paper: citation of the defining paper.
        test_options: options that make the cell small and quick for the shared test-suite
            (e.g. fewer Euler steps or delays); merged into ``build`` by the tests.
        param_counts: parameter counts the papers report.
        variants: named option sets the shared tests also run (e.g. ``{"lowrank": {...}}``).
        gradcheck: False for cells whose backward is deliberately not the true gradient
            (straight-through estimators); the shared float64 gradcheck skips them.
        deterministic: False for cells that draw random numbers in forward (random update masks);
            equivalence tests then reseed the generator before each compared run.
    """

    name: str
    cls: Type[Cell]
    family: str
    paper: str
    test_options: Dict[str, Any] = field(default_factory=dict)
    param_counts: Tuple[ParamCount, ...] = ()
    variants: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    gradcheck: bool = True
    deterministic: bool = True


_REGISTRY: Dict[str, Entry] = {}


def register(
    name: str,
    *,
    family: str,
    paper: str,
    test_options: Dict[str, Any] | None = None,
    param_counts: Tuple[ParamCount, ...] = (),
    variants: Dict[str, Dict[str, Any]] | None = None,
    gradcheck: bool = True,
    deterministic: bool = True,
):
    """Class decorator that adds a Cell subclass to the registry under ``name``."""

    def add(cls: Type[Cell]) -> Type[Cell]:
        if name in _REGISTRY and not _same_class(_REGISTRY[name].cls, cls):
            raise ValueError(
                f"cell name {name!r} is registered twice ({_REGISTRY[name].cls.__name__} and {cls.__name__})"
            )
        if not (isinstance(cls, type) and issubclass(cls, Cell)):
            raise TypeError(f"register({name!r}): expected a Cell subclass, got {cls!r}")
        _REGISTRY[name] = Entry(
            name,
            cls,
            family,
            paper,
            dict(test_options or {}),
            tuple(param_counts),
            dict(variants or {}),
            gradcheck,
            deterministic,
        )
        cls.registry_name = name
        return cls

    return add


def _same_class(a: type, b: type) -> bool:
    """True when ``b`` is ``a`` re-created by importing its module again (after a failed import)."""
    return (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


def entry(name: str) -> Entry:
    """The registry row called ``name``; a clear error lists the known names otherwise."""
    _load_all()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"cell: unknown name {name!r}; expected one of {', '.join(sorted(_REGISTRY))}") from None


def list_cells(family: str | None = None) -> list[str]:
    """Sorted registry names, optionally only one family (``"source"`` or ``"baseline"``)."""
    _load_all()
    return sorted(n for n, e in _REGISTRY.items() if family is None or e.family == family)


def build(name: str, input_size: int, hidden_size: int, **options: Any) -> Cell:
    """Construct the cell called ``name``: ``build("tarnn", 2, 128, K=5)``.

    A config stored before the backends had their names (a checkpoint's ``model.options``) may hold ``impl``:
    it is refused with the word to use instead, since the old values meant different backends per cell."""
    if "impl" in options:
        raise ValueError(
            f"impl: the keyword is backend now, one of 'auto', 'reference', 'torch', 'cpp', 'triton' "
            f"(docs/architecture.md, \"The fast paths\"), got impl={options['impl']!r}; the old 'fused' is 'cpp' "
            "for tarnn, irnn and sarnn and 'torch' for the other cells, 'kernel' is 'cpp', 'fused_packed' is "
            "'torch_packed' (model.options.backend=... in a stored config)"
        )
    return entry(name).cls(input_size, hidden_size, **options)


def _load_all() -> None:
    from . import _load_families  # noqa: F401  (importing registers every family)
