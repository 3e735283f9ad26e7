"""Exported C steps on simulated microcontrollers: an ATmega328P in simavr and a Cortex-M4F in QEMU
(mps2-an386). Each run is held against the same C compiled for the host (the integer step bit for bit)
and against eager PyTorch, and reports flash, RAM, stack and cycles (AVR) or instructions (QEMU) per step.

The toolchains are Debian packages that ``.ci/run`` installs (gcc-avr avr-libc simavr libsimavr-dev
gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm); without them these tests skip and say which
are missing."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from ltdrnn.export import ExportError, StreamingStep, c_build, c_export, devices
from ltdrnn.export.step import run_sequences
from test_export import make_model, needs_cc

INSTALL = (
    "apt-get install gcc-avr avr-libc simavr libsimavr-dev gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm"
)
needs_avr = pytest.mark.skipif(
    devices.missing("avr") is not None, reason=f"AVR toolchain or simavr missing: {devices.missing('avr')} ({INSTALL})"
)
needs_m4 = pytest.mark.skipif(
    devices.missing("cortex-m4") is not None,
    reason=f"ARM toolchain or QEMU missing: {devices.missing('cortex-m4')} ({INSTALL})",
)

# every cell the C export handles, small enough for an ATmega328P
DEVICE_CASES = [
    ("tarnn", {"K": 3}),
    ("srnn", {"hyper_size": 4}),
    ("mist", {"num_delays": 3}),
    ("irnn", {}),
    ("sarnn", {}),
    ("fastgrnn", {"w_rank": 2, "u_rank": 3}),
    ("lstm", {}),
    ("gru", {}),
]


def inputs(batch=3, steps=9, d=3, seed=3):
    return torch.randn(batch, steps, d, generator=torch.Generator().manual_seed(seed))


def prepared(cell, options, int8, hidden=8):
    """``(model, step, generated C, host step, inputs as the device takes them, host outputs)``."""
    model = make_model(cell, options, hidden=hidden)
    step = StreamingStep(model)
    calibration = inputs(batch=32, steps=9, seed=11).double().numpy()
    generated = c_export.generate_c(step, "net", int8, calibration if int8 else None)
    return model, step, generated, calibration


def host_run(tmp_path, step, int8, calibration, x):
    written = c_build.write(step, c_export.generate_c(step, "net", int8, calibration if int8 else None), tmp_path)
    init = written["init"](x.shape[0])
    outputs = run_sequences(written["step"], init, x.numpy())
    device_inputs = x.numpy().astype(np.float32)
    if int8:  # the device takes NAME_quantise's int16 input, computed here by the same C
        quantise = getattr(written["library"], "net_quantise")
        flat = np.ascontiguousarray(device_inputs.reshape(-1, x.shape[-1]))
        q = np.empty(flat.shape, dtype=np.int16)
        for row in range(flat.shape[0]):
            quantise(ctypes.c_void_p(flat[row].ctypes.data), ctypes.c_void_p(q[row].ctypes.data))
        device_inputs = q.reshape(x.shape)
    return outputs, device_inputs


def check_against_host(result, host, int8, expected):
    if int8:  # integer arithmetic: the same bits on an 8-bit AVR (16-bit int) as on the host
        np.testing.assert_array_equal(result["outputs"], host)
    else:  # float: the device's libm rounds differently in the last bits
        assert np.abs(result["outputs"] - host).max() <= 1e-5 * max(1.0, np.abs(host).max())
    assert (result["outputs"].argmax(-1) == expected.argmax(-1)).all()


@needs_cc
@needs_avr
@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
@pytest.mark.parametrize("cell,options", DEVICE_CASES, ids=[c for c, _ in DEVICE_CASES])
def test_every_c_cell_runs_on_a_simulated_atmega328p(tmp_path, cell, options, int8, record_property):
    model, step, generated, calibration = prepared(cell, options, int8)
    x = inputs()
    host, device_inputs = host_run(tmp_path, step, int8, calibration, x)
    with torch.no_grad():
        expected = model(x).numpy()
    result = devices.run_avr(generated, device_inputs)
    check_against_host(result, host, int8, expected)
    assert result["steps"] == x.shape[0] * x.shape[1]
    assert result["step_stack"] <= generated.stack_bytes  # the header's estimate holds
    assert result["ram"] <= 2048 and result["flash"] <= 32768
    for key in ("flash", "static_ram", "stack", "cycles_per_step"):
        record_property(key, result[key])


@needs_cc
@needs_avr
def test_avr_keeps_weights_in_flash_and_the_integer_step_links_no_float(tmp_path):
    """On AVR a ``const`` array is copied to RAM at start-up; the weights must stay in flash (.data holds
    no constants), and the integer step must not pull in the soft-float routines."""
    for int8 in (False, True):
        _, step, generated, _ = prepared("lstm", {}, int8, hidden=16)
        elf = tmp_path / f"{int8}.elf"
        (tmp_path / "net.h").write_text(generated.header)
        (tmp_path / "net.c").write_text(generated.source)
        build = ["avr-gcc", *devices.AVR_FLAGS, f"-I{tmp_path}", f"-I{devices.FIRMWARE}"]
        build += ["-DLTDRNN_NO_FLOAT"] * int8  # the integer build without its float input functions
        build += [
            "-DLTDRNN_MODEL=net",
            "-DLTDRNN_MODEL_UPPER=NET",
            "-o",
            str(elf),
            str(devices.FIRMWARE / "avr_main.c"),
        ]
        subprocess.run([*build, str(tmp_path / "net.c"), "-lm"], check=True, capture_output=True)
        sections = devices._sections("avr-size", elf)
        assert sections.get(".data", 0) == 0 and generated.weight_bytes > 1000
        symbols = subprocess.run(["avr-nm", str(elf)], capture_output=True, text=True, check=True).stdout
        floats = {"__mulsf3", "__addsf3", "__divsf3", "__fixsfsi"} & set(symbols.split())
        assert bool(floats) != int8, floats  # the float step needs them, the integer step none


PROGRAM = """#include "net.h"
volatile {sample} reading;
volatile int16_t sink;
int main(void)
{{
    static NET_state_t state;
    NET_input_t x[NET_INPUT_SIZE];
    NET_output_t out[NET_OUTPUT_SIZE];
    {sample} sample[NET_INPUT_SIZE];
    net_init(&state);
    for (;;) {{
        for (int i = 0; i < NET_INPUT_SIZE; ++i) sample[i] = reading;
        if (net_{quantise}(sample, x) == NET_OK && net_step(x, &state, out) == NET_OK) sink = out[0];
    }}
}}
"""


@needs_cc
@needs_avr
def test_adc_counts_reach_the_integer_step_without_float_on_avr(tmp_path):
    """A program that feeds ADC counts through NAME_quantise_adc, built with LTDRNN_NO_FLOAT, links no
    soft-float routine, and is smaller than the same program quantising float samples (docs/deployment.md
    states the difference)."""
    model = make_model("fastgrnn", {"u_rank": 4}, d=1, hidden=16, classes=2)
    scaling = {"input": {"channel": {"mean": [0.1], "std": [0.9]}}}
    cal = inputs(batch=32, steps=9, d=1, seed=11).double().numpy()
    generated = c_export.generate_c(StreamingStep(model), "net", True, cal, scaling, {"scale": 5 / 1023})
    (tmp_path / "net.h").write_text(generated.header)
    (tmp_path / "net.c").write_text(generated.source)
    flash, floats = {}, {}
    for kind, sample, quantise, flags in [
        ("float", "float", "quantise", []),
        ("adc", "int32_t", "quantise_adc", ["-DLTDRNN_NO_FLOAT"]),
    ]:
        (tmp_path / f"{kind}.c").write_text(PROGRAM.format(sample=sample, quantise=quantise))
        elf = tmp_path / f"{kind}.elf"
        sources = [str(tmp_path / f"{kind}.c"), str(tmp_path / "net.c"), "-Wl,--gc-sections", "-lm"]
        build = ["avr-gcc", *devices.AVR_FLAGS, *flags, f"-I{tmp_path}", "-o", str(elf), *sources]
        subprocess.run(build, check=True, capture_output=True)
        sections = devices._sections("avr-size", elf)
        flash[kind] = sections.get(".text", 0) + sections.get(".data", 0)
        symbols = subprocess.run(["avr-nm", str(elf)], capture_output=True, text=True, check=True).stdout.split()
        floats[kind] = {s for s in symbols if s.endswith("sf3") or "fixsf" in s or "floatsisf" in s}
    assert floats["adc"] == set() and {"__mulsf3", "__divsf3"} <= floats["float"]
    assert flash["float"] - flash["adc"] > 500


@needs_cc
@needs_avr
@pytest.mark.parametrize("cell,options,speedup", [("fastgrnn", {}, 1.0), ("tarnn", {"K": 3}, 1.5), ("irnn", {}, 1.5)])
def test_integer_step_takes_fewer_cycles_than_float_on_avr(cell, options, speedup):
    """Deterministic cycle counts of the simulator, not a timing: no float on the step is the point. The
    Euler cells' int32 states enter their matrix products as two int16 halves; on the 8-bit core those
    products cost 2.5 times the float step's until they used the hardware's 8 x 8-bit multiplier."""
    cycles = {}
    for int8 in (False, True):
        _, step, generated, calibration = prepared(cell, options, int8, hidden=16)
        x = inputs(batch=1, steps=4).numpy()
        if int8:
            x = np.clip(np.rint(x * 2.0**generated.input_frac), -32768, 32767).astype(np.int16)
        cycles[int8] = devices.run_avr(generated, x)["cycles_per_step"]
    assert cycles[False] / cycles[True] >= speedup


KERNELS = """#include <avr/interrupt.h>
#include <avr/sleep.h>
#include "net.c"
static const int8_t w[{n}] LTDRNN_FLASH = {{{w}}};
static const int16_t v[{n}] = {{{v}}};
static const int16_t cols[{cases}] = {{{cols}}};
static const int32_t a[{cases}] = {{{a}}};
static const int16_t m[{cases}] = {{{m}}};
static void put(int32_t value)
{{
    for (int i = 0; i < 4; ++i) GPIOR2 = (uint8_t)(value >> (8 * i));
}}
int main(void)
{{
    GPIOR0 = 1;
    volatile int32_t timed = dot_q(w, v, {n});
    GPIOR0 = 2;
    put(timed);
    for (int k = 0; k < {cases}; ++k) {{
        put(dot_q(w + {n} - cols[k], v + {n} - cols[k], cols[k]));
        put(mul_hi(a[k], m[k]));
    }}
    cli();
    sleep_cpu();
    return 0;
}}
"""


@needs_cc
@needs_avr
def test_avr_integer_kernels_are_exact_and_use_the_hardware_multiplier(tmp_path):
    """The integer step's products on AVR (dot_q: int8 weights from flash times int16 values, in MULS and
    MULSU instructions; mul_hi: round(a m / 2^16) from two 16 x 16-bit products) give the exact integer
    results, at the extremes of their types too, and a product of dot_q takes at most 30 cycles (a
    16 x 16-bit library multiplication per weight took 60 to 80)."""
    _, _, generated, _ = prepared("tarnn", {"K": 2}, True)  # an int32 state: the step uses both kernels
    rng = np.random.default_rng(5)
    n, cases = 300, 40
    w = rng.integers(-127, 128, n)
    v = rng.integers(-32768, 32768, n)
    w[:40], v[:40] = np.tile([127, -127], 20), np.tile([-32768, -32768, 32767, 32767], 10)  # the extremes
    cols = np.concatenate([[1, 2, 16, 40, n], rng.integers(1, n + 1, cases - 5)])
    a = np.concatenate([[2**31 - 1, -(2**31), -1, 65535, 32768], rng.integers(-(2**31), 2**31, cases - 5)])
    m = np.concatenate([[32767, -32768, 32767, -32768, 1], rng.integers(-32768, 32768, cases - 5)])
    items = {k: ", ".join(f"{int(x)}L" for x in values) for k, values in dict(w=w, v=v, cols=cols, a=a, m=m).items()}
    (tmp_path / "net.h").write_text(generated.header)
    (tmp_path / "net.c").write_text(generated.source)
    (tmp_path / "kernels.c").write_text(KERNELS.format(n=n, cases=cases, **items))
    elf = tmp_path / "kernels.elf"
    build = ["avr-gcc", *devices.AVR_FLAGS, "-Wno-unused-function", f"-I{tmp_path}", "-o", str(elf)]
    subprocess.run([*build, str(tmp_path / "kernels.c")], check=True, capture_output=True)
    harness = devices.build_simavr_harness(tmp_path)
    output = tmp_path / "kernels.bin"
    said = subprocess.run([str(harness), str(elf), "atmega328p", "16000000", str(output)], input=b"",
                          check=True, capture_output=True).stdout.decode()  # fmt: skip
    got = np.frombuffer(output.read_bytes(), dtype="<i4").astype(np.int64)
    exact_dots = [int(np.dot(w[n - c :], v[n - c :])) for c in cols]
    exact_mul_hi = [(int(x) >> 16) * int(y) + (((int(x) & 0xFFFF) * int(y) + 32768) >> 16) for x, y in zip(a, m)]
    assert got[0] == np.dot(w, v)
    assert got[1::2].tolist() == exact_dots and got[2::2].tolist() == exact_mul_hi
    cycles = int(said.split("cycles_total ")[1].split()[0])
    assert cycles <= 30 * n


@needs_cc
@needs_avr
def test_a_model_too_big_for_the_chip_stops_the_avr_build():
    """MIST with 8 delays keeps 128 past states: 8 KiB of float state on a 2 KiB chip. The header's
    #error stops the build and says why."""
    model = make_model("mist", {"num_delays": 8}, hidden=16)
    generated = c_export.generate_c(StreamingStep(model), "net")
    with pytest.raises(ExportError, match=r"net: needs [\d]+ B of RAM \(state 8192 B \+ stack \d+ B\), more than"):
        devices.run_avr(generated, inputs(batch=1, steps=2).numpy())


