"""Hyperparameter sweeps on Optuna: ``ltdrnn sweep run`` and ``ltdrnn sweep report``.

A sweep spec (YAML, packaged under ``presets/sweeps/<group>/<name>.yaml`` or any file) names the config
the trials start from and the search space over its dotted keys::

    description: MIST protocol on pMNIST
    base: mist/pmnist                     # preset or config file of every trial
    set: [train.epochs=30]                # overrides applied to the base (optional)
    sampler: random                       # random | tpe | grid
    trials: 50                            # the study's total (grid: default the grid size)
    direction: maximize                   # maximize | minimize | auto (from the task's metric)
    seed_per_trial: true                  # train.seed = base seed + trial number (fresh initialisation)
    params:
      optim.lr: {distribution: log-float, low: 1.0e-4, high: 10}
      optim.weight_decay: {distribution: categorical, choices: [1.0e-6, 1.0e-5]}
      train.epochs: {distribution: int, low: 10, high: 50, step: 10}
    pruner: {name: median, n_startup_trials: 5, n_warmup_steps: 0}   # or none | percentile | hyperband
    retries: 2                            # re-runs of a trial whose worker died
    report: {top_fraction: 0.1}           # or {top_k: 5}

A spec may start from another with ``extends: <group>/<name>`` (its own keys win; ``params`` and
``report`` merge).

Every trial is one ``train(cfg)`` of the base config with the trial's values set; its run is stored in
the results database of single runs (``cfg.results``, or ``--store``) with ``study`` set to the study's
name, and the trial keeps the run id (user attribute ``run_id``). The objective is the validation metric
of the selected checkpoint (``metrics.val_best``). The trainer reports every validation to the trial
(``train(..., on_validation=...)``) so a pruner can end hopeless trials; a pruned run is stored with
status ``pruned``.

Workers: any number of processes on any number of machines share one study through its database
(``--store``, the database of the runs' rows too: a SQLite file by default, any SQLAlchemy URL such as
PostgreSQL for several machines).
The trial budget is the study's total. Exactly-once bookkeeping, also on SQLite:

- a trial runs where it was claimed: a worker inserts ``(study, first trial number, attempt)`` into the
  table ``ltdrnn_sweep_claims`` of the study's database before it runs a trial; the primary key lets one
  insert win, so a queued trial taken by two workers at once runs once;
- the budget counts first attempts ("roots") by trial number, so when two workers start the last trial
  at the same moment, the one with the higher number gives its trial back unrun (state FAIL, user
  attribute ``not_run``) and stops;
- a worker that dies (killed, machine lost) stops its heartbeat; after the grace period any worker marks
  its trial FAIL (Optuna's ``fail_stale_trials``) and Optuna's ``RetryHeartbeatStaleTrialCallback``
  queues a retry with the same parameters, up to ``retries`` times; the retry resumes the run's last
  checkpoint when it can see the run directory. Ctrl-C marks the trial FAIL and queues the retry at once;
- a trial whose training raises is FAIL with the error in user attribute ``error`` and a results row
  with status ``failed``; it is not retried (the same parameters would fail again);
- workers keep running until no trial is waiting or running, so queued retries are not left behind.

The package, by concern: :mod:`.spec` (the schema and its checks, packaged specs), :mod:`.trials` (trial
configs, the default objective), :mod:`.storage` (Optuna storage, study, claims, heartbeats),
:mod:`.worker` (the worker loop, local worker processes), :mod:`.report` (summary, importance, plot,
markdown). The command line is :mod:`ltdrnn.cli.sweep`.
"""

from .report import has_study, parameter_importance, study_markdown, study_report, study_summary, top_k
from .spec import Param, Range, SweepSpec, list_sweeps, load_spec
from .storage import open_storage, open_study
from .trials import base_config, check_params_apply, resolve_direction, train_objective, trial_config
from .worker import run_worker, run_workers

__all__ = [
    "Param",
    "Range",
    "SweepSpec",
    "base_config",
    "check_params_apply",
    "has_study",
    "list_sweeps",
    "load_spec",
    "open_storage",
    "open_study",
    "parameter_importance",
    "resolve_direction",
    "run_worker",
    "run_workers",
    "study_markdown",
    "study_report",
    "study_summary",
    "top_k",
    "train_objective",
    "trial_config",
]
