"""``ltdrnn report``: rendering a store filled by tiny real runs; plots of the analysis module."""

import pytest
import torch

from harness_helpers import install, tiny_config
from ltdrnn import results
from ltdrnn.analysis import gradients, plots
from ltdrnn.cli import main
from ltdrnn.config import load_config
from ltdrnn.models import build_model
from ltdrnn.results import ResultStore, render_report
from ltdrnn.tasks import build_task
from ltdrnn.train import train


@pytest.fixture(autouse=True)
def tiny(monkeypatch):
    install(monkeypatch)
    torch.set_num_threads(1)


@pytest.fixture
def store(tmp_path):
    db = str(tmp_path / "r.db")
    for cell, seed in (("tiny", 0), ("tiny", 1), ("lstm", 0)):
        cfg = load_config(
            tiny_config(tmp_path / f"{cell}{seed}"),
            [
                f"model.cell={cell}",
                f"train.seed={seed}",
                f"results={db}",
                "study=s",
                "train.steps=6",
                "train.eval_every=3",
            ],
        )
        train(cfg)
    train(
        load_config(
            tiny_config(tmp_path / "other"), [f"results={db}", "study=other", "train.steps=2", "task.options.T=4"]
        )
    )
    return db


def test_report_tables_group_runs_by_cell_and_setting(store, tmp_path, monkeypatch):
    monkeypatch.setattr(
        results.report,
        "paper_numbers",
        lambda: [
            {"cell": "lstm", "task": "tiny", "metric": "accuracy", "value": 0.875, "source": "a test paper"},
            {
                "cell": "tiny",
                "task": "tiny",
                "setting": {"T": 99},
                "metric": "accuracy",
                "value": 0.5,
                "source": "a setting we did not run",
            },
        ],
    )
    rows = ResultStore(store).rows(study="s")
    paths = render_report(store, tmp_path / "rep", study="s")
    md = paths["markdown"].read_text()
    tiny_values = [r["metric"] for r in rows if r["cell"] == "tiny"]
    mean = sum(tiny_values) / 2
    assert f"| tiny | {100 * mean:.1f}% ± " in md and "(n=2)" in md
    lstm_value = next(r["metric"] for r in rows if r["cell"] == "lstm")
    assert f"| lstm | {100 * lstm_value:.1f}% [paper: 87.5%] |" in md
    assert "[paper: 50.0%]" not in md  # its setting differs from ours
    assert "a test paper" in md and "3 runs in the store for study 's'" in md
    html = paths["html"].read_text()
    assert "<table>" in html and "[paper: 87.5%]" in html and "curves_tiny.png" in html
    assert paths["curves_tiny"].stat().st_size > 1000


def test_a_column_names_the_options_that_change_the_problem_and_not_how_training_data_is_drawn():
    label = results.setting_label
    assert label("adding", {"T": 200, "n_train": 9600, "fresh_train": True, "seed": 3}) == "adding(T=200)"
    assert label("adding", {"T": 200, "n_train": 64000}) == label("adding", {"T": 200, "fresh_train": True})
    assert label("adding", {"T": 200}) != label("adding", {"T": 750})
    assert label("speech", {"n_filters": 40, "n_val": 100}) == "speech(n_filters=40)"  # features differ


