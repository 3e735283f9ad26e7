"""The check shared by the source cells' compiled streaming steps (``torch.ops.ltdrnn.<cell>_stream``).

``check_streaming_matches_reference`` steps a cell one time step at a time without gradients, both as
the cell itself and through ``Recurrent.step``, and requires the outputs, the final state and any
per-step records to equal the reference scan's; it repeats after scaling every parameter (an optimiser
step), so operands cached by the cell must follow; and it requires the compiled step to have been used
exactly when kernels are on, loaded and the batch is small enough.
"""

from __future__ import annotations

from typing import Callable, Dict

import torch
from torch import Tensor

import ltdrnn
from ltdrnn.ops import kernels

Records = Callable[[torch.nn.Module], Dict[str, Tensor]]


def no_records(cell) -> Dict[str, Tensor]:
    return {}


def check_streaming_matches_reference(
    monkeypatch,
    use_kernels: bool,
    cell,
    x: Tensor,
    state0,
    step_records: Records = no_records,
    expected_records: Records = no_records,
) -> None:
    """``x (T, B, d)``; ``state0`` the initial state (or None). ``step_records(cell)`` is read after
    every streamed step; ``expected_records(cell)`` after the reference scan, each value stacked over
    time (``(T, ...)``)."""
    monkeypatch.setenv("LTDRNN_NO_KERNELS", "" if use_kernels else "1")
    calls = []
    real = kernels.run_stream_kernel
    monkeypatch.setattr(kernels, "run_stream_kernel", lambda *a: calls.append(1) or real(*a))
    layer = ltdrnn.Recurrent(lambda d, h: cell, cell.input_size, cell.hidden_size)
    for _ in range(2):
        expected, expected_final = cell.scan(x, state0, backend="reference")
        expected_by_name = expected_records(cell)
        with torch.no_grad():
            for run in (cell, lambda x_t, s: layer.step(x_t, None if s is None else s[None])):
                state, outputs, records = state0, [], []
                for x_t in x:
                    h, state = run(x_t, state)
                    # the layer's state has a leading layers*directions axis of 1
                    state = state[0] if state.dim() == expected_final.dim() + 1 else state
                    outputs.append(h)
                    records.append(step_records(cell))
                torch.testing.assert_close(torch.stack(outputs), expected.detach())
                torch.testing.assert_close(state, expected_final.detach())
                for name, value in expected_by_name.items():
                    torch.testing.assert_close(
                        torch.stack([r[name] for r in records]),
                        value.detach(),
                        msg=lambda text, name=name: f"{name}: {text}",
                    )
            for p in cell.parameters():  # an optimiser step: the cached operands must follow
                p.mul_(1.1)
    kernel_file = type(cell).__module__.rsplit(".", 1)[-1]  # csrc/<cell>.cpp
    used = use_kernels and x.shape[1] <= kernels.STREAM_MAX_BATCH and kernels.load_torch_ops(kernel_file)
    assert (len(calls) > 0) == bool(used)
