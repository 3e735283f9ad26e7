"""The input/output contract of an export (report.json and the C header), and the export's handling of
what it used to get wrong: pooled heads, diverged weights, names, I/O errors, the latency-step bound."""

from __future__ import annotations

import errno
import json
import re

import numpy as np
import pytest
import torch

import ltdrnn.export as export_module
from ltdrnn.cli import main
from ltdrnn.export import ExportError, StreamingStep, c_build, contract, device_table, devices, export
from ltdrnn.export.c_export import check_name
from ltdrnn.models import SequenceModel
from test_export import make_model, needs_cc, sequences


# ---- a streaming-normalised UCR-style run ------------------------------------------------------------
@pytest.fixture(scope="module")
def standardised_run(tmp_path_factory):
    """A GRU trained briefly on series whose two channels sit at level 5 and 40 with scales 2 and 10,
    read through the UCR task's ``arrays=`` with per-channel standardisation from the training split."""
    from ltdrnn.config import load_config
    from ltdrnn.train import train

    root = tmp_path_factory.mktemp("standardised")
    generator = np.random.default_rng(0)

    def split(n):
        x = generator.normal(size=(n, 24, 2))
        labels = np.where(x[:, 0, 0] > 0, "up", "down")
        return x * np.array([2.0, 10.0]) + np.array([5.0, 40.0]), labels

    (x_train, y_train), (x_test, y_test) = split(160), split(60)
    np.savez(root / "series.npz", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    cfg = load_config(
        {
            "model": {"cell": "gru", "hidden_size": 8},
            "task": {"name": "uea_ucr", "options": {"arrays": str(root / "series.npz"), "standardize": True}},
            "optim": {"name": "adam", "lr": 0.03},
            "train": {
                "steps": 80,
                "batch_size": 32,
                "eval_every": 40,
                "seed": 0,
                "threads": 1,
                "progress": False,
                "latency": False,
            },
            "run_dir": str(root / "run"),
            "results": None,
        }
    )
    record = train(cfg)
    return root / "run", record, x_train


@pytest.fixture
def short_probe(monkeypatch):
    monkeypatch.setattr(contract, "PROBE_STEPS", 600)


@needs_cc
@pytest.mark.parametrize("int8", [False, True])
def test_contract_is_in_the_report_and_the_header_and_the_c_normalises(standardised_run, tmp_path, short_probe, int8):
    run_dir, record, x_train = standardised_run
    report = export(str(run_dir), "c", tmp_path, int8=int8, latency_steps=20)
    saved = json.loads((tmp_path / "report.json").read_text())
    agreed = saved["contract"]
    channel = agreed["input"]["channel"]
    fit = x_train[: int(0.8 * len(x_train))]  # roughly the training part (the split is stratified)
    assert channel["mean"] == pytest.approx(fit.reshape(-1, 2).mean(0), rel=0.1)
    assert channel["std"] == pytest.approx(fit.reshape(-1, 2).std(0), rel=0.1)
    assert agreed["input"]["streaming"] is True
    assert agreed["classes"] == ["down", "up"]
    assert agreed["validated_length"] == 24
    assert agreed["stability"]["steps"] == 600 and agreed["stability"]["first_non_finite_step"] is None
    assert "start every sequence from the initial state" in agreed["reset"]
    header = (tmp_path / f"{report['name']}.h").read_text()
    assert "input: per channel x_n[i] = (x[i] - mean[i]) / std[i]" in header
    assert "1: 'up'" in header and "reset:" in header and "validated: sequences of up to 24 steps" in header
    assert f"#define {report['name'].upper()}_VALIDATED_LENGTH 24" in header
    # the C step takes the raw series (the parity run feeds it x * std + mean): it agrees with eager
    assert saved["parity"]["agreement"] >= (0.99 if int8 else 1.0)
    if not int8:
        assert saved["parity"]["max_abs_error"] <= 1e-5
    assert "Contract:" in (tmp_path / "report.md").read_text()


def test_per_series_znorm_is_declared_not_streaming():
    class Info:
        name, loss, extra = "uea_ucr", "cross_entropy", {"znorm": True, "classes": ["a", "b"]}

    class Task:
        info = Info()

    given = contract.input_contract(Task())
    assert given["streaming"] is False and given["channel"] is None
    assert "needs the whole series in advance" in given["text"] and "standardize=true" in given["text"]


def test_stability_probe_reports_a_diverging_state():
    torch.manual_seed(0)
    model = make_model("fastrnn", {"nonlinearity": "relu"}, d=2)
    with torch.no_grad():
        model.rnn.cells[0].U[0].mul_(60.0)  # a recurrent gain far above 1: the state grows every step
        model.rnn.cells[0].beta.fill_(10.0)

    class Task:
        def dataset(self, split):
            return [(torch.randn(20, 2), 0) for _ in range(5)]

    probe = contract.stability(StreamingStep(model), Task(), steps=400)
    assert probe["bounded"] is False
    assert probe["first_non_finite_step"] is not None or probe["max_abs_state"] > 100 * probe["max_abs_state_validated"]
    text = contract._validated_text(20, probe, "test")
    assert "reset" in text and ("non-finite" in text or "grows" in text)


# ---- what the export used to get wrong ------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["mean", "max"])
def test_pooled_model_exports_what_it_computes(tmp_path, pooling):
    """A pooled head was exported as a last-step head (8% agreement); its pool now lives in the state."""
    model = make_model("gru", {"pooling": pooling})
    report = export(model, "pt2", tmp_path, measure=False)
    loaded = torch.export.load(str(tmp_path / next(iter(report["files"])))).module()
    x, lengths = sequences()
    step = StreamingStep(model)
    from ltdrnn.export.step import run_sequences

    got = run_sequences(lambda a, s: loaded(a, s), step.init_state(6), x, lengths.tolist())
    with torch.no_grad():
        assert torch.allclose(got, model(x, lengths), atol=1e-5, rtol=0)


@pytest.mark.parametrize("fmt", ["onnx", "pt2", "c"])
def test_diverged_model_is_refused_with_no_files(tmp_path, fmt):
    model = make_model("lstm", {})
    with torch.no_grad():
        model.rnn.cells[0].weight_hh[3, 2] = float("nan")
        model.output.bias[0] = float("inf")
    with pytest.raises(
        ExportError, match=r"model: parameter 'rnn\.cells\.0\.weight_hh' has 1 non-finite value.*diverged"
    ):
        export(model, fmt, tmp_path / "out", measure=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "name,said",
    [
        ("int", "C keyword"),
        ("main", "C keyword"),
        ("setup", "C keyword"),
        ("__net", "reserved identifier"),
        ("_Net", "reserved identifier"),
        ("a" * 41, "at most 40 characters"),
        ("9net", "expected a C identifier"),
        ("net-1", "expected a C identifier"),
        ("con", "device name"),
    ],
)
def test_names_that_break_the_build_are_refused(name, said):
    with pytest.raises(ExportError, match=said):
        check_name(name)


def test_good_names_pass():
    assert check_name("gunpoint_net") == "gunpoint_net" and check_name("Net2") == "Net2"


def test_export_directory_that_cannot_be_made_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ExportError, match=r"out: cannot create the export directory .*file"):
        export(make_model("gru", {}), "c", blocker / "out", measure=False)


