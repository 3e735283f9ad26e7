"""Export (ltdrnn.export): the streaming step against eager PyTorch, the generated C, ONNX, torch.export,
int8, the parity report of a trained run, the CLI, and clear errors for what is not supported."""

from __future__ import annotations

import json
import re
import tempfile

import numpy as np
import pytest
import torch

from harness_helpers import TinyTask
from ltdrnn.cells.registry import entry, list_cells
from ltdrnn.cli import main
from ltdrnn.export import ExportError, StreamingStep, c_build, c_export, c_fixed, export
from ltdrnn.export.step import run_sequences
from ltdrnn.models import SequenceModel
from ltdrnn.tasks import base as task_base

needs_cc = pytest.mark.skipif(
    c_build.find_compiler() is None, reason="no C compiler (cc or $CC) on this machine to compile the generated step"
)

# (cell, options, layers): every cell the C generator handles, default options first, then variants
C_CASES = [
    ("lstm", {}, 1),
    ("lstm", {"bias": False}, 1),
    ("gru", {}, 2),
    ("fastrnn", {}, 1),
    ("fastrnn", {"w_rank": 2, "u_rank": 3, "nonlinearity": "relu"}, 1),
    ("fastgrnn", {}, 1),
    ("fastgrnn", {"w_rank": 2, "u_rank": 3}, 1),
    ("srnn", {"hyper_size": 5}, 1),
    ("srnn", {"hyper_size": 5, "activation": "tanh", "gate": False, "fr_layers": 3}, 1),
    ("srnn", {"fr_layers": 0}, 1),
    ("mist", {"num_delays": 3}, 1),
    ("sarnn", {}, 1),
    ("sarnn", {"recurrence": "lstm"}, 1),
    ("tarnn", {}, 1),
    ("tarnn", {"A": "coupled", "activation": "tanh"}, 1),
    ("tarnn", {"gate": "outside", "activation": "sigmoid", "K": 3}, 2),
    ("tarnn", {"reading": "code"}, 1),
    ("tarnn", {"reading": "theorem"}, 1),
    ("tarnn", {"reading": "code", "gate": "outside"}, 1),  # A = -2I: the C step once assumed -I
    ("irnn", {}, 1),
    ("irnn", {"rank": None, "reading": "state", "alpha": 0.5}, 1),
    ("irnn", {"projection": False}, 1),
    ("irnn", {"reading": "paper"}, 1),
    ("irnn", {"contractive": True}, 1),
    ("gru", {"pooling": "mean"}, 1),  # a pooled head keeps its pool in the state
    ("fastgrnn", {"pooling": "max"}, 2),
]
IDS = [f"{cell}-{i}" for i, (cell, _, _) in enumerate(C_CASES)]


def make_model(cell, options, layers=1, d=3, hidden=16, classes=4, seed=0):
    """An untrained classifier (the cells' own initialisation, seeded)."""
    torch.manual_seed(seed)
    return SequenceModel(cell, d, hidden, classes, "classifier", num_layers=layers, **options).eval()


def sequences(batch=6, steps=11, d=3, seed=1):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, steps, d, generator=generator)
    lengths = torch.tensor([steps, 1, 5, steps, 8, 3][:batch])
    return x, lengths


# ---- the streaming step ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cell,options,layers", C_CASES, ids=IDS)
def test_streaming_step_over_a_sequence_equals_the_eager_model(cell, options, layers):
    model = make_model(cell, options, layers)
    x, lengths = sequences()
    with torch.no_grad():
        expected = model(x, lengths)
    got = StreamingStep(model).run(x, lengths)
    assert torch.allclose(got, expected, atol=1e-5, rtol=0)


def test_packed_state_round_trips_and_starts_at_zero():
    model = make_model("mist", {"num_delays": 3}, layers=2)
    step = StreamingStep(model)
    # two layers of a (N=4, H=16) history each
    assert step.state_size == 2 * 4 * 16
    state = torch.randn(3, step.state_size)
    assert torch.equal(step.pack(step.unpack(state)), state)
    assert torch.equal(step.init_state(3), torch.zeros(3, step.state_size))


def test_initial_state_is_the_cells_own():
    # SkipRNN starts its update probability at 1: a zero state would change its first step
    model = make_model("skiprnn_gru", {})
    step = StreamingStep(model)
    assert torch.equal(step.init_state(2), step.pack([model.rnn.cells[0].init_state(2)]))
    assert step.init_state(2)[:, -1].eq(1).all()
    x, lengths = sequences()
    with torch.no_grad():
        assert torch.allclose(step.run(x, lengths), model(x, lengths), atol=1e-5, rtol=0)


