"""Everything that computes a source cell fast: one vocabulary of backends and one resolver.

Shapes use the legend of :mod:`ltdrnn.cells.base`. The backends (:data:`BACKENDS`) mean the same for
every cell:

- ``"reference"``: the plain loop over the cell's ``step`` (``Cell.scan_reference``), obviously correct;
- ``"torch"``: the cell's hand-written forward and backward over the whole sequence in PyTorch operations
  (``ops/<cell>_torch.py``);
- ``"cpp"``: the same time loops compiled from ``ops/csrc/<cell>.cpp`` (CPU tensors in float32/64, built
  on first use by :mod:`ltdrnn.ops.kernels`);
- ``"triton"``: the time loops as Triton kernels (``ops/<cell>_triton.py``: CUDA tensors, or CPU tensors
  under ``TRITON_INTERPRET=1``).

A cell lists the backends it offers in ``Cell.backends`` (a few cells add named variants of their own,
such as SRNN's ``"closed_form"``; those run as named). ``"auto"``, every cell's default, and an explicit
backend that cannot run on the given tensors are resolved by :func:`resolve`, the one dispatch point:
the fastest offered backend at or after the one asked for in :data:`FALLBACK` (``triton``, ``cpp``,
``torch``, ``reference``) that runs here. So ``"auto"`` takes ``"triton"`` for CUDA tensors where Triton
runs, ``"cpp"`` where the compiled kernels build for the tensor, else ``"torch"``; an explicit
``"triton"`` on a machine without Triton runs ``"cpp"`` or ``"torch"``, an explicit ``"cpp"`` without a
C++ compiler (one RuntimeWarning per cell and process, from :func:`~ltdrnn.ops.kernels.load_torch_ops`)
or on a GPU tensor runs ``"torch"``. Nothing falls back silently past ``"torch"``: ``"reference"`` runs only
when asked for, or for a cell that offers nothing faster.

Per source cell, ``ops/<cell>.py`` holds its public operands (the tensors and codes every fast path and
the export read), ``scan`` and ``stream``; ``<cell>_torch.py`` and ``<cell>_triton.py`` beside it hold the
backends. Besides: ``kernels.py`` builds and loads the compiled loops of ``csrc/``; ``triton_support.py`` and
``triton_blocks.py`` hold what the Triton kernels share; ``common.py`` what every fast path shares (activation
codes, operand caches, the final state at each length, autocast); ``memory.py`` work buffers. Nothing here
imports :mod:`ltdrnn.cells`: a ``scan`` or ``stream`` reads the cell it is given through its public methods.
"""

from __future__ import annotations

from typing import Sequence

from torch import Tensor

from . import kernels, triton_support
from .kernels import KERNEL_DTYPES

BACKENDS = ("reference", "torch", "cpp", "triton")
#: The order ``"auto"`` tries the backends in, fastest first; an explicit backend that cannot run here falls
#: back along it.
FALLBACK = ("triton", "cpp", "torch", "reference")


def resolve(backend: str, like: Tensor, offered: Sequence[str] = BACKENDS, kernel: str | None = None) -> str:
    """The backend that runs for tensors like ``like``.

    ``backend`` is ``"auto"`` or one of ``offered`` (a cell's backends; ValueError naming ``backend``
    otherwise); ``kernel`` names the cell's ``csrc/<kernel>.cpp`` (None: the cell has no compiled loops).
    Returns the first of :data:`FALLBACK`, from ``backend`` on (from the start for ``"auto"``), that the cell
    offers and that runs on ``like``: ``"triton"`` where :func:`~ltdrnn.ops.triton_support.triton_runs_on`
    (for ``"auto"``: CUDA tensors only), ``"cpp"`` on CPU tensors in float32/64 where the operators load
    (:func:`~ltdrnn.ops.kernels.load_torch_ops`), ``"torch"`` and ``"reference"`` anywhere. A cell's own
    variant (not in :data:`FALLBACK`) is returned as it is. Called once per scan and per streamed step, so
    it reads the device through ``is_cuda``/``is_cpu`` (a few times cheaper than ``device.type``).
    """
    auto = backend == "auto"
    if auto:
        start = 0
    elif backend in offered:
        start = _POSITION.get(backend)
        if start is None:
            return backend
    else:
        choices = ", ".join(map(repr, ("auto", *offered)))
        raise ValueError(f"backend: expected one of {choices}, got {backend!r}")
    for name in FALLBACK[start:]:
        if name not in offered:
            continue
        if name == "triton":
            runs = (like.is_cuda or not auto) and triton_support.triton_runs_on(like)
        elif name == "cpp":
            runs = kernel is not None and like.is_cpu and like.dtype in KERNEL_DTYPES and kernels.load_torch_ops(kernel)
        else:
            runs = True
        if runs:
            return name
    return "reference"


_POSITION = {name: index for index, name in enumerate(FALLBACK)}
