"""The README's main job, ``ltdrnn run``: the ``main`` preset group, the table it prints, and one colour
per cell in the plots."""

import matplotlib
import pytest
import torch

from ltdrnn.analysis import plots
from ltdrnn.cli import main, parse
from ltdrnn.config import list_presets, load_config
from ltdrnn.results import ResultStore, marked_comparison_rows, summarise

SOURCE_CELLS = {"tarnn", "srnn", "mist", "irnn", "sarnn"}


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def test_run_trains_the_main_group_by_default():
    assert parse(["run"]).group == "main"


def test_the_main_group_is_the_five_source_cells_and_lstm_on_one_long_range_task():
    configs = [load_config(name) for name in list_presets("main")]
    assert {c.model.cell for c in configs} == SOURCE_CELLS | {"lstm"}
    tasks = {(c.task.name, c.task.options["T"]) for c in configs}
    assert len(tasks) == 1 and next(iter(tasks))[0] in ("adding", "copy") and next(iter(tasks))[1] >= 200
    assert all(c.train.seed == configs[0].train.seed for c in configs)  # the same table on every run


def test_lstm_gets_the_strongest_setting_of_the_group():
    """LSTM must not be tuned down: it copies iRNN's setting (optimiser, steps, batch, H), which has the
    largest hidden size and batch of the group."""
    configs = {c.model.cell: c for c in (load_config(name) for name in list_presets("main"))}
    lstm, irnn = configs.pop("lstm"), configs["irnn"]
    assert lstm.optim == irnn.optim
    assert (lstm.train.steps, lstm.train.batch_size, lstm.model.hidden_size) == (
        irnn.train.steps,
        irnn.train.batch_size,
        irnn.model.hidden_size,
    )
    assert lstm.model.hidden_size == max(c.model.hidden_size for c in configs.values())
    assert lstm.train.batch_size == max(c.train.batch_size for c in configs.values())


def _row(cell, metric, seed=0, task="adding", metric_name="mse", higher=False, baseline=0.1667):
    return {
        "cell": cell,
        "task": task,
        "status": "finished",
        "metric": metric,
        "metric_name": metric_name,
        "params": 10,
        "train_time_s": 1.0,
        "config": {"task": {"options": {"T": 200}}, "train": {"seed": seed}},
        "metrics": {"higher_is_better": higher, "baseline": baseline},
    }


def test_the_table_marks_the_best_mean_of_each_column_and_ends_with_the_trivial_baseline():
    rows = [
        _row("lstm", 0.16),
        _row("irnn", 0.001, 0),
        _row("irnn", 0.003, 1),
        _row("tarnn", 0.0025),
        _row("lstm", 0.6, task="toy", metric_name="accuracy", higher=True, baseline=0.25),
        _row("tarnn", 0.9, task="toy", metric_name="accuracy", higher=True, baseline=0.25),
    ]
    summary = summarise(rows)
    table = marked_comparison_rows(summary)
    assert table[0] == ["cell", "adding(T=200)", "toy(T=200)"]
    by_cell = {row[0]: row[1:] for row in table[1:]}
    assert by_cell["irnn"][0] == "**0.002 ± 0.001414 (n=2)**"  # the sample std of 0.001 and 0.003
    assert by_cell["tarnn"] == ["0.0025", "**90.0%**"]
    assert by_cell["lstm"] == ["0.16", "60.0%"]
    assert table[-1] == ["trivial baseline", "0.1667", "25.0%"]
    assert sum(cell.startswith("**") for row in table for cell in row) == 2


def test_a_better_seed_does_not_win_over_a_better_mean():
    summary = summarise([_row("irnn", 0.0001, 0), _row("irnn", 0.1, 1), _row("tarnn", 0.01)])
    table = marked_comparison_rows(summary)
    assert table[2] == ["tarnn", "**0.01**"] and not table[1][1].startswith("**")


def test_run_of_the_main_group_on_a_tiny_budget_prints_the_marked_table_twice_the_same(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tiny = [
        "train.steps=2",
        "train.eval_every=1",
        "task.options.n_train=16",
        "task.options.n_val=8",
        "task.options.n_test=8",
        "model.hidden_size=8",
        "task.options.T=20",
    ]
    tables = []
    for attempt in ("a", "b"):
        args = ["run", "--cells", "irnn,lstm", "--jobs", "1", "--store", f"{attempt}.db", "--out", f"report_{attempt}"]
        for o in tiny:
            args += ["--set", o]
        assert main(args) == 0
        out = capsys.readouterr().out
        assert "group 'main', 2 runs" in out
        tables.append(out[out.index("| cell |") : out.index("\nreport:")])
        rows = ResultStore(f"{attempt}.db").rows()
        assert sorted(r["preset"] for r in rows) == ["main/adding-irnn", "main/adding-lstm"]
    assert tables[0] == tables[1]
    assert tables[0].count("**") == 2 and "| trivial baseline | 0.1667 |" in tables[0]
    assert (tmp_path / "report_a" / "curves_adding_T_20.png").stat().st_size > 0


def test_each_source_cell_and_lstm_has_its_own_colour_and_options_do_not_change_it():
    fixed = {cell: plots.cell_colour(cell) for cell in SOURCE_CELLS | {"lstm"}}
    assert len(set(fixed.values())) == len(fixed)
    assert plots.cell_colour("tarnn[reading=code, eta=0.01]") == fixed["tarnn"]
    grey = matplotlib.colors.to_hex("grey")  # the trivial baseline's line
    others = {plots.cell_colour(name) for name in ("gru", "fastrnn", "indrnn", "unicornn", "nru")}
    assert grey not in set(fixed.values()) | others
    assert not others & set(fixed.values())


def test_learning_curves_draw_every_run_in_its_cells_colour_with_one_legend_entry_per_cell(tmp_path, monkeypatch):
    figures = []
    real_save = plots.save_figure
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig) or real_save(fig, path))
    history = [{"step": 1, "val_metric": 0.2}, {"step": 2, "val_metric": 0.1}]
    runs = [
        {"cell": "irnn", "history": history},
        {"cell": "irnn", "history": history},
        {"cell": "gru", "history": history},
    ]
    plots.learning_curves(runs, tmp_path / "curves.png")
    ax = figures[0].axes[0]
    colours = [matplotlib.colors.to_hex(line.get_color()) for line in ax.get_lines()]
    assert colours == [plots.cell_colour("irnn")] * 2 + [plots.cell_colour("gru")]
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["irnn", "gru"]