# ---- generated C ----------------------------------------------------------------------------------------
def compiled(tmp_path, model, int8=False, name="net", calibration=None):
    step = StreamingStep(model)
    written = c_build.write(step, c_export.generate_c(step, name, int8, calibration), tmp_path)
    return step, written


@needs_cc
@pytest.mark.parametrize("cell,options,layers", C_CASES, ids=IDS)
def test_generated_c_step_matches_eager_pytorch(tmp_path, cell, options, layers):
    model = make_model(cell, options, layers)
    step, written = compiled(tmp_path, model)
    x, lengths = sequences()
    with torch.no_grad():
        expected = model(x, lengths).numpy()
    state = step.init_state(x.shape[0]).numpy()
    got = run_sequences(written["step"], state, x.numpy(), lengths.tolist())
    assert np.abs(got - expected).max() <= 1e-5


@pytest.mark.parametrize("cell,options,layers", C_CASES, ids=IDS)
def test_graph_of_the_c_step_equals_the_eager_model_in_float64(cell, options, layers):
    """The one description both C dialects are written from (export/cells_ir.py), evaluated in float64,
    is the model: the float64 eager model on the reference path gives the same outputs."""
    from ltdrnn.export import ir
    from ltdrnn.export.cells_ir import build_graph
    from ltdrnn.export.measure import on_reference_path

    model = make_model(cell, options, layers)
    x, lengths = sequences()
    exact = on_reference_path(model).double()
    with torch.no_grad():
        expected = exact(x.double(), lengths).numpy()
    got = ir.run(build_graph(StreamingStep(model)), x.numpy(), lengths.tolist())
    assert np.abs(got - expected).max() <= 1e-9 * max(1.0, np.abs(expected).max())


def test_reference_path_copy_leaves_the_model_alone():
    from ltdrnn.export.measure import on_reference_path

    model = make_model("tarnn", {})
    copy = on_reference_path(model)
    assert [cell.backend for cell in copy.rnn.cells] == ["reference"]
    assert [cell.backend for cell in model.rnn.cells] == ["auto"]
    x, lengths = sequences()
    with torch.no_grad():
        assert torch.allclose(copy(x, lengths), model(x, lengths), atol=1e-5, rtol=0)
        assert not torch.equal(copy.output.weight, model.output.weight.add_(1.0))  # a copy, not shared


def test_quantize_rows_is_symmetric_per_row():
    weight = torch.tensor([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0], [3.0, 2.0, -0.1]])
    q, scale = c_fixed.quantize_rows(weight)
    assert q.dtype == np.int8 and scale.dtype == np.float32
    assert np.abs(q[0]).max() == 127 and np.abs(q[2]).max() == 127 and not q[1].any()
    assert scale[0] == pytest.approx(1.0 / 127) and scale[1] == 1.0
    assert np.abs(q * scale[:, None] - weight.numpy()).max() <= scale.max() / 2 + 1e-7


def test_generated_c_is_self_contained_c99():
    source = c_export.generate_c(StreamingStep(make_model("tarnn", {})), "edge_net")
    includes = set(re.findall(r"#\s*include [<\"]([^>\"]+)[>\"]", source.source))
    assert includes == {"edge_net.h", "math.h", "stdint.h", "string.h", "avr/pgmspace.h"}  # the last on AVR only
    assert re.search(r"#  if defined\(__AVR__\)\n#    include <avr/pgmspace.h>", source.source)
    assert "malloc" not in source.source
    assert not re.findall(r"static (?!const)[\w ]+\[", source.source)  # no mutable static data: reentrant
    step = "int edge_net_step(const EDGE_NET_input_t x[EDGE_NET_INPUT_SIZE], EDGE_NET_state_t *{}, "
    step += "EDGE_NET_output_t out[EDGE_NET_OUTPUT_SIZE])"
    assert step.format("model_state") in source.source and step.format("state") + ";" in source.header
    assert "void edge_net_init(EDGE_NET_state_t *state);" in source.header
    assert "typedef struct { float values[EDGE_NET_STATE_SIZE]; } EDGE_NET_state_t;" in source.header
    assert "typedef float EDGE_NET_input_t;" in source.header and "typedef float EDGE_NET_output_t;" in source.header
    assert "#define EDGE_NET_STATE_SIZE 16" in source.header
    # every weight is a const array behind the storage macro (flash on AVR): the classifier head too
    assert re.search(r"static const float head_w\[\d+\] LTDRNN_FLASH = ", source.source)
    assert "LTDRNN_READ_F32(head_b" in source.source and "LTDRNN_READ_F32(w + c)" in source.source  # accessors


