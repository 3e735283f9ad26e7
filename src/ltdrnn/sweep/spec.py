"""The sweep spec: its schema (dataclasses checked by the typed config machinery of
:mod:`ltdrnn.config`, so an unknown key or a wrong type is refused naming the key, as in a run config),
the value checks a type cannot express, and the packaged specs under ``presets/sweeps/``."""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..config import ConfigError, grouped_yaml_names, load_yaml, preset_path, read_file, typed

DISTRIBUTIONS = ("float", "log-float", "int", "categorical")
SAMPLERS = ("random", "tpe", "grid")
PRUNERS = ("none", "median", "percentile", "hyperband")
DIRECTIONS = ("auto", "maximize", "minimize")


@dataclass
class Range:
    """One entry of ``params`` as a spec writes it: ``float``/``log-float``/``int`` in ``[low, high]``
    (``step`` optional), or ``categorical`` over ``choices``."""

    distribution: Optional[str] = None
    low: Optional[float] = None
    high: Optional[float] = None
    step: Optional[float] = None
    choices: Optional[List[Any]] = None


@dataclass
class Param(Range):
    """A searched config key (``name``, dotted) and its range."""

    name: str = ""

    def suggest(self, trial) -> Any:
        if self.distribution == "categorical":
            return trial.suggest_categorical(self.name, self.choices)
        if self.distribution == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), step=int(self.step or 1))
        return trial.suggest_float(self.name, self.low, self.high, step=self.step, log=self.distribution == "log-float")

    def grid_values(self) -> List[Any]:
        """The values a grid visits: the choices, or every ``step`` from low to high for int."""
        if self.distribution == "categorical":
            return list(self.choices)
        if self.distribution == "int":
            return list(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        raise ConfigError(
            f"params.{self.name}: the grid sampler needs categorical or int parameters, "
            f"got distribution {self.distribution!r}"
        )


@dataclass
class SweepSpec:
    """A whole spec; the keys of the file, except that ``params`` is a mapping there (dotted key ->
    :class:`Range`) and ``extends`` is resolved before the schema applies. ``study`` defaults to the
    spec's name."""

    base: Optional[str] = None
    params: List[Param] = field(default_factory=list)
    study: str = "sweep"
    description: str = ""
    set: List[str] = field(default_factory=list)
    sampler: str = "tpe"
    trials: Optional[int] = None
    direction: str = "auto"
    seed: Optional[int] = None
    seed_per_trial: bool = False
    pruner: Dict[str, Any] = field(default_factory=lambda: {"name": "none"})
    retries: int = 2
    report: Dict[str, float] = field(default_factory=lambda: {"top_fraction": 0.1})

    def budget(self, trials: Optional[int] = None) -> int:
        """Trials in the whole study: the argument, the spec's ``trials``, or the grid's size."""
        if trials is not None:
            if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
                raise ConfigError(f"trials: expected a positive number of trials, got {trials!r}")
            return trials
        if self.trials is not None:
            return self.trials
        if self.sampler == "grid":
            return math.prod(len(p.grid_values()) for p in self.params)
        raise ConfigError("trials: expected a number of trials (in the spec or --trials), got none")

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def to_spec_data(self) -> Dict[str, Any]:
        """Plain data that ``load_spec`` turns back into this spec (to hand it to another process)."""
        data = self.to_dict()
        params = {p.pop("name"): {k: v for k, v in p.items() if v is not None} for p in data.pop("params")}
        return {**data, "params": params}


def list_sweeps() -> List[str]:
    """Names ``"<group>/<name>"`` of the packaged sweep specs."""
    return grouped_yaml_names(preset_path("sweeps"))


def _read_spec_data(source: str) -> Dict[str, Any]:
    if Path(source).is_file():
        data = read_file(source)
    else:
        item = preset_path("sweeps", *f"{source}.yaml".split("/"))
        if not item.is_file():
            raise ConfigError(f"sweep {source!r}: no such file or packaged sweep; packaged: {', '.join(list_sweeps())}")
        data = load_yaml(item.read_text(), f"sweep {source!r}") or {}
    parent = data.pop("extends", None)
    if parent is None:
        return data
    merged = _read_spec_data(parent)
    for key, value in data.items():
        if key in ("params", "report", "pruner") and isinstance(value, dict):
            merged[key] = {**merged.get(key, {}), **value}
        else:
            merged[key] = value
    return merged


def load_spec(source: str | Dict[str, Any]) -> SweepSpec:
    """A validated spec from a packaged name (``mist/pmnist``), a YAML/JSON file, or plain data."""
    data = copy.deepcopy(source) if isinstance(source, dict) else _read_spec_data(str(source))
    if not isinstance(data, dict):
        raise ConfigError(f"sweep: expected a mapping of keys, got {data!r}")
    params = data.pop("params", None)
    if not isinstance(params, dict) or not params:
        raise ConfigError(f"sweep params: expected a mapping of dotted config keys to distributions, got {params!r}")
    if data.get("study") is None:
        data["study"] = "sweep" if isinstance(source, dict) else Path(str(source).replace("/", "-")).stem
    spec = typed(SweepSpec, data, "sweep")
    spec.params = [Param(name=name, **asdict(_range(name, raw))) for name, raw in params.items()]
    _check_values(spec)
    return spec


def _range(name: str, raw: Any) -> Range:
    """The entry ``params.<name>``: types from the schema, then the bounds a type cannot express."""
    key = f"params.{name}"
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{key}: expected a mapping such as {{distribution: log-float, low: 1e-4, high: 10}}, got {raw!r}"
        )
    spec = typed(Range, raw, key)
    if spec.distribution not in DISTRIBUTIONS:
        raise ConfigError(f"{key}.distribution: expected one of {', '.join(DISTRIBUTIONS)}, got {spec.distribution!r}")
    if spec.distribution == "categorical":
        if not spec.choices:
            raise ConfigError(f"{key}.choices: expected a non-empty list, got {raw.get('choices')!r}")
        return Range("categorical", choices=spec.choices)
    low, high, step = spec.low, spec.high, spec.step
    if low is None or high is None or not low < high:
        raise ConfigError(f"{key}: expected numbers low < high, got low={low!r}, high={high!r}")
    if spec.distribution == "log-float" and low <= 0:
        raise ConfigError(f"{key}.low: a log-float range must be positive, got {low!r}")
    if spec.distribution == "int" and not (low.is_integer() and high.is_integer()):
        raise ConfigError(f"{key}: an int range needs integer bounds, got low={low!r}, high={high!r}")
    if step is not None and (spec.distribution == "log-float" or not step > 0):
        raise ConfigError(f"{key}.step: expected a positive step (not with log-float), got {step!r}")
    if spec.distribution == "int":  # whole numbers stay whole in the trials and the stored spec
        low, high, step = int(low), int(high), None if step is None else int(step)
    return Range(spec.distribution, low, high, step)


def _check_values(spec: SweepSpec) -> None:
    """What the schema's types cannot express: required keys, choices, ranges, the grid's needs."""
    if not spec.base:
        raise ConfigError("sweep base: expected the preset or config file the trials start from, got none")
    for key, value, choices in (
        ("sampler", spec.sampler, SAMPLERS),
        ("direction", spec.direction, DIRECTIONS),
        ("pruner.name", spec.pruner.get("name", "none"), PRUNERS),
    ):
        if value not in choices:
            raise ConfigError(f"sweep {key}: expected one of {', '.join(choices)}, got {value!r}")
    if spec.trials is not None and spec.trials < 1:
        raise ConfigError(f"sweep trials: expected a positive integer, got {spec.trials!r}")
    if spec.retries < 0:
        raise ConfigError(f"sweep retries: expected a non-negative integer, got {spec.retries!r}")
    top = spec.report
    if not (("top_fraction" in top and 0 < top["top_fraction"] <= 1) or ("top_k" in top and top["top_k"] >= 1)):
        raise ConfigError(f"sweep report: expected top_fraction in (0, 1] or top_k >= 1, got {top!r}")
    if spec.sampler == "grid":
        for param in spec.params:
            param.grid_values()
