"""The UCR/UEA benchmark (``ltdrnn ucr``), the pooled classifier heads and the arrays input of the recipe."""

import re
from datetime import datetime, timezone

import numpy as np
import pytest
import torch

from fixture_data import toy_rows, write_ts, write_ts_set
from ltdrnn import cli, ucr
from ltdrnn.config import ConfigError, load_config
from ltdrnn.data import DataFileError
from ltdrnn.models import SequenceModel
from ltdrnn.tasks import build_task
from ltdrnn.tasks.uea_ucr import aeon_data_dir


# ---- pooling heads -----------------------------------------------------------------------------------
def _model(pooling, head="classifier"):
    torch.manual_seed(0)
    return SequenceModel("lstm", 3, 5, 4, head, pooling=pooling)


@pytest.mark.parametrize("pooling", ["last", "mean", "max"])
def test_pooled_head_on_a_padded_batch_equals_each_sequence_alone(pooling):
    model = _model(pooling)
    x = torch.randn(3, 7, 3)
    lengths = torch.tensor([7, 4, 2])
    x_padded = x.clone()
    for i, n in enumerate(lengths):
        x_padded[i, n:] = 99.0  # padding must not leak into the pooled value
    batched = model(x_padded, lengths)
    for i, n in enumerate(lengths):
        torch.testing.assert_close(batched[i], model(x[i : i + 1, :n])[0])


def test_mean_and_max_pooling_read_every_step_of_the_outputs():
    x = torch.randn(2, 6, 3)
    outputs = {}
    for pooling in ("mean", "max"):
        model = _model(pooling)
        seen = []
        model.output.register_forward_hook(lambda _m, inputs, _o: seen.append(inputs[0]))
        model(x)
        outputs[pooling] = seen[0]
    states, _ = _model("mean").rnn(x)
    torch.testing.assert_close(outputs["mean"], states.mean(dim=1))
    torch.testing.assert_close(outputs["max"], states.amax(dim=1))
    assert not torch.allclose(outputs["mean"], states[:, -1])


def test_pooling_is_validated_with_the_key_named():
    with pytest.raises(ConfigError, match=r"model.pooling: expected one of last, mean, max, got 'avg'"):
        load_config("ucr/default", ["model.pooling=avg"])
    with pytest.raises(ValueError, match=r"model.pooling: 'mean' pools .* head 'tagger'"):
        _model("mean", head="tagger")


