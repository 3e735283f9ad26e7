"""Compiled kernels: building ``ltdrnn/ops/csrc/<cell>.cpp`` into torch operators on first use, caching the
build, and the one-call streaming step of the source cells.

Shapes use the legend of :mod:`ltdrnn.cells.base`. How the build works (sources, flags, cache,
fallback, ``LTDRNN_NO_KERNELS``, first-build cost) is described once, in ``docs/architecture.md``.

:func:`load_torch_ops` registers a cell's operators (``torch.ops.ltdrnn.<cell>_<what>``), or says
they are unavailable (one warning), and the caller takes its pure-PyTorch path. :func:`kernel_runs_on`
is the usual question before a kernel path: CPU, float32/64, operators loaded. :func:`run_stream_kernel`
is the one call of a streaming-step operator, from each source cell's ``ops.<cell>.stream``
(:func:`stream_in_kernel` makes the checks first where the front has not).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

import torch
from torch import Tensor

# -ffast-math lets gcc call glibc's vectorised expf/tanhf (libmvec); results agree with torch's to
# float rounding, which the tests check against the reference loops. It is given to the compile step
# only: linked with -ffast-math, gcc adds crtfastmath.o, whose constructor switches the whole process
# to flush-denormals-to-zero as soon as the library is loaded. -march is kernel_arch()'s; -fopenmp is added
# where torch runs on libgomp (openmp_flags).
COMPILE_FLAGS = ("-O3", "-ffast-math", "-fPIC")
#: The header every ``csrc/<cell>.cpp`` includes; its bytes are part of each build's cache key.
COMMON_HEADER = "common.h"
#: Every header of ``csrc/`` (common.h includes the others); all are copied beside a build and keyed.
HEADERS = (COMMON_HEADER, "products.h")
KERNEL_DTYPES = (torch.float32, torch.float64)
_TORCH_OPS: dict[str, bool] = {}  # registered operators stay for the life of the process


def kernels_enabled() -> bool:
    """False when the environment variable ``LTDRNN_NO_KERNELS`` is set to a non-empty, non-0 value."""
    return os.environ.get("LTDRNN_NO_KERNELS", "") in ("", "0")


def kernel_arch() -> str:
    """The ``-march`` the kernels are built for: ``$LTDRNN_KERNEL_ARCH``, else ``native`` (this CPU).

    Another value builds the code paths of another CPU on this one, to test or time them: ``x86-64-v3``
    (AVX2 and FMA, no AVX-512) and ``x86-64`` (no vector extensions beyond SSE2) compile the AVX2 and the
    portable loops of ``csrc/`` that an AVX-512 machine never builds otherwise. Raises ValueError for a
    value that is not a plain architecture name."""
    arch = os.environ.get("LTDRNN_KERNEL_ARCH", "") or "native"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", arch):
        raise ValueError(
            f"LTDRNN_KERNEL_ARCH: expected a -march name such as native, x86-64-v3 or x86-64, got {arch!r}"
        )
    return arch


def _build_arch(compiler: str) -> str:
    """The ``-march`` to build with: :func:`kernel_arch`, checked by :func:`_arch_this_cpu_runs`."""
    arch = kernel_arch()
    return arch if arch == "native" else _arch_this_cpu_runs(compiler, arch)


@functools.lru_cache(maxsize=None)  # one probe and at most one warning per process
def _arch_this_cpu_runs(compiler: str, arch: str) -> str:
    """``arch``, or ``native`` with a warning where this CPU lacks an instruction set ``-march={arch}``
    implies (code built for it would stop the process with SIGILL).

    The compiler says which features each ``-march`` implies (the macros ``-E -dM`` defines, such as
    ``__AVX512ER__``), for ``arch`` and for ``native``, this CPU: a feature of the first that the second
    lacks is missing here. (A compiled probe would prove little: a small program need not use the
    instructions the kernels do.) The answer is kept in the kernel cache, so it costs one file read after
    the first time on a machine."""
    missing = _missing_features(compiler, arch)
    if not missing:
        return arch
    warnings.warn(
        f"ltdrnn: LTDRNN_KERNEL_ARCH={arch}: this CPU lacks {', '.join(missing)}, which -march={arch} "
        "implies (the kernels would stop the process with SIGILL); building them for -march=native instead",
        RuntimeWarning,
        stacklevel=2,
    )
    return "native"


def _missing_features(compiler: str, arch: str) -> List[str]:
    """The instruction-set features ``-march={arch}`` implies and ``-march=native`` does not, from the
    kernel cache (``arch-<key>``: the compiler, its file's size and time, ``arch`` and the CPU) or from
    the compiler, whose answer is then stored there."""
    program = Path(shutil.which(compiler) or compiler).resolve()
    status = program.stat()
    parts = (str(program), str(status.st_size), str(status.st_mtime_ns), arch, _cpu_signature())
    cache = _private_cache()
    stored = cache / f"arch-{hashlib.sha256(chr(0).join(parts).encode()).hexdigest()[:16]}"
    try:
        return stored.read_text().split()
    except FileNotFoundError:
        pass
    missing = sorted(_feature_macros(compiler, arch) - _feature_macros(compiler, "native"))
    with tempfile.NamedTemporaryFile("w", dir=cache, prefix="tmp", delete=False) as out:
        out.write(" ".join(missing))
    os.replace(out.name, stored)  # atomic: a concurrent reader sees the whole answer or none
    return missing


def _feature_macros(compiler: str, arch: str) -> set[str]:
    """The features ``-march={arch}`` implies, as the compiler names them in the macros it defines for it
    (``__AVX2__`` -> ``AVX2``; the lower-case macros name the CPU itself, not a feature)."""
    command = [compiler, f"-march={arch}", "-E", "-dM", "-x", "c++", os.devnull]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or ["no message"])[0]
        raise RuntimeError(f"LTDRNN_KERNEL_ARCH={arch}: {compiler} does not accept -march={arch}: {reason}")
    names = (line.split()[1] for line in result.stdout.splitlines() if line.startswith("#define "))
    return {name.strip("_") for name in names if re.fullmatch(r"__[A-Z0-9_]+__", name)}


def torch_runs_on_libgomp() -> bool:
    """Whether this process has loaded ``libgomp.so.1``, the OpenMP runtime torch's CPU wheels ship and link."""
    try:
        with open("/proc/self/maps") as maps:
            return any(line.rstrip().endswith("/libgomp.so.1") for line in maps)
    except OSError:
        return False


def openmp_flags() -> list[str]:
    """``["-fopenmp"]`` where torch runs on libgomp, else nothing.

    With it a time loop's batch blocks run on torch's own OpenMP team (``csrc/common.h``,
    ``over_batch_blocks``): the library needs ``libgomp.so.1``, which resolves to the copy torch has already
    loaded, so the process keeps one runtime and one team. A torch on another runtime (LLVM's or Intel's)
    would get a second one beside it; the kernels then start threads of their own instead.
    """
    return ["-fopenmp"] if torch_runs_on_libgomp() else []


def kernel_cache_dir() -> Path:
    """Where compiled kernels live: ``$LTDRNN_CACHE`` or ``$XDG_CACHE_HOME/ltdrnn`` (``~/.cache``)."""
    root = os.environ.get("LTDRNN_CACHE")
    if root:
        return Path(root) / "kernels"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ltdrnn" / "kernels"


def load_torch_ops(cell: str) -> bool:
    """Whether the operators of ``ltdrnn/ops/csrc/<cell>.cpp`` (``torch.ops.ltdrnn.<cell>_*``) are available.

    Built once per machine and torch version (cached on disk), loaded and registered once per process
    (:func:`_load_verified`). Any failure (no C++ compiler, torch headers missing, read-only cache)
    gives one warning and False: callers use their PyTorch path. ``LTDRNN_NO_KERNELS=1`` makes it False.
    """
    if not kernels_enabled():
        return False
    if cell not in _TORCH_OPS:
        try:
            _load_verified(_build(cell))
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
    openmp = openmp_flags()
    compile_flags = [
        *COMPILE_FLAGS,
        *openmp,
        f"-march={_build_arch(compiler)}",
        "-std=c++20",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        *includes,
    ]
    return compiler, compile_flags, [*links, *openmp, "-lc10", "-ltorch_cpu"]


def _sources(cell: str) -> dict[str, bytes]:
    """The files a build of ``csrc/<cell>.cpp`` reads, by name: the file and the :data:`HEADERS`."""
    csrc = resources.files(__package__).joinpath("csrc")  # ltdrnn.ops
    return {name: csrc.joinpath(name).read_bytes() for name in (f"{cell}.cpp", *HEADERS)}


class KernelCacheError(RuntimeError):
    """The kernel cache cannot be trusted (another user could write to it); nothing is built or loaded
    from it."""


def _build(cell: str) -> Path:
    """The shared object of ``csrc/<cell>.cpp``: from the cache when an intact build of the same
    sources, flags, CPU, compiler and torch version is there, else built now.

    Raises :class:`KernelCacheError` before anything is built when the cache directory, or a directory
    above it, could be written by another user (see :func:`check_private_directory`): a library built
    or cached there could be replaced before it is loaded.
    """
    sources = _sources(cell)
    compiler, compile_flags, link_flags = _toolchain()
    parts = [*sources.values(), " ".join(compile_flags), _cpu_signature(), compiler, torch.__version__]
    key = hashlib.sha256(b"\0".join(p if isinstance(p, bytes) else p.encode() for p in parts)).hexdigest()[:16]
    cache = _private_cache()
    for cached in sorted(cache.glob(f"{cell}-{key}-*.so")):
        if _is_intact(cached):
            return cached
    # a private directory (mkdtemp: mode 0700) inside a cache no one else can write to
    with tempfile.TemporaryDirectory(dir=cache, prefix=_BUILD_PREFIX) as work:
        for name, text in sources.items():  # side by side: #include "common.h" finds the header
            (Path(work) / name).write_bytes(text)
        built = Path(work) / f"{cell}.so"
        _compile(compiler, compile_flags, link_flags, Path(work) / f"{cell}.cpp", built)
        target = cache / f"{cell}-{key}-{_digest(built)}.so"
        os.replace(built, target)  # atomic: concurrent builders never see a half-written library
    prune_cache(cache, keep=target)
    return target


def _private_cache() -> Path:
    """The kernel cache directory, made if need be, resolved, and checked by :func:`check_private_directory`."""
    cache = kernel_cache_dir()
    cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    cache = cache.resolve()  # the directories checked are the ones used, whatever links led there
    check_private_directory(cache)
    return cache


def check_private_directory(directory: Path) -> None:
    """Raise :class:`KernelCacheError` unless no other user can change what ``directory`` (a resolved
    path) holds: it belongs to this user and neither its group nor others may write to it, and each
    directory above it belongs to this user or root and is not writable by others unless it is sticky
    (as ``/tmp`` is, where no one may rename another's entry)."""
    me = os.getuid()
    status = directory.stat()
    if status.st_uid != me or status.st_mode & 0o022:
        raise KernelCacheError(
            f"kernel cache {directory} is not private (owner uid {status.st_uid}, mode "
            f"{stat.S_IMODE(status.st_mode):o}; expected owner uid {me} and no write permission for group "
            "or others): a library built there could be replaced before it is loaded. Set LTDRNN_CACHE to a "
            "directory only you can write to, or run chmod go-w on it"
        )
    for parent in directory.parents:
        status = parent.stat()
        sticky = status.st_mode & stat.S_ISVTX
        if status.st_uid not in (me, 0) or (status.st_mode & 0o002 and not sticky):
            raise KernelCacheError(
                f"kernel cache {directory}: the directory above it, {parent}, can be changed by other "
                f"users (owner uid {status.st_uid}, mode {stat.S_IMODE(status.st_mode):o}), who could replace "
                "the cache. Set LTDRNN_CACHE to a directory inside one only you and root control"
            )


#: Name prefixes of the temporary build directories, and of the private directories a library is copied
#: into to be loaded, inside the cache.
_BUILD_PREFIX = "build-"
_LOAD_PREFIX = "load-"
#: Libraries built for other sources, flags or torch versions are removed once unused this long (their
#: modification time is refreshed at every load), as are build directories left by killed builds.
STALE_AFTER_S = 30 * 24 * 3600
ABANDONED_BUILD_AFTER_S = 24 * 3600


def prune_cache(cache: Path, keep: Path) -> None:
    """Remove what the cache holds to no use: libraries that fail :func:`_is_intact` (truncated,
    replaced, or writable by others), libraries of other keys unused for :data:`STALE_AFTER_S`, and
    build directories older than :data:`ABANDONED_BUILD_AFTER_S`. Libraries of other keys that are in
    recent use stay: another environment (another torch) may share the cache."""
    now = time.time()
    for entry in cache.iterdir():
        try:
            age = now - entry.lstat().st_mtime
            temporary = entry.name.startswith((_BUILD_PREFIX, _LOAD_PREFIX, "tmp"))
            if temporary and entry.is_dir() and not entry.is_symlink():
                if age > ABANDONED_BUILD_AFTER_S:
                    shutil.rmtree(entry, ignore_errors=True)
            elif entry.suffix == ".so" and entry != keep and (not _is_intact(entry) or age > STALE_AFTER_S):
                entry.unlink()
        except OSError:  # removed meanwhile by a concurrent builder
            continue


def _compile(compiler: str, compile_flags: list[str], link_flags: list[str], source: Path, target: Path) -> None:
    """Compiles ``source`` and links ``target``; a failure raises with the compiler's own message.

    The compiler keeps its intermediate files (assembly, objects) in the private directory of ``source``,
    not in ``$TMPDIR``: where that is open to others, one of them could swap a file between the compiler's
    steps and have their code built into the library."""
    obj = target.with_suffix(".o")
    env = {**os.environ, "TMPDIR": str(source.parent)}
    for command in (
        [compiler, *compile_flags, "-c", str(source), "-o", str(obj)],
        [compiler, "-shared", str(obj), "-o", str(target), *link_flags],
    ):
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
        if result.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {result.stderr.strip()[:500]}")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _is_intact(path: Path) -> bool:
    """Whether a cached library is the one that was built: its content hash is the one in its name
    (a truncated or replaced file fails), and no other user could have written it (the file belongs to
    this user and is not writable by group or others; the directory is checked by
    :func:`check_private_directory`)."""
    try:
        status = path.lstat()
        if not stat.S_ISREG(status.st_mode) or status.st_uid != os.getuid() or status.st_mode & 0o022:
            return False
        return path.stem.rsplit("-", 1)[-1] == _digest(path)
    except OSError:
        return False


#: Descriptors of the loaded libraries' copies, open for the life of the process as the libraries stay
#: loaded: the dynamic loader knows each by its name ``/proc/self/fd/N``, and would take a later library
#: opened under a reused number for the one it already has.
_LOADED_COPIES: List[int] = []


def _load_verified(path: Path) -> None:
    """Registers the operators of the cached library at ``path``, loading exactly the bytes whose hash
    was checked.

    The library is copied from one open descriptor of it into a fresh directory (mode 0700) inside the
    cache, checked by :func:`check_private_directory` as the cache is, so that no other user can rename
    it or put a file in it (a directory in ``$TMPDIR`` could be renamed away and replaced where that is
    writable by others and not sticky). The copy is hashed through the descriptor it was written with, and
    the dynamic loader opens that same descriptor (``/proc/self/fd/N``), not a path: a file put at the
    copy's path after the hash, even by this user, is never the one loaded. (``torch.ops.load_library``
    would turn that name back into the path and load whatever is there by then.)"""
    check_private_directory(path.parent)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=_LOAD_PREFIX) as private:
        check_private_directory(Path(private))
        fd = _private_copy(path, Path(private) / path.name)
        try:
            if _descriptor_digest(fd) != path.stem.rsplit("-", 1)[-1]:
                raise KernelCacheError(f"{path}: content does not match the hash in its name")
            try:
                ctypes.CDLL(f"/proc/self/fd/{fd}")  # its constructors register the operators
            except OSError as error:
                raise OSError(f"could not load {path}: {error}") from error
        except BaseException:
            os.close(fd)
            raise
        _LOADED_COPIES.append(fd)


