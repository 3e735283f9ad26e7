"""Typed run configurations, their loading and validation, and the packaged presets.

A :class:`RunConfig` fully describes one experiment::

    model:  cell, hidden_size, num_layers, options (cell keywords), head, embedding
    task:   name, options (task keywords)
    optim:  name (adam | rmsprop | sgd), lr, momentum, alpha, weight_decay, clip_norm, skip_spikes,
            halve_every (tau epochs), loss_reduction (mean | sum)
    train:  epochs or steps, batch_size, eval_every, seed, device, loss_weights, ...
    run_dir, results (a SQLite path or a database URL), preset, study

Configs come from YAML/JSON files or packaged presets plus ``key.sub=value`` overrides::

    cfg = load_config("tarnn/adding-750", ["train.steps=200", "model.options.K=3"])

Every key is checked: an unknown key raises :class:`ConfigError` naming the key and listing the valid
ones; a value of the wrong type raises naming the key, the expected type and the value given. Free-form
mappings (``model.options``, ``task.options``, ``train.loss_weights``, ``optim.lr_scales``) accept any
key; the cell, the task and the trainer validate those.

Presets are YAML files in ``ltdrnn/presets/<group>/<name>.yaml``, named ``"<group>/<name>"``. A preset
may start from another with ``extends: <group>/<name>`` (its own keys win, mappings merge, an empty
mapping clears).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from .errors import ConfigError
from .limits import check_limits

#: The results database of every command and config that names none (the repository's studies name theirs).
DEFAULT_STORE = "results.db"


# ---- the schema ------------------------------------------------------------------------------------
@dataclass
class ModelConfig:
    """The network: a :class:`~ltdrnn.layers.Recurrent` stack and a head.

    ``head``: ``auto`` picks from the task (terminal classes -> classifier, terminal regression ->
    regressor, per-step -> tagger, per-step tokens with a perplexity metric -> lm).
    ``embedding``: width of an input embedding (token ids, or a bias-free linear map of one-hot or
    float input); 0 means none (token input then uses ``hidden_size``).
    ``tie_weights``: language model only, share the embedding and output matrices (needs
    ``embedding == hidden_size``).
    ``pooling``: what a classifier or regressor reads: ``last`` (the output at each sequence's last true
    step), or the ``mean`` / ``max`` of the outputs over its true steps.
    """

    cell: str = "lstm"
    hidden_size: int = 128
    num_layers: int = 1
    dropout: float = 0.0
    bidirectional: bool = False
    options: Dict[str, Any] = field(default_factory=dict)
    head: str = "auto"
    embedding: int = 0
    tie_weights: bool = False
    pooling: str = "last"


@dataclass
class TaskConfig:
    """The benchmark: a task registry name and the task's keyword options."""

    name: str = "adding"
    options: Dict[str, Any] = field(default_factory=dict)


@dataclass
class OptimConfig:
    """Optimiser and schedule.

    ``alpha``: RMSprop smoothing constant (SRNN uses 0.9). ``beta2``: Adam's second-moment decay (torch's
    0.999; a lower one lets a single outlying gradient move the weights less, as on TARNN's copy T = 500,
    lab/notes/tarnn.md). ``momentum``: SGD/RMSprop momentum (MIST
    uses SGD with 0.9). ``weight_decay``: L2 penalty coefficient (added to the gradient, as torch's
    ``weight_decay``). ``clip_norm``: clip the global gradient norm to this value (None: no clipping).
    ``halve_every``: halve the learning rate every tau epochs (None: constant; TARNN's tau).
    ``skip_spikes``: skip the update of a batch whose gradient norm is above this factor (> 1) times the
    median of the last 50 gradient norms, or not finite (None: every batch updates;
    :class:`ltdrnn.optimizers.SpikeGuard`); the steps skipped are in the result (``metrics.skipped_updates``).
    ``loss_reduction``: ``mean`` averages the task loss over the batch; ``sum`` sums it over the batch
    (MIST; its learning rates assume the sum). Per-step losses are averaged over each sequence's steps
    in both cases. ``lr_scales``: learning-rate multipliers by parameter name, ``{pattern: factor}``
    with shell-style patterns (``{"*.steps.*": 5}`` trains the Euler step sizes at 5 x ``lr``); a
    parameter takes the factor of the first pattern it matches, 1 otherwise, and a pattern that
    matches no parameter is an error.
    """

    name: str = "adam"
    lr: float = 1e-3
    momentum: float = 0.0
    alpha: float = 0.99
    beta2: float = 0.999
    weight_decay: float = 0.0
    clip_norm: Optional[float] = None
    halve_every: Optional[int] = None
    skip_spikes: Optional[float] = None
    loss_reduction: str = "mean"
    lr_scales: Dict[str, float] = field(default_factory=dict)