@needs_cc
def test_failed_write_leaves_no_partial_files(tmp_path, monkeypatch):
    written = []

    def full_disk(path, text):
        if written:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(path)
        path.write_text(text)

    monkeypatch.setattr(c_build, "write_atomic", full_disk)
    out = tmp_path / "out"
    with pytest.raises(ExportError, match=r"out: writing the export to .* failed: No space left on device") as info:
        export(make_model("gru", {}), "c", out, measure=False)
    assert "not supported" not in str(info.value)
    assert written and list(out.iterdir()) == []  # the first file was written, then removed with the rest


def test_latency_steps_are_bounded(tmp_path, capsys):
    with pytest.raises(ExportError, match="latency_steps: expected an integer from 1 to 100,000, got 100001"):
        export(make_model("gru", {}), "c", tmp_path, latency_steps=100_001)
    code = main(["export", str(tmp_path), "--format", "c", "--latency-steps", "10000000000"])
    error = capsys.readouterr().err
    assert code == 2 and "latency_steps" in error and "Traceback" not in error


def test_cli_names_and_mcu_mistakes_exit_2(tmp_path, capsys):
    assert main(["export", str(tmp_path), "--format", "c", "--name", "int"]) == 2
    assert "Traceback" not in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(tmp_path), "--format", "c", "--mcu", "z80"])
    assert exit_info.value.code == 2


