"""The Recurrent layer against torch.nn.RNN, with a plain Elman cell defined here (not registered)."""

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ltdrnn import Recurrent
from ltdrnn.cells.base import Cell


class Elman(Cell):
    """h_t = tanh(W x_t + b + U h_{t-1}); the math of nn.RNN with tanh."""

    def __init__(self, input_size, hidden_size, backend="auto", device=None, dtype=None):
        super().__init__(input_size, hidden_size, backend, device, dtype)
        self.inp = nn.Linear(input_size, hidden_size, **self.factory)
        self.rec = nn.Linear(hidden_size, hidden_size, bias=False, **self.factory)

    def precompute(self, x):
        return self.inp(x)

    def step(self, p_t, h):
        h = torch.tanh(p_t + self.rec(h))
        return h, h


def copy_from_torch(layer: Recurrent, reference: nn.RNN) -> None:
    for index, cell in enumerate(layer.cells):
        number, direction = divmod(index, layer.num_directions)
        suffix = f"_l{number}" + ("_reverse" if direction else "")
        cell.inp.weight.data.copy_(getattr(reference, "weight_ih" + suffix))
        cell.inp.bias.data.copy_(getattr(reference, "bias_ih" + suffix) + getattr(reference, "bias_hh" + suffix))
        cell.rec.weight.data.copy_(getattr(reference, "weight_hh" + suffix))


@pytest.fixture(params=[(1, False), (2, False), (1, True), (3, True)], ids=lambda p: f"L{p[0]}-bi{p[1]}")
def pair(request):
    layers, bidirectional = request.param
    torch.manual_seed(0)
    reference = nn.RNN(3, 5, num_layers=layers, bidirectional=bidirectional, batch_first=True)
    layer = Recurrent(Elman, 3, 5, num_layers=layers, bidirectional=bidirectional)
    copy_from_torch(layer, reference)
    return reference, layer


def test_matches_nn_rnn_on_padded_packed_and_lengths_input(pair):
    reference, layer = pair
    x = torch.randn(4, 7, 3)
    h0 = torch.randn(reference.num_layers * (2 if reference.bidirectional else 1), 4, 5)
    torch.testing.assert_close(layer(x, h0), reference(x, h0))
    lengths = torch.tensor([7, 3, 5, 1])
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    ref_out, ref_h = reference(packed, h0)
    out, h = layer(packed, h0)
    torch.testing.assert_close(out.data, ref_out.data)
    torch.testing.assert_close(h, ref_h)
    padded_out, padded_h = layer(x, h0, lengths=lengths)
    torch.testing.assert_close(padded_out, pad_packed_sequence(ref_out, batch_first=True)[0])
    torch.testing.assert_close(padded_h, ref_h)


def test_gradients_match_nn_rnn(pair):
    reference, layer = pair
    x = torch.randn(2, 6, 3)
    reference(x)[0].square().sum().backward()
    layer(x)[0].square().sum().backward()
    for index, cell in enumerate(layer.cells):
        number, direction = divmod(index, layer.num_directions)
        suffix = f"_l{number}" + ("_reverse" if direction else "")
        torch.testing.assert_close(cell.rec.weight.grad, getattr(reference, "weight_hh" + suffix).grad)
        torch.testing.assert_close(cell.inp.weight.grad, getattr(reference, "weight_ih" + suffix).grad)


def test_time_major_and_unbatched_layouts():
    torch.manual_seed(0)
    layer = Recurrent(Elman, 3, 5, batch_first=False)
    x = torch.randn(7, 2, 3)
    out, h = layer(x)
    assert out.shape == (7, 2, 5)
    single, h_single = layer(x[:, 0])
    torch.testing.assert_close(single, out[:, 0])
    torch.testing.assert_close(h_single, h[:, 0])


def test_dropout_acts_between_layers_only_in_training():
    torch.manual_seed(0)
    layer = Recurrent(Elman, 3, 5, num_layers=2, dropout=0.5)
    x = torch.randn(2, 6, 3)
    layer.eval()
    assert torch.equal(layer(x)[0], layer(x)[0])
    layer.train()
    assert not torch.equal(layer(x)[0], layer(x)[0])
    single = Recurrent(Elman, 3, 5, num_layers=1, dropout=0.5).train()
    assert torch.equal(single(x)[0], single(x)[0]), "no dropout after the last layer"


def test_streaming_carries_state_across_calls():
    torch.manual_seed(0)
    layer = Recurrent(Elman, 3, 5, num_layers=2)
    x = torch.randn(2, 6, 3)
    out, h = layer(x)
    state = None
    for t in range(6):
        y, state = layer.step(x[:, t], state)
        torch.testing.assert_close(y, out[:, t])
    torch.testing.assert_close(state, h)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"num_layers": 0}, ValueError, "num_layers"),
        ({"dropout": 1.5}, ValueError, "dropout"),
        ({"bidirectional": "yes"}, TypeError, "bidirectional"),
        ({"hidden_size": -1}, ValueError, "hidden_size"),
    ],
)
def test_constructor_validation(kwargs, error, match):
    arguments = {"input_size": 3, "hidden_size": 5, **kwargs}
    with pytest.raises(error, match=match):
        Recurrent(Elman, **arguments)


def test_misuse_errors_name_the_problem():
    layer = Recurrent(Elman, 3, 5, bidirectional=True)
    with pytest.raises(ValueError, match="bidirectional"):
        layer.step(torch.randn(2, 3))
    x = torch.randn(2, 4, 3)
    packed = pack_padded_sequence(x, torch.tensor([4, 2]), batch_first=True)
    with pytest.raises(ValueError, match="lengths"):
        layer(packed, lengths=torch.tensor([4, 2]))
    with pytest.raises(ValueError, match="input"):
        layer(torch.randn(2, 4, 3, 1))
    with pytest.raises(ValueError, match="empty"):
        layer(torch.randn(2, 0, 3))
    with pytest.raises(TypeError, match="Cell instance"):
        Recurrent(Elman(3, 5), 3, 5)
    with pytest.raises(ValueError, match="unknown name"):
        Recurrent("no-such-cell", 3, 5)


def test_streaming_still_validates_a_state_whose_layout_changed():
    layer = Recurrent(Elman, 3, 5, num_layers=2)
    _, state = layer.step(torch.randn(2, 3))
    layer.step(torch.randn(2, 3), state)  # this layout is now known
    with pytest.raises(ValueError, match="state"):
        layer.step(torch.randn(2, 3), state[:, :1])
    with pytest.raises(ValueError, match="input_size"):
        layer.step(torch.randn(2, 4), state)
    with pytest.raises(TypeError, match="dtype"):
        layer.step(torch.randn(2, 3, dtype=torch.float64), state)


def test_streaming_checks_the_input_dtype_again_after_the_layer_is_converted():
    layer = Recurrent(Elman, 3, 5)
    x = torch.randn(2, 3)
    _, state = layer.step(x)
    layer.step(x, state)
    layer.double()
    with pytest.raises(TypeError, match="dtype"):
        layer.step(x, state.double())
    y, _ = layer.step(x.double(), state.double())
    assert y.dtype == torch.float64