@dataclass
class TrainConfig:
    """The training loop. Give ``epochs`` or ``steps`` (optimiser updates); with both, training stops at
    whichever comes first. ``eval_every``: validate every so many steps (0: at the end of every epoch).
    ``eval_batches``: cap on validation batches per evaluation (None: the whole split);
    ``test_batches``: the same for the final test (None, the default, for any reported number).
    ``loss_weights``: weight of each named extra loss term of ``model.losses()`` (e.g. ``omega_A``,
    ``omega_U`` for TARNN's gamma1/gamma2, ``budget`` for SA-RNN's lambda; terms without one are not
    added). ``checkpoint_every``: steps between checkpoints (0: only at evaluations). ``track_gradients``:
    record ||dh_T/dh_1|| at every evaluation.
    ``select_on``: the validation quantity that picks the checkpoint used for the test: the task's
    ``metric`` or its ``loss`` (SRNN selects on the lowest validation cross entropy); ``metric_then_loss``
    the best metric with ties going to the lower loss (a small validation split's accuracy moves in large
    steps and ties often, where ``metric`` keeps the first of the tied checkpoints, and ``loss`` can prefer
    a checkpoint near chance to one confidently wrong on one series); ``last`` tests the
    final weights (no selection; needed when the validation split is empty, which is refused otherwise).
    ``select_after``: only validations after this many steps compete for that checkpoint (0: all); the
    earlier ones are still recorded. On a small validation split an early checkpoint can win by luck
    (GunPoint's 10 series: lab/2026-11-29-tiny-recipes); a run that ends before it tests its final weights.
    ``ema_decay``: keep an exponential moving average of the parameters with this decay per optimiser step
    (bias-corrected, so step t's average weighs the weights after step i by ``decay ** (t - i)``, from the
    first step on), and validate, select, test and save the average in place of the latest weights; the
    optimiser still steps the latest ones. Without a selected checkpoint (``select_on: last``, or a run
    that ends before ``select_after``) the average at the last step is the run's model: tested and saved as
    ``best.pt``, which loading and export read. It smooths the step-to-step noise of a small model trained
    at a high rate (lab/2026-11-29-tiny-recipes-3). 0 (the default): off.
    ``restarts``: with N > 1, screen N starts (the run's seed and N - 1 others) for ``restart_steps`` steps
    each and train the one of lowest training loss as its seed's run (:mod:`ltdrnn.restarts`); 1: off.
    ``malloc_tuning``: have glibc reuse freed large blocks instead of fresh pages
    (:func:`ltdrnn.ops.memory.tune_malloc`; faster steps, memory kept after a peak; process-wide).
    ``qat_steps``: the last N steps train through the int8 export's weights (matrices rounded per row,
    straight-through gradients); validations, test and saved model use them (:mod:`ltdrnn.int8_training`).
    ``rollbacks``: when the training loss turns non-finite, go back to the checkpoint of the best validation
    so far (the latest one without selection or before the first evaluation, the start at least), halve the
    learning rate and go on, at most this many times; 0 (the default): the run ends there, ``diverged``.
    Each rollback is recorded in ``metrics.rollbacks``. ``max_val_loss``: a validation loss above this (or
    not finite) counts as diverged too: a runaway that stays finite (e.g. at 1e30). Judged at evaluations,
    not on the training loss, whose early transients can pass 1e9 and recover (needs ``eval_every`` > 0; None: off).
    ``stop_at``: end at the first validation whose metric reaches this (MSE at or below it, accuracy at or
    above), tested on the selected checkpoint as always (``metrics.stopped_at_target``); None: off.
    """

    epochs: Optional[int] = None
    steps: Optional[int] = None
    batch_size: int = 128
    eval_batch_size: Optional[int] = None
    eval_every: int = 0
    eval_batches: Optional[int] = None
    test_batches: Optional[int] = None
    seed: int = 0
    device: str = "cpu"
    loss_weights: Dict[str, float] = field(default_factory=dict)
    checkpoint_every: int = 0
    track_gradients: bool = False
    progress: bool = True
    latency: bool = True
    threads: Optional[int] = None
    malloc_tuning: bool = True
    select_on: str = "metric"
    select_after: int = 0
    ema_decay: float = 0.0
    restarts: int = 1
    restart_steps: Optional[int] = None
    rollbacks: int = 0
    max_val_loss: Optional[float] = None
    qat_steps: int = 0
    stop_at: Optional[float] = None


