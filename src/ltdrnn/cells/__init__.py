"""Recurrent cells: the contract (``base``), the table of names (``registry``) and one module per family."""

from .base import Cell, State
from .registry import Entry, ParamCount, build, entry, list_cells, register

__all__ = ["Cell", "State", "Entry", "ParamCount", "build", "entry", "list_cells", "register"]
