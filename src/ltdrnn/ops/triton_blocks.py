"""Triton building blocks of the source cells' kernels: the chunked product of state rows with a matrix,
and the activations (written with ``exp`` and ``where`` so that they behave the same compiled and in the
interpreter, and propagate NaN as PyTorch's do). Imports Triton: only the ``*_triton`` modules import it."""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_support import BLOCK_B, dot_precision, hidden_block, interpreting, k_block, num_warps


def compute_type(dtype):
    """The Triton dtype of a kernel's state and sums: float64 for float64 tensors, else float32."""
    import torch

    return tl.float64 if dtype == torch.float64 else tl.float32


def kernel_state_dtype(state):
    """The torch dtype of a kernel's state buffers for the given state tensor: float64 for a float64 state,
    else float32 (a bf16 or fp16 state is carried in float32 inside the kernels)."""
    import torch

    return torch.float64 if state.dtype == torch.float64 else torch.float32


def launch_options(hidden: int, weight, state_dtype) -> dict:
    """The block sizes, dtypes and launch options of a matrix kernel over hidden size ``hidden`` with
    recurrent weights like ``weight`` and state buffers of ``state_dtype``. ``num_stages=1``: the chunk loop of
    a product is not software-pipelined, so its shared memory stays one chunk of the weights (a (64, HP)
    float32 chunk is 128 KB at HP = 512; three pipeline stages of it would not fit an H100's 228 KB)."""
    padded = hidden_block(hidden)
    return dict(BB=BLOCK_B, HP=padded, BK=k_block(padded), DOT=dot_type(weight.dtype), PREC=dot_precision(weight),
                ACC=compute_type(state_dtype), num_warps=num_warps(padded), num_stages=1)  # fmt: skip


def dot_type(dtype):
    """The Triton dtype of a product's operands, from the weights' torch dtype. Triton's interpreter gets
    half-precision products wrong (3.9: bf16 dots off by orders of magnitude), so there the operands are
    widened to float32: the weights keep their half-precision values, the state is not rounded to them."""
    import torch

    if dtype == torch.float64:
        return tl.float64
    if interpreting():
        return tl.float32
    return {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}.get(dtype, tl.float32)


@triton.jit
def step_size(eta_ptr, t, k, K, PER_STEP: tl.constexpr, ACC: tl.constexpr):
    """``eta[t, k]`` of per-time-step step sizes ``(T, K)``, else the shared ``eta[k]``."""
    if PER_STEP:
        return tl.load(eta_ptr + t * K + k).to(ACC)
    return tl.load(eta_ptr + k).to(ACC)


@triton.jit
def rows_times_matrix(
    src_ptr,
    src_stride,
    rows,
    row_mask,
    K,
    m_ptr,
    stride_k,
    stride_n,
    N,
    BB: tl.constexpr,
    NP: tl.constexpr,
    BK: tl.constexpr,
    DOT: tl.constexpr,
    PREC: tl.constexpr,
    ACC: tl.constexpr,
):
    """``acc[r, n] = sum_k src[rows[r], k] * M[k, n]`` for ``n < N``, ``(BB, NP)`` in ``ACC``.

    ``src`` rows are ``src_stride`` apart (K columns each, read in chunks of BK: the state the previous step
    wrote); ``M[k, n]`` lies at ``m_ptr + k * stride_k + n * stride_n`` (a weight or its transpose)."""
    cols = tl.arange(0, NP)
    col_mask = cols < N
    acc = tl.zeros((BB, NP), dtype=ACC)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        k_mask = ks < K
        a = tl.load(
            src_ptr + rows[:, None] * src_stride + ks[None, :], mask=row_mask[:, None] & k_mask[None, :], other=0.0
        )
        w_mask = k_mask[:, None] & col_mask[None, :]
        w = tl.load(m_ptr + ks[:, None] * stride_k + cols[None, :] * stride_n, mask=w_mask, other=0.0)
        acc = tl.dot(a.to(DOT), w.to(DOT), acc=acc, input_precision=PREC, out_dtype=ACC)
    return acc


@triton.jit
def sequence_lengths(len_ptr, rows, row_mask, T, BB: tl.constexpr, HAS_LENGTHS: tl.constexpr):
    """``(BB,)`` the lengths of this program's rows: read from ``len_ptr``, or all ``T``."""
    if HAS_LENGTHS:
        length = tl.load(len_ptr + rows, mask=row_mask, other=0)
    else:
        length = tl.full((BB,), T, tl.int32)
    return length


@triton.jit
def sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def tanh(x):
    # 2 sigmoid(2x) - 1 written so that large |x| gives exactly +-1 and NaN stays NaN
    return 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0


@triton.jit
def relu(x):
    # where(x < 0, 0, x), not maximum: a NaN input stays NaN, as torch.relu keeps it
    return tl.where(x < 0, 0.0, x)


@triton.jit
def activate(x, ACT: tl.constexpr):
    """relu (0), tanh (1) or sigmoid (2) of ``x`` (:data:`ltdrnn.ops.common.ACTIVATION_CODES`)."""
    if ACT == 0:
        y = relu(x)
    elif ACT == 1:
        y = tanh(x)
    else:
        y = sigmoid(x)
    return y


@triton.jit
def activation_slope(y, ACT: tl.constexpr):
    """The activation's derivative from its output ``y`` (relu: 1 where y > 0, as torch's threshold_backward)."""
    if ACT == 0:
        d = tl.where(y > 0, 1.0, 0.0)
    elif ACT == 1:
        d = 1.0 - y * y
    else:
        d = y * (1.0 - y)
    return d