@dataclass
class RunConfig:
    """One experiment. ``results``: SQLite file path or SQLAlchemy URL of the results store (None:
    do not store). ``run_dir``: where the config, checkpoints and history go (None: ``runs/<id>``)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    name: Optional[str] = None
    preset: Optional[str] = None
    study: Optional[str] = None
    run_dir: Optional[str] = None
    results: Optional[str] = DEFAULT_STORE
    notes: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


CHOICES = {
    "optim.name": ("adam", "rmsprop", "sgd"),
    "optim.loss_reduction": ("mean", "sum"),
    "model.head": ("auto", "classifier", "regressor", "tagger", "lm"),
    "model.pooling": ("last", "mean", "max"),
    "train.select_on": ("metric", "loss", "metric_then_loss", "last"),
}


# ---- building from plain data ----------------------------------------------------------------------
def from_dict(data: Dict[str, Any]) -> RunConfig:
    """A validated RunConfig from nested plain data; missing keys take their defaults."""
    cfg = _build(RunConfig, data, "")
    validate(cfg)
    return cfg


def typed(cls, data: Any, key: str = ""):
    """An instance of the dataclass ``cls`` from plain data, with the checks every config gets: an unknown
    key, a missing key without a default or a value of the wrong type raises :class:`ConfigError` naming
    the key (prefixed by ``key``); other missing keys take their defaults. Other schemas (sweep specs,
    the reproduction claims) use it as RunConfig does."""
    return _build(cls, data, key)


def _build(cls, data: Any, path: str):
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping of keys, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = _join(path, unknown[0])
        raise ConfigError(f"unknown config key {key!r}; valid keys{' in ' + path if path else ''}: {', '.join(fields)}")
    required = [
        n for n, f in fields.items() if dataclasses.MISSING is f.default and dataclasses.MISSING is f.default_factory
    ]
    missing = [n for n in required if n not in data]
    if missing:
        raise ConfigError(
            f"{_join(path, missing[0])}: missing; required keys{' in ' + path if path else ''}: {', '.join(required)}"
        )
    values = {}
    for name, value in data.items():
        values[name] = _coerce(hints[name], value, _join(path, name))
    return cls(**values)


def _coerce(kind, value: Any, key: str):
    if dataclasses.is_dataclass(kind):
        return _build(kind, value if value is not None else {}, key)
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if origin is Union:
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(inner[0], value, key)
    if origin in (dict, Dict):
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ConfigError(f"{key}: expected a mapping with string keys, got {value!r}")
        return {k: _coerce(args[1], v, f"{key}.{k}") for k, v in value.items()}
    if origin in (list, List):
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_coerce(args[0], v, f"{key}[{i}]") for i, v in enumerate(value)]
    if kind is Any:
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    raise TypeError(f"{key}: unsupported schema type {kind!r}")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def validate(cfg: RunConfig) -> RunConfig:
    """Check the values a type cannot express (ranges, choices, combinations)."""
    for key, choices in CHOICES.items():
        value = get_key(cfg, key)
        if value not in choices:
            raise ConfigError(f"{key}: expected one of {', '.join(choices)}, got {value!r}")
    positive = ["model.hidden_size", "model.num_layers", "train.batch_size", "optim.lr"]
    optional_positive = (
        "train.epochs train.steps train.eval_batch_size train.eval_batches train.test_batches train.max_val_loss "
        "optim.clip_norm optim.halve_every train.threads"
    ).split()
    for key in positive + optional_positive:
        value = get_key(cfg, key)
        if value is not None and not value > 0:
            raise ConfigError(f"{key}: expected a positive value, got {value!r}")
    non_negative = (
        "optim.momentum optim.weight_decay train.eval_every train.checkpoint_every train.rollbacks model.embedding "
        "train.seed train.select_after train.qat_steps"
    ).split()
    for key in non_negative:
        if get_key(cfg, key) < 0:
            raise ConfigError(f"{key}: expected a non-negative value, got {get_key(cfg, key)!r}")
    if not 0 <= cfg.train.ema_decay < 1:
        raise ConfigError(f"train.ema_decay: expected a value in [0, 1), got {cfg.train.ema_decay!r}")
    check_restarts(cfg.train)
    if not 0 <= cfg.model.dropout < 1:
        raise ConfigError(f"model.dropout: expected a probability in [0, 1), got {cfg.model.dropout!r}")
    for pattern, factor in cfg.optim.lr_scales.items():
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 0:
            raise ConfigError(f"optim.lr_scales.{pattern}: expected a positive number, got {factor!r}")
    if cfg.optim.skip_spikes is not None and not cfg.optim.skip_spikes > 1:
        raise ConfigError(f"optim.skip_spikes: expected a factor above 1, got {cfg.optim.skip_spikes!r}")
    if not 0 < cfg.optim.alpha < 1:
        raise ConfigError(f"optim.alpha: expected a value in (0, 1), got {cfg.optim.alpha!r}")
    if not 0 < cfg.optim.beta2 < 1:
        raise ConfigError(f"optim.beta2: expected a value in (0, 1), got {cfg.optim.beta2!r}")
    if cfg.train.max_val_loss is not None and not cfg.train.eval_every:
        raise ConfigError("train.max_val_loss: judged at evaluations, expected train.eval_every > 0, got 0")
    if cfg.train.epochs is None and cfg.train.steps is None:
        raise ConfigError("train.epochs / train.steps: expected at least one of them, got neither")
    check_limits(cfg)
    return cfg


def check_restarts(train: TrainConfig) -> None:
    """``train.restarts`` and ``train.restart_steps``: a screen needs its length, and a run longer than it."""
    n, steps = train.restarts, train.restart_steps
    if n < 1:
        raise ConfigError(f"train.restarts: expected a positive number of candidates, got {n!r}")
    if n == 1 and steps is not None:
        raise ConfigError(f"train.restart_steps: only used with train.restarts > 1, got {steps!r} with 1 restart")
    if n > 1 and (steps is None or steps < 1):
        raise ConfigError(f"train.restart_steps: expected a positive number of screen steps, got {steps!r}")
    if n > 1 and train.steps is not None and steps >= train.steps:
        raise ConfigError(
            f"train.restart_steps: expected fewer steps than the run's (train.steps={train.steps}), got {steps!r}"
        )


def get_key(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        cfg = cfg[part] if isinstance(cfg, dict) else getattr(cfg, part)
    return cfg


# ---- overrides and files ---------------------------------------------------------------------------
def parse_override(text: str) -> tuple[List[str], Any]:
    """``"optim.lr=1e-3"`` -> ``(["optim", "lr"], 0.001)``; the value is read as YAML (numbers, true,
    null, lists, ``{a: 1}``)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected key.sub=value")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"override {text!r}: expected a dotted key such as optim.lr")
    return parts, _read_scalar(raw)


