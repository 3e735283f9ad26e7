"""``torch.export`` of the streaming step, and of the whole sequence through torch's scan operator.

Files: ``NAME.pt2`` (the step, batch dynamic) and ``NAME.sequence.pt2`` (``x (1, T, d), state (1, S) ->
(y (1, T, o), state)`` with the length ``T >= 2`` dynamic). Both load with ``torch.export.load(path).module()``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Tuple

import torch
from torch import Tensor, nn

from .step import ExportError, StreamingStep


class ScannedSequence(nn.Module):
    """The step run over a whole sequence by ``torch._higher_order_ops.scan`` (one traced loop body).

    ``forward(x (B, T, d), state (B, S)) -> (y (B, T, o), final state (B, S))``, equal to calling the
    step T times.
    """

    def __init__(self, step: StreamingStep) -> None:
        super().__init__()
        self.step = step

    def forward(self, x: Tensor, state: Tensor) -> Tuple[Tensor, Tensor]:
        from torch._higher_order_ops.scan import scan

        def body(carry: Tensor, x_t: Tensor):
            y_t, carry = self.step(x_t, carry)
            return carry, y_t

        final, ys = scan(body, state, x.transpose(0, 1))
        return ys.transpose(0, 1), final


def export_step(step: StreamingStep) -> torch.export.ExportedProgram:
    """The step as an ExportedProgram with a dynamic batch."""
    batch = torch.export.Dim("batch")
    example = (torch.zeros(2, step.input_size), step.init_state(2))
    return torch.export.export(step, example, dynamic_shapes={"x_t": {0: batch}, "state": {0: batch}})


def export_sequence(step: StreamingStep) -> torch.export.ExportedProgram:
    """The whole sequence at batch 1 with a dynamic length ``T >= 2``.

    The batch is fixed: inside scan's loop body torch.export (2.13) specialises the batch size.
    Length 1 is the step program's job (torch specialises a dimension seen as 1).
    """
    length = torch.export.Dim("length", min=2)
    example = (torch.zeros(1, 3, step.input_size), step.init_state(1))
    return torch.export.export(
        ScannedSequence(step), example, dynamic_shapes={"x": {0: None, 1: length}, "state": None}
    )


def write(step: StreamingStep, out: Path, name: str, int8: bool) -> dict:
    """Write ``NAME.pt2`` and, where torch can trace it, ``NAME.sequence.pt2``.

    Returns ``{"files": [...], "step": callable (x_t, state) -> (y, state), "notes": [...]}``.
    """
    if int8:
        raise ExportError(
            "--int8: not supported for the pt2 format (torch.export keeps the float weights); "
            "use --format onnx --int8 or --format c --int8"
        )
    program = export_step(step)
    path = out / f"{name}.pt2"
    torch.export.save(program, path)
    files, notes = [path], []
    try:
        sequence = export_sequence(step)
    except Exception as error:  # torch.export's own limits: report them, keep the step
        notes.append(
            f"sequence: torch.export of the scan loop failed ({type(error).__name__}: "
            f"{str(error).splitlines()[0][:200]}); only the step was exported"
        )
    else:
        torch.export.save(sequence, out / f"{name}.sequence.pt2")
        files.append(out / f"{name}.sequence.pt2")
        notes.append("sequence: batch 1, dynamic length T >= 2 (torch.export specialises the batch inside scan)")
    loaded = torch.export.load(path).module()

    def run_step(x_t, state):
        with torch.no_grad():
            return loaded(torch.as_tensor(x_t), torch.as_tensor(state))

    return {"files": files, "step": run_step, "notes": notes}
