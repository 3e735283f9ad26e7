"""ltdrnn: recurrent cells for long-term dependencies.

    >>> import ltdrnn, torch
    >>> rnn = ltdrnn.Recurrent("tarnn", input_size=2, hidden_size=64)
    >>> out, state = rnn(torch.randn(8, 100, 2))      # (B, T, d) -> (B, T, H)

The core imports only torch and numpy.
"""

from .cells import Cell, ParamCount, build, list_cells
from .cells.base import apply_constraints_
from .cells.registry import entry
from .interop import load_torch_weights, recurrent_from_torch
from .layers import Recurrent

__version__ = "0.1.0"
__all__ = [
    "Cell",
    "ParamCount",
    "Recurrent",
    "apply_constraints_",
    "build",
    "entry",
    "list_cells",
    "load_torch_weights",
    "recurrent_from_torch",
    "__version__",
]
