"""The worker loop: run trials of a study until its budget is used and nothing is waiting or running;
several workers in processes of this machine (``--jobs K``)."""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

from ..config import DEFAULT_STORE, ConfigError
from .spec import SweepSpec, load_spec
from .storage import (
    Claims,
    Heartbeat,
    ask,
    fail_stale_trials,
    open_storage,
    open_study,
    optuna_module,
    pending,
    root_and_attempt,
    roots,
)
from .trials import Objective, check_params_apply, failed_row, resolve_direction, train_objective, trial_config


def run_worker(
    spec: SweepSpec | str,
    store: str = DEFAULT_STORE,
    study: Optional[str] = None,
    trials: Optional[int] = None,
    objective: Objective = train_objective,
    worker: int = 0,
    overrides: Sequence[str] = (),
    runs_dir: str = "runs",
    results: Optional[str] = None,
    heartbeat_s: int = 30,
    grace_s: Optional[int] = None,
    poll_s: Optional[float] = None,
    log: Callable[[str], None] = print,
) -> Dict[str, int]:
    """Run trials of the study until its budget is used and nothing is waiting or running.

    ``store``: the database of the study (Optuna's tables and the claims), a SQLite path or a URL;
    ``results``: the trials' results store (None: the base config's ``results``).
    ``objective(trial, cfg)`` returns the value to optimise for the trial's config (``train_objective``
    by default); it may raise ``optuna.TrialPruned``. Returns counts of what this worker did.
    """
    optuna_module()  # a clear message when Optuna is missing
    from optuna.trial import TrialState

    spec = spec if isinstance(spec, SweepSpec) else load_spec(spec)
    study_name = study or spec.study
    budget = spec.budget(trials)
    check_params_apply(spec, overrides)
    storage = open_storage(store, spec.retries, heartbeat_s, grace_s)
    handle = open_study(spec, storage, study_name, resolve_direction(spec, overrides), worker, budget)
    claims = Claims(store)
    me = f"{socket.gethostname()}:{os.getpid()}:{worker}"
    done = {"complete": 0, "pruned": 0, "failed": 0, "given_back": 0}
    poll_s = poll_s if poll_s is not None else max(1.0, storage.get_heartbeat_interval() / 2)
    try:
        while True:
            fail_stale_trials(handle)
            waiting = pending(handle, (TrialState.WAITING,))
            if not waiting and len(roots(handle)) >= budget:
                if not pending(handle, (TrialState.RUNNING,)):
                    break
                time.sleep(poll_s)  # another worker's trial may still fail and be queued again
                continue
            trial = ask(handle)
            storage.record_heartbeat(trial._trial_id)  # at once, so a worker dying from here on is noticed
            frozen = storage.get_trial(trial._trial_id)
            root, attempt = root_and_attempt(frozen)
            holder = claims.claim(study_name, root, attempt, trial.number, me)
            if holder == trial.number:
                continue  # queued trial taken by two workers at once; the other one runs it
            if holder is not None or (root == trial.number and roots(handle).index(trial.number) >= budget):
                reason = f"duplicate of trial {holder}" if holder is not None else f"budget of {budget} trials reached"
                trial.set_user_attr("not_run", reason)
                handle.tell(trial, state=TrialState.FAIL)
                done["given_back"] += 1
                continue
            state = _run_trial(
                handle, storage, trial, spec, study_name, root, attempt, objective, overrides, runs_dir, results, log
            )
            done[state] += 1
    finally:
        claims.dispose()
    return done


def _run_trial(
    handle, storage, trial, spec, study_name, root, attempt, objective, overrides, runs_dir, results, log
) -> str:
    optuna = optuna_module()
    from optuna.trial import TrialState

    values = {p.name: p.suggest(trial) for p in spec.params}
    cfg = trial_config(spec, values, root, study_name, overrides, runs_dir, results)
    label = f"trial {trial.number}" + (f" (retry {attempt} of trial {root})" if attempt else "")
    try:
        with Heartbeat(storage, trial._trial_id):
            value = objective(trial, cfg)
    except optuna.TrialPruned as pruned:
        handle.tell(trial, state=TrialState.PRUNED)
        log(f"{label}: pruned ({pruned}) {values}")
        return "pruned"
    except KeyboardInterrupt:
        trial.set_user_attr("error", "interrupted (KeyboardInterrupt)")
        failed = handle.tell(trial, state=TrialState.FAIL)
        storage.get_heartbeat_stale_trial_callback()(handle, failed)  # queue the retry now, not after the grace
        raise
    except Exception as error:  # the trial fails, the sweep goes on
        message = f"{type(error).__name__}: {error}"
        trial.set_user_attr("error", message[:2000])
        handle.tell(trial, state=TrialState.FAIL)
        if objective is train_objective:
            failed_row(cfg, message)
        log(f"{label}: FAILED {message} {values}")
        return "failed"
    handle.tell(trial, value)
    log(f"{label}: {value:.6g} {values}")
    return "complete"


def _worker_process(
    spec_data,
    store,
    study,
    trials,
    worker,
    overrides,
    runs_dir,
    results,
    heartbeat_s,
    threads,
    progress,
    outcomes=None,
) -> Dict[str, int]:
    """One worker of ``--jobs K``, in this process or a fresh one (then its counts go to ``outcomes``)."""
    import torch

    torch.set_num_threads(threads)
    extra = list(overrides) + [f"train.threads={threads}", f"train.progress={str(progress).lower()}"]
    counts = run_worker(
        load_spec(spec_data),
        store,
        study,
        trials,
        worker=worker,
        overrides=extra,
        runs_dir=runs_dir,
        results=results,
        heartbeat_s=heartbeat_s,
    )
    if outcomes is not None:
        outcomes.put(counts)
    return counts


def run_workers(
    spec: SweepSpec,
    workers: int,
    store: str,
    study: str,
    trials: Optional[int],
    first_worker: int = 0,
    overrides: Sequence[str] = (),
    runs_dir: str = "runs",
    results: Optional[str] = None,
    heartbeat_s: int = 30,
    progress: bool = True,
) -> List[Dict[str, int]]:
    """``workers`` processes on this machine, each a ``run_worker`` of the same study; returns the counts
    of the workers that ended normally (a worker that dies leaves its trial to the heartbeat rules).
    With ``progress`` the first worker's runs show their progress bars."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers: expected a positive number of worker processes, got {workers!r}")
    spec.budget(trials)  # a bad --trials fails here, before any worker starts
    threads = max(1, (os.cpu_count() or 1) // workers)
    args = [
        (
            spec.to_spec_data(),
            store,
            study,
            trials,
            first_worker + i,
            list(overrides),
            runs_dir,
            results,
            heartbeat_s,
            threads,
            progress and i == 0,
        )
        for i in range(workers)
    ]
    if workers == 1:
        return [_worker_process(*args[0])]
    # create the tables first: workers starting together would race to create them
    open_storage(store, spec.retries, heartbeat_s)
    Claims(store).dispose()
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    outcomes = context.Queue()
    # separate processes, not a pool: a pool ends every worker when one of them dies
    processes = [context.Process(target=_worker_process, args=(*a, outcomes)) for a in args]
    for process in processes:
        process.start()
    counts = []
    for process in processes:
        process.join()
        if process.exitcode != 0:
            print(
                f"ltdrnn sweep: worker process {process.pid} ended with exit code {process.exitcode}; "
                "its trial is failed and retried after the heartbeat grace period",
                file=sys.stderr,
            )
    while not outcomes.empty():
        counts.append(outcomes.get())
    return counts
