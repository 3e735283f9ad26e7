"""The one study runner (``ltdrnn.studies``): resume, parallel processes, failures, summary lines."""

import os
from functools import partial

import pytest

from ltdrnn.results import ResultStore, seed_of
from ltdrnn.studies import StudyRun, finished_rows, run_study, summary_line
from study_helpers import fail, meet, record, store_a_row


def by_label_and_seed(row):
    return row["name"], seed_of(row)


def test_resume_skips_the_pairs_the_store_holds_and_runs_the_rest(tmp_path):
    store, log = str(tmp_path / "r.db"), tmp_path / "log"
    ResultStore(store).add(record("a", 0))
    pairs = [("a", 0), ("a", 1), ("b", 0)]
    runs = [StudyRun(label, seed, partial(store_a_row, store, label, seed, log)) for label, seed in pairs]
    lines = []
    outcome = run_study(runs, store, finished_rows("s", by_label_and_seed), resume=True, log=lines.append)
    assert log.read_text().splitlines() == ["a 1 None None", "b 0 None None"]
    assert outcome.skipped == 1 and not outcome.failures and len(outcome.records) == 2
    assert lines == [
        "  a (seed 1): finished, test accuracy 50.0% (baseline 0.25), 10 params, 1.0 s, 3 steps",
        "  b (seed 0): finished, test accuracy 50.0% (baseline 0.25), 10 params, 1.0 s, 3 steps",
    ]
    # everything is stored now: a second call runs nothing; without resume, everything runs again
    assert run_study(runs, store, finished_rows("s", by_label_and_seed), log=lines.append).skipped == 3
    run_study(runs, store, finished_rows("s", by_label_and_seed), resume=False, log=lines.append)
    assert log.read_text().splitlines()[2:] == ["a 0 None None", "a 1 None None", "b 0 None None"]


def test_a_failing_run_is_reported_and_the_others_go_on(tmp_path):
    store, log = str(tmp_path / "r.db"), tmp_path / "log"
    runs = [
        StudyRun("a", 0, partial(store_a_row, store, "a", 0, log)),
        StudyRun("b", 0, partial(fail, "bad value"), start_line="ltdrnn train b"),
        StudyRun("c", 0, partial(store_a_row, store, "c", 0, log)),
    ]
    lines = []
    outcome = run_study(runs, store, log=lines.append, prefix="[x] ")
    assert outcome.failures == [("b", 0, "ValueError: bad value")]
    assert [r["name"] for r in outcome.records] == ["a", "c"]
    assert lines[1:3] == ["[x] b (seed 0): ltdrnn train b", "[x] b (seed 0): FAILED ValueError: bad value"]
    assert len(ResultStore(store).rows()) == 2


def test_jobs_2_runs_the_runs_in_two_processes_at_once(tmp_path):
    # each run waits until the other has started: run one after the other, the first would time out
    runs = [
        StudyRun("a", 0, partial(meet, str(tmp_path), "a", "b")),
        StudyRun("b", 0, partial(meet, str(tmp_path), "b", "a")),
    ]
    lines = []
    outcome = run_study(runs, jobs=2, log=lines.append)
    assert not outcome.failures, outcome.failures
    pids = {r["pid"] for r in outcome.records}
    assert len(pids) == 2 and os.getpid() not in pids
    # worker processes share the CPUs and show no progress bars
    assert {r["threads"] for r in outcome.records} == {max(1, (os.cpu_count() or 1) // 2)}
    assert {r["progress"] for r in outcome.records} == {False}
    assert sorted(line.split(":")[0] for line in lines) == ["  a (seed 0)", "  b (seed 0)"]


def test_each_pair_once_and_jobs_positive():
    run = StudyRun("a", 0, partial(fail, "never"))
    with pytest.raises(ValueError, match=r"runs: expected each \(label, seed\) once, got \('a', 0\) twice"):
        run_study([run, run])
    with pytest.raises(ValueError, match="jobs: expected a positive number"):
        run_study([run], jobs=0)


def test_summary_line_shows_what_the_record_has():
    assert summary_line(record("a", 0)) == "finished, test accuracy 50.0% (baseline 0.25), 10 params, 1.0 s, 3 steps"
    minimal = {"status": "finished", "metrics": {"metric_name": "mse", "metric": 0.01234567}, "timings": {}}
    assert summary_line(minimal) == "finished, test mse 0.01235"
