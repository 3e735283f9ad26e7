"""The weights a streaming step caches follow every change of the parameters made after
``Recurrent.step`` (in-place edits, ``load_state_dict``, optimiser steps, fused ones included)."""

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
    """``p.data`` edits bypass autograd's version counters; reloading the layer's own state is the
    documented way to make the streaming cache see them."""
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
