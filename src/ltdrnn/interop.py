"""Interoperability of :class:`~ltdrnn.layers.Recurrent` with torch.nn's recurrent modules: a layer built
from an ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` with its weights, or the weights copied into a layer.

With weights copied, the ``lstm``, ``gru``, ``rnn_tanh`` and ``rnn_relu`` cells (:mod:`ltdrnn.cells.gated`)
reproduce the torch module exactly (tests/cells/test_gated.py, tests/test_layer.py).
"""

from __future__ import annotations

import torch
from torch import nn

from .layers import Recurrent


def torch_cell_name(module: nn.RNNBase) -> str:
    """The registry name matching a ``torch.nn.LSTM`` / ``GRU`` / ``RNN`` module."""
    if isinstance(module, nn.LSTM):
        return "lstm"
    if isinstance(module, nn.GRU):
        return "gru"
    if isinstance(module, nn.RNN):
        return "rnn_tanh" if module.nonlinearity == "tanh" else "rnn_relu"
    raise TypeError(f"module: expected torch.nn.LSTM, GRU or RNN, got {type(module).__name__}")


def load_torch_weights(layer: nn.Module, module: nn.RNNBase) -> None:
    """Copy the weights of a torch ``nn.LSTM`` / ``GRU`` / ``RNN`` into a matching ``Recurrent`` layer.

    ``weight_ih_l{k}[_reverse]`` goes to ``layer.cells[k * D + direction].weight_ih``, and so on.
    The layer must have the same cell type, sizes, layers, directions and ``bias``.
    """
    name = torch_cell_name(module)
    if getattr(module, "proj_size", 0):
        raise ValueError("module: LSTM with proj_size > 0 has no ltdrnn equivalent")
    cells = list(layer.cells)
    directions = 2 if module.bidirectional else 1
    if len(cells) != module.num_layers * directions or any(type(c).registry_name != name for c in cells):
        raise ValueError(
            f"layer: expected {module.num_layers * directions} {name!r} cells to match "
            f"{module}, got {[type(c).__name__ for c in cells]}"
        )
    with torch.no_grad():
        for index, cell in enumerate(cells):
            suffix = f"_l{index // directions}" + ("_reverse" if index % directions else "")
            for weight in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                source = getattr(module, weight + suffix, None)
                target = getattr(cell, weight)
                if (source is None) != (target is None) or (source is not None and source.shape != target.shape):
                    raise ValueError(
                        f"layer: {weight} of cell {index} does not match the module's "
                        f"{weight + suffix} (check hidden_size, input_size and bias)"
                    )
                if source is not None:
                    target.copy_(source)


def recurrent_from_torch(module: nn.RNNBase, **cell_options):
    """A ``ltdrnn.Recurrent`` layer with the configuration and weights of a torch RNN module."""
    p = next(module.parameters())
    layer = Recurrent(
        torch_cell_name(module),
        module.input_size,
        module.hidden_size,
        num_layers=module.num_layers,
        dropout=module.dropout,
        bidirectional=module.bidirectional,
        batch_first=module.batch_first,
        bias=module.bias,
        device=p.device,
        dtype=p.dtype,
        **cell_options,
    )
    load_torch_weights(layer, module)
    return layer
