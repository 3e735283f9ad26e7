"""``Recurrent.step``'s lean path (each cell's ``stream_step`` called directly) against the cells' own calls."""

import pytest
import torch

from ltdrnn import Recurrent, entry

#: the source cells, with the options their benchmarks stream (TARNN K = 5 runs several Euler rounds)
STREAMED = [("tarnn", {}), ("tarnn", {"K": 5}), ("srnn", {}), ("mist", {}), ("irnn", {}), ("sarnn", {})]


def stepped_by_cells(layer: Recurrent, xs, state):
    """The same steps through each cell's full call (its checks, ``scan``, ``nn.Module`` dispatch)."""
    outputs = []
    parts = list(state.unbind(0))
    for x in xs:
        for index, cell in enumerate(layer.cells):
            x, parts[index] = cell(x, parts[index])
        outputs.append(x)
    return torch.stack(outputs), torch.stack(parts)


@pytest.mark.parametrize("name,options", STREAMED)
@pytest.mark.parametrize("batch", [1, 3])
def test_a_streamed_step_takes_each_cells_streaming_step_and_equals_its_full_call(name, options, batch, monkeypatch):
    torch.manual_seed(0)
    layer = Recurrent(name, 2, 8, num_layers=2, **options).eval()
    xs = torch.randn(6, batch, 2)
    streamed = []
    cell_type = type(layer.cells[0])
    real = cell_type.stream_step
    monkeypatch.setattr(cell_type, "stream_step", lambda self, *a: streamed.append(1) or real(self, *a))
    with torch.no_grad():
        _, state = layer.step(xs[0])
        _, state = layer.step(xs[1], state)  # the first call with a state checks its layout in full
        streamed.clear()
        outputs, finals = [], state
        for x in xs[2:]:
            y, finals = layer.step(x, finals)
            outputs.append(y)
        monkeypatch.setattr(cell_type, "stream_step", real)
        expected, expected_final = stepped_by_cells(layer, xs[2:], state)
    assert len(streamed) == 2 * len(xs[2:]), "every cell of every step must take its streaming step"
    torch.testing.assert_close(torch.stack(outputs), expected, rtol=0, atol=0)
    torch.testing.assert_close(finals, expected_final, rtol=0, atol=0)


@pytest.mark.parametrize("name,options", STREAMED)
def test_editing_a_streamed_output_in_place_leaves_the_returned_state_alone(name, options):
    layer = Recurrent(name, 2, 8, **options).eval()
    x = torch.randn(1, 2)
    with torch.no_grad():
        _, state = layer.step(x)
        _, state = layer.step(x, state)
        y, state = layer.step(x, state)
        kept = state.clone()
        y.add_(100.0)
    torch.testing.assert_close(state, kept, rtol=0, atol=0)


def test_a_forward_hook_on_a_cell_sees_every_streamed_step():
    layer = Recurrent("tarnn", 2, 8).eval()
    seen = []
    layer.cells[0].register_forward_hook(lambda module, args, output: seen.append(output[0]))
    x = torch.randn(1, 2)
    with torch.no_grad():
        state = None
        for _ in range(4):
            y, state = layer.step(x, state)
    assert len(seen) == 4
    torch.testing.assert_close(seen[-1], y)


@pytest.mark.parametrize("name", ["tarnn", "srnn", "mist", "irnn", "sarnn"])
def test_a_reference_layer_never_takes_a_streaming_step(name, monkeypatch):
    layer = Recurrent(name, 2, 8, backend="reference").eval()
    cell_type = type(layer.cells[0])
    monkeypatch.setattr(cell_type, "stream_step", lambda *a: pytest.fail("a reference layer streamed"))
    x = torch.randn(1, 2)
    with torch.no_grad():
        _, state = layer.step(x)
        for _ in range(3):
            _, state = layer.step(x, state)


def test_training_with_dropout_takes_the_full_path_and_drops_between_layers():
    torch.manual_seed(0)
    layer = Recurrent("srnn", 2, 8, num_layers=2, dropout=0.5).train()
    x = torch.randn(4, 2)
    with torch.no_grad():
        _, state = layer.step(x)
        _, state = layer.step(x, state)
        torch.manual_seed(1)
        y, _ = layer.step(x, state)
        torch.manual_seed(1)
        expected, _ = layer._step_cells(x, list(state.unbind(0)))
    torch.testing.assert_close(y, expected, rtol=0, atol=0)


def every_variant(*names):
    """``(name, options)`` of each cell's default and every registered variant, with its test options."""
    return [
        pytest.param(name, {**entry(name).test_options, **options}, id=f"{name}-{variant}")
        for name in names
        for variant, options in {"default": {}, **entry(name).variants}.items()
    ]


@pytest.mark.parametrize("name,options", every_variant("irnn", "sarnn"))
def test_streamed_steps_equal_the_reference_forward_for_every_variant(name, options):
    """The lean streaming step covers every option the cell accepts, or declines it to the full path."""
    torch.manual_seed(0)
    layer = Recurrent(name, 3, 6, num_layers=2, **options).eval()
    reference = Recurrent(name, 3, 6, num_layers=2, backend="reference", **options).eval()
    reference.load_state_dict(layer.state_dict())
    x = 2 * torch.randn(2, 7, 3)
    with torch.no_grad():
        expected, expected_final = reference(x)
        state, outputs = None, []
        for t in range(x.shape[1]):
            y, state = layer.step(x[:, t], state)
            outputs.append(y)
    torch.testing.assert_close(torch.stack(outputs, 1), expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(flat_state(state), flat_state(expected_final))


def flat_state(state):
    """A state (a tensor, or a tuple such as ``(h, counter)``) as one float64 vector."""
    parts = state if isinstance(state, tuple) else (state,)
    return torch.cat([part.reshape(-1).double() for part in parts])