def _read_scalar(raw: str) -> Any:
    import yaml

    try:
        value = load_yaml(raw, "override")
    except yaml.YAMLError:
        return raw
    return yaml_number(value)


#: Most values (scalars, list items, mapping entries) a config may hold once YAML aliases are expanded;
#: presets hold under a hundred. Nested aliases multiply (``&a [*b, *b, ...]``): a dozen lines can
#: stand for billions of values, which the trainer would copy and save.
MAX_CONFIG_VALUES = 10_000

# YAML 1.2 floats: YAML 1.1 (PyYAML) reads 1e-3, without a dot, as a string
_FLOAT = (
    r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
    r"|\.[0-9_]+(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_LOADER: list = []


def load_yaml(text: str, origin: str) -> Any:
    """``yaml.safe_load(text)`` with ``1e-3`` read as a number, refusing data that expands (through
    aliases) to more than :data:`MAX_CONFIG_VALUES` values; ``origin`` names the source in errors."""
    import yaml

    if not _LOADER:
        import re

        class Loader(yaml.SafeLoader):
            pass

        Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(_FLOAT), list("-+0123456789."))
        _LOADER.append(Loader)
    data = yaml.load(text, Loader=_LOADER[0])
    check_size(data, origin)
    return data


def check_size(data: Any, origin: str, limit: int = MAX_CONFIG_VALUES) -> None:
    """Raise ConfigError if ``data``, with shared (aliased) parts counted every time they appear, holds
    more than ``limit`` values; stops counting at the limit, so the check itself stays cheap."""
    pending, count = [data], 0
    while pending:
        node = pending.pop()
        count += 1
        if count > limit:
            raise ConfigError(
                f"{origin}: expected at most {limit} values once YAML aliases are expanded, got more (nested aliases?)"
            )
        if isinstance(node, dict):
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)


