"""Which stored rows are current: a row counts for a claim only if the config it was trained with is
the config the claim's run resolves to today, up to the keys that do not change what is trained,
selected or measured.

Both sides are resolved configs: the stored one is read back through :func:`ltdrnn.config.from_dict`
(so a key added to the schema after the row was written takes its default, which by the project's
convention is the old behaviour; a cell option whose default changed is filled in with the old value,
:data:`CHANGED_DEFAULTS`), today's one is ``load_config(preset, the claim's overrides)``. A
row whose config no longer loads (a key since removed) is stale. A change inside a cell that no
config key names is invisible here, which is why the presets name the options a paper fixes (the
iRNN reading, TARNN's initial eta) instead of relying on constructor defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

from ..config import ConfigError, from_dict, load_config
from ..results import seed_of
from .analyses import DEFINITIONS
from .claims import Claim, comparable, config_hash
from .measurements import seed_key


@dataclass(frozen=True)
class StaleRow:
    """A stored row left out of the verdict: its run label, seed, creation time and what differs
    (``"model.options.eta 0.001 -> 0.01"``: stored value -> today's)."""

    label: str
    seed: Any
    created: str
    differences: Tuple[str, ...]


@dataclass(frozen=True)
class Tried:
    """One config the claim's stored rows of a run label were trained with: its :func:`config_hash`, the
    seeds and creation days of its rows, and what differs from today's config (empty: today's)."""

    label: str
    hash: str
    seeds: Tuple[Any, ...]
    dates: Tuple[str, ...]
    differences: Tuple[str, ...]


def expected_configs(claim: Claim, budget: str, extra: Sequence[str] = ()) -> Dict[str, Dict[str, Any]]:
    """Per run label, :func:`comparable` of the config the claim trains today under ``budget`` with the
    ``--set`` items ``extra``."""
    return {
        spec.label: comparable(load_config(spec.preset, claim.overrides(spec, budget, extra)).to_dict())
        for spec in claim.runs
    }


# Cell options whose default changed after rows were stored without them: (cell, option, the value a row
# that does not name it was trained with if it was created before the given UTC time: the option's first day,
# or the change of its default). The options mapping is free-form, so the schema cannot fill these in; a
# preset that wants those rows to count names the old value.
CHANGED_DEFAULTS = (
    ("irnn", "u_init", "uniform", "2026-11-26T20:46"),
    ("sarnn", "coordinator_state_grad", True, "2026-11-27T18:10"),
)


def as_trained(stored: Dict[str, Any], created: str = "") -> Dict[str, Any]:
    """``stored`` with the options :data:`CHANGED_DEFAULTS` lists filled in with what a row created
    before the option existed was trained with."""
    model = stored.get("model") or {}
    options = dict(model.get("options") or {})
    for cell, option, value, since in CHANGED_DEFAULTS:
        if model.get("cell") == cell and option not in options and created < since:
            options[option] = value
    return {**stored, "model": {**model, "options": options}} if model else stored


def differences(stored: Dict[str, Any], expected: Dict[str, Any], created: str = "") -> List[str]:
    """What differs between a stored row's config (created at ``created``, ISO) and today's
    :func:`comparable` config; empty: current."""
    try:
        then = comparable(from_dict(as_trained(stored, created)).to_dict())
    except ConfigError as error:
        return [f"its config no longer loads ({error})"]
    out = []
    for key in sorted(set(then) | set(expected)):
        old, new = then.get(key), expected.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            out += [
                f"{key}.{name} {_shown(old, name)} -> {_shown(new, name)}"
                for name in sorted(set(old) | set(new))
                if old.get(name, _UNSET) != new.get(name, _UNSET)
            ]
        elif old != new:
            out.append(f"{key} {old!r} -> {new!r}")
    return out


_UNSET = object()


def stored_hash(stored: Dict[str, Any], created: str = "") -> str:
    """:func:`config_hash` of a stored row's config read as :func:`differences` reads it (one that no longer
    loads: of what it stores), so a row is current exactly when it hashes as today's config."""
    try:
        config = from_dict(as_trained(stored, created)).to_dict()
    except ConfigError:
        config = stored
    return config_hash(config)


def configurations(rows: Sequence[Dict[str, Any]], expected: Dict[str, Dict[str, Any]]) -> Dict[str, List[Tried]]:
    """Per run label of ``expected`` (:func:`expected_configs`), the distinct configs its ``rows`` were
    trained with, in the order of their first row (rows of labels the claim no longer has are left out)."""
    groups: Dict[str, Dict[str, List[Dict[str, Any]]]] = {}
    for row in rows:
        if row.get("name") in expected:
            key = stored_hash(row.get("config") or {}, str(row.get("created") or ""))
            groups.setdefault(row["name"], {}).setdefault(key, []).append(row)
    out: Dict[str, List[Tried]] = {}
    for label, by_hash in groups.items():
        for key, found in by_hash.items():
            first = found[0]
            why = differences(first.get("config") or {}, expected[label], str(first.get("created") or ""))
            seeds = tuple(sorted({seed_of(row) for row in found}, key=seed_key))
            dates = tuple(sorted({str(row.get("created") or "")[:10] for row in found} - {""}))
            out.setdefault(label, []).append(Tried(label, key, seeds, dates, tuple(why)))
    return out


def _shown(options: Dict[str, Any], name: str) -> str:
    return repr(options[name]) if name in options else "unset"


def redefined(analyses: Dict[str, Dict[str, Any]]) -> List[str]:
    """The stored analyses of a row measured under another definition than today's
    (:data:`.analyses.DEFINITIONS`); empty: current."""
    return [
        f"analysis {kind} of {found.get('of', 'the whole state')!r} -> {DEFINITIONS[kind]!r}"
        for kind, found in analyses.items()
        if kind in DEFINITIONS and found.get("of", "the whole state") != DEFINITIONS[kind]
    ]


def stale_row(row: Dict[str, Any], why: Sequence[str]) -> StaleRow:
    return StaleRow(row.get("name") or "?", seed_of(row), str(row.get("created") or "")[:10], tuple(why))
