"""The source cells' Triton paths in mixed precision: under torch.autocast (bf16) with float32 parameters the
products take bf16 and the state stays float32; a bf16 model keeps a float32 state inside the kernels. Both are
compared with the float32 reference loop to bf16's precision. On the CPU they run in Triton's interpreter, which
widens half-precision products to float32 (tests/triton_helpers.py)."""

from __future__ import annotations

import pytest
import torch

import ltdrnn
from triton_helpers import DEVICE, requires_triton

pytestmark = requires_triton
CELLS = {
    "srnn": {"hyper_size": 5},
    "irnn": {"rank": 4},
    "tarnn": {"K": 2, "eta": 0.3},
    "sarnn": {"slope": 2.0, "anneal_slope": False},
    "mist": {"num_delays": 3},
}
BF16 = {"atol": 3e-2, "rtol": 3e-2}


def build(name):
    torch.manual_seed(0)
    cell = ltdrnn.build(name, 3, 20, **CELLS[name]).to(DEVICE)
    if name == "sarnn":  # decisions far from the threshold, so that bf16 rounding flips none of them
        with torch.no_grad():
            cell.coord_bias.copy_(torch.tensor([2.0, -2.0]).repeat(10))
            cell.coord_weight_ih.mul_(0.1)
            cell.coord_weight_hh.mul_(0.1)
    return cell


def run(cell, x, lengths, backend, amp):
    cell.zero_grad()
    with torch.autocast(DEVICE, torch.bfloat16, enabled=amp):
        out, final = cell.scan(x, lengths=lengths, backend=backend)
    (out.float().square().sum() + final.float().sum()).backward()
    return out, final, [p.grad for p in cell.parameters()]


@pytest.mark.parametrize("name", sorted(CELLS))
def test_autocast_keeps_a_float32_state_and_agrees_with_the_reference(name):
    cell = build(name)
    x = torch.randn(6, 5, 3, device=DEVICE)
    lengths = torch.tensor([6, 2, 5, 6, 1])
    out, final, grads = run(cell, x, lengths, "triton", amp=True)
    ref, ref_final, ref_grads = run(cell, x, lengths, "reference", amp=False)
    assert out.dtype == final.dtype == torch.float32
    assert all(g.dtype == torch.float32 for g in grads)
    torch.testing.assert_close(out, ref, **BF16)
    torch.testing.assert_close(final, ref_final, **BF16)
    for grad, ref_grad in zip(grads, ref_grads):
        scale = ref_grad.abs().max().clamp_min(1)  # bf16 products: compare relative to the gradient's size
        torch.testing.assert_close(grad / scale, ref_grad / scale, **BF16)


@pytest.mark.parametrize("name", sorted(CELLS))
def test_a_bf16_model_runs_with_a_float32_state_inside_the_kernel(name):
    cell = build(name).bfloat16()
    x = torch.randn(6, 4, 3, device=DEVICE).bfloat16()
    with torch.no_grad():
        out, final = cell.scan(x, backend="triton")
        wide = build(name)
        wide.load_state_dict({k: v.float() if torch.is_tensor(v) else v for k, v in cell.state_dict().items()})
        ref, ref_final = wide.scan(x.float(), backend="reference")
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, **BF16)
    torch.testing.assert_close(final.float(), ref_final, **BF16)
