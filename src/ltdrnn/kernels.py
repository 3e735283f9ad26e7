"""Compiled kernels: building ``ltdrnn/csrc/<cell>.cpp`` into torch operators on first use, caching the
build, and the one-call streaming step of the source cells.

Shapes use the legend of :mod:`ltdrnn.cells.base`. How the build works (sources, flags, cache,
fallback, ``LTDRNN_NO_KERNELS``, first-build cost) is described once, in ``docs/architecture.md``.

:func:`load_torch_ops` registers a cell's operators (``torch.ops.ltdrnn.<cell>_<what>``), or says
they are unavailable (one warning), and the caller takes its pure-PyTorch path. :func:`kernel_runs_on`
is the usual question before a kernel path: CPU, float32/64, operators loaded. :func:`stream_in_kernel`
is the one streaming-step call every source cell's lean ``forward`` goes through.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import warnings
from importlib import resources
from pathlib import Path
from typing import Callable, List, Sequence

import torch
from torch import Tensor

# -ffast-math lets gcc call glibc's vectorised expf/tanhf (libmvec); results agree with torch's to
# float rounding, which the tests check against the reference loops. It is given to the compile step
# only: linked with -ffast-math, gcc adds crtfastmath.o, whose constructor switches the whole process
# to flush-denormals-to-zero as soon as the library is loaded.
COMPILE_FLAGS = ("-O3", "-march=native", "-ffast-math", "-fPIC")
#: The header every ``csrc/<cell>.cpp`` includes; its bytes are part of each build's cache key.
COMMON_HEADER = "common.h"
KERNEL_DTYPES = (torch.float32, torch.float64)
_TORCH_OPS: dict[str, bool] = {}  # registered operators stay for the life of the process


def kernels_enabled() -> bool:
    """False when the environment variable ``LTDRNN_NO_KERNELS`` is set to a non-empty, non-0 value."""
    return os.environ.get("LTDRNN_NO_KERNELS", "") in ("", "0")


def kernel_cache_dir() -> Path:
    """Where compiled kernels live: ``$LTDRNN_CACHE`` or ``$XDG_CACHE_HOME/ltdrnn`` (``~/.cache``)."""
    root = os.environ.get("LTDRNN_CACHE")
    if root:
        return Path(root) / "kernels"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ltdrnn" / "kernels"


def load_torch_ops(cell: str) -> bool:
    """Whether the operators of ``ltdrnn/csrc/<cell>.cpp`` (``torch.ops.ltdrnn.<cell>_*``) are available.

    Built once per machine and torch version (cached on disk), registered once per process with
    ``torch.ops.load_library``. Any failure (no C++ compiler, torch headers missing, read-only cache)
    gives one warning and False: callers use their PyTorch path. ``LTDRNN_NO_KERNELS=1`` makes it False.
    """
    if not kernels_enabled():
        return False
    if cell not in _TORCH_OPS:
        try:
            torch.ops.load_library(str(_build(cell)))
            _TORCH_OPS[cell] = True
        except Exception as error:  # any failure means: use the PyTorch fallback
            warnings.warn(
                f"ltdrnn: compiled operators {cell!r} unavailable ({error}); using the pure-PyTorch implementation",
                RuntimeWarning,
                stacklevel=3,
            )
            _TORCH_OPS[cell] = False
    return _TORCH_OPS[cell]


def kernel_runs_on(cell: str, x: Tensor) -> bool:
    """Whether the operators of ``csrc/<cell>.cpp`` can run on tensors like ``x``: CPU, float32 or
    float64, and the operators build on this machine."""
    return x.device.type == "cpu" and x.dtype in KERNEL_DTYPES and load_torch_ops(cell)


def _toolchain() -> tuple[str, list[str], list[str]]:
    """``(compiler, compile flags, link flags)`` for C++ against torch's headers and libraries."""
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise RuntimeError("no C++ compiler found (g++ or c++ on PATH, or $CXX)")
    from torch.utils import cpp_extension  # imported only to build: it is slow to import

    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    includes = [f"-I{path}" for path in cpp_extension.include_paths()]
    libraries = cpp_extension.library_paths()
    links = [f"-L{path}" for path in libraries] + [f"-Wl,-rpath,{path}" for path in libraries]
    compile_flags = [*COMPILE_FLAGS, "-std=c++20", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *includes]
    return compiler, compile_flags, [*links, "-lc10", "-ltorch_cpu"]


def _sources(cell: str) -> dict[str, bytes]:
    """The files a build of ``csrc/<cell>.cpp`` reads, by name: the file and :data:`COMMON_HEADER`."""
    csrc = resources.files("ltdrnn").joinpath("csrc")
    return {name: csrc.joinpath(name).read_bytes() for name in (f"{cell}.cpp", COMMON_HEADER)}


