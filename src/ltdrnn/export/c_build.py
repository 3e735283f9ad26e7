"""Write, compile and run the generated C on the host: the parity run's step function and the latency.

Files are written atomically (a temporary file renamed into place), so an interrupted or failed export
never leaves a half-written source behind.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from .c_export import CSource
from .step import ExportError, StreamingStep

CFLAGS = ("-std=c99", "-O2", "-Wall", "-Wextra", "-pedantic", "-Werror")
STATE_DTYPES = {"float": np.float32, "int16_t": np.int16, "int32_t": np.int32}
NONFINITE = -1  # NAME_ERR_NONFINITE: a NaN or infinite input, refused before anything is written


def find_compiler() -> str | None:
    """``$CC`` or the system's ``cc``; None when there is none."""
    return os.environ.get("CC") or shutil.which("cc")


def compile_c(sources, target: Path, shared: bool, flags=()) -> Path:
    """Compile with the system compiler (warnings are errors): a shared library or an executable."""
    compiler = find_compiler()
    if compiler is None:
        raise ExportError("C compiler: none found (set CC or install cc) to compile the generated step")
    extra = ["-shared", "-fPIC"] if shared else []
    extra += sorted({f"-I{Path(source).parent}" for source in sources})
    result = subprocess.run(
        [compiler, *CFLAGS, *flags, *extra, "-o", str(target), *map(str, sources), "-lm"],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise ExportError(f"C compiler: {compiler} failed on the generated code:\n{result.stderr[:2000]}")
    return target


def load_library(source: Path, name: str) -> ctypes.CDLL:
    """Compile ``source`` into a shared library and load it. The build directory is removed before
    returning: a loaded library stays mapped after its file is deleted (POSIX), and nothing is left in
    the temporary directory, even when the compiler fails."""
    with tempfile.TemporaryDirectory(prefix="ltdrnn-c-") as work:
        return ctypes.CDLL(str(compile_c([source], Path(work) / f"lib{name}.so", shared=True)))


def library_step(library: ctypes.CDLL, generated: CSource, state_size: int, output_size: int):
    """``(x_t (B, d), state (B, S)) -> (y (B, o), state)`` calling ``NAME_step`` row by row (numpy, float32
    in and out). For the integer step the input goes through ``NAME_quantise`` and the output is scaled
    back by ``2^-OUTPUT_FRAC``; its state is the C state (int16 or int32). A row whose input the C refuses
    (a non-finite value: ``NAME_ERR_NONFINITE``, nothing written) gets NaN outputs and keeps its state."""
    name = generated.name
    function = getattr(library, f"{name}_step")
    function.argtypes = [ctypes.c_void_p] * 3
    function.restype = ctypes.c_int
    quantise = getattr(library, f"{name}_quantise", None) if generated.int8 else None
    if quantise is not None:
        quantise.argtypes, quantise.restype = [ctypes.c_void_p] * 2, ctypes.c_int
    value = np.int16 if generated.int8 else np.float32
    state_dtype = STATE_DTYPES[generated.state_type]

    def run(x_t, state):
        x_t = np.ascontiguousarray(x_t, dtype=np.float32)
        state = np.array(state, dtype=state_dtype, order="C")  # a copy: the C step updates it in place
        y = np.empty((x_t.shape[0], output_size), dtype=value)
        x_q = np.empty(x_t.shape[1], dtype=np.int16)
        refused = np.zeros(x_t.shape[0], dtype=bool)
        for b in range(x_t.shape[0]):
            x_in = x_t[b].ctypes.data
            if quantise is not None:
                refused[b] = quantise(x_in, x_q.ctypes.data) == NONFINITE
                if refused[b]:
                    continue
                x_in = x_q.ctypes.data
            refused[b] = function(x_in, state[b].ctypes.data, y[b].ctypes.data) == NONFINITE
        y = y.astype(np.float32) / np.float32(2.0**generated.output_frac) if generated.int8 else y
        y[refused] = np.nan
        return y, state

    return run


def initial_state(library: ctypes.CDLL, generated: CSource, state_size: int, batch: int) -> np.ndarray:
    """``(B, S)``: the state ``NAME_init`` writes (int16 or int32 for the integer step)."""
    function = getattr(library, f"{generated.name}_init")
    state = np.zeros(state_size, dtype=STATE_DTYPES[generated.state_type])
    function(ctypes.c_void_p(state.ctypes.data))
    return np.tile(state, (batch, 1))


def step_latency_ns(header: Path, source: Path, name: str, steps: int) -> float:
    """CPU nanoseconds per call of the compiled ``NAME_step`` at batch 1, timed inside C on the thread's
    CPU clock (a loop of ``steps`` calls on a varying input after a warm-up), so neither Python or ctypes
    overhead nor waiting for a core on a shared machine is counted. The benchmark is built and run in a
    temporary directory that is removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="ltdrnn-c-") as work:
        bench = Path(work) / "bench_main.c"
        bench.write_text(_BENCH.format(name=name, upper=name.upper(), header=header.name, steps=steps))
        binary = compile_c([bench, source], Path(work) / "bench_step", shared=False)
        result = subprocess.run([str(binary)], capture_output=True, text=True, check=True)
    return float(result.stdout.split()[0])


_BENCH = """#define _POSIX_C_SOURCE 199309L
#include "{header}"
#include <stdio.h>
#include <time.h>

int main(void)
{{
    static {upper}_input_t x[{upper}_INPUT_SIZE];
    static {upper}_output_t out[{upper}_OUTPUT_SIZE];
    static {upper}_state_t state;
    double sink = 0.0;
    struct timespec start, stop;
    {name}_init(&state);
    for (long i = 0; i < {steps} / 10 + 1; ++i) {{
        x[0] = ({upper}_input_t)(i % 7);
        sink += {name}_step(x, &state, out);
    }}
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
    for (long i = 0; i < {steps}; ++i) {{
        for (int j = 0; j < {upper}_INPUT_SIZE; ++j) x[j] = ({upper}_input_t)((i + j) % 7 - 3);
        sink += {name}_step(x, &state, out);
        sink += (double)out[0];
    }}
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &stop);
    double ns = (stop.tv_sec - start.tv_sec) * 1e9 + (stop.tv_nsec - start.tv_nsec);
    printf("%.3f %g\\n", ns / {steps}, sink);
    return 0;
}}
"""


def write_atomic(path: Path, text: str) -> None:
    """``text`` into ``path`` through a temporary file in the same directory and a rename."""
    from ..checkpoint import atomic_write

    atomic_write(path, text.encode())


def write(step: StreamingStep, generated: CSource, out: Path) -> dict:
    """Write ``generated`` (:func:`~ltdrnn.export.c_export.generate_c`'s step of ``step``) as ``NAME.c`` and
    ``NAME.h``; with a C compiler, also build the files written for the parity run."""
    name = generated.name
    header, source = out / f"{name}.h", out / f"{name}.c"
    write_atomic(header, generated.header)
    write_atomic(source, generated.source)
    result = {"files": [source, header], "generated": generated, "notes": [], "step": None}
    if find_compiler() is None:
        result["notes"].append("no C compiler found: the generated code was not compiled, parity not measured")
        return result
    result["library"] = load_library(source, name)
    result["step"] = library_step(result["library"], generated, step.state_size, step.output_size)
    result["init"] = lambda batch: initial_state(result["library"], generated, step.state_size, batch)
    return result
