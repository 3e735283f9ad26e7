"""What the source cells' Triton kernels share: when the ``"triton"`` path runs, its block sizes, the
precision of its products, and the Triton building blocks every kernel uses.

When it runs (:func:`triton_runs_on`): Triton is installed, compiled kernels are not turned off
(``LTDRNN_NO_KERNELS``), and the tensors are on a CUDA device, or on the CPU with ``TRITON_INTERPRET=1``
(Triton's interpreter: how the tests run every kernel without a GPU). A cell's ``backend="auto"`` takes it for
CUDA tensors (:func:`triton_is_default`); where it cannot run, ``backend="triton"`` runs the cell's ``"cpp"`` or
``"torch"`` backend (:func:`ltdrnn.ops.resolve`).

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

Every operator checks its operands before it launches (:class:`Operands`), as the C++ operators do: the kernels
read raw pointers with the sizes they are given.
"""

from __future__ import annotations

import importlib.util
import math
import os

import torch
from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

from .common import ACTIVATION_CODES, autocast_dtype
from .kernels import kernels_enabled

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
    """Whether a cell's ``backend="auto"`` takes its ``"triton"`` path for ``x``: CUDA tensors only."""
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


# ---- operand checks ------------------------------------------------------------------------------------
#: Dtypes of the buffers a forward kernel saves for its backward (:func:`triton_blocks.kernel_state_dtype`).
SAVED_DTYPES = (torch.float32, torch.float64)
#: The activations of the kernels' ``ACT`` codes 0, 1, 2, in code order (:data:`ltdrnn.ops.common.ACTIVATION_CODES`).
ACTIVATION_NAMES = tuple(sorted(ACTIVATION_CODES, key=ACTIVATION_CODES.get))
#: lengths tensors whose values were checked (same tensor, unchanged): the backward gets its forward's lengths
#: and need not read a device's lengths back again
_CHECKED_LENGTHS = WeakIdKeyDictionary()


