"""Shared machinery for running recurrences fast: helpers of the cells' fused loops (activations into
buffers, a cache of parameter-derived operands), closed forms and small compiled kernels.

Shapes use the legend of :mod:`ltdrnn.cells.base` (time-major ``(T, B, H)``).

Compiled kernels
    :func:`load_kernel` builds a plain C file from ``ltdrnn/csrc`` into a shared library on first use
    and loads it through :mod:`ctypes`. Plain C (no torch headers) compiles in about a second, so a
    kernel costs nothing at import time and little on first call. The library is cached in the user
    cache directory under a name derived from the source, the compiler flags and the CPU, so an edited
    source or another machine gets its own build. Any failure (no compiler, read-only cache, missing
    source) makes :func:`load_kernel` return None once, with one warning, and callers fall back to
    their pure-PyTorch path. ``LTDRNN_NO_KERNELS=1`` disables compiled kernels altogether.
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
import threading
import warnings
from importlib import resources
from pathlib import Path

import torch
from torch import Tensor

# -ffast-math lets gcc call glibc's vectorised expf/tanhf (libmvec); results agree with torch's to
# float rounding, which the tests check against the reference loop. It is given to the compile step
# only: linked with -ffast-math, gcc adds crtfastmath.o, whose constructor switches the whole process
# to flush-denormals-to-zero as soon as the library is loaded.
C_FLAGS = ("-O3", "-march=native", "-ffast-math", "-fPIC")
_LOADED: dict[str, ctypes.CDLL | None] = {}


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
    if name not in _LOADED:
        try:
            _LOADED[name] = ctypes.CDLL(str(_build(name)))
        except Exception as error:  # any failure means: use the PyTorch fallback
            warnings.warn(f"ltdrnn: compiled kernel {name!r} unavailable ({error}); "
                          f"using the pure-PyTorch implementation", RuntimeWarning, stacklevel=3)
            _LOADED[name] = None
    return _LOADED[name]


def _build(name: str) -> Path:
    source = resources.files("ltdrnn").joinpath("csrc", f"{name}.c").read_bytes()
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise RuntimeError("no C compiler found (gcc or cc on PATH, or $CC)")
    key = hashlib.sha256(source + " ".join(C_FLAGS).encode() + _cpu_signature().encode()
                         + compiler.encode()).hexdigest()[:16]
    cache = kernel_cache_dir()
    for cached in sorted(cache.glob(f"{name}-{key}-*.so")):
        if _is_intact(cached):
            return cached
    cache.mkdir(mode=0o755, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as work:
        src = Path(work) / f"{name}.c"
        src.write_bytes(source)
        obj, built = Path(work) / f"{name}.o", Path(work) / f"{name}.so"
        for command in ([compiler, *C_FLAGS, "-c", str(src), "-o", str(obj)],
                        [compiler, "-shared", str(obj), "-o", str(built), "-lm"]):
            result = subprocess.run(command, capture_output=True, text=True, timeout=120)
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


# ---- large work buffers ---------------------------------------------------------------------------
_HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14  # Linux <sys/mman.h>
_MADVISE = []        # [libc.madvise] once resolved, [None] where unavailable


def empty_buffer(shape, like: Tensor) -> Tensor:
    """``torch.empty(shape)`` with the dtype and device of ``like``, for a large work buffer.

    On Linux CPUs the buffer's whole 2 MB pages are marked for transparent huge pages before first
    use (``madvise(MADV_HUGEPAGE)``; a hint the kernel may ignore). A fresh ``(784, 128, 128)`` float32
    buffer then costs about 60 ms less to fill here, because the first write faults 2 MB pages in
    instead of 4 KB ones; whole-sequence scans allocate several such buffers per call.
    """
    buffer = torch.empty(shape, dtype=like.dtype, device=like.device)
    nbytes = buffer.numel() * buffer.element_size()
    if buffer.device.type == "cpu" and nbytes >= 2 * _HUGE_PAGE:
        madvise = _madvise()
        if madvise is not None:
            start = -(-buffer.data_ptr() // _HUGE_PAGE) * _HUGE_PAGE
            end = (buffer.data_ptr() + nbytes) // _HUGE_PAGE * _HUGE_PAGE
            madvise(start, end - start, _MADV_HUGEPAGE)  # failure just means ordinary pages
    return buffer


class _Scratch(threading.local):
    """Per-thread store of released work buffers (flat tensors), largest kept first."""

    limit = 4

    def __init__(self) -> None:
        self.free: list[Tensor] = []


_SCRATCH = _Scratch()


def scratch_buffer(shape, like: Tensor) -> Tensor:
    """A work buffer like :func:`empty_buffer`, reusing one given back by :func:`release` if it fits.

    Reuse spares the page faults of fresh memory (tens of ms per 51 MB buffer here). Only for buffers
    that live inside one call and of which no view escapes it: the caller must :func:`release` them.
    """
    count = 1
    for size in shape:
        count *= size
    fitting = [i for i, b in enumerate(_SCRATCH.free)
               if b.numel() >= count and b.dtype == like.dtype and b.device == like.device]
    if not fitting:
        return empty_buffer(shape, like)
    chosen = _SCRATCH.free.pop(min(fitting, key=lambda i: _SCRATCH.free[i].numel()))
    return chosen[:count].view(shape)


def release(*buffers: Tensor | None) -> None:
    """Give work buffers from :func:`scratch_buffer` back; at most ``_Scratch.limit`` are kept."""
    for buffer in buffers:
        if buffer is not None and buffer.device.type == "cpu":
            base = buffer if buffer._base is None else buffer._base
            _SCRATCH.free.append(base.view(-1))
    _SCRATCH.free.sort(key=Tensor.numel, reverse=True)
    del _SCRATCH.free[_Scratch.limit:]


def release_scratch() -> None:
    """Free every kept work buffer of this thread (they are otherwise kept for reuse)."""
    _SCRATCH.free.clear()


def _madvise():
    if not _MADVISE:
        try:
            function = ctypes.CDLL(None, use_errno=True).madvise if sys.platform.startswith("linux") else None
            if function is not None:
                function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                function.restype = ctypes.c_int
        except (OSError, AttributeError):
            function = None
        _MADVISE.append(function)
    return _MADVISE[0]


def pointer(tensor: Tensor | None) -> ctypes.c_void_p:
    """The data address of a contiguous CPU tensor for a C call (NULL for None)."""
    return ctypes.c_void_p(None if tensor is None else tensor.data_ptr())

# ---- helpers of the fused loops (hand-written forward and backward over a sequence) ------------------
ACTIVATION_INTO = {
    # phi(x, out=buffer), for the fused loops
    "relu": lambda x, out: torch.clamp_min(x, 0, out=out),
    "tanh": lambda x, out: torch.tanh(x, out=out),
    "sigmoid": lambda x, out: torch.sigmoid(x, out=out),
}
ACTIVATION_BACKWARD_INTO = {
    # gradient through phi from phi's output, written into ``out``: the backward needs only that output
    "relu": lambda grad, y, out: torch.ops.aten.threshold_backward.grad_input(grad, y, 0, grad_input=out),
    "tanh": lambda grad, y, out: torch.ops.aten.tanh_backward.grad_input(grad, y, grad_input=out),
    "sigmoid": lambda grad, y, out: torch.ops.aten.sigmoid_backward.grad_input(grad, y, grad_input=out),
}


class ParameterCache:
    """Values derived from some parameters, recomputed only when one of them changes.

    The key is every given tensor's storage and version counter, so in-place optimiser updates,
    ``load_state_dict`` and ``module.to(...)`` invalidate it.
    """

    def __init__(self) -> None:
        self.key, self.value = None, None

    def get(self, tensors, compute, extra=None):
        """The cached ``compute()``, recomputed when a tensor or the hashable ``extra`` changes."""
        key = (tuple((p.data_ptr(), p._version) for p in tensors), extra)
        if key != self.key:
            self.key, self.value = key, compute()
        return self.value


def final_state_at_lengths(outputs: Tensor, lengths: Tensor | None) -> Tensor:
    """The state after each sequence's last true step, from the unmasked outputs ``(T, B, H)``."""
    if lengths is None:
        return outputs[-1]
    index = (lengths.to(outputs.device) - 1).view(1, -1, 1).expand(1, -1, outputs.shape[-1])
    return outputs.gather(0, index)[0]


