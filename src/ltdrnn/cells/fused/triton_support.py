"""What the source cells' Triton kernels share: when the ``"triton"`` path runs, its block sizes, the
precision of its products, and the Triton building blocks every kernel uses.

When it runs (:func:`triton_runs_on`): Triton is installed, compiled kernels are not turned off
(``LTDRNN_NO_KERNELS``), and the tensors are on a CUDA device, or on the CPU with ``TRITON_INTERPRET=1``
(Triton's interpreter: how the tests run every kernel without a GPU). A cell's ``impl="auto"`` takes it for
CUDA tensors (:func:`triton_is_default`); elsewhere ``impl="triton"`` runs the cell's PyTorch loop.

The layout every matrix-recurrent kernel follows (docs/architecture.md, "Triton kernels"):

- one program per block of ``BLOCK_B`` batch rows, all ``H`` units of those rows, running every time step
  (a persistent kernel: one launch per direction);
- the input projection ``P`` is one GEMM in PyTorch before the launch (with PyTorch's autograd on it);
- each step's product of the state with the recurrent weights is ``triton_blocks.rows_times_matrix``: the
  state rows are read back from the ``states`` buffer the step before wrote (a barrier between the two), in
  chunks of :func:`k_block` (64) columns, against the weights, which every step reads again from the on-chip
  L1/L2 caches (up to H = 256 the weights of one cell fit in L2 many times over; above it they are re-read the
  same way, which is the documented fallback: more warps, the same code);
- state, accumulation and every elementwise function in float32 (float64 for float64 tensors); the products
  take the weights' dtype (bf16/fp16 weights: tensor cores), float32 products use TF32 only when
  ``torch.backends.cuda.matmul.allow_tf32`` allows it, as PyTorch's own matmuls do;
- ``lengths`` inside the kernel: a row's steps at or past its length write zeros and pass no gradient.
"""

from __future__ import annotations

import importlib.util
import os

import torch
from torch import Tensor

from ...kernels import kernels_enabled
from ...scan import autocast_dtype

#: Batch rows per program: the smallest M of a tensor-core product.
BLOCK_B = 16
#: Dtypes the kernels read (their inputs may mix them: bf16 projections with a float32 state).
TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


_INSTALLED: list = []  # [bool] once known


def triton_installed() -> bool:
    """Whether the ``triton`` package can be imported (checked once, without importing it)."""
    if not _INSTALLED:
        _INSTALLED.append(importlib.util.find_spec("triton") is not None)
    return _INSTALLED[0]


def interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter (``TRITON_INTERPRET=1``: CPU tensors, no GPU)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def triton_runs_on(x: Tensor) -> bool:
    """Whether the Triton kernels can run on tensors like ``x``: Triton installed, kernels not turned off,
    a floating dtype, and a CUDA tensor (or a CPU tensor under the interpreter)."""
    if x.dtype not in TRITON_DTYPES or not kernels_enabled() or not triton_installed():
        return False
    return x.device.type == "cuda" or (x.device.type == "cpu" and interpreting())


def triton_is_default(x: Tensor) -> bool:
    """Whether a cell's ``impl="auto"`` takes its ``"triton"`` path for ``x``: CUDA tensors only."""
    return x.device.type == "cuda" and triton_runs_on(x)


def hidden_block(hidden: int) -> int:
    """``HP``: the hidden size padded to a power of two of at least 16 (a tensor-core dimension)."""
    return max(16, 1 << (hidden - 1).bit_length())


def k_block(padded: int) -> int:
    """Columns of the state read per chunk of a recurrent product (bounds each product's shared memory)."""
    return min(padded, 64)


def num_warps(padded: int) -> int:
    """Warps per program: more for wider states, so that the ``(BLOCK_B, HP)`` blocks stay in registers."""
    return 4 if padded <= 128 else 8 if padded <= 256 else 16


def dot_precision(weight: Tensor) -> str:
    """``tl.dot``'s input precision for products with ``weight``: TF32 for float32 only where PyTorch's
    own float32 matmuls use it (``torch.backends.cuda.matmul.allow_tf32``), else exact."""
    if weight.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    return "ieee"


def grid(batch: int) -> tuple:
    """One program per block of :data:`BLOCK_B` batch rows."""
    return (-(-batch // BLOCK_B),)


def lengths_operand(lengths: Tensor | None, like: Tensor) -> Tensor:
    """``lengths`` as the kernels read them (int32 on the data's device), or a one-element dummy."""
    if lengths is None:
        return torch.zeros(1, dtype=torch.int32, device=like.device)
    return lengths.to(device=like.device, dtype=torch.int32).contiguous()


def autocast_weight(weight: Tensor, device_type: str) -> Tensor:
    """``weight`` in the autocast dtype when autocast is on for ``device_type`` (the products then run in
    it; the state stays in its own dtype), else unchanged. Differentiable: the gradient comes back in the
    weight's dtype."""
    amp = autocast_dtype(device_type)
    return weight.to(amp) if amp is not None and weight.dtype == torch.float32 else weight
