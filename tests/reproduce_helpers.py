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
    return R.load_claims(text)[0]


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


def claim(cid: str) -> R.Claim:
    return R.find_claim(R.load_claims(), cid)


def without_variants(found: R.Claim) -> R.Claim:
    """The claim as if its runs trained the papers' cells: its conditions without the variants that cap
    its verdict at partly."""
    return dataclasses.replace(found, conditions=[c for c in found.conditions if not c.variant])


def outcome(verdict, says_start: str):
    """The result of the verdict's rule whose sentence starts with ``says_start``."""
    return next(r for r in verdict.checks if r.check.says.startswith(says_start))