class Operands:
    """The checks of one Triton operator call's operands, as the C++ operators' ``TORCH_CHECK``\\ s make them:
    each raises before any launch, naming the operator, the operand, what it expected and what came. The
    kernels read raw pointers with the sizes they are given, so an operand of another shape, dtype or device
    would be read out of bounds.

    ``lead`` is the operand the sizes come from; every other tensor must be on its device, a CUDA device or the
    CPU under the interpreter (:func:`interpreting`).
    """

    def __init__(
        self, op: str, name: str, lead: Tensor, layout: str, dtypes: tuple = TRITON_DTYPES, contiguous: bool = False
    ) -> None:
        self.op, self.lead = op, name
        dims = layout.strip("()").rstrip(",").count(",") + 1
        if not isinstance(lead, Tensor) or lead.dim() != dims or 0 in lead.shape:
            raise ValueError(f"{op}: {name} must be a non-empty {layout} tensor, got {_described(lead)}")
        if not (lead.is_cuda or (lead.is_cpu and interpreting())):
            raise ValueError(
                f"{op}: {name} must be on a CUDA device (or the CPU with TRITON_INTERPRET=1), got one on {lead.device}"
            )
        self.device = lead.device
        self.kind(name, lead, dtypes, contiguous)

    def tensor(
        self, name: str, t: Tensor, layout: str, shape: tuple, dtypes: tuple = TRITON_DTYPES, contiguous: bool = False
    ) -> None:
        """``t`` of exactly ``shape`` (written ``layout``, e.g. ``"(3H, H)"``; None: any positive size on that axis),
        one of ``dtypes``, on the lead's device, and contiguous where the kernel reads it as it is."""
        if not isinstance(t, Tensor) or not (t.shape == shape or _fits(t.shape, shape)):
            sizes = ", ".join("any" if e is None else str(e) for e in shape) + ("," if len(shape) == 1 else "")
            raise ValueError(f"{self.op}: {name} must be a {layout} = ({sizes}) tensor, got {_described(t)}")
        self.kind(name, t, dtypes, contiguous)

    def kind(self, name: str, t: Tensor, dtypes: tuple = TRITON_DTYPES, contiguous: bool = False) -> None:
        """``t`` one of ``dtypes``, on the lead's device, and contiguous where asked."""
        if t.dtype not in dtypes:
            expected = ", ".join(str(d).replace("torch.", "") for d in dtypes)
            raise TypeError(f"{self.op}: {name} must have dtype {expected}, got {t.dtype}")
        if t.device != self.device:
            raise ValueError(f"{self.op}: {name} must be on {self.device} (where {self.lead} is), got {t.device}")
        if contiguous and not t.is_contiguous():
            raise ValueError(f"{self.op}: {name} must be contiguous (the kernel reads it as laid out)")

    def lengths(self, lengths: Tensor | None, batch: int, steps: int) -> None:
        """None, or ``(B,)`` integers in ``[1, T]`` on the lead's device. The values are read once per tensor and
        T while the tensor is unchanged: the backward gets the forward's lengths, and reading a GPU's values back
        waits for the device."""
        if lengths is None:
            return
        integers = isinstance(lengths, Tensor) and lengths.dtype in (torch.int32, torch.int64)
        if not integers or tuple(lengths.shape) != (batch,):
            raise ValueError(
                f"{self.op}: lengths must be None or an int32/int64 (B,) = ({batch},) tensor, got {_described(lengths)}"
            )
        self.kind("lengths", lengths, (lengths.dtype,), False)
        if _CHECKED_LENGTHS.get(lengths) == (lengths._version, steps):
            return
        lowest, highest = (int(v) for v in torch.aminmax(lengths))
        if lowest < 1 or highest > steps:
            raise ValueError(
                f"{self.op}: lengths must hold values in [1, {steps}] (T), got min {lowest}, max {highest}"
            )
        _CHECKED_LENGTHS[lengths] = (lengths._version, steps)

    def step_sizes(self, eta: Tensor, steps: int, k: int | None = None) -> None:
        """``eta`` ``(K,)`` shared or ``(T, K)`` per time step, ``K >= 1`` (``k``: the K the operator fixes)."""
        if k is None:
            k = eta.shape[-1] if isinstance(eta, Tensor) and eta.dim() in (1, 2) else 0
        if k < 1 or not isinstance(eta, Tensor) or tuple(eta.shape) not in ((k,), (steps, k)):
            sizes = f" = ({k},) or ({steps}, {k})" if k >= 1 else f" with K >= 1 and T = {steps}"
            raise ValueError(
                f"{self.op}: eta must be a (K,) shared or a (T, K) per-time-step tensor{sizes}, got {_described(eta)}"
            )
        self.kind("eta", eta, TRITON_DTYPES, False)

    def activation(self, code: int) -> None:
        codes = range(len(ACTIVATION_NAMES))
        if code not in codes:
            described = ", ".join(f"{i} ({name})" for i, name in enumerate(ACTIVATION_NAMES))
            self.choice("activation", code, codes, described)

    def choice(self, name: str, value, choices, described: str | None = None) -> None:
        """``value`` one of ``choices`` (a code the kernels branch on at compile time)."""
        if value not in choices:
            expected = "one of " + (described or ", ".join(map(repr, choices)))
            raise ValueError(f"{self.op}: {name} must be {expected}, got {value!r}")

    def finite(self, name: str, value) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{self.op}: {name} must be a finite number, got {value!r}")


def _fits(sizes: torch.Size, shape: tuple) -> bool:
    """Whether ``sizes`` are ``shape``, where None stands for any positive size."""
    return len(sizes) == len(shape) and all(n == e or (e is None and n > 0) for n, e in zip(sizes, shape))


def _described(value) -> str:
    if isinstance(value, Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return repr(value)
