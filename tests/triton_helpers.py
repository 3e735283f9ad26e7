"""Shared by tests/cells/test_triton_*.py: where the Triton kernels run in the tests, and the comparison of a
cell's ``"triton"`` path with its reference loop (outputs, final state and every gradient).

The kernels run on ``LTDRNN_TEST_DEVICE`` (default ``cpu``). On the CPU they run in Triton's interpreter,
which must be chosen before the first kernel is defined: importing this module sets ``TRITON_INTERPRET=1``
(the cells import their kernel modules lazily, on the first Triton scan). With ``LTDRNN_TEST_DEVICE=cuda``
(benchmarks/gpu_check.sh) the same tests run the compiled kernels on the GPU, in float32.
"""

from __future__ import annotations

import os

DEVICE = os.environ.get("LTDRNN_TEST_DEVICE", "cpu")
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

import ltdrnn  # noqa: E402
from ltdrnn.ops.triton_support import triton_installed, triton_runs_on  # noqa: E402

requires_triton = pytest.mark.skipif(
    not triton_installed(),
    reason="triton is not installed (pip install -e '.[gpu]'): the Triton kernels cannot be run here",
)
#: float64 in the interpreter (the kernels' arithmetic is then exact to rounding); float32 on a GPU, whose
#: compiled kernels use the fast float32 paths
DTYPE = torch.float64 if DEVICE == "cpu" else torch.float32
TOLERANCE = {"atol": 1e-9, "rtol": 1e-7} if DTYPE == torch.float64 else {"atol": 2e-4, "rtol": 2e-3}


def build(name: str, input_size: int = 3, hidden_size: int = 20, seed: int = 0, **options):
    torch.manual_seed(seed)
    return ltdrnn.build(name, input_size, hidden_size, **options).to(device=DEVICE, dtype=DTYPE)


def sequence(cell, steps: int, batch: int, seed: int = 1):
    """Input ``(T, B, d)``, a random initial state (its tensor part, without the time-step counter of
    per-time-step step sizes) and lengths from 1 to T (None for T = 1)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(steps, batch, cell.input_size, generator=generator, dtype=DTYPE).to(DEVICE)
    state = cell.init_state(batch, DEVICE, DTYPE)
    shape = state[0].shape if isinstance(state, tuple) else state.shape
    state = torch.randn(shape, generator=generator, dtype=DTYPE).to(DEVICE) * 0.5
    lengths = None if steps == 1 else torch.randint(1, steps + 1, (batch,), generator=generator)
    if lengths is not None:
        lengths[0] = steps  # the longest runs to the end
    return x, state, lengths


def run(cell, x, state, lengths, backend: str, seed: int = 2):
    """Outputs, final state and the gradients of a random weighting of both wrt x, state and every parameter."""
    cell.zero_grad()
    x = x.detach().clone().requires_grad_()
    state = state.detach().clone().requires_grad_()
    out, final = cell.scan(x, state, lengths, backend=backend)
    generator = torch.Generator().manual_seed(seed)
    w_out = torch.randn(out.shape, generator=generator, dtype=out.dtype).to(out.device)
    w_final = torch.randn(final.shape, generator=generator, dtype=final.dtype).to(final.device)
    ((out * w_out).sum() + (final * w_final).sum()).backward()
    grads = {"x": x.grad, "state": state.grad}
    grads.update({name: p.grad for name, p in cell.named_parameters()})
    return out.detach(), final.detach(), grads


def assert_triton_matches_reference(cell, x, state, lengths, tolerance=None):
    """The triton path equals the reference loop in outputs, final state and every gradient."""
    assert triton_runs_on(x), "the triton path would not run here: the comparison would test the fallback"
    tolerance = tolerance or TOLERANCE
    out, final, grads = run(cell, x, state, lengths, "triton")
    ref_out, ref_final, ref_grads = run(cell, x, state, lengths, "reference")
    torch.testing.assert_close(out, ref_out, **tolerance)
    torch.testing.assert_close(final, ref_final, **tolerance)
    for name, grad in ref_grads.items():
        if grad is None:
            assert grads[name] is None or not grads[name].any(), name
            continue
        assert grads[name] is not None, f"no gradient for {name}"
        torch.testing.assert_close(grads[name], grad, **tolerance, msg=lambda m: f"gradient of {name}: {m}")


def assert_per_time_step_kernel_matches_reference(cell, kernel_module, operator: str, monkeypatch, start: int = 2):
    """A cell with per-time-step step sizes (``max_length`` 9, T = 5, B = 4), each call reading the rows
    ``eta[start : start + T]``: the ``"triton"`` path launches ``kernel_module.<operator>`` once, moves each
    sequence's counter by its length, puts dL/deta on the call's rows alone, and equals the reference loop in
    outputs, final state and every gradient."""
    with torch.no_grad():  # distinct step sizes per row, so a row read at the wrong time step shows
        cell.steps.parameter.mul_(torch.linspace(0.5, 1.5, cell.steps.max_length, dtype=DTYPE, device=DEVICE)[:, None])
    x, h, lengths = sequence(cell, 5, 4)
    calls, real = [], getattr(kernel_module, operator)
    monkeypatch.setattr(kernel_module, operator, lambda *args: calls.append(1) or real(*args))
    results = {}
    for backend in ("triton", "reference"):
        cell.zero_grad()
        x_, h_ = x.clone().requires_grad_(), h.clone().requires_grad_()
        counter = torch.full((4,), start, dtype=torch.int64, device=DEVICE)
        out, (final, moved) = cell.scan(x_, (h_, counter), lengths, backend=backend)
        (out.square().sum() + final.sum()).backward()
        results[backend] = (out, final, moved, x_.grad, h_.grad, *(p.grad for p in cell.parameters()))
    assert calls == [1], "the per-time-step scan did not take the Triton kernel"
    assert torch.equal(results["triton"][2], start + lengths.to(DEVICE))
    eta_grad = results["triton"][5 + [p is cell.steps.parameter for p in cell.parameters()].index(True)]
    rows = slice(start, start + 5)
    assert eta_grad[rows].abs().sum() > 0 and not eta_grad[:start].any() and not eta_grad[start + 5 :].any()
    for got, want in zip(results["triton"], results["reference"]):
        torch.testing.assert_close(got, want, **TOLERANCE)
