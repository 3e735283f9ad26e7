"""When the "triton" impl runs: the default for CUDA tensors when Triton runs there, never on the CPU by default;
an explicit impl="triton" where Triton cannot run takes the cell's PyTorch path; NaN inputs propagate as in the
reference on every source cell's Triton path. On the CPU the kernels run in Triton's interpreter
(tests/triton_helpers.py)."""

from __future__ import annotations

import types

import pytest
import torch

import ltdrnn
from ltdrnn.cells.fused import triton_support
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
    on_cuda = types.SimpleNamespace(device=torch.device("cuda"))
    monkeypatch.setattr(triton_support, "triton_is_default", lambda x: True)
    assert cell.resolved_impl(like=on_cuda) == "triton"
    assert cell.resolved_impl(like=torch.zeros(1)) == cell.default_impl != "triton"
    assert cell.resolved_impl("reference", like=on_cuda) == "reference"  # an explicit choice stays
    monkeypatch.setattr(triton_support, "triton_is_default", lambda x: False)  # no Triton: the usual default
    assert cell.resolved_impl(like=on_cuda) == cell.default_impl


def test_cells_without_a_triton_path_keep_their_default_on_cuda(monkeypatch):
    monkeypatch.setattr(triton_support, "triton_is_default", lambda x: True)
    cell = ltdrnn.build("lstm", 3, 8)
    assert cell.resolved_impl(like=types.SimpleNamespace(device=torch.device("cuda"))) == cell.default_impl


def test_triton_where_triton_cannot_run_takes_the_pytorch_path(monkeypatch):
    cell = build("tarnn", hidden_size=8, K=2)
    x, state, lengths = sequence(cell, 4, 3)
    monkeypatch.setattr(triton_support, "interpreting", lambda: False)
    assert not triton_support.triton_runs_on(x)
    out, final = cell.scan(x, state, lengths, impl="triton")
    ref, ref_final = cell.scan(x, state, lengths, impl="reference")
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(final, ref_final)


@pytest.mark.parametrize("name", sorted(CELLS))
def test_nan_input_propagates_as_in_the_reference(name):
    cell = build(name, hidden_size=16, **CELLS[name])
    x, state, _ = sequence(cell, 4, 3)
    x[1, 0, 0] = float("nan")
    with torch.no_grad():
        out, _ = cell.scan(x, state, impl="triton")
        ref, _ = cell.scan(x, state, impl="reference")
    assert torch.equal(out.isnan(), ref.isnan()) and out[1, 0].isnan().any()
