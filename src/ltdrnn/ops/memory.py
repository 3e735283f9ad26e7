"""Memory of the fast paths and of the process: large work buffers on huge pages, a per-thread pool of
released work buffers, and the glibc malloc tuning the trainer and the benchmark apply."""

from __future__ import annotations

import ctypes
import sys
import threading

import torch
from torch import Tensor

# ---- large work buffers ---------------------------------------------------------------------------
_HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14  # Linux <sys/mman.h>
_MADVISE = []  # [libc.madvise] once resolved, [None] where unavailable


def empty_buffer(shape, like: Tensor) -> Tensor:
    """``torch.empty(shape)`` with the dtype and device of ``like``, for a large work buffer.

    On Linux CPUs the buffer's whole 2 MB pages are marked for transparent huge pages before first
    use (``madvise(MADV_HUGEPAGE)``; a hint the kernel may ignore), so the first write faults 2 MB
    pages in instead of 4 KB ones; whole-sequence scans allocate several such buffers per call
    (measured: lab/notes/srnn-speed.md, "The fast paths in detail").
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

    Reuse spares the page faults of fresh memory (lab/notes/srnn-speed.md). Only for buffers
    that live inside one call and of which no view escapes it: the caller must :func:`release` them.
    """
    count = 1
    for size in shape:
        count *= size
    fitting = [
        i
        for i, b in enumerate(_SCRATCH.free)
        if b.numel() >= count and b.dtype == like.dtype and b.device == like.device
    ]
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
    del _SCRATCH.free[_Scratch.limit :]


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


# ---- the process's allocator ---------------------------------------------------------------------------
# glibc mallopt parameters (malloc.h) and the environment variables that set the same at start-up
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
TRIM_THRESHOLD = 2**31 - 1
MALLOC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}


def tune_malloc() -> bool:
    """Tell glibc to serve large blocks from the heap and never trim it (what the ``MALLOC_*``
    variables do); returns whether it took effect (False off glibc).

    Why: with glibc's defaults every large block is mmap-ed and returned on free, so each training
    step of a long sequence writes its big buffers into fresh zeroed pages (page faults at a few GB/s).
    With the tuning, freed blocks are reused: faster training steps for our cells and more so for
    nn.LSTM/nn.GRU (measured: docs/benchmarks.md, "glibc malloc settings"). The cost: memory freed
    after a peak stays with the process. It changes the whole process and cannot be undone, so callers
    make it optional.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    except (OSError, AttributeError):
        return False
