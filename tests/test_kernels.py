"""The compiled operators' calling convention (src/ltdrnn/ops/csrc/common.h): a streaming step takes its
weights as a tensor list, its flags as an int list, and checks every operand before reading it, so a
malformed call is a RuntimeError that names the operator and the argument, never a stray read."""

import shutil

import pytest
import torch

from ltdrnn.cells.mist import MISTCell
from ltdrnn.cells.sarnn import SARNN
from ltdrnn.cells.srnn import SRNNCell
from ltdrnn.cells.tarnn import TARNN
from ltdrnn.ops import kernels
from ltdrnn.ops import mist as mist_ops
from ltdrnn.ops import sarnn as sarnn_ops
from ltdrnn.ops import srnn as srnn_ops
from ltdrnn.ops import tarnn as tarnn_ops

CELLS = {"srnn": SRNNCell, "mist": MISTCell, "sarnn": SARNN, "tarnn": TARNN}
#: the cells whose streaming operands come from their front in ops/
FRONTS = {"mist": mist_ops, "sarnn": sarnn_ops, "srnn": srnn_ops, "tarnn": tarnn_ops}


def stream_call(name):
    """``(operator, weights, options, x, state)`` of a well-formed streaming step of cell ``name``."""
    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("no C++ compiler on this machine")
    if not kernels.load_torch_ops(name):
        pytest.skip(f"kernels off (LTDRNN_NO_KERNELS) or csrc/{name}.cpp does not build here")
    torch.manual_seed(0)
    cell = CELLS[name](3, 8)
    operands = FRONTS[name].stream_operands(cell) if name in FRONTS else cell._stream_operands()
    x, state = torch.randn(2, 3), torch.randn(*cell.init_state(2).shape)
    return getattr(torch.ops.ltdrnn, f"{name}_stream"), operands.tensors, operands.options, x, state


@pytest.mark.parametrize("name", sorted(CELLS))
def test_a_malformed_streaming_call_is_a_clear_error(name):
    op, weights, options, x, state = stream_call(name)
    op(weights, options, x, state)  # well-formed: runs, so each failure below is its one defect
    cases = [
        (weights[:-1], options, x, state, "weights"),
        ([weights[0][:, :-1].contiguous(), *weights[1:]], options, x, state, "must be a contiguous"),
        ([weights[0].double(), *weights[1:]], options, x, state, "dtype Float"),
        (weights, options, x.double(), state, "state must be a CPU tensor of dtype Double"),
        (weights, options, x.t(), state, "x must be a contiguous"),
        (weights, options, x[:, :2].contiguous(), state, "must be a contiguous"),
        (weights, options, x, state[:1], "state must be"),
        (weights, [*options, 0], x, state, "options"),
    ]
    for bad_weights, bad_options, bad_x, bad_state, message in cases:
        with pytest.raises(RuntimeError, match=f"{name}_stream: .*{message}"):
            op(bad_weights, bad_options, bad_x, bad_state)


