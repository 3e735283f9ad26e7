"""Training through int8 weights (``train.qat_steps``): the model the C export stores, tested in PyTorch.

The int8 C export (:mod:`ltdrnn.export.c_fixed`) stores every weight matrix as symmetric per-row int8,
``W[r] ~ s_r * q[r]`` with ``s_r = max_j |W[r, j]| / 127`` and ``q = round(W / s)`` in [-127, 127]. A model
trained in float and rounded only at export disagrees with its C step wherever rounding moves a series
across the decision boundary (lab/2026-11-30-int8-snap: MIST's misses were all of this kind). With
:class:`Int8Matrices` the last steps of a run see the rounded matrices in the forward pass, the gradient
passes straight through the rounding to the float weights (the straight-through estimator), and every
state the run validates, tests and saves is on the int8 grid, so eager PyTorch computes with exactly the
weights the C step holds. Vectors (biases, step sizes) stay float: the export keeps them at int16 or int32
resolution, as it does the activations.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, List

import torch
from torch import nn


def int8_rows(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` (rows, cols) on its symmetric per-row int8 grid, in ``weight``'s dtype.

    ``s_r = max_j |w_rj| / 127`` (1 for a zero row), ``q = clip(round(w / s), -127, 127)``, returned as
    ``q * s`` with ``s`` rounded to float32, as :func:`ltdrnn.export.c_fixed.quantize_rows` computes and
    stores them (float64 arithmetic, ties to even): quantising the result again gives the same ``q`` and ``s``.
    """
    wide = weight.detach().to(torch.float64)
    scale = wide.abs().amax(dim=1, keepdim=True) / 127.0
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    q = torch.clamp(torch.round(wide / scale), -127, 127)
    return (q * scale.to(torch.float32).to(torch.float64)).to(weight.dtype)


class Int8Matrices:
    """The weight matrices (every 2-D parameter) of ``model``, which :meth:`applied` puts on the int8 grid."""

    def __init__(self, model: nn.Module) -> None:
        self.matrices: List[nn.Parameter] = [p for p in model.parameters() if p.dim() == 2]

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """Inside the block the matrices hold their :func:`int8_rows` values, and their float values again
        after it. Gradients computed inside are those at the rounded weights; an optimiser step taken after
        the block applies them to the float weights (the straight-through estimator)."""
        floats = [p.detach().clone() for p in self.matrices]
        with torch.no_grad():
            for p in self.matrices:
                p.copy_(int8_rows(p))
        try:
            yield
        finally:
            with torch.no_grad():
                for p, value in zip(self.matrices, floats):
                    p.copy_(value)