def test_report_command_prints_the_markdown(store, tmp_path, capsys):
    assert main(["report", "--store", store, "--out", str(tmp_path / "rep"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "tiny(T=4)" in out and "| lstm |" in out and "report.html" in out
    assert not list((tmp_path / "rep").glob("*.png"))


def test_markdown_table_escapes_what_would_break_its_layout():
    text = results.markdown_table([["name", "value"], ["a|b", 1.5], ["two\nlines", None]])
    assert text.split("\n") == ["| name | value |", "|---|---|", "| a\\|b | 1.5 |", "| two lines | None |"]


def test_file_slug_keeps_letters_digits_and_the_kept_characters_and_trims_the_ends():
    assert results.file_slug("ucr/default/train.lr=0.01") == "ucr_default_train_lr_0_01"
    assert results.file_slug("ucr/default/train.lr=0.01", keep="-_.") == "ucr_default_train.lr_0.01"
    assert results.file_slug("/lr sweep-2!") == "lr_sweep-2"


def test_packaged_paper_numbers_are_well_formed():
    numbers = results.paper_numbers()
    assert len(numbers) > 20
    for n in numbers:
        assert set(n) <= {"cell", "task", "setting", "metric", "value", "source"} and n["source"]
        assert 0 <= n["value"] <= 1 if n["metric"] == "accuracy" else True


def _trained_tiny(tmp_path):
    record = train(load_config(tiny_config(tmp_path), ["results=null", "train.steps=20"]))
    cfg = load_config(record["config"])
    task = build_task(cfg.task.name, **cfg.task.options)
    model = build_model(cfg.model, task.info)
    model.load_state_dict(torch.load(f"{record['run_dir']}/best.pt", weights_only=False)["model"])
    x, y, lengths = task.collate([task.dataset("val")[i] for i in range(16)])
    return model, task, (x, y, lengths), record


def test_gradient_vs_lag_matches_autograd_on_the_first_state(tmp_path):
    model, task, batch, _ = _trained_tiny(tmp_path)
    curve = gradients.gradient_vs_lag(model, batch, task.info)
    assert curve.shape == (batch[0].shape[1],) and bool((curve >= 0).all())
    # the longest lag is d loss / d h_1: recompute it by hand
    cell = model.rnn.cells[0]
    p = cell.precompute(batch[0].transpose(0, 1))
    h1 = torch.tanh(p[0]).detach().requires_grad_(True)
    h, state = h1, h1
    for p_t in p[1:].unbind(0):
        h, state = cell.step(p_t, state)
    loss = torch.nn.functional.cross_entropy(model.output(h), batch[1], reduction="sum")
    (grad,) = torch.autograd.grad(loss, h1)
    assert curve[-1] == pytest.approx(float(grad.norm(dim=1).mean()), rel=1e-5)


def test_gradient_vs_lag_of_mist_is_the_full_derivative_by_each_output(tmp_path):
    # MIST's state is its ring buffer of delayed outputs: the curve follows h_t itself (MIST Fig. 2's
    # d+ l / d h_{t-tau}), through every delay that reads it, and is not 0 at lag 0
    torch.manual_seed(0)
    cfg = load_config(tiny_config(tmp_path, model={"cell": "mist", "options": {"num_delays": 3}}))
    task = build_task(cfg.task.name, **cfg.task.options)
    model = build_model(cfg.model, task.info).double()
    x, y, lengths = task.collate([task.dataset("val")[i] for i in range(6)])
    x = x.double()
    curve = gradients.gradient_vs_lag(model, (x, y, lengths), task.info)
    cell = model.rnn.cells[0]
    p = cell.precompute(x.transpose(0, 1))
    state = cell.init_state(x.shape[0], dtype=torch.float64)
    h1, state = cell.step(p[0], state)
    h1 = h1.detach().requires_grad_(True)
    state = torch.cat([state[:, :-1], h1[:, None]], 1)  # h_1 as a leaf wherever a later step reads it
    h = h1
    for p_t in p[1:].unbind(0):
        h, state = cell.step(p_t, state)
    loss = torch.nn.functional.cross_entropy(model.output(h), y, reduction="sum")
    (by_h1, by_last) = torch.autograd.grad(loss, (h1, h))
    assert curve[-1] == pytest.approx(float(by_h1.norm(dim=1).mean()), rel=1e-9)
    assert curve[0] == pytest.approx(float(by_last.norm(dim=1).mean()), rel=1e-9) and float(curve[0]) > 0
    # the sequences go through in chunks (memory): any chunking gives the same mean
    chunked = gradients.gradient_vs_lag(model, (x, y, lengths), task.info, chunk=4)
    torch.testing.assert_close(chunked, curve, rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="chunk: expected a positive integer, got 0"):
        gradients.gradient_vs_lag(model, (x, y, lengths), task.info, chunk=0)


def test_jacobian_norm_estimate_is_close_to_the_exact_norm(tmp_path):
    model, _, batch, _ = _trained_tiny(tmp_path)
    x = batch[0][:1]
    cell = model.rnn.cells[0]
    p = cell.precompute(x.transpose(0, 1)).detach()

    def last_from_first(h1):
        state = h1
        for p_t in p[1:].unbind(0):
            _, state = cell.step(p_t, state)
        return state

    h1 = torch.tanh(p[0])
    exact = torch.autograd.functional.jacobian(last_from_first, h1).reshape(8, 8).norm()
    estimate = gradients.state_jacobian_norm(model, (x, None, None), probes=400)
    assert estimate == pytest.approx(float(exact), rel=0.15)


def test_plots_write_pngs(tmp_path):
    model, task, batch, record = _trained_tiny(tmp_path)
    model(batch[0])
    outputs, _ = model.rnn(batch[0])
    written = [
        plots.learning_curves([record], tmp_path / "curves.png", "tiny"),
        plots.gradient_lag_plot({"tiny": gradients.gradient_vs_lag(model, batch, task.info)}, tmp_path / "lag.png"),
        plots.update_pattern(model.aux[0], tmp_path / "mask.png"),
        plots.beta_over_time({"beta": torch.rand(6, 2, 8)}, tmp_path / "beta.png"),
        plots.unshifted_state(outputs.transpose(0, 1), tmp_path / "srnn.png"),
        plots.jacobian_during_training(
            [{"cell": "tiny", "history": [{"step": 1, "jacobian_norm": 1.0}, {"step": 2, "jacobian_norm": 0.5}]}],
            tmp_path / "jac.png",
        ),
    ]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unshift_undoes_one_cyclic_shift_per_step():
    start = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    shifted = torch.stack([torch.roll(start, t + 1) for t in range(7)])  # h_t = W_p^(t+1) h_0
    assert torch.equal(plots.unshift(shifted, shift=1), start.expand(7, 5))


def test_tracked_jacobian_norms_enter_the_history(tmp_path):
    record = train(
        load_config(
            tiny_config(tmp_path), ["results=null", "train.steps=4", "train.eval_every=2", "train.track_gradients=true"]
        )
    )
    norms = [h["jacobian_norm"] for h in record["history"]]
    assert len(norms) == 2 and all(n > 0 for n in norms)


def test_plot_command_draws_what_applies_to_a_run(tmp_path, capsys):
    record = train(
        load_config(
            tiny_config(tmp_path), ["results=null", "train.steps=4", "train.eval_every=2", "train.track_gradients=true"]
        )
    )
    assert main(["plot", record["run_dir"], "--out", str(tmp_path / "p")]) == 0
    names = sorted(p.split("/")[-1] for p in capsys.readouterr().out.split())
    # the tiny cell records an update mask but no beta, and it is not SRNN
    assert names == ["curves.png", "gradient_vs_lag.png", "jacobian.png", "update_mask.png"]
    assert main(["plot", record["run_dir"], "--kinds", "betas"]) == 2  # a user mistake: one line, exit 2
    assert "plots: unknown kind 'betas'" in capsys.readouterr().err


def test_runs_under_different_readings_are_separate_rows():
    def row(reading, metric):
        options = {} if reading is None else {"reading": reading}
        return {
            "cell": "tarnn",
            "task": "adding",
            "status": "finished",
            "metric": metric,
            "metric_name": "mse",
            "params": 1,
            "train_time_s": 1.0,
            "metrics": {},
            "config": {"model": {"options": options}, "task": {"options": {"T": 200}}},
        }

    summary = results.summarise([row("paper", 0.16), row("code", 0.01), row("code", 0.03), row(None, 0.1)])
    assert summary["cells"] == ["tarnn", "tarnn[reading=code]", "tarnn[reading=paper]"]
    code = summary["table"][("tarnn[reading=code]", "adding(T=200)")]
    assert code["n"] == 2 and code["mean"] == pytest.approx(0.02)
