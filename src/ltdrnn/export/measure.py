"""Parity and cost of an exported step: outputs against eager PyTorch over a task split, and latencies.

Every exported format is driven the same way: a step function ``(x_t (B, d), state (B, S)) -> (y (B, o),
state)`` on float32 numpy arrays, run over each test sequence up to its true length
(:func:`~ltdrnn.export.step.run_sequences`), against ``model(x, lengths)`` in eager PyTorch.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from copy import deepcopy
from typing import Callable, Dict, Iterator, Optional

import numpy as np
import torch
from torch import nn

from .step import StreamingStep, run_sequences

StepFunction = Callable[[np.ndarray, np.ndarray], tuple]


def as_numpy(value) -> np.ndarray:
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def parity(
    model: nn.Module,
    step: StreamingStep,
    run: StepFunction,
    task,
    split: str = "test",
    batch_size: int = 256,
    init: Optional[Callable[[int], np.ndarray]] = None,
) -> Dict[str, Optional[float]]:
    """Max absolute output error and, for a classifier, prediction agreement and accuracies.

    Returns ``{"sequences", "max_abs_error", "output_scale", "max_rel_error", "max_abs_error_vs_reference",
    "eager_rounding_error", "agreement", "accuracy_eager", "accuracy_export", "accuracy_delta"}``:
    ``output_scale`` is the largest ``|y|`` of eager PyTorch over the split and ``max_rel_error =
    max_abs_error / output_scale``. Two figures tell an export defect from float32 rounding:
    ``max_abs_error_vs_reference`` compares with eager PyTorch on every cell's reference path (the
    ``cell.step`` loop the export is built from; the default path may be a fused one that sums in another
    order), and ``eager_rounding_error`` is how far eager float32 itself is from the same model in float64
    (the rounding any float32 implementation has; it grows with the outputs and the sequence length).
    The last four are None for a regressor (no class predictions). Agreement and accuracies are
    fractions in [0, 1]; ``accuracy_delta = accuracy_export - accuracy_eager``. ``init(B)`` gives the
    exported step's initial state (default: the step's own, float32; the integer C step has its own).
    """
    dataset = task.dataset(split)
    eager, reference, exact, exported, labels = [], [], [], [], []
    model.eval()
    reference_model = on_reference_path(model)
    exact_model = on_reference_path(model).double()
    wrapped = _numpy_step(run)
    for start in range(0, len(dataset), batch_size):
        x, y, lengths = task.collate([dataset[i] for i in range(start, min(start + batch_size, len(dataset)))])
        with torch.no_grad():
            eager.append(as_numpy(model(x, lengths)))
            reference.append(as_numpy(reference_model(x, lengths)))
            exact.append(as_numpy(exact_model(x.double(), lengths)))
        state = init(x.shape[0]) if init is not None else as_numpy(step.init_state(x.shape[0])).astype(np.float32)
        exported.append(
            run_sequences(wrapped, state, as_numpy(x).astype(np.float32), None if lengths is None else lengths.tolist())
        )
        labels.append(as_numpy(y))
    eager, exported, labels = np.concatenate(eager), np.concatenate(exported), np.concatenate(labels)
    error, scale = float(np.abs(eager - exported).max()), float(np.abs(eager).max())
    result = {
        "sequences": int(len(eager)),
        "max_abs_error": error,
        "output_scale": scale,
        "max_rel_error": error / scale if scale > 0 else error,
        "max_abs_error_vs_reference": float(np.abs(np.concatenate(reference) - exported).max()),
        "eager_rounding_error": float(np.abs(np.concatenate(exact) - eager).max()),
        "agreement": None,
        "accuracy_eager": None,
        "accuracy_export": None,
        "accuracy_delta": None,
    }
    if task.info.loss == "cross_entropy":
        predicted_eager, predicted_export = eager.argmax(-1), exported.argmax(-1)
        result["agreement"] = float((predicted_eager == predicted_export).mean())
        result["accuracy_eager"] = float((predicted_eager == labels).mean())
        result["accuracy_export"] = float((predicted_export == labels).mean())
        result["accuracy_delta"] = result["accuracy_export"] - result["accuracy_eager"]
    return result


def on_reference_path(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose cells all scan with their reference loop (``backend="reference"``)."""
    copy = deepcopy(model).eval()
    for cell in copy.rnn.cells:
        cell.backend = "reference"
    return copy


def _numpy_step(run: StepFunction) -> StepFunction:
    def step(x_t, state):
        y, state = run(x_t, state)
        return as_numpy(y), as_numpy(state)

    return step


def per_call_us(call: Callable[[], object], steps: int, repeats: int = 3) -> float:
    """CPU microseconds per call: the best of ``repeats`` timed loops of ``steps`` calls, after a warm-up.

    The clock is the calling thread's CPU time (as the C benchmark's), so time spent waiting for a core
    on a shared machine is not counted; with one torch thread all the step's work runs in this thread.
    """
    for _ in range(max(1, steps // 10)):
        call()
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        for _ in range(steps):
            call()
        best = min(best, (time.thread_time() - start) / steps)
    return best * 1e6


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch on one thread inside the block (a streaming step's latency, as the C step runs), its thread
    count restored after it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def torch_step_latencies(model: nn.Module, steps: int) -> Dict[str, float]:
    """Per-step microseconds at batch 1 on one thread, no autograd: the model's ``Recurrent.step``
    (streaming, each cell's default fast path) and ``nn.LSTMCell`` of the same input and hidden size."""
    with one_torch_thread():
        rnn = model.rnn
        x = torch.randn(1, rnn.input_size)
        lstm = nn.LSTMCell(rnn.input_size, rnn.hidden_size).eval()
        with torch.no_grad():
            state = [rnn.init_state(1)]
            lstm_state = [(torch.zeros(1, rnn.hidden_size), torch.zeros(1, rnn.hidden_size))]

            def recurrent_step():
                state[0] = rnn.step(x, state[0])[1]

            def lstm_step():
                lstm_state[0] = lstm(x, lstm_state[0])

            return {
                "torch_recurrent_step": per_call_us(recurrent_step, steps),
                "torch_lstmcell": per_call_us(lstm_step, steps),
            }


def runner_latency_us(run: StepFunction, step: StreamingStep, steps: int) -> float:
    """Per-step microseconds of an exported step function at batch 1 (its runtime's own overhead included)."""
    x = np.zeros((1, step.input_size), dtype=np.float32)
    state = [as_numpy(step.init_state(1)).astype(np.float32)]

    def call():
        state[0] = run(x, state[0])[1]

    with one_torch_thread():
        return per_call_us(call, steps)
