"""The reproduction's database: the results store of single runs (``runs``, one row per run and seed)
plus the table ``reproduce_analyses`` (one row per analysis of a run), and the measurements of a claim
read from them: the current rows only (:mod:`.staleness`), the stale ones kept aside to be listed."""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..results import seed_of
from .claims import BUDGETS, Claim
from .measurements import Measurements
from .staleness import Tried, configurations, differences, expected_configs, redefined, stale_row
from .verdicts import deciding_seeds, missing_seeds


class Store:
    """The results store plus the table ``reproduce_analyses`` (one row per analysis of a run)."""

    def __init__(self, location: str) -> None:
        from ..results import ResultStore, create_tables

        self.results = ResultStore(location)
        sa = self.results.sa
        self.table = sa.Table(
            "reproduce_analyses",
            sa.MetaData(),
            sa.Column("id", sa.String(64), primary_key=True),
            sa.Column("run_id", sa.String(200), nullable=False, index=True),
            sa.Column("study", sa.String(200), index=True),
            sa.Column("label", sa.String(100)),
            sa.Column("kind", sa.String(40), nullable=False),
            sa.Column("created", sa.String(40), nullable=False),
            sa.Column("data", sa.Text, nullable=False),
        )
        create_tables(sa, self.table.metadata, self.results.engine)

    def add_analysis(self, run_id: str, study: str, label: str, kind: str, data: Dict[str, Any]) -> None:
        row = {
            "id": uuid.uuid4().hex,
            "run_id": run_id,
            "study": study,
            "label": label,
            "kind": kind,
            "created": datetime.now(timezone.utc).isoformat(),
            "data": json.dumps(data),
        }
        with self.results.engine.begin() as connection:
            connection.execute(self.table.insert().values(**row))

    def analyses(self, study: str) -> Dict[str, Dict[str, Dict[str, Any]]]:
        """``{run_id: {kind: data}}`` for one study (the latest analysis of each kind)."""
        sa = self.results.sa
        query = sa.select(self.table).where(self.table.c.study == study).order_by(self.table.c.created)
        out: Dict[str, Dict[str, Any]] = {}
        with self.results.engine.connect() as connection:
            for row in connection.execute(query).mappings():
                out.setdefault(row["run_id"], {})[row["kind"]] = json.loads(row["data"])
        return out

    def measurements(
        self, claim: Claim, budget: str, extra: Sequence[str] = (), elsewhere: Sequence[str] = ()
    ) -> Measurements:
        """Per label, the latest current row of each seed (``train.seed`` of its config) under ``budget``,
        oldest first, and their analyses. Rows of the same label and seed are re-runs: the latest wins.
        A row is current if its config is the one the claim trains today with the ``--set`` items
        ``extra`` (:mod:`.staleness`); the others, and rows of labels the claim no longer has, are
        ``stale``, less those current with ``extra`` and ``elsewhere`` too (the full-data rows, which
        :meth:`full_rows` reads)."""
        study = claim.study(budget)
        expected = expected_configs(claim, budget, extra)
        other = expected_configs(claim, budget, [*extra, *elsewhere]) if elsewhere else {}
        by_run = self.analyses(study)
        latest: Dict[str, Dict[Any, Dict[str, Any]]] = {}
        stale = []
        for row in self.results.rows(study=study):  # oldest first
            label = row["name"]
            why = _why_stale(row, expected, by_run)
            if why and other and not _why_stale(row, other, by_run):
                continue
            if why:
                stale.append(stale_row(row, why))
                continue
            per_seed = latest.setdefault(label, {})
            per_seed.pop(seed_of(row), None)  # re-inserted last: the dict stays ordered by time
            per_seed[seed_of(row)] = row
        rows = {label: list(per_seed.values()) for label, per_seed in latest.items()}
        analyses = {label: [by_run.get(row["id"], {}) for row in found] for label, found in rows.items()}
        return Measurements(rows, analyses, stale)

    def configurations(self, claim: Claim, budget: str, extra: Sequence[str] = ()) -> Dict[str, List[Tried]]:
        """Per run label, the distinct configs the claim's rows under ``budget`` were trained with, stale or
        current (:func:`.staleness.configurations`): the configurations tried on the claim's own rows. The
        full-data rows are not among them: they train today's config on other data, chosen by nobody."""
        rows = self.results.rows(study=claim.study(budget))
        full = expected_configs(claim, budget, [*extra, *full_set(claim)]) if full_set(claim) else {}
        if full:
            rows = [row for row in rows if _why_stale(row, full, {})]
        return configurations(rows, expected_configs(claim, budget, extra))

    def by_budget(self, claim: Claim, extra: Sequence[str] = ()) -> Dict[str, Measurements]:
        """:meth:`measurements` of every budget, without the claim's full-data rows (:meth:`full_rows`)."""
        return {budget: self.measurements(claim, budget, extra, full_set(claim)) for budget in BUDGETS}

    def full_rows(self, claim: Claim, extra: Sequence[str] = ()) -> Optional[Measurements]:
        """The claim's full-data rows: those trained at the paper budget with the ``--set`` items of its
        ``full_run`` (and ``extra``); None where the claim has no full-data run."""
        if not full_set(claim):
            return None
        return self.measurements(claim, "paper", [*extra, *full_set(claim)])

    def shown_budget(self, claim: Claim, extra: Sequence[str] = ()) -> Tuple[Optional[str], Measurements]:
        """The budget whose runs the document shows and its measurements (see :func:`pick_budget`)."""
        return pick_budget(claim, self.by_budget(claim, extra))


def _why_stale(row: Dict[str, Any], expected: Dict[str, Dict[str, Any]], by_run: Dict[str, Any]) -> List[str]:
    """Why a stored row is not a current row of the claim whose configs of today are ``expected`` (empty:
    it is)."""
    label = row["name"]
    if label not in expected:
        return ["not a run of the claim"]
    created = str(row.get("created") or "")
    return differences(row.get("config") or {}, expected[label], created) + redefined(by_run.get(row["id"], {}))


def full_set(claim: Claim) -> List[str]:
    """The ``--set`` items that make a paper-budget row a full-data row (empty: the claim has none)."""
    return list(claim.full_run.set) if claim.full_run else []


def judged_rows(
    claim: Claim, found: Dict[str, Measurements], full: Optional[Measurements]
) -> Tuple[Claim, Optional[str], Measurements]:
    """``(the claim as judged, its budget, the rows that judge it)``: the full-data rows ``full`` once every
    judged run has each seed that decides (:func:`.verdicts.deciding_seeds`), the claim then judged on the
    papers' data (``data`` full, so no longer a proxy); until then the budget :func:`pick_budget` picks."""
    if full is not None and not missing_seeds(claim, full, deciding_seeds(claim)):
        return dataclasses.replace(claim, data="full"), "paper", full
    return (claim, *pick_budget(claim, found))


def pick_budget(claim: Claim, found: Dict[str, Measurements]) -> Tuple[Optional[str], Measurements]:
    """The paper budget if every judged run has a current result, else quick if so, else the one with
    more runs finished (None: nothing stored)."""
    done = {b: sum(label in found[b].seeds for label in claim.checked_labels) for b in BUDGETS}
    for budget in ("paper", "quick"):
        if done[budget] == len(claim.checked_labels):
            return budget, found[budget]
    budget = max(("quick", "paper"), key=lambda b: done[b])
    if not found[budget].seeds:
        return None, found["quick"]
    return budget, found[budget]