# ---- the recipe on arrays ------------------------------------------------------------------------------
def _arrays(rng, n, length=12, dims=2):
    y = np.array(["up", "down"] * (n // 2))
    x = rng.normal(size=(n, length, dims)).astype(np.float32)
    return x, y


def test_arrays_give_the_same_task_as_the_same_series_in_ts_files(tmp_path):
    rng = np.random.default_rng(0)
    (x_train, y_train), (x_test, y_test) = _arrays(rng, 20), _arrays(rng, 6)
    np.savez(tmp_path / "mine.npz", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    from_arrays = build_task("uea_ucr", arrays=str(tmp_path / "mine.npz"), znorm=True)
    names = {"down": "a", "up": "b"}  # sorted class order, as the .ts files declare theirs
    rows = lambda x, y: [(series.T.round(6).tolist(), names[label]) for series, label in zip(x, y)]  # noqa: E731
    write_ts_set(tmp_path, rows(x_train, y_train), rows(x_test, y_test), name="Mine", dims=2)
    from_ts = build_task("uea_ucr", dataset="Mine", data_dir=str(tmp_path), znorm=True)
    assert from_arrays.info.extra["classes"] == ["down", "up"]
    for split in ("train", "val", "test"):
        a, b = from_arrays.dataset(split), from_ts.dataset(split)
        assert len(a) == len(b) > 0
        for i in range(len(a)):
            torch.testing.assert_close(a[i][0], b[i][0], atol=1e-5, rtol=0)
            assert int(a[i][1]) == int(b[i][1])


def test_arrays_errors_name_what_was_expected(tmp_path):
    np.savez(tmp_path / "partial.npz", x_train=np.zeros((4, 5)), y_train=np.zeros(4))
    with pytest.raises(
        DataFileError,
        match=r"expected arrays x_train, y_train, x_test, y_test, got x_train, "
        r"y_train",
    ):
        build_task("uea_ucr", arrays=str(tmp_path / "partial.npz"))
    np.savez(
        tmp_path / "shape.npz",
        x_train=np.zeros((4, 5)),
        y_train=np.zeros(3),
        x_test=np.zeros((2, 5)),
        y_test=np.zeros(2),
    )
    with pytest.raises(
        DataFileError,
        match=r"x_train of shape \(N, T\) or \(N, T, d\) with N = len\(y_train\) "
        r"= 3, got \(4, 5\)",
    ):
        build_task("uea_ucr", arrays=str(tmp_path / "shape.npz"))
    np.savez(
        tmp_path / "objects.npz",
        x_train=np.array([np.zeros(3), np.zeros(4)], dtype=object),
        y_train=np.zeros(2),
        x_test=np.zeros((1, 3)),
        y_test=np.zeros(1),
    )
    with pytest.raises(DataFileError, match="without pickled objects"):
        build_task("uea_ucr", arrays=str(tmp_path / "objects.npz"))


# ---- sets and published numbers -----------------------------------------------------------------------
def test_available_sets_are_the_classification_pairs_of_the_data_dir_and_aeon(tmp_path):
    rng = np.random.default_rng(0)
    write_ts_set(tmp_path, toy_rows(6, 1, rng), toy_rows(3, 1, rng), name="Mine")
    regression = tmp_path / "ucr_uea" / "Prices"
    regression.mkdir(parents=True)
    for part in ("TRAIN", "TEST"):
        (regression / f"Prices_{part}.ts").write_text("@problemName Prices\n@targetLabel true\n@data\n1,2:3.5\n")
    only_train = tmp_path / "ucr_uea" / "Half"
    only_train.mkdir()
    write_ts(only_train / "Half_TRAIN.ts", toy_rows(3, 1, rng))
    found = ucr.available_sets(str(tmp_path))
    assert "Mine" in found and "Prices" not in found and "Half" not in found
    if aeon_data_dir() is not None:
        assert {"GunPoint", "BasicMotions"} <= set(found)
        assert "UnitTest" not in found  # aeon's test fixture, not an archive set


def test_published_numbers_parse_with_their_sources():
    numbers = ucr.published_numbers()
    assert len(numbers) >= 128
    assert set(numbers["GunPoint"]) == {"rocket", "inceptiontime"}
    assert all(0 < v <= 1 for row in numbers.values() for v in row.values())
    sources = " ".join(ucr.page._published_header())
    assert "github.com/angus924/rocket" in sources and "github.com/hfawaz/InceptionTime" in sources


def test_padded_array_is_channels_first_and_zero_padded():
    series = [np.arange(6, dtype=np.float32).reshape(3, 2), np.ones((1, 2), dtype=np.float32)]
    out = ucr.padded_array(series, 4)
    assert out.shape == (2, 2, 4)
    np.testing.assert_array_equal(out[0], [[0, 2, 4, 0], [1, 3, 5, 0]])
    np.testing.assert_array_equal(out[1], [[1, 0, 0, 0], [1, 0, 0, 0]])


# ---- the page from a store -----------------------------------------------------------------------------
def _row(cell, dataset, seed, accuracy, study="ucr/default", params=100, train_s=2.0):
    stamp = datetime.now(timezone.utc)
    return {
        "id": f"{cell}-{dataset}-{seed}-{study}",
        "status": "finished",
        "created": stamp.isoformat(),
        "cell": cell,
        "task": "uea_ucr",
        "study": study,
        "name": dataset,
        "config": {"model": {"cell": cell}, "task": {"options": {"dataset": dataset}}, "train": {"seed": seed}},
        "metrics": {"metric_name": "accuracy", "metric": accuracy, "params": params},
        "timings": {"train_s": train_s},
        "version": {"git_commit": "abc"},
    }


def _store(tmp_path, accuracies, study="ucr/default"):
    from ltdrnn.results import ResultStore

    store = ResultStore(str(tmp_path / "results.db"))
    for (cell, dataset), values in accuracies.items():
        for seed, value in enumerate(values):
            store.add(_row(cell, dataset, seed, value, study))
    return store


def test_ranks_means_and_goal_come_from_the_stored_runs(tmp_path):
    pytest.importorskip("aeon", reason="the critical-difference diagram needs aeon")
    accuracies = {
        ("lstm", "A"): [0.5, 0.7, 0.6],
        ("srnn", "A"): [0.8] * 3,
        ("minirocket", "A"): [0.82, 0.84, 0.83],
        ("lstm", "GunPoint"): [0.6, 0.6],
        ("srnn", "GunPoint"): [0.7, 0.7],
        ("minirocket", "GunPoint"): [0.9, 0.9],
        ("lstm", "C"): [0.9],
        ("srnn", "C"): [0.8],
        ("minirocket", "C"): [0.85],
        ("srnn", "OnlySrnn"): [0.5],
    }
    store = _store(tmp_path, accuracies)
    data = ucr.collect(store.rows(study="ucr/default"))
    assert data["methods"] == ["lstm", "srnn", "minirocket"]
    assert ucr.complete_sets(data) == ["A", "C", "GunPoint"]
    assert ucr.average_ranks(data, ["A", "C", "GunPoint"]) == pytest.approx(
        {"lstm": 7 / 3, "srnn": 7 / 3, "minirocket": 4 / 3}
    )
    goal = "\n".join(ucr.goal_lines(data))
    # srnn 0.7667 against MiniRocket 0.86 (9.3 points); srnn above lstm (0.70)
    assert "gap of 9.3 points: goal (within 5 points) not reached" in goal
    assert "Source cells above it: srnn; at or below it: none: goal (every source cell above LSTM) reached" in goal
    store.add(_row("lstm", "A", 0, 0.5, study="ucr-recipe/x"))
    store.add(_row("srnn", "A", 0, 0.7, study="ucr-recipe/x"))
    store.add(_row("srnn", "Z", 0, 0.9, study="ucr-recipe/x"))  # no twin under the default recipe
    (tmp_path / "notes.md").write_text("## Discussion\n\nWritten by hand.\n")
    page = ucr.render_page(
        str(tmp_path / "results.db"), "ucr/default", tmp_path / "docs" / "page.md", notes=tmp_path / "notes.md"
    )
    text = page.read_text()
    assert "reached.\n\n## Discussion\n\nWritten by hand.\n\n## Parameters and training time" in text
    assert "| A | 60.0 ± 10.0 | 80.0 ± 0.0 | 83.0 ± 1.0 | - | - |" in text
    published = ucr.published_numbers()["GunPoint"]
    assert (
        f"| GunPoint | 60.0 ± 0.0 (n=2) | 70.0 ± 0.0 (n=2) | 90.0 ± 0.0 (n=2) | "
        f"{100 * published['rocket']:.1f} | {100 * published['inceptiontime']:.1f} |"
    ) in text
    assert "| C | 90.0 (n=1) |" in text and "| OnlySrnn | - | 50.0 (n=1) | - |" in text
    assert "| mean over 3 sets | 70.0 | 76.7 | 86.0 | - | - |" in text
    # each variant beside the default recipe on the same cell, set and seed
    assert "| ucr-recipe/x | lstm | A | 1 | 50.0 | 50.0 (variant 50.0, 1 pair) | 0 / 0 |" in text
    assert "| ucr-recipe/x | srnn | A,Z | 2 | 80.0 | 80.0 (variant 70.0, 1 pair) | 0 / 1 |" in text
    assert "| ucr-recipe/x | all (over the pairs) |  | 3 | 70.0 | 65.0 (variant 60.0, 2 pairs) | 0 / 1 |" in text
    assert (tmp_path / "cd-ucr_default.png").stat().st_size > 0
    assert "](../cd-ucr_default.png)" in text


def test_report_without_the_study_is_a_clear_error(tmp_path, capsys):
    _store(tmp_path, {("lstm", "A"): [0.5]}, study="other")
    code = cli.main(["ucr", "report", "--store", str(tmp_path / "results.db"), "--page", str(tmp_path / "p.md")])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        f"ltdrnn ucr report: --study ucr/default: no finished runs of this study in {tmp_path / 'results.db'}"
    )


# ---- the command ---------------------------------------------------------------------------------------
def test_run_rejects_unknown_sets_cells_and_keys_before_training(tmp_path, capsys):
    rng = np.random.default_rng(0)
    write_ts_set(tmp_path, toy_rows(6, 1, rng), toy_rows(3, 1, rng), name="Mine")
    common = ["ucr", "run", "--data-dir", str(tmp_path), "--store", str(tmp_path / "r.db")]
    assert cli.main(common + ["--sets", "Mine,Nope"]) == 2
    assert "--sets: expected comma-separated names among" in capsys.readouterr().err
    assert cli.main(common + ["--sets", "Mine", "--cells", "lstm,gruu"]) == 2
    assert "--cells: expected comma-separated names among" in capsys.readouterr().err
    assert cli.main(common + ["--sets", "Mine", "--seeds", "0"]) == 2
    assert "--seeds: expected a count of at least 1 or a list such as 0,1,2, got '0'" in capsys.readouterr().err
    assert cli.main(common + ["--sets", "Mine", "--set", "optim.lrr=1"]) == 2
    assert "unknown config key 'optim.lrr'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def _learnable_rows(n, rng, length, dims=1):
    """Class a: a rising ramp, class b: a falling one, plus noise (any sensible classifier separates them)."""
    ramp = np.linspace(-1, 1, length)
    rows = []
    for i in range(n):
        label = "ab"[i % 2]
        sign = 1 if label == "a" else -1
        rows.append(([(sign * ramp + 0.1 * rng.normal(size=length)).round(4).tolist() for _ in range(dims)], label))
    return rows


@pytest.mark.slow
def test_benchmark_end_to_end_on_two_small_sets_at_a_tiny_budget(tmp_path, capsys):
    pytest.importorskip("aeon", reason="MiniRocket comes from aeon")
    rng = np.random.default_rng(0)
    write_ts_set(tmp_path, _learnable_rows(20, rng, 16), _learnable_rows(10, rng, 16), name="Ramps")
    write_ts_set(
        tmp_path, _learnable_rows(20, rng, 12, dims=2), _learnable_rows(10, rng, 12, dims=2), name="Ramps2D", dims=2
    )
    store, page = tmp_path / "results.db", tmp_path / "docs" / "benchmarks-ucr.md"
    argv = [
        "ucr",
        "run",
        "--sets",
        "Ramps,Ramps2D",
        "--cells",
        "lstm,srnn",
        "--seeds",
        "2",
        "--budget",
        "quick",
        "--set",
        "train.epochs=2",
        "--set",
        "model.hidden_size=8",
        "--study",
        "tiny",
        "--store",
        str(store),
        "--runs",
        str(tmp_path / "runs"),
        "--data-dir",
        str(tmp_path),
        "--page",
        str(page),
    ]
    assert cli.main(argv) == 0
    from ltdrnn.results import ResultStore

    rows = ResultStore(str(store)).rows(study="tiny")
    assert sorted((r["cell"], r["name"], r["config"]["train"]["seed"]) for r in rows) == sorted(
        (c, s, seed) for c in ("lstm", "srnn", "minirocket") for s in ("Ramps", "Ramps2D") for seed in (0, 1)
    )
    trained = [r for r in rows if r["cell"] != "minirocket"]
    assert {r["config"]["train"]["epochs"] for r in trained} == {2}
    assert {r["config"]["model"]["hidden_size"] for r in trained} == {8}
    assert all(r["metric"] == 1.0 for r in rows if r["cell"] == "minirocket")
    text = page.read_text()
    assert "| Ramps | " in text and "| Ramps2D | " in text and "| mean over 2 sets |" in text
    assert (tmp_path / "cd-tiny.png").is_file()
    # a second call finds every run stored and trains nothing
    capsys.readouterr()
    assert cli.main(argv) == 0
    assert len(ResultStore(str(store)).rows(study="tiny")) == len(rows)
    assert "seed" not in capsys.readouterr().out.replace("seeds", "")


# ---- bad sets: found before any training, reported by name, the others run ---------------------------
def _write_set(root, name, train, test, header="@classLabel true a b", start=""):
    """A set as two .ts files whose data lines are given as text, ``start`` written first."""
    folder = root / "ucr_uea" / name
    folder.mkdir(parents=True)
    for split, lines in (("TRAIN", train), ("TEST", test)):
        body = f"{start}@problemName {name}\n{header}\n@data\n" + "\n".join(lines) + "\n"
        (folder / f"{name}_{split}.ts").write_text(body, encoding="utf-8")


def _ramps(n, labels="ab", length=8):
    ramp = np.linspace(-1, 1, length)
    return [
        ",".join(f"{v:.3f}" for v in (1 if i % 2 == 0 else -1) * ramp + 0.01 * i) + f":{labels[i % 2]}"
        for i in range(n)
    ]


def _problems(tmp_path, *sets):
    where = dict(study="t", store=str(tmp_path / "r.db"), runs_dir=str(tmp_path / "runs"), data_dir=str(tmp_path))
    return ucr.check_sets(sets, ["lstm"], "quick", [], **where)


def test_a_set_with_a_missing_label_is_named_with_its_file_and_line(tmp_path):
    _write_set(tmp_path, "NoLabel", _ramps(9) + ["0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8:"], _ramps(4))
    problem = _problems(tmp_path, "NoLabel")["NoLabel"]
    assert problem.endswith("NoLabel_TRAIN.ts:13: the class label is missing (expected '<values>:<class>')")


def test_a_series_with_ragged_dimensions_is_refused_by_name(tmp_path):
    train = [f"{row.split(':')[0]}:{row}" for row in _ramps(10)]
    train[4] = "1,2,3:" + train[4].split(":", 1)[1]
    _write_set(
        tmp_path,
        "Ragged",
        train,
        [f"{row.split(':')[0]}:{row}" for row in _ramps(4)],
        "@dimensions 2\n@classLabel true a b",
    )
    problem = _problems(tmp_path, "Ragged")["Ragged"]
    assert problem.endswith(
        "Ragged_TRAIN.ts:9: the dimensions of one series have different lengths [3, 8]; expected one length per series"
    )


def test_nan_values_are_missing_values_like_question_marks(tmp_path):
    train = _ramps(10)
    with_nan, with_question = list(train), list(train)
    with_nan[3] = "NaN," + train[3].split(",", 1)[1]
    with_question[3] = "?," + train[3].split(",", 1)[1]
    _write_set(tmp_path, "Nans", with_nan, ["nan," + _ramps(4)[0].split(",", 1)[1]] + _ramps(4)[1:])
    _write_set(tmp_path, "Marks", with_question, ["?," + _ramps(4)[0].split(",", 1)[1]] + _ramps(4)[1:])
    assert _problems(tmp_path, "Nans", "Marks") == {}
    nans, marks = (
        build_task("uea_ucr", dataset=s, data_dir=str(tmp_path), standardize=True) for s in ("Nans", "Marks")
    )
    for split in ("train", "val", "test"):
        for a, b in zip(nans.splits[split][0], marks.splits[split][0]):
            np.testing.assert_array_equal(a, b)
    assert nans.splits["test"][0][0][0, 0] == 0.0  # missing, then scaled: 0


def test_a_one_row_set_is_refused_by_name(tmp_path):
    _write_set(tmp_path, "OneRow", _ramps(1), _ramps(4))
    assert _problems(tmp_path, "OneRow") == {
        "OneRow": "dataset 'OneRow': TRAIN holds 1 series of 1 class ['a']; a classifier needs series of at "
        "least 2 classes"
    }


def test_unicode_labels_and_a_byte_order_mark_are_read(tmp_path):
    labels = ["caf\u00e9", "\u72ac"]
    _write_set(
        tmp_path,
        "Uni",
        _ramps(10, labels),
        _ramps(4, labels),
        header=f"@classLabel true {' '.join(labels)}",
        start="\ufeff",
    )
    assert _problems(tmp_path, "Uni") == {}
    task = build_task("uea_ucr", dataset="Uni", data_dir=str(tmp_path))
    assert task.info.extra["classes"] == labels
    assert task.splits["test"][1].tolist() == [0, 1, 0, 1]


def test_a_class_only_in_test_is_refused_naming_the_class(tmp_path):
    _write_set(tmp_path, "TestOnly", _ramps(10), _ramps(4) + _ramps(3, "cc"), header="@classLabel true a b c")
    assert _problems(tmp_path, "TestOnly") == {
        "TestOnly": "dataset 'TestOnly': classes only in TEST, with no TRAIN series to learn from: 'c' (3 series)"
    }


def test_a_bad_set_is_skipped_before_training_and_the_good_one_runs(tmp_path, capsys):
    _write_set(tmp_path, "Good", _ramps(12), _ramps(6))
    _write_set(tmp_path, "Bad", _ramps(12), _ramps(6) + _ramps(2, "cc"), header="@classLabel true a b c")
    store, page = tmp_path / "results.db", tmp_path / "page.md"
    argv = ["ucr", "run", "--sets", "Bad,Good", "--cells", "lstm", "--seeds", "1", "--budget", "quick"]
    argv += ["--set", "train.steps=4", "--set", "train.eval_every=2", "--set", "model.hidden_size=4", "--no-minirocket"]
    argv += ["--study", "tiny", "--store", str(store), "--runs", str(tmp_path / "runs"), "--data-dir", str(tmp_path)]
    assert cli.main(argv + ["--page", str(page)]) == 1  # a skipped set is not a full success
    out = capsys.readouterr().out
    why = "dataset 'Bad': classes only in TEST, with no TRAIN series to learn from: 'c' (2 series)"
    assert out.index(f"skipped set Bad: {why}") < out.index("lstm/Good (seed 0): finished")
    assert f"0 failed; 1 sets skipped\n  skipped Bad: {why}" in out
    from ltdrnn.results import ResultStore

    assert [(r["cell"], r["name"]) for r in ResultStore(str(store)).rows(study="tiny")] == [("lstm", "Good")]
    assert f"Bad (skipped: {why})" in page.read_text()
    assert not (tmp_path / "runs" / "tiny" / "lstm-Bad-s0").exists()


def test_a_set_without_class_labels_is_skipped_by_name_saying_so(tmp_path, capsys):
    """A regression set (``@classLabel false``) asked for by name was refused as an unknown name, as if it
    did not exist; it is now skipped with the reason, and `ucr sets` says it is there but not listed."""
    _write_set(tmp_path, "Good", _ramps(12), _ramps(6))
    targets = [row.split(":")[0] + f":{0.5 * i}" for i, row in enumerate(_ramps(6))]
    header = "@univariate true\n@equalLength true\n@seriesLength 8\n@classLabel false\n@targetLabel true"
    _write_set(tmp_path, "Prices", targets, targets[:3], header=header)
    assert "Prices" in ucr.unlabelled_sets(str(tmp_path)) and "Prices" not in ucr.available_sets(str(tmp_path))
    argv = ["ucr", "run", "--sets", "Prices,Good", "--cells", "none", "--no-minirocket", "--data-dir", str(tmp_path)]
    assert cli.main(argv + ["--store", str(tmp_path / "r.db"), "--runs", str(tmp_path / "runs")]) == 1
    out = capsys.readouterr().out
    assert re.search(r"skipped set Prices: \S*Prices_TRAIN\.ts: the set has no class labels \('@classLabel false'", out)
    assert "1 sets skipped" in out and "skipped set Good" not in out
    assert cli.main(["ucr", "sets", "--data-dir", str(tmp_path)]) == 0
    printed = capsys.readouterr()
    assert "Good" in printed.out.split() and "Prices" not in printed.out
    assert re.search(r"not listed, without class labels \(regression sets\): .*Prices", printed.err)
    assert cli.main(argv[:3] + ["Nope,Prices", "--data-dir", str(tmp_path)]) == 2  # an unknown name still is
    error = capsys.readouterr().err
    assert "--sets: expected comma-separated names among" in error and "got 'Nope'" in error


# ---- empty validation splits: skipped with the override that runs them ----------------------------------
def _ucr_run(tmp_path, sets, study, *extra):
    argv = ["ucr", "run", "--sets", sets, "--cells", "lstm", "--seeds", "1", "--budget", "quick", "--no-minirocket"]
    argv += ["--set", "train.steps=4", "--set", "train.eval_every=2", "--set", "model.hidden_size=4", *extra]
    argv += ["--study", study, "--store", str(tmp_path / "results.db"), "--runs", str(tmp_path / "runs")]
    return cli.main(argv + ["--data-dir", str(tmp_path), "--page", str(tmp_path / f"{study}.md")])


def test_a_set_without_a_validation_series_is_skipped_with_the_override_that_runs_it(tmp_path, capsys):
    from ltdrnn.results import ResultStore

    _write_set(tmp_path, "Good", _ramps(12), _ramps(6))
    _write_set(tmp_path, "Tiny", _ramps(4), _ramps(6))  # 2 TRAIN series per class: round(0.2 * 2) = 0 validate
    assert _ucr_run(tmp_path, "Good,Tiny", "tiny") == 1
    out = capsys.readouterr().out
    why = (
        "dataset 'Tiny': its validation split is empty (val_fraction 0.2 of TRAIN series per class: 'a' 2, 'b' 2; "
        "a class needs 3 for one to validate), so no checkpoint can be chosen on validation as the protocol asks; "
        "to run it tested on its final weights instead, in a study of its own, add --set train.select_on=last"
    )
    assert f"skipped set Tiny: {why}" in out and f"skipped Tiny: {why}" in out
    store = ResultStore(str(tmp_path / "results.db"))
    assert [r["name"] for r in store.rows(study="tiny")] == ["Good"]
    page = (tmp_path / "tiny.md").read_text()
    assert f"Tiny (skipped: {why})" in page and "†" not in page
    assert "| Good | 10 | 2 | 6 | 2 of 2 | 1 | best validation loss |" in page  # 6 per class: 5 fit, 1 validates
    # what the message says to do: the set runs, is tested on its final weights, and is marked
    assert _ucr_run(tmp_path, "Tiny", "tiny-last", "--set", "train.select_on=last") == 0
    (row,) = store.rows(study="tiny-last")
    assert row["metrics"]["checkpoint"] == "last" and row["metrics"]["val_best"] is None
    assert row["history"] == [] and row["metrics"]["best_step"] == 4  # no validation metric, not even 0.0
    page = (tmp_path / "tiny-last.md").read_text()
    assert f"| Tiny | {100 * row['metric']:.1f} (n=1) † |" in page
    assert "† tested on the final weights, not on a checkpoint chosen on validation" in page
    assert "lstm on Tiny (1 of 1 runs)" in page
    assert "| Tiny | 4 | 0 | 6 | 0 of 2 | 0 | last |" in page
    capsys.readouterr()
    assert cli.main(["ucr", "sets", "--splits", "--data-dir", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert "| Good | 10 | 2 | 6 | 2 of 2 | 1 |" in listed and "| Tiny | 4 | 0 | 6 | 0 of 2 | 0 |" in listed


def test_a_checkpoint_chosen_on_an_empty_split_is_marked_invalid_on_the_page(tmp_path):
    """A row stored before empty splits were refused: it says it chose on validation, which was empty."""
    _write_set(tmp_path, "Tiny", _ramps(4), _ramps(6))
    row = _row("lstm", "Tiny", 0, 0.4)
    row["config"]["task"]["options"].update(data_dir=str(tmp_path), val_fraction=0.2)
    row["config"]["train"]["select_on"] = "loss"
    chosen_on_nothing = dict(row, id="old", metrics=dict(row["metrics"], val_best=0.0))
    from ltdrnn.results import ResultStore

    ResultStore(str(tmp_path / "results.db")).add(chosen_on_nothing)
    page = ucr.render_page(str(tmp_path / "results.db"), "ucr/default", tmp_path / "page.md").read_text()
    assert "| Tiny | 4 | 0 | 6 | 0 of 2 | 0 | best validation loss (of an empty split: invalid) |" in page
    assert ucr.tested_checkpoint(dict(row, metrics={"val_best": None})) == "last"
    assert ucr.tested_checkpoint(dict(row, metrics={"checkpoint": "last"})) == "last"
    assert ucr.tested_checkpoint({"metrics": {}, "config": {"train": {}}}) == "?"


def test_every_offline_set_of_the_committed_study_validates_every_class():
    from pathlib import Path

    from ltdrnn.data import DataNotFoundError
    from ltdrnn.results import ResultStore

    store = Path(__file__).resolve().parents[1] / "docs" / "ucr" / "results.db"
    rows = [r for r in ResultStore(str(store), read_only=True).rows(study="ucr/default") if r["cell"] != "minirocket"]
    options = {r["name"]: r["config"]["task"]["options"] for r in rows}
    checked = []
    for name, given in sorted(options.items()):
        try:
            sizes = ucr.preset_split_sizes(name, {k: v for k, v in given.items() if k != "data_dir"})
        except DataNotFoundError:
            continue
        assert sizes.val > 0 and sizes.val_classes == sizes.classes, (name, sizes)
        checked.append(name)
    if not checked:
        pytest.skip("none of the study's sets is here (aeon ships them)")
    assert len(checked) == len(options) or aeon_data_dir() is None, sorted(set(options) - set(checked))


def test_ucr_report_folds_the_log_into_the_store_and_changes_nothing_else(tmp_path, capsys):
    """The report reads the store; it only folds SQLite's log into the file (so that a committed file holds
    every row), and never adds the key column that opening an old store for writing adds."""
    import shutil
    import sqlite3

    path = tmp_path / "results.db"
    _store(tmp_path, {("lstm", "A"): [0.5]}).engine.dispose()
    with sqlite3.connect(path) as db:  # a store written before rows had a key
        db.execute("DROP INDEX ix_runs_run_key")
        db.execute("ALTER TABLE runs DROP COLUMN run_key")
    db.close()
    before = path.read_bytes()
    argv = ["ucr", "report", "--store", str(path), "--page", str(tmp_path / "p.md")]
    assert cli.main(argv) == 0
    assert path.read_bytes() == before
    writer = sqlite3.connect(path)  # held open: its row stays in the log until the report folds it
    writer.execute("PRAGMA wal_autocheckpoint=0")
    row = _row("lstm", "B", 0, 0.75)
    writer.execute(
        "INSERT INTO runs (id, created, status, cell, task, study, name, metric, config, metrics) "
        "VALUES (?,?,?,?,?,?,?,?,?,?)",
        (
            row["id"],
            row["created"],
            "finished",
            "lstm",
            "uea_ucr",
            "ucr/default",
            "B",
            0.75,
            '{"train": {"seed": 0}}',
            '{"metric": 0.75}',
        ),
    )
    writer.commit()
    assert cli.main(argv) == 0 and "| B | 75.0 (n=1) |" in (tmp_path / "p.md").read_text()
    shutil.copy(path, tmp_path / "copy.db")  # the file alone, without its log
    writer.close()
    with sqlite3.connect(tmp_path / "copy.db") as copy:
        assert copy.execute("SELECT count(*) FROM runs").fetchone() == (2,)
        assert "run_key" not in {c[1] for c in copy.execute("PRAGMA table_info(runs)")}
    copy.close()
