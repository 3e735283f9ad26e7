"""The torch.nn cells (lstm, gru, rnn_tanh, rnn_relu) against torch.nn with copied weights, and UGRNN."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

import ltdrnn
from ltdrnn.interop import load_torch_weights, recurrent_from_torch

TORCH_MODULES = {
    "lstm": lambda *a, **k: nn.LSTM(*a, **k),
    "gru": lambda *a, **k: nn.GRU(*a, **k),
    "rnn_tanh": lambda *a, **k: nn.RNN(*a, nonlinearity="tanh", **k),
    "rnn_relu": lambda *a, **k: nn.RNN(*a, nonlinearity="relu", **k),
}
TORCH_CELLS = {
    "lstm": nn.LSTMCell,
    "gru": nn.GRUCell,
    "rnn_tanh": lambda *a, **k: nn.RNNCell(*a, nonlinearity="tanh", **k),
    "rnn_relu": lambda *a, **k: nn.RNNCell(*a, nonlinearity="relu", **k),
}
LAYOUTS = [
    pytest.param(1, False, id="1layer"),
    pytest.param(2, False, id="2layers"),
    pytest.param(2, True, id="2layers-bidirectional"),
]


def states(s):
    return s if isinstance(s, tuple) else (s,)


def run_with_grads(module, x, lengths=None):
    """Outputs, final states and the gradients of inputs and every weight for a fixed loss."""
    module.zero_grad()
    x = x.clone().requires_grad_()
    inp = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False) if lengths is not None else x
    out, final = module(inp)
    data = out.data if lengths is not None else out
    weights = torch.linspace(-1, 1, data.numel(), dtype=data.dtype).view_as(data)
    loss = (data * weights).sum() + sum((s * s).sum() for s in states(final))
    loss.backward()
    grads = [p.grad.clone() for _, p in sorted(_torch_named_weights(module))]
    return data.detach(), [s.detach() for s in states(final)], x.grad, grads


def _torch_named_weights(module):
    """Weights keyed by their torch.nn name, for either a torch module or a Recurrent layer."""
    if isinstance(module, nn.RNNBase):
        return list(module.named_parameters())
    directions = module.num_directions
    return [
        (f"{w}_l{i // directions}{'_reverse' if i % directions else ''}", getattr(cell, w))
        for i, cell in enumerate(module.cells)
        for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        if getattr(cell, w) is not None
    ]


def pair(name, layers, bidirectional, dtype=torch.float32, backend="auto", **kwargs):
    torch.manual_seed(0)
    module = TORCH_MODULES[name](
        3, 5, num_layers=layers, bidirectional=bidirectional, batch_first=True, dtype=dtype, **kwargs
    )
    return module, recurrent_from_torch(module, backend=backend)


@pytest.mark.parametrize("name", list(TORCH_MODULES))
@pytest.mark.parametrize("layers,bidirectional", LAYOUTS)
def test_copied_weights_give_identical_outputs_states_and_gradients(name, layers, bidirectional):
    module, layer = pair(name, layers, bidirectional)
    x = torch.randn(4, 11, 3)
    expected, got = run_with_grads(module, x), run_with_grads(layer, x)
    assert torch.equal(got[0], expected[0])
    assert all(torch.equal(a, b) for a, b in zip(got[1], expected[1]))
    assert torch.equal(got[2], expected[2])
    for a, b in zip(got[3], expected[3]):
        if bidirectional:
            # torch sums the reverse direction's weight gradient over time in another order
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        else:
            assert torch.equal(a, b)


@pytest.mark.parametrize("name", list(TORCH_MODULES))
@pytest.mark.parametrize("layers,bidirectional", LAYOUTS)
@pytest.mark.parametrize("backend", ["torch_packed", "torch", "reference"])
def test_packed_sequence_matches_torch_packed_output(name, layers, bidirectional, backend):
    module, layer = pair(name, layers, bidirectional, dtype=torch.float64, backend=backend)
    x = torch.randn(4, 9, 3, dtype=torch.float64)
    lengths = torch.tensor([9, 3, 6, 1])
    expected, got = run_with_grads(module, x, lengths), run_with_grads(layer, x, lengths)
    if backend == "torch_packed" and not bidirectional:
        assert torch.equal(got[0], expected[0])
        assert all(torch.equal(a, b) for a, b in zip(got[1], expected[1]))
        assert torch.equal(got[2], expected[2])
    # other paths group other sequences into each batched matmul than torch's packed kernel
    # (and its reverse pass), so roundoff may differ in the last bits
    tight = dict(rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(got[0], expected[0], **tight)
    for a, b in zip(got[1], expected[1]):
        torch.testing.assert_close(a, b, **tight)
    torch.testing.assert_close(got[2], expected[2], **tight)
    for a, b in zip(got[3], expected[3]):
        torch.testing.assert_close(a, b, **tight)


@pytest.mark.parametrize("name", list(TORCH_MODULES))
def test_fused_equals_step_reference_with_lengths_outputs_and_gradients(name):
    torch.manual_seed(1)
    cell = ltdrnn.build(name, 3, 5, dtype=torch.float64)
    x = torch.randn(45, 4, 3, dtype=torch.float64)
    lengths = torch.tensor([40, 17, 1, 33])  # all shorter than T: the tail is padding only
    start = [s + torch.randn_like(s) for s in states(cell.init_state(4))]
    results = {}
    for backend in ("torch", "torch_packed", "reference"):
        cell.zero_grad()
        xi = x.clone().requires_grad_()
        state = tuple(s.clone().requires_grad_() for s in start)
        out, final = cell.scan(xi, state if len(state) > 1 else state[0], lengths, backend=backend)
        (out.sin().sum() + sum((s * s).sum() for s in states(final))).backward()
        results[backend] = [out, *states(final), xi.grad, *[s.grad for s in state]] + [
            p.grad.clone() for p in cell.parameters()
        ]
    assert results["torch"][0][17:, 1].abs().max() == 0 and results["torch"][0][40:].abs().max() == 0
    for fast in ("torch", "torch_packed"):
        for a, b in zip(results[fast], results["reference"]):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", list(TORCH_MODULES))
def test_step_is_the_torch_cell(name):
    torch.manual_seed(2)
    torch_cell = TORCH_CELLS[name](3, 5, dtype=torch.float64)
    cell = ltdrnn.build(name, 3, 5, backend="reference", dtype=torch.float64)
    with torch.no_grad():
        for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(cell, w).copy_(getattr(torch_cell, w))
    x = torch.randn(2, 3, dtype=torch.float64)
    state = tuple(torch.randn(2, 5, dtype=torch.float64) for _ in states(cell.init_state(2)))
    state = state if len(state) > 1 else state[0]
    h, new_state = cell(x, state)
    expected = torch_cell(x, state)
    torch.testing.assert_close(states(new_state), states(expected), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(h, states(expected)[0], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", list(TORCH_MODULES))
def test_without_bias_matches_torch(name):
    module, layer = pair(name, 1, False, bias=False)
    assert layer.cells[0].bias_ih is None
    x = torch.randn(2, 6, 3)
    assert torch.equal(layer(x)[0], module(x)[0])


def test_initialisation_is_torchs_uniform_bound():
    cell = ltdrnn.build("lstm", 3, 400)
    bound = 1 / 400**0.5
    for p in cell.parameters():
        assert p.abs().max() <= bound
        assert p.abs().max() > 0.95 * bound


def test_forget_bias_sets_the_forget_gate_biases_only():
    torch.manual_seed(4)
    cell = ltdrnn.build("lstm", 3, 5, forget_bias=1.0)
    assert torch.equal(cell.bias_ih[5:10], torch.ones(5)) and torch.equal(cell.bias_hh[5:10], torch.zeros(5))
    assert cell.bias_ih[:5].abs().max() > 0  # the other gates keep torch's draw
    with pytest.raises(ValueError, match="forget_bias"):
        ltdrnn.build("lstm", 3, 5, forget_bias=1.0, bias=False)


def test_load_torch_weights_rejects_mismatches():
    module = nn.LSTM(3, 5, num_layers=2)
    with pytest.raises(ValueError, match="expected 2 'lstm' cells"):
        load_torch_weights(ltdrnn.Recurrent("lstm", 3, 5), module)
    with pytest.raises(ValueError, match="expected 2 'lstm' cells"):
        load_torch_weights(ltdrnn.Recurrent("gru", 3, 5, num_layers=2), module)
    with pytest.raises(ValueError, match="weight_ih"):
        load_torch_weights(ltdrnn.Recurrent("lstm", 3, 6, num_layers=2), module)
    with pytest.raises(ValueError, match="proj_size"):
        recurrent_from_torch(nn.LSTM(3, 5, proj_size=2))
    with pytest.raises(TypeError, match="nn.LSTM, GRU or RNN"):
        recurrent_from_torch(nn.Linear(3, 5))


# ---- UGRNN ----------------------------------------------------------------------------------------
def test_ugrnn_gate_interpolates_between_keeping_and_replacing_the_state():
    torch.manual_seed(3)
    cell = ltdrnn.build("ugrnn", 3, 4, dtype=torch.float64)
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    h0 = torch.randn(2, 4, dtype=torch.float64)
    with torch.no_grad():
        cell.bias[4:] = 60.0  # gate closed: g = 1, keep the state
    out, final = cell.scan(x, h0)
    torch.testing.assert_close(final, h0)
    with torch.no_grad():
        cell.bias[4:] = -60.0  # gate open: g = 0, h_t = tanh(W_c x_t + U_c h_{t-1} + b_c)
    out, _ = cell.scan(x, h0)
    expected = torch.tanh(x[0] @ cell.weight_ih[:4].T + h0 @ cell.weight_hh[:4].T + cell.bias[:4])
    torch.testing.assert_close(out[0], expected)


def test_ugrnn_starts_with_the_gate_bias():
    cell = ltdrnn.build("ugrnn", 3, 4, gate_bias=2.5)
    assert torch.equal(cell.bias[4:], torch.full((4,), 2.5))
    assert torch.equal(cell.bias[:4], torch.zeros(4))
