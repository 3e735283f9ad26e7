"""The integer C step (export --format c --int8): agreement with eager PyTorch for every cell the C export
handles, no float on the step, the activation tables' accuracy, saturation instead of wrap-around, and
what it refuses."""

from __future__ import annotations

import math
import re
import subprocess

import numpy as np
import pytest
import torch

from ltdrnn.export import ExportError, StreamingStep, c_build, c_export, export
from ltdrnn.export.c_fixed import frac_bits
from ltdrnn.export.step import run_sequences
from test_export import C_CASES, IDS, make_model, needs_cc, sequences

FIXED_CASES = [(c, o, n) for c, o, n in C_CASES if o.get("pooling") != "mean"]
FIXED_IDS = [i for i, (_, o, _) in zip(IDS, C_CASES) if o.get("pooling") != "mean"]


def calibration(seed=7, batch=48, steps=11):
    """Inputs of the same distribution as :func:`test_export.sequences`, from another seed."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, steps, 3, generator=generator).double().numpy()


def integer(tmp_path, model, name="net"):
    step = StreamingStep(model)
    return step, c_build.write(step, c_export.generate_c(step, name, True, calibration()), tmp_path)


@needs_cc
@pytest.mark.parametrize("cell,options,layers", FIXED_CASES, ids=FIXED_IDS)
def test_integer_c_step_agrees_with_eager_pytorch(tmp_path, cell, options, layers):
    model = make_model(cell, options, layers)
    step, written = integer(tmp_path, model)
    x, lengths = sequences(batch=6)
    with torch.no_grad():
        expected = model(x, lengths).numpy()
    state = written["init"](x.shape[0])
    header = (tmp_path / "net.h").read_text()
    typedef = re.search(r"typedef struct \{ (\w+) values\[NET_STATE_SIZE\]; \} NET_state_t;", header).group(1)
    assert state.dtype == {"int16_t": np.int16, "int32_t": np.int32}[typedef]
    got = run_sequences(written["step"], state, x.numpy(), lengths.tolist())
    error = np.abs(got - expected).max()
    assert 0 < error <= 0.02 * np.abs(expected).max()  # quantised, and within 2% of the largest output
    assert (got.argmax(-1) == expected.argmax(-1)).all()
    assert written["generated"].weight_bytes < 0.6 * c_export.generate_c(step, "net").weight_bytes


def _without_float_input(source: str) -> str:
    """The source without the functions that take float input (``NAME_quantise``, off the step), which sit
    behind ``LTDRNN_NO_FLOAT``."""
    return re.sub(r"#if !defined\(LTDRNN_NO_FLOAT\)\n.*?\n#endif\n", "", source, flags=re.S)


@needs_cc
@pytest.mark.parametrize("cell", ["lstm", "mist", "sarnn", "tarnn"])
def test_integer_step_has_no_float(tmp_path, cell):
    """No float type, literal or libm call outside the float input functions (NAME_quantise), and with
    LTDRNN_NO_FLOAT, which leaves them out, it compiles where the compiler may not use a floating-point
    register (x86's -mgeneral-regs-only)."""
    options = {"num_delays": 3} if cell == "mist" else {}
    generated = c_export.generate_c(StreamingStep(make_model(cell, options)), "net", True, calibration())
    rest = _without_float_input(generated.source)
    assert "net_quantise" not in rest and "int net_quantise(" in generated.source
    assert re.search(r"int net_step\(const NET_input_t x\[NET_INPUT_SIZE\], NET_state_t \*model_state", rest)
    code = re.sub(r"/\*.*?\*/", "", rest[rest.index("static const") :], flags=re.S)
    assert not re.search(r"\bfloat\b|\bdouble\b|tanhf|expf|\d\.\d*f\b", code)
    (tmp_path / "net.h").write_text(generated.header)
    (tmp_path / "net.c").write_text(generated.source)
    flags = ["-DLTDRNN_NO_FLOAT"] + (
        ["-mgeneral-regs-only"]
        if subprocess.run(["uname", "-m"], capture_output=True, text=True).stdout.strip() in ("x86_64", "aarch64")
        else []
    )
    c_build.compile_c([tmp_path / "net.c"], tmp_path / "net.so", shared=True, flags=flags)


@needs_cc
def test_activation_tables_are_within_their_stated_error(tmp_path):
    """tanh and sigmoid from the 1/32 table with interpolation (<= 1.2e-4 plus rounding), exp from 2^f."""
    generated = c_export.generate_c(
        StreamingStep(make_model("mist", {"num_delays": 3})), "net", True, calibration()
    )  # uses all three tables
    (tmp_path / "net.h").write_text(generated.header)
    (tmp_path / "net.c").write_text(generated.source)
    (tmp_path / "probe.c").write_text(
        '#include "net.c"\n#include <stdio.h>\nint main(void) {\n'
        "    for (long x = -9 * 4096L; x <= 9 * 4096L; ++x)\n"
        '        printf("%ld %ld %ld %ld\\n", x, (long)tanh_q15(x), (long)sigmoid_q15(x),\n'
        "               x <= 0 ? (long)exp_q15(x) : 0L);\n"
        "    return 0;\n}\n"
    )
    binary = c_build.compile_c([tmp_path / "probe.c"], tmp_path / "probe", shared=False)
    rows = np.loadtxt(subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.splitlines())
    x = rows[:, 0] / 4096
    assert np.abs(rows[:, 1] / 32768 - np.tanh(x)).max() <= 1.3e-4
    # sigmoid_q15 takes x / 2 in Q12: sigmoid(2 h) = (1 + tanh(h)) / 2, half of tanh's error
    assert np.abs(rows[:, 2] / 32768 - 0.5 * (1 + np.tanh(x))).max() <= 0.8e-4
    negative = x <= 0
    assert np.abs(rows[negative, 3] / 32768 - np.exp(x[negative])).max() <= 2e-4


def test_number_formats_leave_headroom():
    assert frac_bits(1.0) == 14  # twice the largest value seen, +-2, fits (up to the last step below 2)
    assert frac_bits(0.2) == 16 and frac_bits(100.0) == 7
    assert frac_bits(0.0) == 12  # never seen: +-8
    assert 32768 / 2 ** frac_bits(3.7) >= 2 * 3.7 > 32768 / 2 ** (frac_bits(3.7) + 1)


@needs_cc
def test_out_of_range_values_saturate_instead_of_wrapping(tmp_path):
    """Past its calibrated range a value clips at the rails of its format, keeping the float result's
    sign; it never wraps around to the other sign."""
    model = make_model("fastrnn", {"nonlinearity": "relu"})  # h = 0.05 relu(a) + 0.95 h: h builds up slowly
    step = StreamingStep(model)
    generated = c_export.generate_c(step, "net", True, calibration(steps=2))  # calibrated on 2 steps only
    written = c_build.write(step, generated, tmp_path)
    x = torch.full((1, 200, 3), 1.5)  # the input fits its format; the state after 200 steps does not
    state = written["init"](1)
    float_state = step.init_state(1)
    for t in range(200):
        _, state = written["step"](x[:, t].numpy(), state)
        with torch.no_grad():
            _, float_state = step(x[:, t], float_state)
    exact = float_state.numpy()[0]
    got = state[0]
    assert np.abs(exact).max() > 0.5  # far past the range seen in two steps (~0.1)
    assert (np.sign(got) == np.sign(exact)).all() and (state[0] != 0).all()
    assert np.abs(state).max() > 16384  # clipped near the top of int16, not wrapped to small or negative


def test_integer_step_refuses_what_it_cannot_do(tmp_path):
    mean_pooled = make_model("gru", {"pooling": "mean"})
    with pytest.raises(ExportError, match="pooling mean: the integer C step does not support mean pooling"):
        c_export.generate_c(StreamingStep(mean_pooled), "net", True, calibration())
    with pytest.raises(ExportError, match="int8: the integer C step needs calibration inputs"):
        c_export.generate_c(StreamingStep(make_model("gru", {})), "net", True)
    with pytest.raises(ExportError, match="int8: the integer C step is calibrated on the task's training split"):
        export(make_model("gru", {}), "c", tmp_path, int8=True, measure=False)


@pytest.mark.parametrize(
    "cell,parameter,named",
    [
        ("gru", "weight_ih", r"parameter 'rnn\.cells\.0\.weight_ih' \(the C step's matrix l0_w_ih\)"),
        ("tarnn", "weight_B1", r"matrix l0_w_in, computed from 'rnn\.cells\.0\.weight_B1' \(\|w\| up to 1e\+30\)"),
        ("fastgrnn", "bias_gate", r"parameter 'rnn\.cells\.0\.bias_gate' \(\|values\| up to 1e\+30\)"),
    ],
    ids=["weight", "derived-matrix", "bias"],
)
def test_one_huge_parameter_is_an_int8_range_error_naming_it(cell, parameter, named):
    """One value of 1e30 among weights near 1: the integer step cannot hold it, and the message says which
    parameter, what range it reached, and that the float step takes it."""
    model = make_model(cell, {})
    with torch.no_grad():
        getattr(model.rnn.cells[0], parameter).view(-1)[0] = 1e30
    step = StreamingStep(model)
    with pytest.raises(ExportError) as info:
        c_export.generate_c(step, "net", True, calibration())
    message = str(info.value)
    assert re.search(named, message) and message.startswith("int8: ")
    assert "out of the integer step's range" in message
    assert message.endswith("export the fp32 C step instead (without --int8)")
    if parameter.startswith("weight"):  # the weights' reach, and what the output reached on calibration
        assert "its weights reach |w| = 1e+30" in message and re.search(r"the output reached \d", message)
    assert c_export.generate_c(step, "net").weight_bytes > 0  # what the message suggests works


@needs_cc
def test_header_states_formats_and_memory(tmp_path):
    model = make_model("fastgrnn", {"w_rank": 2, "u_rank": 3})
    _, written = integer(tmp_path, model)
    generated, header = written["generated"], (tmp_path / "net.h").read_text()
    defines = dict(re.findall(r"#define NET_(\w+) (-?\d+)", header))
    assert int(defines["INTEGER"]) == 1 and int(defines["INPUT_FRAC"]) == generated.input_frac
    assert int(defines["STATE_BYTES"]) == 4 * 16  # FastGRNN's state accumulates: int32
    assert "typedef struct { int32_t values[NET_STATE_SIZE]; } NET_state_t;" in header
    assert int(defines["RAM_BYTES"]) == int(defines["STATE_BYTES"]) + int(defines["STACK_BYTES"])
    assert int(defines["FLASH_BYTES"]) == generated.flash_bytes > generated.weight_bytes  # + the tanh table
    assert "typedef int16_t NET_input_t;" in header and "typedef int16_t NET_output_t;" in header
    assert "int net_quantise(const float x[NET_INPUT_SIZE], NET_input_t x_q[NET_INPUT_SIZE]);" in header
    assert math.isclose(generated.flash_bytes - generated.weight_bytes, 2 * 193)


@pytest.mark.parametrize(
    "cell,options,state_type",
    [
        ("tarnn", {}, "int32_t"),  # s + delta
        ("irnn", {}, "int32_t"),  # the residual y = h + ...
        ("lstm", {}, "int32_t"),  # the cell c = f c + i g
        ("gru", {}, "int32_t"),  # n + z (h - n)
        ("fastgrnn", {}, "int32_t"),
        ("sarnn", {}, "int32_t"),  # h kept where the coordinator skips
        ("mist", {"num_delays": 3}, "int16_t"),  # h = tanh(...): nothing accumulates
        ("srnn", {"hyper_size": 4}, "int16_t"),  # h = relu(roll(h) + beta)
    ],
)
def test_accumulating_states_are_int32(cell, options, state_type):
    """A state that is its own old value plus a change keeps 15 more fractional bits (int32): on a trained
    TARNN (GunPoint, |state| up to 160) an int16 state lost the small per-step changes and the integer step
    agreed with eager on 75% of the test sequences (lab/notes/deployment.md)."""
    from ltdrnn.export import ir
    from ltdrnn.export.c_fixed import WIDE_EXTRA, FixedDialect
    from ltdrnn.export.cells_ir import build_graph

    graph = build_graph(StreamingStep(make_model(cell, options)))
    dialect = FixedDialect(graph, ir.value_ranges(graph, calibration()))
    assert dialect.state_type == state_type
    for value in graph.values:
        accumulating = "s1" if cell == "lstm" else "s0"  # an LSTM's h = o tanh(c) is not wide; its c is
        if value.op == "state" and state_type == "int32_t" and value.attrs["part"].name == accumulating:
            assert value.index in dialect.wide
            assert dialect.narrow_frac(value) == dialect.frac[value.index] - WIDE_EXTRA
