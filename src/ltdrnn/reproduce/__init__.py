"""Reproduce the source papers' headline claims and publish them, with the papers' numbers, in REPRODUCTION.md.

    ltdrnn reproduce list [--set KEY=VALUE ...]            the claims, and their verdicts so far
    ltdrnn reproduce run CLAIM [CLAIM ...] | all [--budget quick|paper] [--seeds 1,2,3] [--set KEY=VALUE ...]
                         [--store DB] [--resume]
                                                           train the claim's runs into the store, analyse
    ltdrnn reproduce report [--set KEY=VALUE ...]          REPRODUCTION.md, the per-claim notes and the plots
    ltdrnn reproduce check                                 validate the claims table

The claims table is packaged data, ``ltdrnn/presets/reproduce/_claims.yaml``. A claim names the paper's
numbers and their sources, the runs that measure ours (a label, a preset, overrides, analyses), two
budgets (``quick``: what a small CPU carries; ``paper``: the paper's protocol), the full-data run and
``checks``: expressions over measured numbers such as ``metric(tarnn) >= 0.99`` or
``steps_to(tarnn, 0.05) < steps_to(lstm, 0.05)``, each yes, no or undecided and judged seed by seed (yes
only in every seed). The machinery refuses a check that would pass on a run that learned nothing
(:func:`evaluate_check`: a subject at chance fails, a competitor at chance or not trained alike, a
censored speed comparison or a derived measure of an unsolved run leaves it undecided), and
``conditions`` give every setting of the runs a source (paper, authors' code, ours). All checks yes ->
reproduced (partly where a run trains a variant of the paper's cell), a check about one of the claim's
own cells yes -> partly, else not reproduced; a claim on proxy data is "proxy"; a claim with a judged
run missing "not run yet". A claim whose settings were chosen by looking at its results (``tuning``) is
judged on its held-out seeds 4, 5, 6 alone, its development seeds shown beside, and is "not measured on
held-out seeds" until they are stored; each run's config at the paper budget is frozen as a hash
(``frozen``), which ``check`` verifies.

Every run is a normal ``train(cfg)`` run stored in the results store (``--store``; this repository's is
``reproduction/results.db``) with
``study = "reproduce/<claim>/<budget>"``, ``name = <label>`` and its seed in ``train.seed``; the command
that produced it is kept in the run's ``notes``. A stored row counts only while its config is the one the
claim trains today (:mod:`.staleness`); stale rows are listed in the notes, never judged. Analyses
(gradient norm versus lag, MIST Fig. 2; ||dh_T/dh_1|| / ||dh_T/dh_{T-1}||, iRNN Fig. 3) go to the table
``reproduce_analyses`` of the same database. ``report`` reads only the database, so the document can be
regenerated anywhere the database is.

The package, by concern: :mod:`.expressions` (the rule language), :mod:`.claims` (the table's schema,
checked by the typed config machinery, and its validation), :mod:`.measurements` (the numbers over
seeds, censored steps), :mod:`.verdicts` (rule outcomes, the verdict), :mod:`.staleness` (which stored
rows are current), :mod:`.store` (the database), :mod:`.analyses` (gradient analyses in float64, a copy
row's recall re-measured), :mod:`.running` (training a claim), :mod:`.page` (the summary), :mod:`.notes`
(the per-claim notes) and :mod:`.plots`. The command line is :mod:`ltdrnn.cli.reproduce`.
"""

from .analyses import AnalysisWatcher as AnalysisWatcher
from .analyses import jacobian_ratio as jacobian_ratio
from .claims import ANALYSES as ANALYSES
from .claims import BUDGETS as BUDGETS
from .claims import Budget as Budget
from .claims import Check as Check
from .claims import Claim as Claim
from .claims import FullRun as FullRun
from .claims import PaperNumber as PaperNumber
from .claims import RunSpec as RunSpec
from .claims import Tuning as Tuning
from .claims import config_hash as config_hash
from .claims import find_claim as find_claim
from .claims import load_claims as load_claims
from .claims import validate as validate
from .expressions import ClaimError as ClaimError
from .expressions import Expression as Expression
from .measurements import CHANCE_MARGIN as CHANCE_MARGIN
from .measurements import Measurements as Measurements
from .measurements import Summary as Summary
from .measurements import format_number as format_number
from .measurements import mean_text as mean_text
from .measurements import steps_to as steps_to
from .notes import cpu_minutes as cpu_minutes
from .notes import readings_text as readings_text
from .page import ours_text as ours_text
from .page import render as render
from .plots import make_plots as make_plots
from .running import run_claim as run_claim
from .staleness import StaleRow as StaleRow
from .store import Store as Store
from .verdicts import HELD_OUT_SEEDS as HELD_OUT_SEEDS
from .verdicts import STATUSES as STATUSES
from .verdicts import evaluate_check as evaluate_check
from .verdicts import judge as judge