@needs_cc
def test_c_state_and_init_follow_the_header(tmp_path):
    import ctypes

    model = make_model("lstm", {})
    _, written = compiled(tmp_path, model)
    state = np.full(32, 7.0, np.float32)
    written["library"].net_init(ctypes.c_void_p(state.ctypes.data))
    assert not state.any()


@needs_cc
def test_c_build_leaves_no_temporary_directory(tmp_path, monkeypatch):
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    model = make_model("gru", {})
    step, written = compiled(tmp_path, model)
    c_build.step_latency_ns(tmp_path / "net.h", tmp_path / "net.c", "net", 10)
    x, lengths = sequences()
    run_sequences(written["step"], step.init_state(6).numpy(), x.numpy(), lengths.tolist())  # still loaded
    assert list(temporary.iterdir()) == []
    monkeypatch.setenv("CC", "false")  # a compiler that fails: the build directory goes too
    with pytest.raises(ExportError, match="C compiler: false failed"):
        compiled(tmp_path, model)
    assert list(temporary.iterdir()) == []


# ---- ONNX and torch.export --------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    "cell,options",
    [
        ("lstm", {}),
        ("tarnn", {}),
        ("sarnn", {}),
        ("mist", {"num_delays": 3}),
        ("srnn", {"hyper_size": 5}),
        ("irnn", {}),
    ],
)
def test_onnx_step_is_checked_and_matches_eager(tmp_path, cell, options):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from ltdrnn.export import onnx_export

    model = make_model(cell, options)
    written = onnx_export.write(StreamingStep(model), tmp_path, "net", int8=False)
    graph = onnx.load(str(tmp_path / "net.onnx"))
    assert [i.name for i in graph.graph.input] == ["x", "state"]
    assert [o.name for o in graph.graph.output] == ["y", "state_out"]
    assert onnx_export.check(tmp_path / "net.onnx") >= 17
    x, lengths = sequences()
    with torch.no_grad():
        expected = model(x, lengths).numpy()
    got = run_sequences(
        written["step"], StreamingStep(model).init_state(x.shape[0]).numpy(), x.numpy(), lengths.tolist()
    )
    assert np.abs(got - expected).max() <= 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("cell,options", [("tarnn", {}), ("srnn", {"hyper_size": 5})])
