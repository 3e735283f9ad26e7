"""Caps on what a config may ask for: sizes, lengths and the work of one pass over a split.

A config read from a file or a checkpoint (a 23 KB file) must not make ``ltdrnn train``, ``eval`` or
``export`` allocate gigabytes or run for days; :func:`check_limits` runs inside ``config.validate``,
before any data is built. Doc: docs/reliability.md.  Tests: tests/test_reliability.py, tests/test_config.py
"""

from __future__ import annotations

import functools
from typing import Any

from .errors import ConfigError

#: the most a config may ask for, far above every preset (hidden 139, T 1,000, 100,000 series): a config
#: read from a file or a checkpoint (23 KB) must not make eval or export allocate gigabytes or run for days
LIMITS = {"model.hidden_size": 4096, "model.num_layers": 64, "train.batch_size": 65536, "train.eval_batch_size": 65536}
#: task options: sizes of generated splits (``n_train``, ``n_val``, ``n_test``, any ``n_*``) and lengths (``T``)
MAX_ITEMS, MAX_STEPS, MAX_VALUES = 10_000_000, 1_000_000, 1_000_000_000


def check_limits(cfg: Any) -> None:
    """ConfigError naming the key when ``cfg`` asks for more than :data:`LIMITS` (or a task option beyond
    :data:`MAX_ITEMS` series, :data:`MAX_STEPS` steps, or :data:`MAX_VALUES` series times steps, or a
    split beyond :data:`MAX_SPLIT_STEPS` steps)."""
    number = _number
    caps = [(key, functools.reduce(getattr, key.split("."), cfg), cap) for key, cap in LIMITS.items()]
    options = cfg.task.options
    caps += [(f"task.options.{k}", v, MAX_ITEMS) for k, v in options.items() if k.startswith("n_") and number(v)]
    caps += [(f"task.options.{k}", v, MAX_STEPS) for k, v in options.items() if k in ("T", "seq_len") and number(v)]
    for key, value, cap in caps:
        if value is not None and value > cap:
            raise ConfigError(
                f"{key}: expected at most {cap:,} (limits.LIMITS: the most a config may ask for), got {value!r}"
            )
    items = sum(v for k, v in options.items() if k in ("n_train", "n_val", "n_test") and number(v))
    steps = options.get("T")
    if number(steps) and items * steps > MAX_VALUES:
        raise ConfigError(
            f"task.options: n_train + n_val + n_test = {items:,} series of T = {steps:,} steps is "
            f"{items * steps:,.0f} values; expected at most {MAX_VALUES:,}"
        )
    check_work(cfg)


#: the most steps (series x steps per series) one pass over one split may ask for: five times the largest
#: split of any preset (copy-1000's training split, 100,000 series of 1,020 steps), so a config file or a
#: 23 KB checkpoint cannot make ``ltdrnn eval`` read half a billion steps more than a preset does
MAX_SPLIT_STEPS = 500_000_000
#: task options that set the steps of a series, and the power that gives them (``size``: an image's side)
LENGTH_OPTIONS = {"T": 1, "delay": 1, "size": 2}
#: the series of a split that a data set sets (no option gives it): MNIST's 60,000 training images, the
#: most of the data sets whose series length an option sets (noisy MNIST, noisy CIFAR-10, big pMNIST)
DATA_SERIES = 60_000


def check_work(cfg: Any) -> None:
    """ConfigError naming the option when one split asks for more than :data:`MAX_SPLIT_STEPS` steps:
    series (``task.options.n_<split>``, the task's default, or :data:`DATA_SERIES`) times the steps of
    one (the :data:`LENGTH_OPTIONS` given, or the task's default). Tasks whose series length a data set
    sets (pixel MNIST, speech, UCR) and PTB (whose windows cut one text) are bounded by their data."""
    from .tasks.base import SPLITS, option_defaults

    options = cfg.task.options
    known = {**option_defaults(cfg.task.name), **options}
    lengths = [(k, known[k] ** power) for k, power in LENGTH_OPTIONS.items() if _number(known.get(k))]
    if not lengths:
        return
    length_key, steps = max(lengths, key=lambda item: item[1])
    for split in SPLITS:
        series = known.get(f"n_{split}", DATA_SERIES)
        if not _number(series) or series * steps <= MAX_SPLIT_STEPS:
            continue
        if f"n_{split}" in options or length_key not in options:
            key, limit, value = f"n_{split}", MAX_SPLIT_STEPS // steps, series
            what = f"series of {steps:,.0f} steps in the {split} split"
        else:
            key, value = length_key, known[length_key]
            limit = (MAX_SPLIT_STEPS // series) ** (1 / LENGTH_OPTIONS[length_key])
            unit = "steps a series" if LENGTH_OPTIONS[length_key] == 1 else "pixels a side"
            what = f"{unit} for the {series:,.0f} series of the {split} split"
        raise ConfigError(
            f"task.options.{key}: expected at most {limit:,.0f} {what} (limits.MAX_SPLIT_STEPS: "
            f"{MAX_SPLIT_STEPS:,} steps in one pass over a split), got {value!r}"
        )


def _number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))