@needs_cc
@needs_m4
@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
@pytest.mark.parametrize("cell,options", [("tarnn", {"K": 3}), ("mist", {"num_delays": 3}), ("fastgrnn", {})])
def test_cells_run_on_a_cortex_m4_in_qemu(tmp_path, cell, options, int8, record_property):
    model, step, generated, calibration = prepared(cell, options, int8)
    x = inputs()
    host, device_inputs = host_run(tmp_path, step, int8, calibration, x)
    with torch.no_grad():
        expected = model(x).numpy()
    result = devices.run_cortex_m4(generated, device_inputs, timeout=120)
    check_against_host(result, host, int8, expected)
    assert result["steps"] == x.shape[0] * x.shape[1] and result["instructions_per_step"] > 0
    assert result["step_stack"] <= generated.stack_bytes
    for key in ("flash", "static_ram", "stack", "instructions_per_step"):
        record_property(key, result[key])


@needs_cc
@needs_avr
@pytest.mark.parametrize("int8,window", [(False, False), (True, False), (False, True)], ids=["fp32", "int8", "window"])
def test_arduino_sketch_streams_a_serial_input(tmp_path, int8, window):
    """examples/arduino/ltdrnn_stream, built for the ATmega328P against a stub of the Arduino core whose
    Serial is simavr's harness: fed two sequences as text lines, it prints each one's class and logits,
    as the same model compiled for the host computes them; a line with a NaN is refused ("E -1") and
    the sequence starts again. For a model trained on series z-normalised one by one (``window``), the
    sketch normalises each window (at another level and scale here) before running it."""
    root = Path(__file__).resolve().parents[1]
    model, step, _, calibration = prepared("gru", {}, int8)
    agreed = {"classes": ["walk", "run", "sit", "jump"], "validated_length": 9}
    if window:
        agreed["input"] = {"window": {"ddof": 1}}
    generated = c_export.generate_c(step, "model", int8, calibration if int8 else None, agreed)
    sketch = tmp_path / "sketch"
    sketch.mkdir()
    (sketch / "model.h").write_text(generated.header)
    (sketch / "model.c").write_text(generated.source)
    (sketch / "sketch.cpp").write_text((root / "examples/arduino/ltdrnn_stream/ltdrnn_stream.ino").read_text())
    stub = root / "tests/arduino_stub"
    elf = tmp_path / "sketch.elf"
    common = ["-mmcu=atmega328p", "-Os", "-ffunction-sections", "-fdata-sections", f"-I{sketch}", f"-I{stub}"]
    subprocess.run(["avr-gcc", *common, "-std=c99", "-c", "-o", str(tmp_path / "model.o"), str(sketch / "model.c")],
                   check=True, capture_output=True)  # fmt: skip
    subprocess.run(["avr-g++", *common, "-include", "Arduino.h", "-o", str(elf), str(sketch / "sketch.cpp"),
                    str(stub / "main.cpp"), str(tmp_path / "model.o"), "-Wl,--gc-sections", "-lm"],
                   check=True, capture_output=True)  # fmt: skip
    x = inputs(batch=2)
    fed = x * 4.0 + 9.0 if window else x
    lines = ["".join(" ".join(f"{v:.6g}" for v in sample) + "\n" for sample in sequence) for sequence in fed.numpy()]
    # four samples, then one with a NaN: refused, and the sequence starts again with the next sample
    refused = "" if window else "".join(lines[0].splitlines(keepends=True)[:4]) + "0.5 nan 1\n"
    harness = devices.build_simavr_harness(tmp_path)
    output = tmp_path / "printed.txt"
    subprocess.run([str(harness), str(elf), "atmega328p", "16000000", str(output)],
                   input=(refused + "".join(lines) + "q").encode(), check=True, capture_output=True)  # fmt: skip
    printed = output.read_text().splitlines()
    written = c_build.write(step, c_export.generate_c(step, "host", int8, calibration if int8 else None), tmp_path)
    parsed = np.array([[float(v) for v in line.split()] for line in "".join(lines).splitlines()], np.float32)
    parsed = parsed.reshape(x.shape)
    if window:  # what each window becomes: z-normalised per channel, ddof 1
        parsed = (parsed - parsed.mean(1, keepdims=True)) / parsed.std(1, ddof=1, keepdims=True)
    host = run_sequences(written["step"], written["init"](2), parsed)
    if refused:
        assert printed[0] == "E -1"
        printed = printed[1:]
    assert len(printed) == 2
    for line, logits in zip(printed, host):
        index, name, *values = line.split()
        assert int(index) == logits.argmax() and name == f'"{agreed["classes"][int(index)]}"'
        assert np.abs(np.array(values, float) - logits).max() <= 1e-3
