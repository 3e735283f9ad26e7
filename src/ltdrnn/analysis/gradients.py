"""How far back the gradient reaches: the quantities of MIST Fig. 2 and iRNN Fig. 3.

Both run the first layer's cell step by step (its reference loop), so they work for every cell, and
need a one-layer, one-direction model (deeper stacks: the first layer is analysed, the rest ignored
would be wrong, so they are refused).
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .. import metrics as M
from ..cells.base import time_slices


def _state_tensors(state) -> List[Tensor]:
    return [state] if isinstance(state, Tensor) else [s for part in state for s in _state_tensors(part)]


def single_cell(model, what: str = "gradient analysis"):
    """The cell of a one-layer, one-direction model: the analyses follow its one state through time (a
    ValueError named ``what`` for another model)."""
    rnn = model.rnn
    if rnn.num_layers != 1 or rnn.bidirectional:
        raise ValueError(
            f"{what}: expected a one-layer, one-direction model, got "
            f"num_layers={rnn.num_layers}, bidirectional={rnn.bidirectional}"
        )
    return rnn.cells[0]


def cell_inputs(model, x: Tensor) -> Tensor:
    """Batch-first model input -> time-major cell input ``(T, B, d)``."""
    if model.embed is not None:
        x = model.embed(x)
    return x.transpose(0, 1)


def gradient_vs_lag(model, batch: Tuple[Tensor, Tensor, Optional[Tensor]], info, chunk: int = 10) -> Tensor:
    """``(T,)``: ``mean_b ||dL_b/dh_{T-tau}||`` for lags ``tau = 0 .. T-1`` (MIST Fig. 2).

    ``L_b`` is the task loss of sequence ``b`` at the last step (terminal tasks: the loss; per-step
    tasks: the loss of the last step). ``h_t`` is the cell's output at step t, and the derivative is
    the full one (MIST's ``d+ l / d h_{t-tau}``): every path from h_t to the loss, through whatever
    state carries it forward (LSTM's next gates, MIST's ring buffer of delayed states). Equal-length
    batches only.

    The sequences go through ``chunk`` at a time (each one's norms do not depend on the others): a
    step of MIST's reference loop allocates a new ``(B, 2^(n_d-1), H)`` history, and the heap keeps
    those blocks' pages once small saved tensors are placed in them, so resident memory grows by the
    history's size every step: 22 GB for 100 pMNIST sequences in float64 at once, 2.4 GB for 10.
    """
    x, y, lengths = batch
    if lengths is not None:
        raise ValueError("gradient_vs_lag: expected an equal-length batch (lengths None)")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"gradient_vs_lag: chunk: expected a positive integer, got {chunk!r}")
    cell = single_cell(model)
    was_training = model.training
    model.eval()
    total = sum(_lag_norms(model, cell, xs, ys, info) for xs, ys in zip(x.split(chunk), y.split(chunk)))
    model.train(was_training)
    return total.flip(0) / x.shape[0]


def _lag_norms(model, cell, x: Tensor, y: Tensor, info) -> Tensor:
    """``(T,)``: ``sum_b ||dL_b/dh_t||`` for t = 1 .. T (float64) over the sequences of ``x``."""
    slices = time_slices(cell.precompute(cell_inputs(model, x)))
    state = cell.init_state(x.shape[0], x.device, x.dtype)
    outputs: List[Tensor] = []
    for p_t in slices:
        h, state = cell.step(p_t, state)
        outputs.append(h)
    target = y if info.target == "terminal" else y[:, -1]
    loss = M.per_sequence_loss(model.output(outputs[-1]), target, dataclasses.replace(info, target="terminal")).sum()
    grads = torch.autograd.grad(loss, outputs, allow_unused=True)
    # Squares in float64: a float32 gradient of 1e-20 would square to 0 and hide a tiny but real norm.
    zero = torch.zeros((), dtype=torch.float64)  # an output no later step reads
    return torch.stack(
        [zero if g is None else (g.detach().double().flatten(1) ** 2).sum(1).sqrt().sum() for g in grads]
    )


def state_jacobian_norm(model, batch: Tuple[Tensor, Tensor, Optional[Tensor]], probes: int = 4, seed: int = 0) -> float:
    """An estimate of ``mean_b ||d state_T / d state_1||_F`` (iRNN Fig. 3).

    ``E_v ||v^T J||^2 = ||J||_F^2`` for ``v ~ N(0, I)``; ``probes`` backward passes give the estimate,
    where the exact norm would need one per state unit. The global RNG is left untouched.
    """
    x, _, _ = batch
    cell = single_cell(model)
    was_training = model.training
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.enable_grad():
        slices = time_slices(cell.precompute(cell_inputs(model, x).detach()))
        state = cell.init_state(x.shape[0], x.device, x.dtype)
        _, state = cell.step(slices[0], state)
        first = [s.detach().requires_grad_(True) for s in _state_tensors(state)]
        state = _rebuild(state, iter(first))
        for p_t in slices[1:]:
            _, state = cell.step(p_t, state)
        last = _state_tensors(state)
        total = torch.zeros(x.shape[0], dtype=torch.float64)
        for _ in range(probes):
            vs = [torch.randn(s.shape, generator=generator, dtype=s.dtype) for s in last]
            grads = torch.autograd.grad(last, first, grad_outputs=vs, retain_graph=True, allow_unused=True)
            total += sum((g.double().flatten(1) ** 2).sum(1) for g in grads if g is not None)
    model.train(was_training)
    return float((total / probes).sqrt().mean())


def _rebuild(state, leaves):
    if isinstance(state, Tensor):
        return next(leaves)
    return tuple(_rebuild(part, leaves) for part in state)
