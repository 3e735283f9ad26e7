"""Running a claim: each run once per seed through ``train(cfg)`` into the store, with its analyses,
and the command lines kept with every row."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from ..config import DEFAULT_STORE, ConfigError, load_config
from ..results import seed_of
from .analyses import AnalysisWatcher, traces_training
from .claims import Claim, RunSpec
from .expressions import ClaimError
from .measurements import Measurements
from .store import Store

DEFAULT_SEEDS = (1, 2, 3)
DEFAULT_RUNS = "runs/reproduce"


def invocation(
    claim_id: str, budget: str, extra: Sequence[str], seeds: Sequence[int] = DEFAULT_SEEDS, store: str = DEFAULT_STORE
) -> str:
    """The command line that runs one claim (kept in each run's notes; ``--seeds`` only if not the
    default, ``--store`` only if not the default store)."""
    words = ["ltdrnn", "reproduce", "run", claim_id, "--budget", budget]
    if tuple(seeds) != DEFAULT_SEEDS:  # a list; one seed with a trailing comma (a bare number is a count)
        words += ["--seeds", ",".join(str(s) for s in seeds) + ("," if len(seeds) == 1 else "")]
    for item in extra:
        words += ["--set", item]
    if store != DEFAULT_STORE:
        words += ["--store", store]
    return " ".join(shlex.quote(w) for w in words)


def train_command(spec: RunSpec, overrides: Sequence[str]) -> str:
    """The ``ltdrnn train`` command equivalent to one run (without the analyses)."""
    return " ".join(shlex.quote(w) for w in ["ltdrnn", "train", spec.preset, *overrides])


def run_config(
    claim: Claim,
    spec: RunSpec,
    budget: str,
    store: str,
    runs_dir: str,
    extra: Sequence[str] = (),
    progress: bool = False,
    seed: int = DEFAULT_SEEDS[0],
    resume: bool = False,
):
    """The config of one run and seed under ``budget``, stored as ``study = reproduce/<claim>/<budget>``,
    ``name = <label>``, with the command lines that reproduce it in ``notes``. Its run directory is new
    (``<label>-s<seed>-<UTC stamp>``), or with ``resume`` the newest interrupted one of the same config
    (:func:`interrupted_directory`), which training then continues."""
    from ..results import utc_stamp

    stamp = utc_stamp()
    overrides = claim.overrides(spec, budget, [*extra, f"train.seed={seed}"])
    # the notes keep both command lines as run, so the document shows them even if the table changes
    notes = f"{invocation(claim.id, budget, extra, (seed,), store)}\n{train_command(spec, overrides)}"
    bookkeeping = [
        f"study={claim.study(budget)}",
        f"name={spec.label}",
        f"results={store}",
        f"run_dir={fresh_directory(Path(runs_dir) / claim.id / budget / f'{spec.label}-s{seed}-{stamp}')}",
        f"train.progress={str(progress).lower()}",
    ]
    cfg = load_config(spec.preset, overrides + bookkeeping)
    cfg.notes = notes
    if resume and not traces_training(spec):  # its trace would lose the steps before the checkpoint
        cfg.run_dir = str(interrupted_directory(Path(cfg.run_dir).parent, f"{spec.label}-s{seed}-", cfg) or cfg.run_dir)
    return cfg


def interrupted_directory(parent: Path, prefix: str, cfg) -> Optional[Path]:
    """The newest directory ``<prefix>*`` in ``parent`` that holds a checkpoint (``last.pt``) but no
    result (``result.json``) and whose ``config.yaml`` equals ``cfg`` but for its run directory and
    notes: a run killed before it finished, which ``--resume`` continues rather than starts again."""
    wanted = _comparable(cfg.to_dict())
    found = [
        path
        for path in parent.glob(f"{prefix}*")
        if (path / "last.pt").is_file() and not (path / "result.json").exists() and (path / "config.yaml").is_file()
    ]
    for path in sorted(found, key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            if _comparable(load_config(str(path / "config.yaml")).to_dict()) == wanted:
                return path
        except ConfigError:  # a config this release cannot read is not the same run
            continue
    return None


def _comparable(config: Dict[str, Any]) -> Dict[str, Any]:
    return {key: value for key, value in config.items() if key not in ("run_dir", "notes")}


def fresh_directory(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``, ... if it exists: a retrain within the same second as an
    earlier run of the same label and seed (an analysis interrupted after a short run) gets a directory of
    its own instead of resuming the finished one."""
    candidate, n = path, 2
    while candidate.exists():
        candidate, n = path.with_name(f"{path.name}-{n}"), n + 1
    return candidate