def scalars(values: Tensor) -> list:
    """Python floats of a small parameter, for the fused loops (no graph, no per-step tensor ops)."""
    return [float(v) for v in values.detach().reshape(-1).tolist()]


# ---- the process's allocator ---------------------------------------------------------------------------
# glibc mallopt parameters (malloc.h) and the environment variables that set the same at start-up
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
TRIM_THRESHOLD = 2 ** 31 - 1
MALLOC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}


def tune_malloc() -> bool:
    """Tell glibc to serve large blocks from the heap and never trim it (what the ``MALLOC_*``
    variables do); returns whether it took effect (False off glibc).

    Why: with glibc's defaults every large block is mmap-ed and returned on free, so each training
    step of a long sequence writes its big buffers into fresh zeroed pages (page faults at a few GB/s).
    With the tuning, freed blocks are reused: measured 1.2-1.3x faster training steps for our cells and
    1.5-1.9x for nn.LSTM/nn.GRU (docs/benchmarks.md). The cost: memory freed after a peak stays with
    the process. It changes the whole process and cannot be undone, so callers make it optional.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    except (OSError, AttributeError):
        return False


# ---- closed forms -------------------------------------------------------------------------------------
def relu_accumulate(c: Tensor, g0: Tensor) -> Tensor:
    """Solve ``g_t = max(0, g_{t-1} + c_t)`` for all t at once.

    Shapes: ``c (T, B, H)``, ``g0 (B, H)`` (any sign) -> ``g (T, B, H)``.

    With ``S_t = c_1 + ... + c_t`` the solution is ``g_t = S_t - min(-g_0, min_{j<=t} S_j)``
    (Lindley's recursion). ``S`` is accumulated in float64: in float32 the difference of two large
    partial sums loses the small values the recurrence would have kept.

    Equivalent to::

        g = g0
        for t in range(T):
            g = torch.relu(g + c[t]); out[t] = g
    """
    wide = torch.float64 if c.dtype in (torch.float32, torch.float16, torch.bfloat16) else c.dtype
    # time on the last (contiguous) axis: cumsum and cummin are several times faster there
    s = c.to(wide).permute(1, 2, 0).cumsum(-1)
    floor = torch.minimum(s.cummin(-1).values, -g0.to(wide).unsqueeze(-1))
    return (s - floor).permute(2, 0, 1).to(c.dtype)


# ---- one-call streaming steps (csrc/stream_step.c) ------------------------------------------------
#: Largest batch for which the cells' lean ``forward`` uses the compiled streaming step. Its products
#: are plain loops: at batch 1 they beat BLAS plus op dispatch (2-8x at H=128); at large batch BLAS
#: wins. Measured crossover at H=128: batch 16 for TARNN, beyond 32 for SRNN, MIST and SA-RNN.
STREAM_MAX_BATCH = 8
_STREAM_POINTERS = {"tarnn_stream": 4, "srnn_stream": 3, "mist_stream": 4, "sarnn_stream": 5}


def stream_kernel(name: str, dtype: torch.dtype):
    """The function ``<name>_f32``/``_f64`` of ``csrc/stream_step.c``, or None when compiled kernels
    are off or unavailable, or for another dtype."""
    if dtype not in (torch.float32, torch.float64):
        return None
    lib = load_kernel("stream_step")
    if lib is None:
        return None
    function = getattr(lib, f"{name}_{'f32' if dtype == torch.float32 else 'f64'}")
    if function.argtypes is None:  # declare 64-bit sizes, or ctypes would pass 32-bit ints
        function.argtypes = [ctypes.c_void_p] * (2 + _STREAM_POINTERS[name]) + [ctypes.c_long]
        function.restype = ctypes.c_int
    return function


def can_stream_in_kernel(x_t, state, dtype: torch.dtype, input_size: int, state_tail: tuple) -> bool:
    """Whether one step of ``x_t (B, d)`` from the tensor ``state (B, *state_tail)`` may use the
    compiled streaming step: no autograd, CPU, the shapes the kernel expects, matching float dtypes,
    batch at most :data:`STREAM_MAX_BATCH`. Anything else takes the cell's general path (which also
    raises the clear errors for bad input)."""
    return (not torch.is_grad_enabled() and isinstance(x_t, Tensor) and isinstance(state, Tensor)
            and x_t.dim() == 2 and 0 < x_t.shape[0] <= STREAM_MAX_BATCH and x_t.shape[1] == input_size
            and state.shape == (x_t.shape[0], *state_tail) and x_t.device.type == "cpu"
            and state.device.type == "cpu" and x_t.dtype == state.dtype == dtype)


class StreamOperands:
    """The weights of one streaming-step call: contiguous copies kept alive, the C array of their
    addresses (``None`` becomes NULL) and the C array of sizes, built once per parameter change."""

    def __init__(self, tensors, sizes) -> None:
        self.dtype = next(t for t in tensors if t is not None).dtype
        self.tensors = [None if t is None else t.detach().contiguous() for t in tensors]
        self.pointer_array = (ctypes.c_void_p * len(self.tensors))(
            *[None if t is None else t.data_ptr() for t in self.tensors])
        self.size_array = (ctypes.c_long * len(sizes))(*sizes)
        self.pointers, self.sizes = ctypes.addressof(self.pointer_array), ctypes.addressof(self.size_array)


def run_stream_kernel(function, operands: StreamOperands, *arrays: Tensor) -> None:
    """Call a streaming step on contiguous tensors (the batch size is the first axis of the first)."""
    status = function(operands.pointers, operands.sizes, *[a.data_ptr() for a in arrays], arrays[0].shape[0])
    if status != 0:
        raise MemoryError("stream_step: the kernel could not allocate its work space")