def _build(cell: str) -> Path:
    """The shared object of ``csrc/<cell>.cpp``: from the cache when an intact build of the same
    sources, flags, CPU, compiler and torch version is there, else built now."""
    sources = _sources(cell)
    compiler, compile_flags, link_flags = _toolchain()
    parts = [*sources.values(), " ".join(compile_flags), _cpu_signature(), compiler, torch.__version__]
    key = hashlib.sha256(b"\0".join(p if isinstance(p, bytes) else p.encode() for p in parts)).hexdigest()[:16]
    cache = kernel_cache_dir()
    for cached in sorted(cache.glob(f"{cell}-{key}-*.so")):
        if _is_intact(cached):
            return cached
    cache.mkdir(mode=0o755, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as work:
        for name, text in sources.items():  # side by side: #include "common.h" finds the header
            (Path(work) / name).write_bytes(text)
        built = Path(work) / f"{cell}.so"
        _compile(compiler, compile_flags, link_flags, Path(work) / f"{cell}.cpp", built)
        target = cache / f"{cell}-{key}-{_digest(built)}.so"
        os.replace(built, target)  # atomic: concurrent builders never see a half-written library
    return target


def _compile(compiler: str, compile_flags: list[str], link_flags: list[str], source: Path, target: Path) -> None:
    """Compiles ``source`` and links ``target``; a failure raises with the compiler's own message."""
    obj = target.with_suffix(".o")
    for command in (
        [compiler, *compile_flags, "-c", str(source), "-o", str(obj)],
        [compiler, "-shared", str(obj), "-o", str(target), *link_flags],
    ):
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {result.stderr.strip()[:500]}")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _is_intact(path: Path) -> bool:
    """Whether a cached library is the one that was built: its content hash is the one in its name
    (a truncated or replaced file fails), and no other user could have written it (the file and its
    directory are owned by this user and not writable by others)."""
    try:
        for item in (path, path.parent):
            status = item.stat()
            if status.st_uid != os.getuid() or status.st_mode & 0o002:
                return False
        return path.stem.rsplit("-", 1)[-1] == _digest(path)
    except OSError:
        return False


def _cpu_signature() -> str:
    """Identifies the CPU model, because ``-march=native`` code may not run on another one."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith(("model name", "flags")):
                    model += line
    except OSError:
        pass
    return model + sys.platform


# ---- one-call streaming steps (torch.ops.ltdrnn.<cell>_stream) ------------------------------------------
#: Largest batch for which the cells' lean ``forward`` uses the compiled streaming step. Its products
#: are plain loops: at batch 1 they beat BLAS plus op dispatch; at large batch BLAS wins (the measured
#: crossover: docs/architecture.md, "Compiled kernels").
STREAM_MAX_BATCH = 8


def can_stream_in_kernel(x_t, state, dtype: torch.dtype, input_size: int, state_tail: tuple) -> bool:
    """Whether one step of ``x_t (B, d)`` from the tensor ``state (B, *state_tail)`` may use the
    compiled streaming step: no autograd, CPU, the shapes the kernel expects, matching float dtypes,
    batch at most :data:`STREAM_MAX_BATCH`. Anything else takes the cell's general path (which also
    raises the clear errors for bad input)."""
    return (
        not torch.is_grad_enabled()
        and isinstance(x_t, Tensor)
        and isinstance(state, Tensor)
        and x_t.dim() == 2
        and 0 < x_t.shape[0] <= STREAM_MAX_BATCH
        and x_t.shape[1] == input_size
        and state.shape == (x_t.shape[0], *state_tail)
        and x_t.device.type == "cpu"
        and state.device.type == "cpu"
        and x_t.dtype == state.dtype == dtype
    )


class StreamOperands:
    """The weights of one streaming-step call, detached and contiguous, and its integer options; built
    once per parameter change (the cells cache it)."""

    def __init__(self, tensors: Sequence[Tensor], options: Sequence[int] = ()) -> None:
        self.tensors = [t.detach().contiguous() for t in tensors]
        self.options = [int(o) for o in options]
        self.dtype = self.tensors[0].dtype


def run_stream_kernel(cell: str, operands: StreamOperands, x_t: Tensor, state: Tensor) -> List[Tensor]:
    """``torch.ops.ltdrnn.<cell>_stream`` on contiguous inputs; its outputs as a list."""
    op = getattr(torch.ops.ltdrnn, f"{cell}_stream")
    outputs = op(operands.tensors, operands.options, x_t.contiguous(), state.contiguous())
    return list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]


def stream_in_kernel(
    cell: str,
    operands: Callable[[], StreamOperands],
    x_t,
    state,
    input_size: int,
    state_tail: tuple,
) -> List[Tensor] | None:
    """One time step of a source cell in one call of its compiled streaming step.

    ``x_t (B, d)``, ``state (B, *state_tail)`` -> the operator's outputs, each with batch first; None
    where the kernel does not apply (see :func:`can_stream_in_kernel`) or is unavailable, and the
    caller takes its general path. ``operands()`` gives the cell's cached weights; it is only asked
    for without autograd.
    """
    if torch.is_grad_enabled():
        return None
    weights = operands()
    if not can_stream_in_kernel(x_t, state, weights.dtype, input_size, state_tail) or not load_torch_ops(cell):
        return None
    return run_stream_kernel(cell, weights, x_t, state)
