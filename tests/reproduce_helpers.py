"""Synthetic result rows and claims for the reproduction tests (tests/test_reproduce*.py)."""

from __future__ import annotations

import dataclasses

from ltdrnn import reproduce as R

CLAIM_YAML = """
claims:
  - id: demo
    paper: TARNN
    title: demo
    claim: a beats b
    paper_numbers: [{what: a, value: "1", source: "Table 1"}]
    runs: [{label: a, preset: reproduce/toy-tarnn}, {label: b, preset: reproduce/toy-lstm}]
    budgets:
      quick: {overrides: [train.steps=1], note: tiny}
      paper: {overrides: [], note: full}
    conditions: [{what: "the presets' settings", keys: ["*"], source: ours}]
    tuning: {how: "nothing was chosen by looking at its results"}
    checks: [{expr: "%s", says: "a beats b"}]
"""


def demo(expr: str, **check) -> R.Claim:
    """The demo claim with one rule ``expr`` and the extra keys ``check`` (YAML flow values) on it;
    ``success`` goes to the claim."""
    success = check.pop("success", None)
    extra = "".join(f", {key}: {value}" for key, value in check.items())
    text = (CLAIM_YAML % expr.replace('"', '\\"')).replace('says: "a beats b"}', f'says: "a beats b"{extra}}}')
    if success is not None:
        text = text.replace("    checks:", f"    success: {success}\n    checks:")
    found = R.load_claims(text)[0]
    return dataclasses.replace(found, frozen=R.claims.run_hashes(found, "paper"))  # as the table freezes them


def row(
    metric,
    history=(),
    higher=True,
    skip=None,
    status="finished",
    baseline=0.25,
    cell="tarnn",
    seed=1,
    train_s=1.0,
    train=None,
    optim=None,
    steps=None,
    **metrics,
):
    """A stored result row as the store returns it: the test metric, the validation history
    ``[(step, value), ...]``, the task's direction and trivial baseline, the cell and the seed; ``train``
    and ``optim``: more of its config, ``steps``: the steps it took, ``metrics``: more of its metrics."""
    return {
        "metric": metric,
        "status": status,
        "params": 10,
        "train_time_s": train_s,
        "cell": cell,
        "config": {"train": {"seed": seed, **(train or {})}, "optim": dict(optim or {})},
        "metrics": {
            "higher_is_better": higher,
            "skip_fraction": skip,
            "baseline": baseline,
            "metric_name": "accuracy" if higher else "mse",
            **metrics,
        },
        "timings": {} if steps is None else {"steps": steps},
        "history": [{"step": s, "val_metric": v} for s, v in history],
    }


def claim(cid: str, tuned: bool = False) -> R.Claim:
    """The packaged claim ``cid``, judged on every seed of its rows as an untuned claim is (the rule tests
    use rows of seed 1); with ``tuned``, as the table has it (a tuned claim: on its held-out seeds only)."""
    found = R.find_claim(R.load_claims(), cid)
    return found if tuned else dataclasses.replace(found, tuning=R.Tuning(how="as untuned"))


def without_variants(found: R.Claim) -> R.Claim:
    """The claim as if its runs trained the papers' cells: its conditions without the variants that cap
    its verdict at partly."""
    return dataclasses.replace(found, conditions=[c for c in found.conditions if not c.variant])


def outcome(verdict, says_start: str):
    """The result of the verdict's rule whose sentence starts with ``says_start``."""
    return next(r for r in verdict.checks if r.check.says.startswith(says_start))


def current_config(claim, label, budget, seed, extra=()):
    """The resolved config a run of ``claim`` is trained with today, as ``run_claim`` stores it."""
    from ltdrnn.config import load_config

    spec = next(spec for spec in claim.runs if spec.label == label)
    return load_config(spec.preset, claim.overrides(spec, budget, [*extra, f"train.seed={seed}"])).to_dict()


def stored_row(store, name, seed, metric, created, study="reproduce/tarnn-toy/paper", cell="tarnn", config=None):
    """A results row as ``run_claim`` writes it; ``config`` defaults to today's config of the toy claim."""
    if config is None:
        config = current_config(claim("tarnn-toy"), name, study.split("/")[-1], seed)
    record = {
        "id": f"{name}-{seed}-{created}",
        "created": created,
        "status": "finished",
        "cell": cell,
        "task": "toy",
        "study": study,
        "name": name,
        "config": config,
        "metrics": {
            "metric": metric,
            "metric_name": "accuracy",
            "baseline": 0.25,
            "higher_is_better": True,
            "params": 10,
        },
        "timings": {"train_s": 60.0, "steps": 10, "epochs": 1.0},
        "history": [],
        "run_dir": f"runs/{name}-s{seed}-{created}",  # each re-run in a directory of its own
    }
    store.results.add(record)
