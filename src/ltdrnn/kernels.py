"""Compiled kernels: building the plain-C files of ``ltdrnn/csrc`` (and its C++ files against ATen) on first
use, caching them, declaring their C signatures, and the one-call streaming step of the source cells.

Shapes use the legend of :mod:`ltdrnn.cells.base`.

Building
    :func:`load_kernel` builds ``csrc/<name>.c`` into a shared library on first use and loads it through
    :mod:`ctypes`. Plain C (no torch headers) compiles in about a second, so a kernel costs nothing at
    import time and little on first call. The library is cached in the user cache directory under a
    name derived from the source, the compiler flags and the CPU, so an edited source or another machine
    gets its own build. Any failure (no compiler, read-only cache, missing source) makes
    :func:`load_kernel` return None once, with one warning, and callers fall back to their pure-PyTorch
    path. ``LTDRNN_NO_KERNELS=1`` disables compiled kernels altogether.

    :func:`load_torch_ops` does the same for ``csrc/<name>.cpp``: C++ against torch's headers and
    libraries (``-lc10 -ltorch_cpu``; the cache key adds the torch version), registered as
    ``torch.ops.ltdrnn.*`` operators. Torch's headers make this build slow (about 30 s on an idle core,
    3 minutes on this loaded machine), once per machine and torch version.

Calling
    :func:`kernel_function` is the one place that looks a function up by dtype (``<name>_f32`` or
    ``_f64``) and declares its argument types; :func:`stream_in_kernel` is the one streaming-step call
    every source cell's lean ``forward`` goes through.
"""

from __future__ import annotations

import ctypes
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
# float rounding, which the tests check against the reference loop. It is given to the compile step
# only: linked with -ffast-math, gcc adds crtfastmath.o, whose constructor switches the whole process
# to flush-denormals-to-zero as soon as the library is loaded.
C_FLAGS = ("-O3", "-march=native", "-ffast-math", "-fPIC")
_LOADED: dict[str, ctypes.CDLL | None] = {}
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


def load_kernel(name: str) -> ctypes.CDLL | None:
    """The compiled library of ``ltdrnn/csrc/<name>.c``, or None when it cannot be built or loaded.

    Built once per machine (cached on disk) and loaded once per process (cached in memory).
    """
    if not kernels_enabled():
        return None
    return _load_once(_LOADED, name, "compiled kernel", lambda: ctypes.CDLL(str(_build(name))), None)


def load_torch_ops(name: str) -> bool:
    """Whether the ATen operators of ``ltdrnn/csrc/<name>.cpp`` (``torch.ops.ltdrnn.*``) are available.

    The C++ file is built like the C kernels (on first use, cached on disk under a name derived from
    the source, the flags, the CPU, the compiler and the torch version) and registered once per
    process with ``torch.ops.load_library``. Needs a C++ compiler (``$CXX``, ``g++`` or ``c++``) and
    torch's headers, nothing else (no ninja, no Python headers). Any failure gives one warning and
    False: callers use their PyTorch path. ``LTDRNN_NO_KERNELS=1`` makes it False.
    """
    if not kernels_enabled():
        return False

    def register() -> bool:
        torch.ops.load_library(str(_build(name, "cpp")))
        return True

    return _load_once(_TORCH_OPS, name, "compiled operators", register, False)


def _load_once(cache: dict, name: str, what: str, load, failed):
    """``cache[name]``, filled on first use by ``load()``; any failure warns once and caches ``failed``."""
    if name not in cache:
        try:
            cache[name] = load()
        except Exception as error:  # any failure means: use the PyTorch fallback
            warnings.warn(
                f"ltdrnn: {what} {name!r} unavailable ({error}); using the pure-PyTorch implementation",
                RuntimeWarning,
                stacklevel=4,
            )
            cache[name] = failed
    return cache[name]


def _toolchain(language: str) -> tuple[str, list[str], list[str], bytes]:
    """``(compiler, compile flags, link flags, what else the build depends on)`` for ``"c"`` or ``"cpp"``
    (C++ against torch's headers and libraries)."""
    if language == "c":
        compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
        if compiler is None:
            raise RuntimeError("no C compiler found (gcc or cc on PATH, or $CC)")
        return compiler, list(C_FLAGS), ["-lm"], b""
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise RuntimeError("no C++ compiler found (g++ or c++ on PATH, or $CXX)")
    from torch.utils import cpp_extension  # imported only to build: it is slow to import

    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    includes = [f"-I{path}" for path in cpp_extension.include_paths()]
    libraries = cpp_extension.library_paths()
    links = [f"-L{path}" for path in libraries] + [f"-Wl,-rpath,{path}" for path in libraries]
    compile_flags = [*C_FLAGS, "-std=c++20", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *includes]
    return compiler, compile_flags, [*links, "-lc10", "-ltorch_cpu"], torch.__version__.encode()