def yaml_number(value: Any) -> Any:
    """``value``, or the float a string spells: YAML 1.1 reads ``1e-3`` (no dot) as a string, but numbers
    written that way are meant as numbers."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def apply_overrides(data: Dict[str, Any], overrides: List[str]) -> Dict[str, Any]:
    """A copy of ``data`` with each ``key.sub=value`` set (intermediate mappings created)."""
    data = copy.deepcopy(data)
    for text in overrides:
        parts, value = parse_override(text)
        node = data
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"override {text!r}: {'.'.join(parts[: i + 1])} is not a mapping")
            node = child
        node[parts[-1]] = value
    return data


def read_file(path: Union[str, Path]) -> Dict[str, Any]:
    """Plain data from a YAML (``.yaml``/``.yml``) or JSON file."""
    path = Path(path)
    text = path.read_text()
    try:
        if path.suffix == ".json":
            data = json.loads(text)
            check_size(data, str(path))
        else:
            data = load_yaml(text, str(path)) or {}
    except ConfigError:
        raise
    except ValueError as error:  # json.JSONDecodeError
        raise ConfigError(f"{path}: not valid JSON ({error})") from None
    except Exception as error:
        if type(error).__module__.split(".")[0] != "yaml":
            raise
        raise ConfigError(f"{path}: not valid YAML ({' '.join(str(error).split())})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def load_config(
    source: Union[str, Path, Dict[str, Any], None] = None, overrides: Optional[List[str]] = None
) -> RunConfig:
    """A validated config from a preset name, a YAML/JSON file or a dict, plus overrides."""
    if source is None:
        data: Dict[str, Any] = {}
    elif isinstance(source, dict):
        data = copy.deepcopy(source)
    elif Path(source).is_file():
        data = _resolve_extends(read_file(source), str(source))
    else:
        data = preset_data(str(source))
    return from_dict(apply_overrides(data, list(overrides or [])))


def save_config(cfg: RunConfig, path: Union[str, Path]) -> None:
    """Write the resolved config as YAML (``.yaml``) or JSON."""
    path = Path(path)
    if path.suffix in (".yaml", ".yml"):
        import yaml

        path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    else:
        path.write_text(json.dumps(cfg.to_dict(), indent=2))


# ---- presets ---------------------------------------------------------------------------------------
def preset_path(*parts: str):
    """``presets/<parts...>`` of the installed package: the folder itself, a group, or a file (read it
    with ``read_text``); it may sit inside a wheel, so it is not always a ``Path``."""
    return resources.files("ltdrnn").joinpath("presets", *parts)


def grouped_yaml_names(root) -> List[str]:
    """Sorted names ``"<group>/<name>"`` of the YAML files in the group folders of ``root`` (a
    :func:`preset_path`); a file starting with ``_`` is a base, not listed."""
    return sorted(
        f"{group.name}/{item.name[:-5]}"
        for group in root.iterdir()
        if group.is_dir() and not group.name.startswith(("_", "."))
        for item in group.iterdir()
        if item.name.endswith(".yaml") and not item.name.startswith("_")
    )


def list_presets(group: Optional[str] = None) -> List[str]:
    """Names ``"<group>/<name>"`` of the packaged presets (of one group if given)."""
    names = grouped_yaml_names(preset_path())
    return names if group is None else [name for name in names if name.split("/")[0] == group]


def preset_data(name: str) -> Dict[str, Any]:
    """The plain data of preset ``name`` with ``extends`` resolved and ``preset`` set to ``name``."""
    data = _resolve_extends(_read_preset(name), name)
    data.setdefault("preset", name)
    return data


def _read_preset(name: str) -> Dict[str, Any]:
    if not isinstance(name, str) or any(part in ("", ".", "..") or "\\" in part for part in name.split("/")):
        raise ConfigError(
            f"preset {name!r}: expected a packaged preset name such as tarnn/adding-750 "
            "(no empty, '.' or '..' parts) or an existing config file"
        )
    item = preset_path(*f"{name}.yaml".split("/"))
    if not item.is_file():
        known = list_presets()
        raise ConfigError(f"preset {name!r}: no such preset or file; presets: {', '.join(known)}")
    data = load_yaml(item.read_text(), f"preset {name!r}") or {}
    if not isinstance(data, dict):
        raise ConfigError(f"preset {name!r}: expected a mapping at the top level")
    return data


def _resolve_extends(data: Dict[str, Any], origin: str, depth: int = 0) -> Dict[str, Any]:
    base_name = data.pop("extends", None)
    if base_name is None:
        return data
    if depth > 8:
        raise ConfigError(f"{origin}: 'extends' chain longer than 8 (a cycle?)")
    base = _resolve_extends(_read_preset(base_name), base_name, depth + 1)
    return deep_merge(base, data)


def deep_merge(base: Dict[str, Any], top: Dict[str, Any]) -> Dict[str, Any]:
    """``top`` over ``base``: non-empty mappings merge key by key; anything else, including an empty
    mapping (``options: {}`` clears the base's cell options), replaces."""
    merged = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and value and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


# config mappings whose keys are free-form (options, loss terms, parameter patterns): compared whole
FREE_FORM_MAPPINGS = ("model.options", "task.options", "train.loss_weights", "optim.lr_scales")
# settings that change how a run is watched, not what it computes
_COSMETIC = {"train.progress", "train.latency", "results", "notes", "train.threads", "train.malloc_tuning"}


def comparable_config(config: Dict[str, Any]) -> Dict[str, Any]:
    """A run config flattened to ``{"section.key": value}`` without the keys that do not change a result
    (progress, latency, threads, malloc tuning, results, notes): what resuming and ``reproduce``'s
    stale-row check compare."""
    flat = {}

    def walk(node, prefix):
        for key, value in node.items():
            name = f"{prefix}{key}"
            if isinstance(value, dict) and name not in FREE_FORM_MAPPINGS:
                walk(value, name + ".")
            elif name not in _COSMETIC:
                flat[name] = value

    walk(config, "")
    return flat
