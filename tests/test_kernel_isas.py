"""The compiled kernels' code for other CPUs and another torch, built and checked on this machine.

``csrc/`` holds AVX-512 code, AVX2 code and portable loops, chosen when the kernels are compiled; a build
for this machine (``-march=native``) compiles only one of them. ``LTDRNN_KERNEL_ARCH`` builds the others
here. And where torch does not run on libgomp the kernels are built without OpenMP and start threads of
their own. Each such build must load, and the tests that compare the compiled paths with the reference
loops (outputs, gradients, non-finite values, streaming steps) must pass with it.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from ltdrnn.ops import kernels

ROOT = Path(__file__).resolve().parent.parent
CELLS = ("srnn", "mist", "tarnn", "irnn", "sarnn")
#: The tests of the compiled paths (every comparison with a reference): each cell's file, and two for all.
CELL_TESTS = {cell: f"tests/cells/test_{cell}.py" for cell in CELLS}
SHARED_TESTS = ["tests/cells/test_non_finite.py", "tests/test_kernels.py"]
SELECTION = "(kernel or compiled or fused or stream or piecewise or equal or non_finite) and not one_openmp_runtime"


def test_kernel_arch_is_native_by_default_and_refuses_what_is_not_an_architecture_name(monkeypatch):
    monkeypatch.delenv("LTDRNN_KERNEL_ARCH", raising=False)
    assert kernels.kernel_arch() == "native"
    monkeypatch.setenv("LTDRNN_KERNEL_ARCH", "x86-64-v3")
    assert kernels.kernel_arch() == "x86-64-v3"
    monkeypatch.setenv("LTDRNN_KERNEL_ARCH", "native -fplugin=evil.so")
    with pytest.raises(ValueError, match="LTDRNN_KERNEL_ARCH: expected a -march name"):
        kernels.kernel_arch()


def _cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as info:
        return set(next((line for line in info if line.startswith("flags")), ":").split(":", 1)[1].split())


def _arch_this_cpu_lacks() -> tuple[str, str]:
    """A ``-march`` name and a feature it implies (as gcc names it) that /proc/cpuinfo says this CPU
    lacks; skips the test where there is none or no compiler to ask."""
    if platform.machine() not in ("x86_64", "AMD64") or not os.path.exists("/proc/cpuinfo"):
        pytest.skip("x86-64 Linux only")
    if shutil.which("g++") is None and shutil.which("c++") is None and not os.environ.get("CXX"):
        pytest.skip("no C++ compiler on this machine")
    flags = _cpu_flags()
    candidates = (
        ("knl", "avx512er", "AVX512ER"),
        ("sapphirerapids", "amx_tile", "AMX_TILE"),
        ("x86-64-v4", "avx512f", "AVX512F"),
    )
    for arch, flag, feature in candidates:
        if flag not in flags:
            return arch, feature
    pytest.skip("this CPU has every instruction set of the architectures tried")


@pytest.fixture
def fresh_arch_check(tmp_path, monkeypatch):
    """An empty kernel cache, and no answer about an architecture kept by this process yet."""
    monkeypatch.setenv("LTDRNN_CACHE", str(tmp_path))
    kernels._arch_this_cpu_runs.cache_clear()
    yield
    kernels._arch_this_cpu_runs.cache_clear()


def _march(monkeypatch, arch: str) -> list[str]:
    monkeypatch.setenv("LTDRNN_KERNEL_ARCH", arch)
    return [flag for flag in kernels._toolchain()[1] if flag.startswith("-march=")]


def test_an_arch_this_cpu_lacks_is_built_as_native_with_a_warning(fresh_arch_check, monkeypatch):
    """Built for an instruction set the CPU lacks, the kernels would stop the process with SIGILL."""
    arch, feature = _arch_this_cpu_lacks()
    with pytest.warns(RuntimeWarning, match=rf"LTDRNN_KERNEL_ARCH={arch}: this CPU lacks .*{feature}.*-march=native"):
        assert _march(monkeypatch, arch) == ["-march=native"]


def test_the_arch_check_keeps_a_supported_arch_and_runs_the_compiler_only_the_first_time(fresh_arch_check, monkeypatch):
    arch, _ = _arch_this_cpu_lacks()
    if not {"avx2", "fma", "bmi2"} <= _cpu_flags():
        pytest.skip("x86-64-v3 needs AVX2, FMA and BMI2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _march(monkeypatch, "x86-64-v3") == ["-march=x86-64-v3"]
    with pytest.warns(RuntimeWarning, match=f"LTDRNN_KERNEL_ARCH={arch}"):
        _march(monkeypatch, arch)
    kernels._arch_this_cpu_runs.cache_clear()  # as in a new process: the answers come from the cache
    monkeypatch.setattr(kernels.subprocess, "run", lambda *args, **kwargs: pytest.fail(f"ran {args[0]}"))
    assert _march(monkeypatch, "x86-64-v3") == ["-march=x86-64-v3"]
    with pytest.warns(RuntimeWarning, match=f"LTDRNN_KERNEL_ARCH={arch}: this CPU lacks"):
        assert _march(monkeypatch, arch) == ["-march=native"]


@pytest.mark.slow  # a build of srnn.cpp where the cache has none for this CPU
def test_a_process_asking_for_an_arch_this_cpu_lacks_runs_the_kernels_and_says_why():
    arch, feature = _arch_this_cpu_lacks()
    if not kernels.kernels_enabled():
        pytest.skip("the kernels are off")
    script = (
        "import torch, ltdrnn\n"
        "from ltdrnn.ops import kernels\n"
        "assert kernels.load_torch_ops('srnn')\n"
        "torch.manual_seed(0)\n"
        "cell = ltdrnn.build('srnn', 3, 16)\n"
        "x = torch.randn(20, 2, 3)\n"
        "torch.testing.assert_close(cell.scan(x, backend='cpp')[0], cell.scan(x, backend='reference')[0])\n"
    )
    env = {**os.environ, "LTDRNN_KERNEL_ARCH": arch}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=850, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"LTDRNN_KERNEL_ARCH={arch}: this CPU lacks" in run.stderr and feature in run.stderr


#: Runs a Python script with the kernels built as if torch ran on another OpenMP runtime (no -fopenmp: the
#: batch blocks on threads of their own).
WITHOUT_OPENMP = "import ltdrnn.ops.kernels\nltdrnn.ops.kernels.torch_runs_on_libgomp = lambda: False\n"


@pytest.mark.slow
@pytest.mark.parametrize(
    "arch, cells, openmp",
    [
        ("x86-64-v3", CELLS, True),  # AVX2 and FMA: every branch an AVX-512 build leaves out
        ("x86-64", ("srnn", "irnn"), True),  # SSE2 only: the portable loops beside the AVX2 ones (srnn.cpp, common.h)
        # a torch on another OpenMP runtime: the blocks on threads of their own (common.h's code for every cell;
        # SRNN's elementwise loops and MIST's per-block products)
        ("native", ("srnn", "mist"), False),
    ],
)
def test_the_kernels_built_for_another_cpu_or_runtime_load_and_equal_the_references(arch, cells, openmp):
    if platform.machine() not in ("x86_64", "AMD64") or not kernels.kernels_enabled():
        pytest.skip("x86-64 architectures, with the kernels on")
    if shutil.which("g++") is None and shutil.which("c++") is None and not os.environ.get("CXX"):
        pytest.skip("no C++ compiler on this machine")
    if openmp and not kernels.torch_runs_on_libgomp():
        pytest.skip("torch does not run on libgomp here")
    env = {**os.environ, "LTDRNN_KERNEL_ARCH": arch}
    prelude = "" if openmp else WITHOUT_OPENMP
    build = prelude + (
        "import warnings\n"
        "warnings.simplefilter('error')\n"  # a failed build warns and falls back: make it fail here
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from ltdrnn.ops import kernels\n"
        f"assert ('-fopenmp' in kernels._toolchain()[1]) == {openmp}\n"
        "with ThreadPoolExecutor(2) as pool:\n"  # the compiler runs in processes of its own: two at once
        f"    list(pool.map(kernels._build, {cells!r}))\n"
        f"for cell in {cells!r}:\n"
        "    assert kernels.load_torch_ops(cell), cell\n"
    )
    built = subprocess.run([sys.executable, "-c", build], capture_output=True, text=True, timeout=850, env=env)
    assert built.returncode == 0, built.stderr[-3000:]
    files = [CELL_TESTS[cell] for cell in cells] + SHARED_TESTS
    selection = SELECTION if cells == CELLS else f"({SELECTION}) and ({' or '.join(cells)})"
    pytest_main = prelude + "import sys, pytest\nsys.exit(pytest.main(sys.argv[1:]))\n"
    command = [sys.executable, "-c", pytest_main, "-q", "-x", "-p", "no:cacheprovider", "-k", selection, *files]
    run = subprocess.run(command, capture_output=True, text=True, timeout=850, env=env, cwd=ROOT)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-2000:])
    assert " passed" in run.stdout.splitlines()[-1], run.stdout[-500:]
