"""The generated C's public API (export/c_api.py): one state type that a wrong declaration cannot stand in
for, statuses that report a non-finite input instead of a silent class 0, the ADC helper, the per-window
normalisation of a model trained on series normalised one by one, and every C snippet of the docs compiled
strictly and run under AddressSanitizer against real trained exports."""

from __future__ import annotations

import ctypes
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from ltdrnn.cli import main
from ltdrnn.export import ExportError, StreamingStep, c_build, c_export, contract, export, load_trained
from ltdrnn.export.c_emit import float_literal
from ltdrnn.export.device_table import raw
from test_export import make_model, needs_cc
from test_export_contract import short_probe, standardised_run  # noqa: F401  (module fixtures reused)
from test_export_fixed import calibration

ROOT = Path(__file__).resolve().parents[1]
SANITIZED = ["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-g", "-O1", "-fno-omit-frame-pointer"]
SANITIZED += ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
ADC = {"scale": [0.01, 0.02], "offset": [-50.0, -100.0]}  # the standardised run's channels sit near 5 and 40
STATUS = {"ok": 0, "nonfinite": -1, "state": -2, "range": -3}


class Library:
    """An export's ``NAME.c`` compiled for the host (the flags of the parity run) and called through ctypes."""

    def __init__(self, directory: Path, name: str = "model", flags=(), work: Path | None = None):
        header = (directory / f"{name}.h").read_text()
        self.macros = {k: int(v) for k, v in re.findall(rf"#define {name.upper()}_(\w+) \(?(-?\d+)\)?\n", header)}
        work = work or directory
        library = c_build.compile_c([directory / f"{name}.c"], work / f"lib{name}.so", shared=True, flags=flags)
        self.lib, self.name = ctypes.CDLL(str(library)), name
        self.value = np.int16 if self.macros["INTEGER"] else np.float32

    def __call__(self, function: str, *arguments) -> int:
        called = getattr(self.lib, f"{self.name}_{function}")
        called.restype = ctypes.c_int
        return called(
            *(ctypes.c_void_p(a.ctypes.data) if isinstance(a, np.ndarray) else ctypes.c_int(a) for a in arguments)
        )

    def state(self) -> np.ndarray:
        state = np.full(self.macros["STATE_BYTES"], 0x5A, np.uint8)
        getattr(self.lib, f"{self.name}_init")(ctypes.c_void_p(state.ctypes.data))
        return state

    def output(self) -> np.ndarray:
        return np.zeros(self.macros["OUTPUT_SIZE"], self.value)

    def run(self, sequence: np.ndarray, feed: str = "step") -> np.ndarray:
        """The outputs after the last sample of ``sequence`` (T, d) from NAME_init: raw floats through
        NAME_quantise for an integer step (``feed="quantise"``), or ADC counts (``"quantise_adc"``)."""
        state, out = self.state(), self.output()
        for sample in sequence:
            x = np.ascontiguousarray(sample, np.int32 if feed == "quantise_adc" else np.float32)
            if feed != "step":
                x_q = np.empty(len(x), np.int16)
                assert self(feed, x, x_q) == 0
                x = x_q
            assert self("step", x, state, out) == 0
        return out