@needs_cc
def test_mcu_refuses_a_model_that_does_not_fit(tmp_path):
    big = make_model("lstm", {}, hidden=96)  # 4 * 96 * 99 floats: 150 KiB of weights
    with pytest.raises(ExportError, match=r"mcu atmega328p: the fp32 C step needs [\d,]+ B of constants .*32,768 B"):
        export(big, "c", tmp_path, measure=False, mcu="atmega328p")
    report = export(make_model("fastgrnn", {}, hidden=8), "c", tmp_path / "small", measure=False, mcu="atmega328p")
    assert report["fits"]["atmega328p"]["fp32"]["fits"] is True
    assert re.search(r"atmega328p: fp32 fits", (tmp_path / "small" / "report.md").read_text())


def test_device_table_user_mistakes_exit_2(tmp_path, capsys):
    assert main(["device-table", str(tmp_path / "nowhere")]) == 2
    error = capsys.readouterr().err
    assert "nowhere" in error and "Traceback" not in error and len(error.strip().splitlines()) == 1
    assert main(["device-table", str(tmp_path), "--sequences", "0"]) == 2


@pytest.mark.slow
@needs_cc
@pytest.mark.skipif(
    devices.missing("avr") is not None or devices.missing("cortex-m4") is not None,
    reason="AVR or ARM toolchain missing (.ci/install-device-toolchains installs them)",
)
def test_device_table_measures_a_standardised_run_from_its_raw_series(standardised_run, tmp_path, capsys):
    """The table feeds each simulated chip the raw series (the C standardises them) and the integer step
    NAME_quantise's output; both agree with eager PyTorch."""
    run_dir, record, _ = standardised_run
    assert main(["device-table", str(run_dir), "--sequences", "4", "--json", str(tmp_path / "table.json")]) == 0
    (row,) = json.loads((tmp_path / "table.json").read_text())
    assert row["cell"] == "gru" and row["sequences"] == 4
    for kind in ("fp32", "int8"):
        for chip in ("atmega328p", "cortex-m4"):
            measured = row[kind][chip]
            assert measured["agreement"] == 1.0 and measured["steps"] == 4 * 24
            assert 0 < measured["stack"] <= measured["ram"] and measured["flash"] > row[kind]["weight_bytes"]
    assert row["int8"]["atmega328p"]["cycles_per_step"] < row["fp32"]["atmega328p"]["cycles_per_step"]
    printed = capsys.readouterr().out
    assert "| gru H=8 | fp32 |" in printed and "|  | int8 |" in printed