def _private_copy(source: Path, copy: Path) -> int:
    """Copies the library ``source`` to the new file ``copy`` through one open descriptor of each, and
    returns the copy's descriptor (read and write, at its end). The source's owner and mode are read
    from the open file: a file of another user, or one others may write to, is refused."""
    flags = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(source, os.O_RDONLY | flags)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or status.st_uid != os.getuid() or status.st_mode & 0o022:
            raise KernelCacheError(f"{source}: not a regular file of this user that only it may write to")
        out = os.open(copy, os.O_RDWR | os.O_CREAT | os.O_EXCL | flags, 0o400)
        try:
            with os.fdopen(os.dup(fd), "rb") as library, os.fdopen(os.dup(out), "wb") as target:
                shutil.copyfileobj(library, target)
        except BaseException:
            os.close(out)
            raise
        os.utime(fd)  # marks it in use for prune_cache
        return out
    finally:
        os.close(fd)


def _descriptor_digest(fd: int) -> str:
    """The :func:`_digest` of the whole file open as ``fd``, read through it."""
    digest, offset = hashlib.sha256(), 0
    while block := os.pread(fd, 1 << 20, offset):
        digest.update(block)
        offset += len(block)
    return digest.hexdigest()[:16]


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
#: Largest batch for which the cells' streaming hook uses the compiled streaming step. Its products
#: are plain loops: at batch 1 they beat BLAS plus op dispatch; at large batch BLAS wins (the measured
#: crossover: docs/architecture.md, "Compiled kernels").
STREAM_MAX_BATCH = 8