def run_claim(
    claim: Claim,
    budget: str = "quick",
    store: str = DEFAULT_STORE,
    runs_dir: str = DEFAULT_RUNS,
    extra: Sequence[str] = (),
    only: Optional[Sequence[str]] = None,
    skip_done: bool = False,
    progress: bool = False,
    log: Callable[[str], None] = print,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    jobs: int = 1,
) -> List[str]:
    """Train each of the claim's runs once per seed under ``budget`` into ``store`` and store their
    analyses, ``jobs`` at a time (:func:`ltdrnn.studies.run_study`); returns the ``label (seed S)`` items
    that failed (a failing run does not stop the others). ``skip_done`` skips the label and seed pairs that
    already have a current row for the budget and ``extra`` with every analysis of its run (a stale row,
    or one whose analysis was interrupted, is trained again)."""
    from ..studies import run_study

    if budget not in claim.budgets:
        raise ClaimError(f"budget: expected one of {', '.join(claim.budgets)}, got {budget!r}")
    unknown = sorted(set(only or ()) - set(claim.labels))
    if unknown:
        raise ClaimError(f"--only: unknown run label {unknown[0]!r}; labels of {claim.id}: {', '.join(claim.labels)}")
    runs = claim_runs(claim, budget, store, runs_dir, extra, only, progress, seeds, resume=skip_done)
    outcome = run_study(
        runs,
        store,
        lambda location: finished_pairs(claim, Store(location).measurements(claim, budget, extra)),
        jobs,
        skip_done,
        log,
        prefix=f"[{claim.id}/{budget}] ",
    )
    return [f"{label} (seed {seed})" for label, seed, _ in outcome.failures]


def claim_runs(
    claim: Claim,
    budget: str,
    store: str,
    runs_dir: str,
    extra: Sequence[str] = (),
    only: Optional[Sequence[str]] = None,
    progress: bool = False,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    resume: bool = False,
) -> list:
    """The claim's runs under ``budget`` as study runs: each run label once per seed, its analyses
    stored after training; with ``resume`` an interrupted run continues its directory."""
    from functools import partial

    from ..studies import StudyRun

    runs = []
    for spec in claim.runs:
        for seed in seeds:
            if only and spec.label not in only:
                continue
            cfg = run_config(claim, spec, budget, store, runs_dir, extra, progress, seed, resume)
            work = partial(train_with_analyses, spec, store, cfg.to_dict())
            runs.append(StudyRun(spec.label, seed, work, start_line=cfg.notes.splitlines()[1]))
    return runs


def train_with_analyses(
    spec: RunSpec, store: str, config: Dict[str, Any], threads: Optional[int] = None, progress: Optional[bool] = None
) -> Dict[str, Any]:
    """The work of one run of a claim: train it (storing its row), continuing its directory's checkpoint
    if it has one, then store its analyses."""
    from ..studies import configured
    from ..train import train

    cfg = configured(config, threads, progress)
    watcher = AnalysisWatcher(spec, cfg)
    record = train(cfg, resume="auto", callbacks=[watcher])
    stored = Store(store)
    for kind, data in watcher.finish(record).items():
        stored.add_analysis(record["id"], cfg.study, spec.label, kind, data)
    return record


def measure_recall(claim: Claim, store: str, extra: Sequence[str] = (), log: Callable[[str], None] = print) -> int:
    """Store a ``recall`` analysis (:func:`.analyses.recall_from_checkpoint`) for each current copy row
    of ``claim``, in every budget and its full-data rows, whose test metrics lack ``recall_accuracy``
    (rows trained before it was measured); returns how many rows could not be measured."""
    from .analyses import recall_from_checkpoint
    from .expressions import Unmeasured

    stored = Store(store)
    found = [*stored.by_budget(claim, extra).values(), stored.full_rows(claim, extra)]
    missing = 0
    for measurements in [m for m in found if m is not None]:
        for label, rows in measurements.seeds.items():
            for row, analyses in zip(rows, measurements.analyses_of.get(label, [{}] * len(rows))):
                test = (row.get("metrics") or {}).get("test") or {}
                if row.get("task") != "copy" or "recall_accuracy" in test or "recall" in analyses:
                    continue
                where = f"[{claim.id}] {label} (seed {seed_of(row)}, {row['study']})"
                try:
                    data = recall_from_checkpoint(row)
                except Unmeasured as error:
                    missing += 1
                    log(f"{where}: not measured: {error}")
                    continue
                stored.add_analysis(row["id"], row["study"], label, "recall", data)
                log(f"{where}: recall {100 * data['accuracy']:.3f}% from {data['checkpoint']}")
    return missing


def finished_pairs(claim: Claim, found: Measurements) -> Set[Tuple[str, Any]]:
    """The ``(label, seed)`` pairs of ``found`` whose row has every analysis its run asks for: the row
    is written when training ends, the analyses after it, so a process killed in between (MIST's
    analysis once ran out of memory) leaves a row without them."""
    wanted = {spec.label: spec.analyses for spec in claim.runs}
    return {
        (label, seed_of(row))
        for label, rows in found.seeds.items()
        for row, analyses in zip(rows, found.analyses_of.get(label, [{}] * len(rows)))
        if all(kind in analyses for kind in wanted.get(label, ()))
    }