# ---- trained exports ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def znormalised_run(tmp_path_factory):
    """A GRU trained briefly on series z-normalised one by one (ddof 1, as UCR's GunPoint ships), read with
    per-channel standardisation: the run's contract must say that each window needs normalising."""
    from ltdrnn.config import load_config
    from ltdrnn.train import train

    root = tmp_path_factory.mktemp("znormalised")
    generator = np.random.default_rng(1)

    def split(n):
        x = generator.normal(size=(n, 24, 2)) + np.linspace(0, 1, 24)[:, None] * generator.choice([-2, 2], (n, 1, 1))
        labels = np.where(x[:, -6:, 0].mean(1) > x[:, :6, 0].mean(1), "rise", "fall")
        x = (x - x.mean(1, keepdims=True)) / x.std(1, ddof=1, keepdims=True)
        return x, labels

    (x_train, y_train), (x_test, y_test) = split(120), split(40)
    np.savez(root / "series.npz", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    train_options = {"steps": 80, "batch_size": 32, "eval_every": 40, "seed": 0, "threads": 1}
    cfg = load_config(
        {
            "model": {"cell": "gru", "hidden_size": 8},
            "task": {"name": "uea_ucr", "options": {"arrays": str(root / "series.npz"), "standardize": True}},
            "optim": {"name": "adam", "lr": 0.03},
            "train": {**train_options, "progress": False, "latency": False},
            "run_dir": str(root / "run"),
            "results": None,
        }
    )
    train(cfg)
    return root / "run"


@pytest.fixture(scope="module")
def exports(standardised_run, znormalised_run, tmp_path_factory):  # noqa: F811
    """Export directories of the trained runs, each with files ``model.c`` and ``model.h``."""
    root = tmp_path_factory.mktemp("exports")
    made = {}
    for key, run, int8, adc in [
        ("fp32", standardised_run[0], False, None),
        ("int8", standardised_run[0], True, None),
        ("adc", standardised_run[0], True, ADC),
        ("window-fp32", znormalised_run, False, None),
        ("window-int8", znormalised_run, True, None),
    ]:
        export(str(run), "c", root / key, int8=int8, name="model", measure=False, adc=adc)
        made[key] = root / key
    return made


def series_inputs(run_dir, count=12):
    """``(model, raw test series (N, T, d) as a sensor gives them, contract)`` of a trained run."""
    model, _, task = load_trained(run_dir)
    dataset = task.dataset("test")
    x, _, _ = task.collate([dataset[i] for i in range(count)])
    agreed = contract.contract(StreamingStep(model), task, measured=False)
    return model, x, raw(x, agreed), agreed


# ---- the docs' C snippets -----------------------------------------------------------------------------------
MARKED = re.compile(r"<!-- c-snippet: (\w+) -->\n```c\n(.*?)```", re.S)
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: what each snippet function takes and the exports it runs on
SNIPPETS = {"classify": ["fp32", "int8"], "classify_window": ["window-fp32", "window-int8"], "classify_adc": ["adc"]}
CASES = [
    (path.relative_to(ROOT).as_posix(), function, kind)
    for path in DOCS
    for function in dict.fromkeys(m.group(1) for m in MARKED.finditer(path.read_text()))
    for kind in SNIPPETS.get(function, ["unknown"])
]


def test_every_c_block_of_the_docs_that_calls_the_api_is_marked_and_known():
    """A C block in the docs is compiled by the test below only when marked: an unmarked one would drift."""
    for path in DOCS:
        text = path.read_text()
        for block in re.finditer(r"(<!-- c-snippet: (\w+) -->\n)?```c\n(.*?)```", text, re.S):
            if re.search(r"\w+_(step|init)\(", block.group(3)):
                line = text[: block.start()].count("\n") + 1
                assert block.group(1), f"{path.name}:{line}: a C block using the API without a c-snippet marker"
                assert block.group(2) in SNIPPETS, f"{path.name}:{line}: unknown snippet {block.group(2)!r}"
    assert {function for _, function, _ in CASES} == set(SNIPPETS)  # each kind is in the docs


def _c_array(data: np.ndarray, integer: bool) -> str:
    """A C initializer of ``data`` with a brace level per dimension."""
    if data.ndim == 0:
        return f"{int(data)}L" if integer else float_literal(float(data))
    return "{" + ", ".join(_c_array(item, integer) for item in data) + "}"


def _driver(function: str, data: np.ndarray) -> str:
    n, t, _ = data.shape
    integer = function == "classify_adc"
    ctype = "int32_t" if integer else "float"
    return (
        '#include "snippets.c"\n#include <stdio.h>\n\n'
        f"static {ctype} data[{n}][{t}][MODEL_INPUT_SIZE] = {_c_array(data, integer)};\n\n"
        "int main(void)\n{\n"
        f"    for (int s = 0; s < {n}; ++s) {{\n"
        "        MODEL_output_t out[MODEL_OUTPUT_SIZE] = {0};\n"
        f"        const int result = {function}(data[s], {t}, out);\n"
        '        printf("%d", result);\n'
        '        for (int k = 0; k < MODEL_OUTPUT_SIZE; ++k) printf(" %.9g", (double)out[k]);\n'
        '        printf("\\n");\n    }\n    return 0;\n}\n'
    )


def _inputs_and_reference(function, directory, run_dir, work):
    """What the snippet is fed, and the outputs the export's own C (compiled as for parity) gives."""
    model, x, series, _ = series_inputs(run_dir)
    library = Library(directory, work=work)
    feed = "quantise" if library.macros["INTEGER"] else "step"
    if function == "classify_adc":
        counts = np.rint((series - np.array(ADC["offset"])) / np.array(ADC["scale"])).astype(np.int32)
        return counts, np.stack([library.run(c, "quantise_adc") for c in counts]), None
    if function == "classify_window":  # a real sensor: the windows at another level and scale
        sensor = (series * 3.0 + 7.0).astype(np.float32)
        normalised = sensor.copy()
        for window in normalised:
            assert library("normalise_window", window, len(window)) == 0
        with torch.no_grad():
            eager = model(x).numpy()  # the data set's own per-series normalisation
        return sensor, np.stack([library.run(w, feed) for w in normalised]), eager
    with torch.no_grad():
        eager = model(x).numpy()
    return series, np.stack([library.run(s, feed) for s in series]), eager


@needs_cc
@pytest.mark.parametrize("doc,function,kind", CASES, ids=[f"{d}-{f}-{k}" for d, f, k in CASES])
def test_each_doc_c_snippet_compiles_strictly_and_runs_clean_under_asan(exports, doc, function, kind, tmp_path):
    """The doc's snippets (all of them, in order, in one file) with a driver that calls ``function`` on a
    trained run's test series, built with -Wall -Wextra -Werror and AddressSanitizer + UBSan: they compile,
    run clean, and give the classes and outputs of the export's own C (bit for bit for the integer step)."""
    assert function in SNIPPETS, f"{doc}: unknown c-snippet {function!r}; add it to SNIPPETS"
    directory = exports[kind]
    run_dir = Path(json.loads((directory / "report.json").read_text())["source"])
    data, reference, eager = _inputs_and_reference(function, directory, run_dir, tmp_path)
    snippets = "\n".join(m.group(2) for m in MARKED.finditer((ROOT / doc).read_text()))
    (tmp_path / "snippets.c").write_text(snippets)
    (tmp_path / "driver.c").write_text(_driver(function, data))
    binary = tmp_path / "snippet"
    built = subprocess.run(
        ["gcc", *SANITIZED, f"-I{directory}", "-o", str(binary), str(tmp_path / "driver.c"), str(directory / "model.c")]
        + ["-lm"],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    ran = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0 and "Sanitizer" not in ran.stderr and "runtime error" not in ran.stderr, ran.stderr
    rows = np.array([[float(v) for v in line.split()] for line in ran.stdout.splitlines()])
    classes, outputs = rows[:, 0].astype(int), rows[:, 1:]
    assert (classes == reference.argmax(-1)).all()  # a class, never a negative status
    if reference.dtype == np.int16:
        np.testing.assert_array_equal(outputs, reference)
    else:
        assert np.abs(outputs - reference).max() <= 1e-6 * max(1.0, np.abs(reference).max())
    if eager is not None and reference.dtype != np.int16:  # the float step is the model
        assert np.abs(outputs - eager).max() <= 1e-4 * max(1.0, np.abs(eager).max())


# ---- one state type ------------------------------------------------------------------------------------------
@needs_cc
@pytest.mark.parametrize("declared", ["MODEL_output_t state[MODEL_STATE_SIZE]", "int16_t state[MODEL_STATE_SIZE]"])
def test_a_state_declared_as_an_array_of_values_does_not_compile(exports, declared, tmp_path):
    """The old docs declared the state as an array of the value type: int16_t for an integer step whose
    state was int32_t, so TARNN's init and step wrote 64 bytes into 32. The functions take the state
    struct's address; any such array is an incompatible pointer, which -Werror (and C++) refuse."""
    directory = exports["int8"]
    (tmp_path / "old.c").write_text(
        f'#include "model.h"\nint main(void)\n{{\n    static {declared};\n    model_init(state);\n    return 0;\n}}\n'
    )
    built = subprocess.run(
        ["gcc", "-std=c99", "-Wall", "-Werror", "-c", f"-I{directory}", "-o", str(tmp_path / "old.o")]
        + [str(tmp_path / "old.c")],
        capture_output=True,
        text=True,
    )
    assert built.returncode != 0 and "incompatible pointer type" in built.stderr
    header = (directory / "model.h").read_text()
    state_bytes = int(re.search(r"#define MODEL_STATE_BYTES (\d+)", header).group(1))
    element = re.search(r"typedef struct \{ (\w+) values\[MODEL_STATE_SIZE\]; \} MODEL_state_t;", header).group(1)
    assert element == "int32_t" and state_bytes == 4 * int(re.search(r"_STATE_SIZE (\d+)", header).group(1))


# ---- non-finite input ---------------------------------------------------------------------------------------
def written_c(model, directory, calibration=None):
    """``net.c`` and ``net.h`` of ``model`` (the integer step with calibration inputs) written into ``directory``."""
    step = StreamingStep(model)
    c_build.write(step, c_export.generate_c(step, "net", calibration is not None, calibration), directory)


@needs_cc
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")], ids=["nan", "inf", "-inf"])
def test_the_float_step_refuses_a_non_finite_input_and_changes_nothing(tmp_path, bad):
    """One NaN used to make the state non-finite until the next reset, and the logits then gave class 0."""
    written_c(make_model("lstm", {}), tmp_path)
    library = Library(tmp_path, "net")
    state, out = library.state(), library.output()
    x = np.array([0.3, -1.2, 0.5], np.float32)
    assert library("step", x, state, out) == STATUS["ok"]
    before, out_before = state.copy(), out.copy()
    assert library("step", np.array([0.3, bad, 0.5], np.float32), state, out) == STATUS["nonfinite"]
    np.testing.assert_array_equal(state, before)
    np.testing.assert_array_equal(out, out_before)
    assert library("step", x, state, out) == STATUS["ok"] and np.isfinite(out).all()


@needs_cc
def test_the_float_step_reports_a_state_that_turned_non_finite(tmp_path):
    written_c(make_model("lstm", {}), tmp_path)
    library = Library(tmp_path, "net")
    state, out = library.state(), library.output()
    cell = state.view(np.float32)
    cell[-1] = np.inf  # an LSTM's cell c keeps what it had: c = f c + i g
    assert library("step", np.zeros(3, np.float32), state, out) == STATUS["state"]


@needs_cc
def test_the_integer_quantiser_flags_a_non_finite_input_instead_of_mapping_it_to_zero(tmp_path):
    written_c(make_model("gru", {}), tmp_path, calibration())
    library = Library(tmp_path, "net")
    x_q = np.full(3, 1234, np.int16)
    for bad in (np.nan, np.inf, -np.inf):
        assert library("quantise", np.array([0.5, bad, 0.1], np.float32), x_q) == STATUS["nonfinite"]
        np.testing.assert_array_equal(x_q, [1234, 1234, 1234])  # nothing written
    assert library("quantise", np.array([1e30, -1e30, 0.0], np.float32), x_q) == STATUS["ok"]
    np.testing.assert_array_equal(x_q, [32767, -32768, 0])  # finite but huge: saturated, and said to be OK


@needs_cc
def test_the_parity_runner_gives_nan_for_a_refused_input_and_keeps_the_state(tmp_path):
    step = StreamingStep(make_model("gru", {}))
    for int8 in (False, True):
        written = c_build.write(step, c_export.generate_c(step, "net", int8, calibration() if int8 else None), tmp_path)
        state = written["init"](2)
        x = np.array([[0.1, 0.2, 0.3], [np.nan, 0.2, 0.3]], np.float32)
        y, after = written["step"](x, state)
        assert np.isfinite(y[0]).all() and np.isnan(y[1]).all()
        np.testing.assert_array_equal(after[1], state[1])


# ---- the ADC helper ------------------------------------------------------------------------------------------
def _adc_export(tmp_path, adc, flags=()):
    scaling = {"mean": [5.0, 40.0, -3.0], "std": [2.0, 10.0, 0.5]}
    generated = c_export.generate_c(
        StreamingStep(make_model("gru", {})), "net", True, calibration(), {"input": {"channel": scaling}}, adc
    )
    (tmp_path / "net.h").write_text(generated.header)
    (tmp_path / "net.c").write_text(generated.source)
    return generated, Library(tmp_path, "net", flags=flags)


@needs_cc
@pytest.mark.parametrize(
    "adc",
    [{"scale": 5.0 / 1023, "offset": 0.0}, {"scale": [0.01, -0.02, 3e-5], "offset": [-50.0, 600.0, -3.5]}],
    ids=["10-bit", "per-channel"],
)
def test_the_adc_quantiser_is_the_float_quantiser_in_integers(tmp_path, adc):
    """counts -> x_q without float agrees with NAME_quantise(counts * scale + offset) to within one step of
    the int16 input, and equals it nearly everywhere; a count past +-65535 is refused, nothing written."""
    _, library = _adc_export(tmp_path, adc)
    scale = np.broadcast_to(np.asarray(adc["scale"], np.float64), (3,))
    offset = np.broadcast_to(np.asarray(adc["offset"], np.float64), (3,))
    counts = np.concatenate([np.arange(-65535, 65536, 7), np.arange(-300, 1100)])
    by_integer, by_float = np.empty((len(counts), 3), np.int16), np.empty((len(counts), 3), np.int16)
    for row, c in enumerate(counts):
        c3 = np.full(3, c, np.int32)
        assert library("quantise_adc", c3, by_integer[row]) == STATUS["ok"]
        assert library("quantise", (c3 * scale + offset).astype(np.float32), by_float[row]) == STATUS["ok"]
    difference = np.abs(by_integer.astype(int) - by_float)
    assert difference.max() <= 1 and (difference == 0).mean() >= 0.99
    assert len(np.unique(by_integer[:, 0])) > 100  # the counts move the input: not all saturated
    x_q = np.full(3, 77, np.int16)
    for beyond in (65536, -65536, 2**31 - 1):
        assert library("quantise_adc", np.array([0, beyond, 0], np.int32), x_q) == STATUS["range"]
        np.testing.assert_array_equal(x_q, 77)


@needs_cc
def test_an_adc_program_has_no_float_in_the_model(tmp_path):
    """LTDRNN_NO_FLOAT leaves out the float input functions: with the ADC helper nothing in the model uses
    a floating-point register (x86's -mgeneral-regs-only), and it runs as the full build does."""
    if subprocess.run(["uname", "-m"], capture_output=True, text=True).stdout.strip() not in ("x86_64", "aarch64"):
        pytest.skip("-mgeneral-regs-only is an x86 and AArch64 flag")
    adc = {"scale": 0.01, "offset": 0.0}
    _, full = _adc_export(tmp_path, adc)
    (tmp_path / "bare").mkdir()
    for file in ("net.c", "net.h"):
        (tmp_path / "bare" / file).write_text((tmp_path / file).read_text())
    bare = Library(tmp_path / "bare", "net", flags=["-DLTDRNN_NO_FLOAT", "-mgeneral-regs-only"])
    assert not hasattr(bare.lib, "net_quantise") and hasattr(full.lib, "net_quantise")
    counts = np.random.default_rng(0).integers(-2000, 6000, size=(11, 3)).astype(np.int32)
    np.testing.assert_array_equal(bare.run(counts, "quantise_adc"), full.run(counts, "quantise_adc"))


def test_adc_mistakes_are_clear_errors(tmp_path, capsys):
    step, scaling = StreamingStep(make_model("gru", {})), {"input": {"channel": None}}
    with pytest.raises(ExportError, match=r"adc \(--adc-scale\): the ADC helper feeds the integer step"):
        c_export.generate_c(step, "net", False, None, scaling, {"scale": 0.01})
    window = {"input": {"window": {"ddof": 1}}}
    with pytest.raises(ExportError, match="z-normalised one by one, so each window must be normalised as a whole"):
        c_export.generate_c(step, "net", True, calibration(), window, {"scale": 0.01})
    for adc, said in [
        ({"scale": 0.0}, r"adc scale \(--adc-scale\): expected non-zero units per count"),
        ({"scale": [0.1, 0.2]}, r"adc scale \(--adc-scale\): expected one finite number or 3 \(one per input"),
        ({"scale": 0.1, "offset": float("nan")}, r"adc offset \(--adc-offset\): expected one finite number"),
        ({"gain": 0.1}, r"adc: expected \{'scale'"),
    ]:
        with pytest.raises(ExportError, match=said):
            c_export.generate_c(step, "net", True, calibration(), scaling, adc)
    with pytest.raises(ExportError, match="export with --format c --int8, got format 'onnx'"):
        export(make_model("gru", {}), "onnx", tmp_path, adc={"scale": 0.1}, measure=False)
    for arguments in (["--adc-scale", "0.1,x"], ["--adc-offset", "3"]):
        assert main(["export", str(tmp_path), "--format", "c", "--int8", *arguments]) == 2
        error = capsys.readouterr().err
        assert "--adc-" in error and "Traceback" not in error and len(error.strip().splitlines()) == 1


# ---- per-window normalisation: the contract for real sensors ---------------------------------------------------
class SeriesTask:
    """A task of given training series (as a UCR task yields them), for the detection alone."""

    class Info:
        name, input_kind, loss, extra = "uea_ucr", "float", "cross_entropy", {}

    def __init__(self, series):
        self.series = [torch.as_tensor(s, dtype=torch.float32) for s in series]
        self.info = self.Info()

    def dataset(self, split):
        return [(s, 0) for s in self.series]


def _series(ddof=None, n=30, length=50, d=2, seed=0):
    x = np.random.default_rng(seed).normal(2.0, 3.0, size=(n, length, d))
    if ddof is None:
        return x
    return (x - x.mean(1, keepdims=True)) / x.std(1, ddof=ddof, keepdims=True)


def test_series_normalised_one_by_one_are_recognised_with_their_ddof():
    for ddof in (0, 1):
        found = contract.per_series_normalisation(SeriesTask(_series(ddof)))
        assert found["ddof"] == ddof and found["series"] == 30 and found["largest_deviation"] < 1e-5
    assert contract.per_series_normalisation(SeriesTask(_series(None))) is None  # raw series: no
    # standardised per channel on top (what the deploy presets do): the statistics are undone first
    channel = {"mean": [0.2, -0.1], "std": [1.5, 0.9]}
    standardised = (_series(1) - np.array(channel["mean"])) / np.array(channel["std"])
    assert contract.per_series_normalisation(SeriesTask(standardised)) is None
    assert contract.per_series_normalisation(SeriesTask(standardised), channel)["ddof"] == 1
    nearly = _series(1)
    nearly[0] *= 1.01  # one series off by 1%: not normalised one by one
    assert contract.per_series_normalisation(SeriesTask(nearly)) is None
    given = contract.input_contract(SeriesTask(_series(1)))
    assert given["streaming"] is False and given["window"]["ddof"] == 1
    assert "z-normalise each window per channel (ddof 1; NAME_normalise_window in C)" in given["text"]


@needs_cc
def test_a_run_on_series_normalised_one_by_one_says_so_everywhere(znormalised_run, tmp_path, short_probe):  # noqa: F811
    """report.json, the header's macros and contract, and a C helper; the reset rule and the longest
    stream tested beside it."""
    report = export(str(znormalised_run), "c", tmp_path, name="model", latency_steps=1)
    given = report["contract"]["input"]
    assert given["window"]["ddof"] == 1 and given["streaming"] is False and given["channel"] is not None
    assert report["contract"]["reset_within"] in (600, 24)  # the probe's steps when the state held
    header = (tmp_path / "model.h").read_text()
    assert "#define MODEL_NORMALISE_WINDOW 1" in header and "int model_normalise_window(float *window" in header
    assert f"#define MODEL_RESET_WITHIN {report['contract']['reset_within']}" in header
    assert "#define MODEL_VALIDATED_LENGTH 24" in header
    text = re.sub(r"\s*\*\s+", " ", header)  # the comment's words, unwrapped
    assert "z-normalise each window per channel (ddof 1; model_normalise_window in C)" in text
    assert "a reset at least every reset_within steps (MODEL_RESET_WITHIN" in text
    with pytest.raises(ExportError, match="each window must be normalised as a whole"):
        export(str(znormalised_run), "c", tmp_path / "adc", int8=True, measure=False, adc={"scale": 0.1})


@needs_cc
@pytest.mark.parametrize("ddof", [0, 1])
def test_the_window_normaliser_is_the_training_normalisation(tmp_path, ddof):
    contract_ = {"input": {"window": {"ddof": ddof}, "channel": None}}
    generated = c_export.generate_c(StreamingStep(make_model("gru", {})), "net", False, None, contract_)
    (tmp_path / "net.h").write_text(generated.header)
    (tmp_path / "net.c").write_text(generated.source)
    library = Library(tmp_path, "net")
    window = np.random.default_rng(2).normal(1e4, 250.0, size=(40, 3)).astype(np.float32)
    window[:, 2] = 3.25  # a constant channel: shifted to 0, not divided by a spread of 0
    exact = window.astype(np.float64)
    expected = (exact - exact.mean(0)) / np.where(np.arange(3) == 2, 1.0, exact.std(0, ddof=ddof))
    got = window.copy()
    assert library("normalise_window", got, 40) == STATUS["ok"]
    assert np.abs(got - expected).max() <= 1e-4
    bad = window.copy()
    bad[17, 1] = np.nan
    before = bad.copy()
    assert library("normalise_window", bad, 40) == STATUS["nonfinite"]
    np.testing.assert_array_equal(bad, before)  # nothing written (NaN compares equal in the same place)
    assert library("normalise_window", got, 1) == STATUS["range"]