def test_the_scan_operators_check_the_step_and_the_history_they_index():
    if not (kernels.load_torch_ops("mist") and kernels.load_torch_ops("srnn")):
        pytest.skip("kernels off (LTDRNN_NO_KERNELS) or csrc/mist.cpp or srnn.cpp does not build here")
    T, B, H, nd = 3, 2, 4, 3  # delays 1, 2, 4: four rows of history
    gates, states, rm = torch.zeros(T, B, nd + H), torch.zeros(4 + T, B, H), torch.zeros(T, B, H)
    w_hh, w_mix = torch.zeros(nd + H, H), torch.zeros(H, H)
    x, w_ih, bias, outside = torch.zeros(T, B, 2), torch.zeros(nd + 2 * H, 2), torch.zeros(nd + 2 * H), rm * 0
    inputs = (x, w_ih, bias, torch.zeros(4, B, H).transpose(0, 1))  # the history in any strides
    forward = torch.ops.ltdrnn.mist_forward
    forward(gates, states, rm, w_hh, w_mix, *inputs)
    with pytest.raises(RuntimeError, match="mist_forward: 3 delays need a history of at least"):
        forward(gates, states[1:], rm, w_hh, w_mix, *inputs)
    with pytest.raises(RuntimeError, match="mist_forward: w_hh must be a contiguous"):
        forward(gates, states, rm, w_hh[:, :2], w_mix, *inputs)
    with pytest.raises(RuntimeError, match="mist_forward: w_mix must be a CPU tensor of dtype Float"):
        forward(gates, states, rm, w_hh, w_mix.double(), *inputs)
    with pytest.raises(RuntimeError, match="mist_forward: bias must be a contiguous"):
        forward(gates, states, rm, w_hh, w_mix, x, w_ih, bias[1:], inputs[-1])
    with pytest.raises(RuntimeError, match="mist_forward: history0 must be a"):
        forward(gates, states, rm, w_hh, w_mix, x, w_ih, bias, torch.zeros(B, 3, H))
    backward = torch.ops.ltdrnn.mist_backward
    results = [torch.zeros(B, 4, H), torch.zeros_like(w_ih), torch.zeros(nd + 2 * H), torch.zeros_like(w_hh), w_mix * 0]
    scan = (gates, states, rm, w_hh, w_mix, x, w_ih)
    backward(*scan, outside, torch.zeros_like(states), torch.zeros_like(x), *results)
    backward(*scan, outside, torch.zeros_like(states), None, *results)  # no d_x: x needs no gradient
    with pytest.raises(RuntimeError, match="mist_backward: d_outside must be \\(R, B, H\\) with R <= N \\+ T"):
        backward(*scan, torch.zeros(5 + T, B, H), torch.zeros_like(states), None, *results)
    with pytest.raises(RuntimeError, match="mist_backward: d_x must be a contiguous"):
        backward(*scan, outside, torch.zeros_like(states), x[:, :, :1], *results)
    with pytest.raises(RuntimeError, match="mist_backward: w_ih must be a contiguous"):
        backward(*scan[:-1], w_ih[:, :1], outside, torch.zeros_like(states), None, *results)
    with pytest.raises(RuntimeError, match="mist_backward: d_w_mix must be a CPU tensor of dtype Float"):
        backward(*scan, outside, torch.zeros_like(states), None, *results[:-1], w_mix.double())
    f, b_f, h0, h = torch.zeros(T, B, H), torch.zeros(H), torch.zeros(B, H), torch.zeros(T, B, H)
    x, w_g = torch.zeros(T, B, 2), torch.zeros(H, 2)
    scan = torch.ops.ltdrnn.srnn_forward
    scan(f, b_f, None, b_f, x, w_g, h0, True, h)
    with pytest.raises(RuntimeError, match="srnn_forward: give the gate's logits g or x and w_g, not both"):
        scan(f, b_f, f, b_f, x, w_g, h0, True, h)
    with pytest.raises(RuntimeError, match="srnn_forward: the gate needs b_g"):
        scan(f, b_f, f, None, None, None, h0, True, h)
    with pytest.raises(RuntimeError, match="srnn_forward: h must be a contiguous"):
        scan(f, b_f, None, None, None, None, h0, True, h[:, :1])


@pytest.mark.parametrize(
    "name, options",
    [
        ("tarnn", {"K": 1}),
        ("tarnn", {"K": 5}),
        ("irnn", {}),
        ("irnn", {"activation": "sigmoid", "rank": 4}),
        ("irnn", {"activation": "tanh"}),
        ("sarnn", {}),
        ("mist", {}),
        ("srnn", {}),
    ],
)
def test_saturated_gates_stay_finite_and_equal_the_reference(name, options):
    """Pre-activations in the thousands: each compiled sigmoid must give 0 or 1 as torch's does (under
    -ffast-math a bare 1 / (1 + exp(1000)) is NaN in float32; it made a TARNN UCR run diverge)."""
    from ltdrnn.cells.registry import build

    if not kernels.load_torch_ops(name):
        pytest.skip(f"kernels off (LTDRNN_NO_KERNELS) or csrc/{name}.cpp does not build here")
    torch.manual_seed(0)
    cell = build(name, 3, 8, **options)
    with torch.no_grad():
        for p in cell.parameters():
            p.mul_(30.0)
    x = 100.0 * torch.randn(6, 5, 3)
    reference, _ = cell.scan(x, backend="reference")
    assert torch.isfinite(reference).all()
    for backend in cell.backends:
        if backend != "reference":
            fast, _ = cell.scan(x, backend=backend)
            torch.testing.assert_close(fast, reference, rtol=1e-4, atol=1e-3, msg=f"{name} {backend}")
