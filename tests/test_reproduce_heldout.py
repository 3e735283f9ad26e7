"""Held-out seeds: a claim tuned by looking at its results is judged on seeds it was never tuned on, each
run's config is frozen as a hash, and the configurations tried are counted and listed."""

import dataclasses
import re

import pytest

from ltdrnn import reproduce as R
from reproduce_helpers import CLAIM_YAML, claim, current_config, demo, row, stored_row

TOY = "reproduce/tarnn-toy/paper"


def tuned(found: R.Claim, runs=("a",)) -> R.Claim:
    return dataclasses.replace(found, tuning=R.Tuning(how="chosen on seeds 1-3", runs=list(runs)))


def rows(a: dict, b: dict) -> R.Measurements:
    """Rows of the demo claim's runs ``a`` (TARNN) and ``b`` (LSTM): seed -> test accuracy."""
    return R.Measurements(
        {
            "a": [row(m, seed=seed) for seed, m in a.items()],
            "b": [row(m, cell="lstm", seed=seed) for seed, m in b.items()],
        }
    )


PASS = {1: 0.95, 2: 0.96, 3: 0.97}


def test_a_tuned_claim_is_judged_on_its_held_out_seeds_alone():
    # tuned on seeds 1-3, where it holds; on the held-out seeds 4-6 the rule fails
    demo_claim = tuned(demo("metric(a) >= 0.9"))
    found = rows({**PASS, 4: 0.6, 5: 0.95, 6: 0.5}, {seed: 0.5 for seed in range(1, 7)})
    verdict = R.judge(demo_claim, found, "paper")
    assert verdict.status == "not reproduced"
    assert verdict.checks[0].outcome == "no" and verdict.checks[0].seeds == (1, 3)
    assert verdict.development.status == "reproduced" and verdict.development.checks[0].seeds == (3, 3)
    assert verdict.reason.startswith("On the held-out seeds 4, 5, 6 (a tuned on the development seeds, reproduced")
    # the development seeds' numbers are shown, never judged: held-out seeds that pass decide alone
    passing = rows({1: 0.5, 2: 0.5, 3: 0.5, 4: 0.95, 5: 0.96, 6: 0.97}, {seed: 0.5 for seed in range(1, 7)})
    verdict = R.judge(demo_claim, passing, "paper")
    assert verdict.status == "reproduced" and verdict.development.status == "not reproduced"


def test_a_tuned_claim_without_every_held_out_row_is_not_measured_with_the_command_that_measures_it():
    demo_claim = tuned(demo("metric(a) >= 0.9"))
    verdict = R.judge(demo_claim, rows(PASS, {1: 0.5, 2: 0.5, 3: 0.5}), "paper")
    assert verdict.status == "not measured on held-out seeds"
    assert [r.outcome for r in verdict.checks] == ["not measured"]
    assert verdict.development.status == "reproduced"
    assert verdict.pending == ["a (seeds 4, 5, 6)", "b (seeds 4, 5, 6)"]
    assert "not stored yet: a (seeds 4, 5, 6), b (seeds 4, 5, 6)" in verdict.reason
    assert "`ltdrnn reproduce run demo --budget paper --seeds 4,5,6 --resume` trains them" in verdict.reason
    # one held-out seed missing is not enough: a rule judged on fewer seeds would pass more easily
    partial = rows({**PASS, 4: 0.95, 5: 0.95}, {seed: 0.5 for seed in range(1, 7)})
    verdict = R.judge(demo_claim, partial, "paper")
    assert verdict.status == "not measured on held-out seeds" and "not stored yet: a (seed 6)." in verdict.reason
    # on proxy data the claim stays a proxy
    proxy = dataclasses.replace(demo_claim, data="proxy")
    assert R.judge(proxy, rows(PASS, {1: 0.5, 2: 0.5, 3: 0.5}), "paper").status == "proxy"


def test_an_untuned_claim_keeps_its_seeds_one_to_three():
    demo_claim = demo("metric(a) >= 0.9")
    assert not demo_claim.tuning.tuned
    verdict = R.judge(demo_claim, rows(PASS, {1: 0.5, 2: 0.5, 3: 0.5}), "paper")
    assert verdict.status == "reproduced" and verdict.checks[0].seeds == (3, 3) and verdict.development is None
    # every current row counts for it, a later seed's too
    verdict = R.judge(demo_claim, rows({**PASS, 4: 0.5}, {seed: 0.5 for seed in range(1, 5)}), "paper")
    assert verdict.status == "not reproduced" and verdict.checks[0].seeds == (3, 4)


