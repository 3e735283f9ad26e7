"""The flags every command shares, defined once: one word, one meaning, in every command that has it.

=================================  ===============================================================
``--seeds LIST|COUNT``             the training seeds: a list (``0,1,2``; one seed: ``5,``) or a
                                   count (``3`` = seeds 0, 1, 2); ``--set train.seed=S`` alone means
                                   the one seed S. Every command that runs seeds.
``--store DB``                     the database of results, a SQLite path or a database URL: the runs'
                                   rows and whatever else a command keeps beside them (a sweep's
                                   Optuna study, the reproduction's analyses); default
                                   :data:`~ltdrnn.config.DEFAULT_STORE` (``results.db`` in the working
                                   directory). Every command that writes or reads results.
``--set KEY=VALUE``                a config override, repeatable. Every command that trains or judges
                                   runs (``train`` also takes them as positional words).
``--jobs N``                       runs (a sweep: workers) at once, one process each. Every command
                                   that runs several.
``--resume`` / ``--no-resume``     continue what was started: a run already finished is not trained
                                   again, a half-finished run directory continues from its last
                                   checkpoint, any other run starts. ``train``, ``run``, ``ucr run``,
                                   ``reproduce run`` (a sweep always continues its study).
``--progress`` / ``--no-progress`` a progress bar per training run on stderr (never for runs trained
                                   in parallel processes). ``train``, ``sweep run``, ``reproduce run``.
=================================  ===============================================================
"""

from __future__ import annotations

import argparse
import re
from typing import Any, List, Optional, Sequence, Tuple

from ..config import DEFAULT_STORE, ConfigError

STORE_DEFAULT_TEXT = f"{DEFAULT_STORE} in the working directory"
STORE_HELP = f"results database, a SQLite path or a database URL (default: {STORE_DEFAULT_TEXT})"
RESUME_HELP = (
    "continue what was started: a run already finished is not trained again, a half-finished run directory "
    "continues from its last checkpoint, any other run starts"
)
PROGRESS_HELP = "a progress bar per training run on stderr (none for runs trained in parallel processes)"


def add_set(parser: argparse.ArgumentParser, help: str, dest: str = "overrides") -> None:
    """``--set KEY=VALUE``, repeatable."""
    parser.add_argument("--set", dest=dest, action="append", default=[], metavar="KEY=VALUE", help=help)


def add_store(parser: argparse.ArgumentParser, default: Optional[str] = DEFAULT_STORE, help: str = STORE_HELP) -> None:
    """``--store DB``; ``default=None`` where the command falls back on a config's ``results``."""
    parser.add_argument("--store", default=default, help=help)


def add_seeds(parser: argparse.ArgumentParser, default_text: str) -> None:
    """``--seeds LIST|COUNT``; read it with :func:`parse_seeds`."""
    parser.add_argument(
        "--seeds",
        help=f"training seeds: a list such as 0,1,2 (one seed: 5,) or a count such as 3 (seeds 0,1,2); "
        f"--set train.seed=S alone means the one seed S (default: {default_text})",
    )


def add_jobs(parser: argparse.ArgumentParser, default: int, default_text: Optional[str] = None) -> None:
    """``--jobs N``."""
    parser.add_argument(
        "--jobs",
        type=positive_int("--jobs"),
        default=default,
        help=f"runs trained at once, one process each (default: {default_text or default})",
    )


def add_resume(parser: argparse.ArgumentParser, default: bool, what: str = "") -> None:
    """``--resume`` / ``--no-resume``; ``what`` says which runs the command continues."""
    parser.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=default,
        help=f"{RESUME_HELP}{f'; {what}' if what else ''} (default: {'on' if default else 'off'})",
    )


def add_progress(parser: argparse.ArgumentParser, default: Optional[bool], default_text: str = "") -> None:
    """``--progress`` / ``--no-progress``; ``default=None`` where the config's ``train.progress`` decides."""
    state = default_text or ("on" if default else "off")
    parser.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=default, help=f"{PROGRESS_HELP} (default: {state})"
    )


def positive_int(flag: str):
    """An argparse ``type`` for a positive integer that names ``flag`` in its error."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
        return value

    convert.__name__ = flag
    return convert


def parse_seeds(
    text: Optional[str],
    overrides: Sequence[str],
    default: Sequence[int],
) -> Tuple[Tuple[int, ...], List[str]]:
    """``(seeds, overrides without train.seed)`` from ``--seeds`` and the ``--set`` items.

    ``text``: a count (``"3"``: seeds 0, 1, 2), a list (``"0,1,2"``, one seed ``"5,"``) or None (the
    seed of a ``--set train.seed=S``, else ``default``). ConfigError names ``--seeds`` and what was
    expected."""
    fixed = [item for item in overrides if item.split("=", 1)[0].strip() == "train.seed"]
    rest = [item for item in overrides if item not in fixed]
    if fixed and text is not None:
        raise ConfigError(f"--seeds: --set {fixed[0]} also chooses the seed; give one of them, got both")
    if fixed:
        value = fixed[-1].split("=", 1)[1].strip()
        if not re.fullmatch(r"-?\d+", value):
            raise ConfigError(f"--set train.seed: expected an integer, got {value!r}")
        return (int(value),), rest
    if text is None:
        return tuple(default), rest
    words = text.strip()
    if re.fullmatch(r"\d+", words):
        if int(words) < 1:
            raise ConfigError(f"--seeds: expected a count of at least 1 or a list such as 0,1,2, got {text!r}")
        return tuple(range(int(words))), rest
    items = [w.strip() for w in words.split(",")]
    if items and items[-1] == "":
        items = items[:-1]  # "5," is the list of the one seed 5
    if not items or not all(re.fullmatch(r"-?\d+", w) for w in items):
        raise ConfigError(
            f"--seeds: expected a count such as 3 or comma-separated integers such as 0,1,2, got {text!r}"
        )
    seeds = tuple(int(w) for w in items)
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds: expected distinct integers, got {text!r}")
    return seeds, rest


def names(text: Optional[str], known: Sequence[str], flag: str) -> Optional[List[str]]:
    """The comma-separated names of ``text`` checked against ``known`` (None when ``text`` is None)."""
    if text is None:
        return None
    chosen = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in known]
    if not chosen or unknown:
        raise ConfigError(f"{flag}: expected comma-separated names among {', '.join(known) or '(none)'}, got {text!r}")
    return chosen


def add_group(sub, name: str, help: str, description: Optional[str] = None):
    """``ltdrnn <name> COMMAND``: the group's parser (its help when no command is given) and the
    subparsers its commands are added to."""
    parser = sub.add_parser(name, help=help, description=description or help)
    parser.set_defaults(handler=None, help_parser=parser, command_name=name)
    return parser.add_subparsers(metavar="COMMAND")


def with_command(parser: argparse.ArgumentParser, name: str, handler: Any) -> None:
    """Make ``handler`` the one ``ltdrnn <name>`` runs (``name`` names it in error lines)."""
    parser.set_defaults(handler=handler, command_name=name)
