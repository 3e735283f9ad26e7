"""When the "triton" backend runs: the default for CUDA tensors when Triton runs there, never on the CPU by default;
an explicit backend="triton" where Triton cannot run takes the cell's compiled or PyTorch path; NaN inputs propagate
as in the reference on every source cell's Triton path. On the CPU the kernels run in Triton's interpreter
(tests/triton_helpers.py)."""

from __future__ import annotations

import types

import pytest
import torch

import ltdrnn
from ltdrnn.ops import kernels, triton_support
from triton_helpers import build, requires_triton, sequence

pytestmark = requires_triton
CELLS = {
    "srnn": {"hyper_size": 5},
    "irnn": {"rank": 4},
    "tarnn": {"K": 2, "eta": 0.3},
    "sarnn": {},
    "mist": {"num_delays": 3},
}


@pytest.mark.parametrize("name", sorted(CELLS))
def test_auto_is_triton_on_cuda_tensors_only(name, monkeypatch):
    cell = ltdrnn.build(name, 3, 8)
    on_cuda = types.SimpleNamespace(device=torch.device("cuda"), is_cuda=True, is_cpu=False, dtype=torch.float32)
    on_cpu = torch.zeros(1)
    monkeypatch.setattr(triton_support, "triton_runs_on", lambda x: True)  # as on a machine with a GPU
    assert cell.resolved_backend(like=on_cuda) == "triton"
    assert cell.resolved_backend(like=on_cpu) == ("cpp" if kernels.kernel_runs_on(name, on_cpu) else "torch")
    assert cell.resolved_backend("reference", like=on_cuda) == "reference"  # an explicit choice stays
    monkeypatch.setattr(triton_support, "triton_runs_on", lambda x: False)  # no Triton: the PyTorch loops
    assert cell.resolved_backend(like=on_cuda) == "torch"


def test_cells_without_a_triton_path_keep_their_default_on_cuda(monkeypatch):
    monkeypatch.setattr(triton_support, "triton_runs_on", lambda x: True)
    cell = ltdrnn.build("lstm", 3, 8)
    on_cuda = types.SimpleNamespace(device=torch.device("cuda"), is_cuda=True, is_cpu=False, dtype=torch.float32)
    assert cell.resolved_backend(like=on_cuda) == "torch"


def test_triton_where_triton_cannot_run_takes_the_pytorch_path(monkeypatch):
    cell = build("tarnn", hidden_size=8, K=2)
    x, state, lengths = sequence(cell, 4, 3)
    monkeypatch.setattr(triton_support, "interpreting", lambda: False)
    assert not triton_support.triton_runs_on(x)
    out, final = cell.scan(x, state, lengths, backend="triton")
    ref, ref_final = cell.scan(x, state, lengths, backend="reference")
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(final, ref_final)


@pytest.mark.parametrize("name", sorted(CELLS))
def test_nan_input_propagates_as_in_the_reference(name):
    cell = build(name, hidden_size=16, **CELLS[name])
    x, state, _ = sequence(cell, 4, 3)
    x[1, 0, 0] = float("nan")
    with torch.no_grad():
        out, _ = cell.scan(x, state, backend="triton")
        ref, _ = cell.scan(x, state, backend="reference")
    assert torch.equal(out.isnan(), ref.isnan()) and out[1, 0].isnan().any()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tarnn", "mist"])
def test_the_layer_with_a_packed_sequence_both_directions_equals_the_reference(name):
    from torch.nn.utils.rnn import pack_padded_sequence

    from triton_helpers import DEVICE, DTYPE, TOLERANCE

    results = []
    for backend in ("triton", "reference"):
        torch.manual_seed(0)
        rnn = ltdrnn.Recurrent(name, 3, 16, num_layers=2, bidirectional=True, backend=backend, **CELLS[name])
        rnn = rnn.to(device=DEVICE, dtype=DTYPE)
        torch.manual_seed(1)
        x = torch.randn(4, 6, 3, dtype=DTYPE, device=DEVICE, requires_grad=True)
        packed = pack_padded_sequence(x, torch.tensor([6, 2, 5, 1]), batch_first=True, enforce_sorted=False)
        out, final = rnn(packed)
        loss = out.data.square().sum() + final.square().sum()
        grads = torch.autograd.grad(loss, [x, *rnn.parameters()])
        results.append((out.data.detach(), final.detach(), grads))
    (out, final, grads), (ref, ref_final, ref_grads) = results
    torch.testing.assert_close(out, ref, **TOLERANCE)
    torch.testing.assert_close(final, ref_final, **TOLERANCE)
    for grad, ref_grad in zip(grads, ref_grads):
        torch.testing.assert_close(grad, ref_grad, **TOLERANCE)