# ---- refusals that used to fall back silently -----------------------------------------------------------
@pytest.mark.parametrize("fmt", ["onnx", "pt2"])
def test_mcu_is_refused_where_no_c_step_is_exported(tmp_path, monkeypatch, capsys, fmt):
    """``--mcu`` only checks a C step against a chip; with onnx or pt2 it was ignored without a word."""
    said = rf"mcu: applies to the C format only, got mcu 'cortex-m4' with format '{fmt}'"
    with pytest.raises(ExportError, match=said):
        export(make_model("gru", {}), fmt, tmp_path / "api", measure=False, mcu="cortex-m4")
    monkeypatch.setattr(export_module, "load_trained", lambda path: (make_model("gru", {}), None, None))
    assert main(["export", str(tmp_path), "--format", fmt, "--mcu", "atmega328p", "--no-measure"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("ltdrnn export: mcu: applies to the C format only") and "--format c" in error
    assert "Traceback" not in error and len(error.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_an_empty_name_is_refused_not_replaced_by_the_default(tmp_path, monkeypatch, capsys):
    with pytest.raises(ExportError, match=r"name \(--name\): expected a C identifier .*, got ''"):
        export(make_model("gru", {}), "c", tmp_path / "api", name="", measure=False)
    monkeypatch.setattr(export_module, "load_trained", lambda path: (make_model("gru", {}), None, None))
    assert main(["export", str(tmp_path), "--format", "c", "--name", "", "--no-measure"]) == 2
    error = capsys.readouterr().err
    assert "--name" in error and "got ''" in error and "Traceback" not in error
    assert list(tmp_path.iterdir()) == []


# ---- device-table on a regressor ---------------------------------------------------------------------------
def test_device_outputs_are_scored_by_accuracy_or_by_mse():
    eager = np.array([[0.5, -1.0], [2.0, 1.0], [0.0, 0.25]])
    device = eager + np.array([[0.0, 0.0], [0.0, 1.5], [0.125, 0.0]])
    classes = device_table.scores(device, eager, np.array([0, 0, 0]), "cross_entropy")  # predicts 0, 1, 1
    assert classes == {"accuracy": pytest.approx(1 / 3), "agreement": pytest.approx(2 / 3)}
    targets = np.array([[0.5, -1.0], [2.0, 2.0], [0.0, 0.0]])
    assert device_table.scores(device, eager, targets, "mse") == {
        "mse": pytest.approx((0.25 + 0.125**2 + 0.25**2) / 6),
        "max_abs_difference": pytest.approx(1.5),
    }


@needs_cc
def test_device_table_reports_mse_and_the_output_difference_for_a_regressor(monkeypatch, capsys):
    """A regression run on the device table read as "accuracy 0, agreement 1" (an argmax of one output);
    it now gives the test MSE, eager -> device, and the largest difference from eager PyTorch. The
    simulators are stood in for by outputs 0.25 off eager PyTorch's (the real ones: test_export_devices)."""
    from types import SimpleNamespace

    from harness_helpers import TinyTask

    task = TinyTask(kind="regression", n_train=32, n_test=8)
    torch.manual_seed(0)
    model = SequenceModel("gru", 2, 8, 1, "regressor").eval()
    cfg = SimpleNamespace(model=SimpleNamespace(cell="gru", hidden_size=8, options={}))
    monkeypatch.setattr(device_table, "load_trained", lambda run: (model, cfg, task))
    x, y, _ = task.collate([task.dataset("test")[i] for i in range(8)])
    with torch.no_grad():
        eager = model(x).numpy()

    def simulated(generated, inputs, lengths):
        return {"outputs": eager + 0.25, "flash": 4000, "ram": 300, "stack": 120, "cycles_per_step": 9000.0}

    monkeypatch.setattr(devices, "run_avr", lambda *a: dict(simulated(*a), us_per_step_16mhz=562.5))
    monkeypatch.setattr(devices, "run_cortex_m4", lambda *a: dict(simulated(*a), instructions_per_step=900.0))
    assert main(["device-table", "regression-run"]) == 0
    (row,) = device_table.measure_runs(["regression-run"])
    mse_eager, mse_device = float(((eager - y.numpy()) ** 2).mean()), float(((eager + 0.25 - y.numpy()) ** 2).mean())
    assert row["metric"] == "mse" and row["mse_eager"] == pytest.approx(mse_eager)
    for kind in ("fp32", "int8"):
        for chip in ("atmega328p", "cortex-m4"):
            measured = row[kind][chip]
            assert "accuracy" not in measured and "agreement" not in measured
            assert measured["mse"] == pytest.approx(mse_device)
            assert measured["max_abs_difference"] == pytest.approx(0.25)
    printed = capsys.readouterr().out
    assert "accuracy (MSE) eager -> device | agreement (max abs difference) |" in printed
    assert printed.count(f"| MSE {mse_eager:.4g} -> {mse_device:.4g} | 0.25 |") == 2