def test_onnx_int8_is_weight_only_per_channel(tmp_path, cell, options):
    """The int8 graph computes what eager PyTorch computes with every weight matrix replaced by its
    per-output-row symmetric int8 round trip (activations and state stay float), in onnxruntime's
    default optimised session; its matrices are int8 initializers read by DequantizeLinear."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from ltdrnn.export import onnx_export

    model = make_model(cell, options)
    written = onnx_export.write(StreamingStep(model), tmp_path, "net", int8=True)
    graph = onnx.load(str(tmp_path / "net.int8.onnx")).graph
    dequantized = [node for node in graph.node if node.op_type == "DequantizeLinear"]
    assert dequantized and not {"QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger"} & {
        node.op_type for node in graph.node
    }
    assert {t.data_type for t in graph.initializer if t.name.endswith("_q8")} == {onnx.TensorProto.INT8}
    quantized = make_model(cell, options)
    with torch.no_grad():
        for parameter in quantized.parameters():
            if parameter.dim() == 2:
                q, scale = c_fixed.quantize_rows(parameter)
                parameter.copy_(torch.from_numpy(q * scale[:, None]))
    x, lengths = sequences()
    with torch.no_grad():
        expected, unquantized = quantized(x, lengths).numpy(), model(x, lengths).numpy()
    got = run_sequences(
        written["step"], StreamingStep(model).init_state(x.shape[0]).numpy(), x.numpy(), lengths.tolist()
    )
    assert np.abs(got - expected).max() <= 1e-6 * max(1.0, np.abs(expected).max())
    assert np.abs(got - unquantized).max() > 1e-6  # the weights really are int8


@pytest.mark.slow
def test_pt2_step_and_scanned_sequence_match_eager(tmp_path):
    from ltdrnn.export import pt2_export

    model = make_model("tarnn", {})
    step = StreamingStep(model)
    written = pt2_export.write(step, tmp_path, "net", int8=False)
    assert [f.name for f in written["files"]] == ["net.pt2", "net.sequence.pt2"]
    sequence = torch.export.load(str(tmp_path / "net.sequence.pt2")).module()
    for steps in (2, 23):  # the example had 3 steps: the length is dynamic
        x = torch.randn(1, steps, 3)
        ys, final = sequence(x, step.init_state(1))
        with torch.no_grad():
            assert torch.allclose(ys[:, -1], model(x), atol=1e-5, rtol=0)
            assert torch.allclose(ys[:, 4 % steps], model(x[:, : 4 % steps + 1]), atol=1e-5, rtol=0)
    loaded_step = torch.export.load(str(tmp_path / "net.pt2")).module()
    x, lengths = sequences()
    got = run_sequences(lambda a, s: loaded_step(a, s), step.init_state(6), x, lengths.tolist())
    with torch.no_grad():
        assert torch.allclose(got, model(x, lengths), atol=1e-5, rtol=0)


# ---- what is not supported says so ------------------------------------------------------------------------
def test_unsupported_models_and_options_get_clear_errors(tmp_path):
    with pytest.raises(ExportError, match=r"cell 'indrnn': export to C is not supported"):
        export(make_model("indrnn", {}), "c", tmp_path, measure=False)
    per_time_step = make_model("tarnn", {"eta_per_time_step": True, "max_length": 20})
    with pytest.raises(ExportError, match="integer state .* not supported"):
        StreamingStep(per_time_step)
    with pytest.raises(ExportError, match="cell 'irnn': export to C is not supported with gate='outside'"):
        export(make_model("irnn", {"gate": "outside"}), "c", tmp_path, measure=False)
    bidirectional = SequenceModel("gru", 3, 8, 2, "classifier", bidirectional=True)
    with pytest.raises(ExportError, match="bidirectional"):
        StreamingStep(bidirectional)
    with pytest.raises(ExportError, match="head: 'tagger' is not supported"):
        StreamingStep(SequenceModel("gru", 3, 8, 2, "tagger"))
    with pytest.raises(ExportError, match="--int8: not supported for the pt2 format"):
        export(make_model("gru", {}), "pt2", tmp_path, int8=True, measure=False)
    with pytest.raises(ExportError, match="format: expected one of onnx, pt2, c, got 'tflite'"):
        export(make_model("gru", {}), "tflite", tmp_path)
    with pytest.raises(ExportError, match=r"name \(--name\): expected a C identifier"):
        c_export.generate_c(StreamingStep(make_model("gru", {})), "1net")
    with pytest.raises(ExportError, match="out: expected an export directory"):
        export(make_model("gru", {}), "c")


@pytest.mark.slow
@pytest.mark.parametrize("cell", list_cells())
def test_every_registry_cell_exports_to_pt2_or_says_why_not(tmp_path, cell):
    options = dict(entry(cell).test_options)
    model = make_model(cell, options, hidden=16)
    try:
        report = export(model, "pt2", tmp_path, measure=False)
    except ExportError as error:
        assert re.match(rf"cell '{cell}': .*not supported", str(error)), str(error)
        return
    loaded = torch.export.load(str(tmp_path / next(iter(report["files"])))).module()
    x, lengths = sequences()
    step = StreamingStep(model)
    if not entry(cell).deterministic:
        return  # random update masks: nothing to compare without the generator's state
    got = run_sequences(lambda a, s: loaded(a, s), step.init_state(6), x, lengths.tolist())
    with torch.no_grad():
        assert torch.allclose(got, model(x, lengths), atol=1e-5, rtol=0)


# ---- a trained run: every format, the report, the CLI -------------------------------------------------------
@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A small LSTM classifier trained for a few seconds on the tiny task (the class of x[0, 0] > 0 read
    after 6 steps), with 400 test sequences; the task stays registered while the module's tests run."""
    from ltdrnn.config import load_config
    from ltdrnn.train import train

    class TinyTest(TinyTask):
        def __init__(self, **options):
            super().__init__(**{"n_train": 1024, "n_val": 64, "n_test": 400, **options})

    run_dir = tmp_path_factory.mktemp("trained") / "run"
    with pytest.MonkeyPatch.context() as patch:
        task_base._load_all()
        patch.setitem(task_base._TASKS, "tiny", TinyTest)
        cfg = load_config(
            {
                "model": {"cell": "lstm", "hidden_size": 16},
                "task": {"name": "tiny"},
                "optim": {"name": "adam", "lr": 0.03},
                "train": {
                    "steps": 150,
                    "batch_size": 32,
                    "eval_every": 50,
                    "seed": 0,
                    "threads": 1,
                    "progress": False,
                    "latency": False,
                },
                "run_dir": str(run_dir),
                "results": None,
            }
        )
        record = train(cfg)
        yield run_dir, record


