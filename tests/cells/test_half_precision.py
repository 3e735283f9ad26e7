"""Layers in float16 and bfloat16, which the reference supports, stream and
scan on every path; the compiled steps, built for float32 and float64 only, are left to the general
path instead of being called with a dtype they refuse (``tarnn_stream: x must be float32 or float64``)."""

import pytest
import torch

import ltdrnn
from ltdrnn.cells.registry import build
from ltdrnn.ops.kernels import can_stream_in_kernel

D, H = 3, 16
SOURCE = ["tarnn", "srnn", "mist", "irnn", "sarnn"]
TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("name", SOURCE)
def test_a_half_precision_layer_streams_as_its_reference(name, batch, dtype):
    torch.manual_seed(0)
    layer = ltdrnn.Recurrent(name, D, H, dtype=dtype)
    x = torch.randn(batch, 3, D, dtype=dtype, generator=torch.Generator().manual_seed(1))
    expected, _ = layer.cells[0].scan(x.transpose(0, 1), backend="reference")
    with torch.no_grad():
        state, streamed = None, []
        for t in range(3):
            out, state = layer.step(x[:, t], state)
            streamed.append(out)
    tolerance = TOLERANCE[dtype]
    torch.testing.assert_close(torch.stack(streamed), expected.detach(), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", SOURCE)
def test_every_backend_scans_a_half_precision_sequence_as_the_reference(name, dtype):
    torch.manual_seed(0)
    cell = build(name, D, H, dtype=dtype)
    x = torch.randn(4, 2, D, dtype=dtype, generator=torch.Generator().manual_seed(1))
    expected, _ = cell.scan(x, backend="reference")
    # "triton" keeps a float32 state with half-precision products (more exact than this reference):
    # tests/cells/test_triton_autocast.py holds it to a float32 reference
    for backend in [i for i in cell.backends[1:] if i != "triton"]:
        out, _ = cell.scan(x, backend=backend)
        torch.testing.assert_close(out, expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype], msg=backend)


def test_the_compiled_step_is_asked_only_for_the_dtypes_it_is_built_for():
    with torch.no_grad():
        for dtype, expected in [(torch.float32, True), (torch.float64, True), (torch.float16, False)]:
            x, state = torch.zeros(1, D, dtype=dtype), torch.zeros(1, H, dtype=dtype)
            assert can_stream_in_kernel(x, state, dtype, D, (H,)) is expected
