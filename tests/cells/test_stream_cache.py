"""The weights a streaming step caches follow every change of the parameters made after ``Recurrent.step``
or ``cell(x_t, state)`` (in-place edits, ``load_state_dict``, optimiser steps, fused ones included, new
tensors through ``p.data = t``, and ``p.data`` writes once ``increment_version`` tells of them)."""

import pytest
import torch

import ltdrnn

D, H = 3, 16
#: the cells whose streaming step caches operands derived from the parameters (scan.ParameterCache)
STREAMING = ["tarnn", "irnn", "sarnn", "srnn", "mist"]


def _shifted(layer):
    return {k: v + 0.3 if v.is_floating_point() else v for k, v in layer.state_dict().items() if torch.is_tensor(v)}


def _optimiser_step(layer, optimiser):
    with torch.enable_grad():
        out, _ = layer(torch.randn(2, 4, D, generator=torch.Generator().manual_seed(5)))
        out.square().sum().backward()
    optimiser.step()


def _no_grad_add(layer):
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.3)


def _vector_to_parameters(layer):
    vector = torch.nn.utils.parameters_to_vector(layer.parameters()) + 0.3
    torch.nn.utils.vector_to_parameters(vector, layer.parameters())


def _data_edit_then_reload(layer):
    """``p.data`` edits bypass autograd's version counters; reloading the layer's own state makes the
    streaming cache see them."""
    for p in layer.parameters():
        p.data.add_(0.3)
    layer.load_state_dict(layer.state_dict())


EDITS = {
    "no_grad add_": _no_grad_add,
    "load_state_dict": lambda layer: layer.load_state_dict(_shifted(layer), strict=False),
    "load_state_dict assign": lambda layer: layer.load_state_dict(_shifted(layer), strict=False, assign=True),
    "SGD": lambda layer: _optimiser_step(layer, torch.optim.SGD(layer.parameters(), lr=0.3, foreach=False)),
    "Adam foreach": lambda layer: _optimiser_step(layer, torch.optim.Adam(layer.parameters(), lr=0.3, foreach=True)),
    "Adam fused": lambda layer: _optimiser_step(layer, torch.optim.Adam(layer.parameters(), lr=0.3, fused=True)),
    "AdamW fused": lambda layer: _optimiser_step(layer, torch.optim.AdamW(layer.parameters(), lr=0.3, fused=True)),
    "double and back": lambda layer: layer.double().float(),
    "vector_to_parameters": _vector_to_parameters,
    "p.data then reload": _data_edit_then_reload,
}


@pytest.mark.parametrize("batch", [1, 16])
@pytest.mark.parametrize("edit", list(EDITS))
@pytest.mark.parametrize("name", STREAMING)
def test_streaming_after_a_parameter_change_uses_the_new_parameters(name, edit, batch):
    torch.manual_seed(0)
    layer = ltdrnn.Recurrent(name, D, H)
    x = torch.randn(batch, 3, D, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        state = None
        for t in range(2):  # fills the streaming cache
            _, state = layer.step(x[:, t], state)
        EDITS[edit](layer)
        streamed, _ = layer.step(x[:, 2], state)
    fresh = ltdrnn.Recurrent(name, D, H)
    fresh.load_state_dict(layer.state_dict())  # no cache yet; with autograd: the sequence path
    expected, _ = fresh(x[:, 2:3], state)
    torch.testing.assert_close(streamed, expected[:, 0].detach(), rtol=1e-5, atol=1e-6)


# ---- the cell API: stream one step, edit, stream the next, against the reference step -----------------
def _stream_edit_stream(name, edit):
    """``(streamed, expected)``: the second of two streamed steps of a fresh ``name`` cell with ``edit(cell)``
    between them, and the reference implementation's step from the same state with the edited weights."""
    torch.manual_seed(0)
    cell = ltdrnn.build(name, D, H)
    x = torch.randn(2, 1, D, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        _, state = cell(x[0], cell.init_state(1))  # fills the streaming cache; a state that is not zero
        edit(cell)
        streamed, _ = cell(x[1], state)
        expected, _ = cell.scan(x[1:], state, backend="reference")
    return streamed, expected[0]


def _replace_until_the_address_returns(p, tries=16):
    """``p.data = t`` with new values until ``p`` is back at its first address (the allocator hands a freed
    block out again: about every second time here), at most ``tries`` times."""
    first = p.data_ptr()
    for _ in range(tries):
        new = p.detach() + 0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2))
        p.data = new
        del new
        if p.data_ptr() == first:
            return


def _write_through_data(cell):
    for p in cell.parameters():
        p.data.copy_(p.detach() + 0.1)


def _write_one_row_through_data(cell):
    for p in cell.parameters():
        p.data[0] = p.detach()[0] + 0.1


def _assign_data(cell):
    for p in cell.parameters():
        p.data = p.detach() + 0.1


CELL_EDITS = {
    "p.data.copy_": _write_through_data,
    "p.data[0] = v": _write_one_row_through_data,
    "p.data = t": _assign_data,
    "load_state_dict": lambda cell: cell.load_state_dict(_shifted(cell), strict=False),
}

PARAMETERS = [(name, p) for name in STREAMING for p, _ in ltdrnn.build(name, D, H).named_parameters()]


@pytest.mark.parametrize("name, parameter", PARAMETERS, ids=[f"{n}-{p}" for n, p in PARAMETERS])
def test_streaming_follows_a_new_tensor_whose_address_was_the_old_ones(name, parameter):
    def replace(cell):
        _replace_until_the_address_returns(cell.get_parameter(parameter))

    streamed, expected = _stream_edit_stream(name, replace)
    torch.testing.assert_close(streamed, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("edit", list(CELL_EDITS))
@pytest.mark.parametrize("name", STREAMING)
def test_a_streamed_step_after_an_edit_matches_the_reference_step(name, edit):
    streamed, expected = _stream_edit_stream(name, CELL_EDITS[edit])
    torch.testing.assert_close(streamed, expected, rtol=1e-5, atol=1e-6)


def test_every_parameter_of_a_cell_counts_the_uses_of_its_data_alias():
    """The key that makes ``p.data`` writes visible: a cell's parameters, its submodules' included (SRNN's
    beta network, the Euler step sizes), count every use of ``.data``; user modules are left alone."""
    for name in STREAMING:
        cell = ltdrnn.build(name, D, H)
        for label, p in cell.named_parameters():
            before = p.data_edits
            p.data.mul_(1.0)
            assert p.data_edits == before + 1, f"{name}.{label}"
    assert not hasattr(torch.nn.Linear(2, 3).weight, "data_edits")