def measured(run_dir, fmt, out, int8=False):
    return export(str(run_dir), fmt, out, int8=int8, latency_steps=50)


@pytest.mark.parametrize(
    "fmt,int8",
    [
        pytest.param("c", False, marks=needs_cc),
        pytest.param("c", True, marks=needs_cc),
        pytest.param("onnx", False, marks=pytest.mark.slow),
        pytest.param("onnx", True, marks=pytest.mark.slow),
        pytest.param("pt2", False, marks=pytest.mark.slow),
    ],
)
def test_trained_classifier_exports_with_parity_report(trained_run, tmp_path, fmt, int8):
    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
    run_dir, record = trained_run
    assert record["metrics"]["metric"] >= 0.9  # trained, not chance (0.5)
    report = measured(run_dir, fmt, tmp_path, int8)
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved == json.loads(json.dumps(report))
    parity = saved["parity"]
    assert parity["sequences"] == 400 and parity["split"] == "test"
    assert parity["output_scale"] > 0
    assert parity["max_rel_error"] == pytest.approx(parity["max_abs_error"] / parity["output_scale"])
    assert parity["accuracy_eager"] == pytest.approx(record["metrics"]["metric"])
    if int8:
        assert parity["agreement"] >= 0.99 and saved["targets"]["int8_agreement>=99%"] is True
        assert parity["max_abs_error"] > 0  # the weights really are quantised
        assert parity["accuracy_delta"] == pytest.approx(parity["accuracy_export"] - parity["accuracy_eager"])
    else:
        assert parity["max_abs_error"] <= 1e-5 and parity["agreement"] == 1.0
        assert parity["max_abs_error_vs_reference"] <= 1e-5
        assert saved["targets"]["fp32_max_abs_error<=1e-5"] and saved["targets"]["fp32_agreement=100%"]
    assert 0 < parity["eager_rounding_error"] <= 1e-4  # float32 against float64: rounding, small here
    lstm_c = 4 * (4 * 16 * (2 + 16) + 4 * 16) + 4 * (2 * 16 + 2)  # weights, one summed bias, head
    assert saved["weight_bytes"]["fp32"] == lstm_c
    assert saved["weight_bytes"]["int8"] < 0.4 * lstm_c
    assert saved["memory_bytes"]["state"] == 4 * 32
    latency = saved["latency_us"]
    assert latency["torch_recurrent_step"] > 0 and latency["torch_lstmcell"] > 0
    if fmt == "c":
        assert latency["c_step"] > 0
        assert latency["c_speedup_vs_torch_step"] == pytest.approx(latency["torch_recurrent_step"] / latency["c_step"])
    else:
        assert latency[f"{fmt}_step"] > 0
    for name, size in saved["files"].items():
        assert (tmp_path / name).stat().st_size == size
    text = (tmp_path / "report.md").read_text()
    assert f"{100 * parity['agreement']:.2f}%" in text


def test_cli_export_writes_and_reports(trained_run, tmp_path, capsys):
    run_dir, _ = trained_run
    code = main(
        ["export", str(run_dir), "--format", "c", "--out", str(tmp_path / "c"), "--name", "tiny_lstm", "--no-measure"]
    )
    assert code == 0
    assert (tmp_path / "c" / "tiny_lstm.c").is_file() and (tmp_path / "c" / "tiny_lstm.h").is_file()
    assert json.loads((tmp_path / "c" / "report.json").read_text())["parity"] is None
    assert "written:" in capsys.readouterr().out


def test_cli_export_user_mistakes_exit_2_with_one_line(tmp_path, capsys):
    assert main(["export", str(tmp_path / "nowhere"), "--format", "c"]) == 2
    error = capsys.readouterr().err
    assert "nowhere" in error and "Traceback" not in error and len(error.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(tmp_path), "--format", "tflite"])
    assert exit_info.value.code == 2


@needs_cc
def test_float_input_embedding_is_part_of_the_step_and_the_c(tmp_path):
    torch.manual_seed(0)
    model = SequenceModel("gru", 3, 16, 4, "classifier", embedding=5).eval()
    step, written = compiled(tmp_path, model)
    x, lengths = sequences()
    with torch.no_grad():
        expected = model(x, lengths)
    assert torch.allclose(step.run(x, lengths), expected, atol=1e-5, rtol=0)
    got = run_sequences(written["step"], step.init_state(6).numpy(), x.numpy(), lengths.tolist())
    assert np.abs(got - expected.numpy()).max() <= 1e-5