def test_the_config_hash_changes_with_the_preset_and_check_reports_a_run_changed_since_it_was_frozen():
    toy = claim("tarnn-toy", tuned=True)
    frozen = R.claims.run_hashes(toy, "paper")
    assert frozen == toy.frozen and len(frozen["tarnn"]) == 8
    spec = toy.runs[0]
    changed = dataclasses.replace(
        toy, runs=[dataclasses.replace(spec, overrides=[*spec.overrides, "model.options.eta=0.02"]), toy.runs[1]]
    )
    now = R.claims.run_hashes(changed, "paper")
    assert now["tarnn"] != frozen["tarnn"] and now["lstm"] == frozen["lstm"]
    assert R.claims.unfrozen(changed) == [
        f"tarnn-toy/tarnn: frozen: {frozen['tarnn']}, but its paper config hashes to {now['tarnn']} (the preset "
        "or the claim's overrides changed since it was frozen; rows of a tuned claim's held-out seeds trained "
        "before the change are stale)"
    ]
    # what does not change a result leaves it: the seed, the device, threads, the bookkeeping
    config = current_config(toy, "tarnn", "paper", 1)
    elsewhere = {**config, "train": {**config["train"], "seed": 9, "device": "cuda", "threads": 2}, "notes": "x"}
    assert R.config_hash(elsewhere) == R.config_hash(config) == frozen["tarnn"]
    # a stored row hashes as the check of stale rows reads it: current exactly when its hash is today's
    assert R.staleness.stored_hash(config) == frozen["tarnn"]


def test_the_page_shows_the_held_out_verdict_the_hashes_and_every_configuration_tried(tmp_path):
    toy = claim("tarnn-toy", tuned=True)
    store = R.Store(str(tmp_path / "r.db"))
    old = current_config(toy, "tarnn", "paper", 1)
    old = {**old, "model": {**old["model"], "options": {**old["model"]["options"], "eta": 0.02}}}
    stored_row(store, "tarnn", 1, 0.6, "2026-11-22T10:00:00", config=old)  # a configuration tried, now stale
    for seed in (1, 2, 3):
        stored_row(store, "tarnn", seed, 1.0, f"2026-11-23T1{seed}:00:00")
        stored_row(store, "lstm", seed, 0.45, f"2026-11-23T1{seed}:30:00", cell="lstm")
    doc = R.render(str(tmp_path / "r.db"), str(tmp_path / "R.md"), str(tmp_path / "plots"), [toy], plots=False)
    text, notes = doc.read_text(), (tmp_path / "reproduction/notes/tarnn-toy.md").read_text()
    assert "**1 claims: 0 reproduced, 0 partly, 0 not reproduced; 1 not measured on held-out seeds.**" in text
    row_text = next(line for line in text.splitlines() if line.startswith("| [tarnn-toy]"))
    assert "held-out: not measured. dev: accuracy: tarnn 100% ± 0%; lstm 45% ± 0%" in row_text
    assert "| **tuned** (tarnn): seeds 4, 5, 6; configs: 6 in all |" in row_text  # tarnn: 2 stored + 3 screens
    assert "Configurations tried: tarnn 5, lstm 1." in notes  # per run, in the claim's notes
    hashes = f"Config hashes: tarnn `{toy.frozen['tarnn']}`; lstm `{toy.frozen['lstm']}`."
    assert hashes in text
    command = "`ltdrnn reproduce run tarnn-toy --budget paper --seeds 4,5,6 --resume`"
    assert f"To measure the held-out seeds: {command}." in text
    assert "### Development seeds (tuned on; shown, deciding nothing): reproduced" in notes
    assert "## Runs on the development seeds (tuned on; deciding nothing)" in notes
    assert f"- `tarnn`: 5\n  - `{R.staleness.stored_hash(old)}` (seed 1; 2026-11-22): stored -> today's: " in notes
    assert f"  - `{toy.frozen['tarnn']}` (seeds 1, 2, 3; 2026-11-23): today's config" in notes
    assert "  - screen: reading code, one η per Euler step: 65.2%" in notes
    # the held-out rows, once stored, decide
    for seed in (4, 5, 6):
        stored_row(store, "tarnn", seed, 1.0, f"2026-11-29T1{seed}:00:00")
        stored_row(store, "lstm", seed, 0.9, f"2026-11-29T1{seed}:30:00", cell="lstm")
    text = R.render(str(tmp_path / "r.db"), str(tmp_path / "R.md"), str(tmp_path / "p"), [toy], plots=False).read_text()
    assert "**1 claims: 0 reproduced, 1 partly, 0 not reproduced.**" in text
    assert "1✓ 3/3 2✗ 0/3 · dev 1✓ 3/3 2✓ 3/3" in text
    # the summary shows the numbers that decide; the development seeds' are in the notes
    row_text = next(line for line in text.splitlines() if line.startswith("| [tarnn-toy]"))
    assert "| held-out: accuracy: tarnn 100% ± 0%; lstm 90% ± 0% |" in row_text and "dev:" not in row_text


UNTUNED = 'tuning: {how: "nothing was chosen by looking at its results"}'


@pytest.mark.parametrize(
    "new, message",
    [
        ("", "claims[0].tuning: missing"),
        ('tuning: {how: "x", runs: [c]}', "claim 'demo': tuning.runs: unknown run label 'c'; labels: a, b"),
        ('tuning: {how: "x", screens: {c: [y]}}', "claim 'demo': tuning.screens: unknown run label 'c'"),
        ('tuning: {how: " ", runs: [a]}', "claim 'demo': tuning.how: expected what was tuned by looking at results"),
        (UNTUNED + "\n    frozen: {c: abc}", "claim 'demo': frozen: unknown run label 'c'"),
    ],
)
def test_every_claim_says_how_its_settings_were_chosen(new, message):
    text = CLAIM_YAML.replace(UNTUNED, new, 1)
    assert text != CLAIM_YAML
    with pytest.raises(R.ClaimError, match=re.escape(message)):
        R.load_claims(text % "metric(a) > 0")