def _build(name: str, language: str = "c") -> Path:
    source = resources.files("ltdrnn").joinpath("csrc", f"{name}.{language}").read_bytes()
    compiler, compile_flags, link_flags, depends_on = _toolchain(language)
    key = hashlib.sha256(
        source + " ".join(compile_flags).encode() + _cpu_signature().encode() + compiler.encode() + depends_on
    ).hexdigest()[:16]
    cache = kernel_cache_dir()
    for cached in sorted(cache.glob(f"{name}-{key}-*.so")):
        if _is_intact(cached):
            return cached
    cache.mkdir(mode=0o755, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as work:
        src = Path(work) / f"{name}.{language}"
        src.write_bytes(source)
        obj, built = Path(work) / f"{name}.o", Path(work) / f"{name}.so"
        for command in (
            [compiler, *compile_flags, "-c", str(src), "-o", str(obj)],
            [compiler, "-shared", str(obj), "-o", str(built), *link_flags],
        ):
            result = subprocess.run(command, capture_output=True, text=True, timeout=600)
            if result.returncode != 0:
                raise RuntimeError(f"{compiler} failed: {result.stderr.strip()[:500]}")
        target = cache / f"{name}-{key}-{_digest(built)}.so"
        os.replace(built, target)  # atomic: concurrent builders never see a half-written library
    return target


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


# ---- C signatures -----------------------------------------------------------------------------------
#: The ctypes types of the kernels' arguments: addresses, sizes (64-bit, or ctypes would pass 32-bit
#: ints) and flags.
POINTER, SIZE, FLAG = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
KERNEL_DTYPES = {torch.float32: "f32", torch.float64: "f64"}


def kernel_function(library: str, name: str, dtype: torch.dtype, argtypes: Sequence):
    """The function ``<name>_f32`` or ``<name>_f64`` of ``csrc/<library>.c`` for ``dtype``, its
    arguments declared as ``argtypes`` (once) and its result an ``int`` status; None when compiled
    kernels are off or unavailable, or for a dtype other than float32 and float64."""
    if dtype not in KERNEL_DTYPES:
        return None
    lib = load_kernel(library)
    if lib is None:
        return None
    function = getattr(lib, f"{name}_{KERNEL_DTYPES[dtype]}")
    if function.argtypes is None:
        function.argtypes = list(argtypes)
        function.restype = ctypes.c_int
    return function


def kernel_runs_on(library: str, x: Tensor) -> bool:
    """Whether ``csrc/<library>.c`` can run on tensors like ``x``: CPU, float32 or float64, and the
    library builds on this machine."""
    return x.device.type == "cpu" and x.dtype in KERNEL_DTYPES and load_kernel(library) is not None


def pointer(tensor: Tensor | None) -> ctypes.c_void_p:
    """The data address of a contiguous CPU tensor for a C call (NULL for None)."""
    return ctypes.c_void_p(None if tensor is None else tensor.data_ptr())


# ---- one-call streaming steps (csrc/stream_step.c) ------------------------------------------------
#: Largest batch for which the cells' lean ``forward`` uses the compiled streaming step. Its products
#: are plain loops: at batch 1 they beat BLAS plus op dispatch (2-8x at H=128); at large batch BLAS
#: wins. Measured crossover at H=128: batch 16 for TARNN, beyond 32 for SRNN, MIST and SA-RNN.
STREAM_MAX_BATCH = 8
_STREAM_POINTERS = {"tarnn_stream": 4, "srnn_stream": 3, "mist_stream": 4, "sarnn_stream": 5}


def stream_kernel(name: str, dtype: torch.dtype):
    """The function ``<name>_f32``/``_f64`` of ``csrc/stream_step.c``, or None when compiled kernels
    are off or unavailable, or for another dtype. Its arguments: the operands' address and size arrays,
    the inputs and outputs, the batch size."""
    return kernel_function("stream_step", name, dtype, [POINTER] * (2 + _STREAM_POINTERS[name]) + [SIZE])


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
    """The weights of one streaming-step call: contiguous copies kept alive, the C array of their
    addresses (``None`` becomes NULL) and the C array of sizes, built once per parameter change."""

    def __init__(self, tensors, sizes) -> None:
        self.dtype = next(t for t in tensors if t is not None).dtype
        self.tensors = [None if t is None else t.detach().contiguous() for t in tensors]
        self.pointer_array = (ctypes.c_void_p * len(self.tensors))(
            *[None if t is None else t.data_ptr() for t in self.tensors]
        )
        self.size_array = (ctypes.c_long * len(sizes))(*sizes)
        self.pointers, self.sizes = ctypes.addressof(self.pointer_array), ctypes.addressof(self.size_array)


def run_stream_kernel(function, operands: StreamOperands, *arrays: Tensor) -> None:
    """Call a streaming step on contiguous tensors (the batch size is the first axis of the first)."""
    status = function(operands.pointers, operands.sizes, *[a.data_ptr() for a in arrays], arrays[0].shape[0])
    if status != 0:
        raise MemoryError("stream_step: the kernel could not allocate its work space")


def stream_in_kernel(
    name: str,
    operands: Callable[[], StreamOperands],
    x_t,
    state,
    input_size: int,
    state_tail: tuple,
    output_tails: Sequence[tuple],
) -> List[Tensor] | None:
    """One time step of a source cell in one call of the compiled streaming step ``name``.

    ``x_t (B, d)``, ``state (B, *state_tail)`` -> the kernel's outputs, ``(B, *output_tails[i])`` each, in the
    order ``csrc/stream_step.c`` writes them; None where the kernel does not apply (see
    :func:`can_stream_in_kernel`) or is unavailable, and the caller takes its general path.
    ``operands()`` gives the cell's cached weights; it is only asked for without autograd.
    """
    if torch.is_grad_enabled():
        return None
    weights = operands()
    if not can_stream_in_kernel(x_t, state, weights.dtype, input_size, state_tail):
        return None
    kernel = stream_kernel(name, state.dtype)
    if kernel is None:
        return None
    outputs = [state.new_empty(x_t.shape[0], *tail) for tail in output_tails]
    run_stream_kernel(kernel, weights, x_t.contiguous(), state.contiguous(), *outputs)
    return outputs