def can_stream_in_kernel(x_t, state, dtype: torch.dtype, input_size: int, state_tail: tuple) -> bool:
    """Whether one step of ``x_t (B, d)`` from the tensor ``state (B, *state_tail)`` may use the
    compiled streaming step: no autograd, CPU, the shapes the kernel expects, matching dtypes the kernels
    are built for (:data:`KERNEL_DTYPES`: float16 and bfloat16 layers take the general path), batch at
    most :data:`STREAM_MAX_BATCH`. Anything else takes the cell's general path (which also raises the
    clear errors for bad input)."""
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
        and dtype in KERNEL_DTYPES
    )


class StreamOperands:
    """The weights of one streaming-step call, detached and contiguous, and its integer options; built
    once per parameter change (the cells cache it)."""

    def __init__(self, tensors: Sequence[Tensor], options: Sequence[int] = ()) -> None:
        self.tensors = [t.detach().contiguous() for t in tensors]
        self.options = [int(o) for o in options]
        self.dtype = self.tensors[0].dtype


def run_stream_kernel(cell: str, operands: StreamOperands, x_t: Tensor, state: Tensor) -> List[Tensor] | None:
    """``torch.ops.ltdrnn.<cell>_stream`` on contiguous inputs; its outputs as a list, or None when
    ``x_t`` or ``state`` holds NaN or an infinity: the operator declines those (its sums run in
    another order than the reference's), and the caller's general path gives the reference's values."""
    op = _STREAM_OPS.get(cell) or _STREAM_OPS.setdefault(cell, getattr(torch.ops.ltdrnn, f"{cell}_stream").default)
    try:
        outputs = op(operands.tensors, operands.options, x_t.contiguous(), state.contiguous())
    except NotImplementedError:
        return None
    return list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]


#: ``torch.ops.ltdrnn.<cell>_stream``'s overload, looked up once: per streamed step the lookup costs as much as
#: a small cell's arithmetic
_STREAM_OPS: Dict[str, Any] = {}


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
