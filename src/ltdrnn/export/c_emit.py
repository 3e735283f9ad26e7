"""Write a scheduled :class:`~ltdrnn.export.ir.Graph` as the body of a C step, in one of two dialects.

The dialect (``c_float.FloatDialect`` or ``c_fixed.FixedDialect``) says how one value is computed (an
elementwise expression, a vector operation) and how constants are stored; this module walks the plan of
:mod:`ltdrnn.export.schedule`: the loops, the stack buffers, the reads of every kind of storage, the state
writes at the end.

Constants live behind one storage macro and are read through accessor macros (``LTDRNN_FLASH``,
``LTDRNN_READ_*``): on AVR, ``PROGMEM`` and ``pgm_read_*`` keep them in flash (a plain ``const`` array
is copied into the 2 KiB of RAM at start-up); elsewhere plain ``const`` arrays, which stay in flash.
"""

from __future__ import annotations

from typing import Dict, List

import numpy as np

from .ir import Graph, Value
from .schedule import Plan

#: storage and read macros of the generated source; a build may predefine them (another Harvard target)
STORAGE_MACROS = """#if !defined(LTDRNN_FLASH)
#  if defined(__AVR__)
#    include <avr/pgmspace.h>
#    define LTDRNN_FLASH PROGMEM
#    define LTDRNN_READ_F32(p) pgm_read_float(p)
#    define LTDRNN_READ_I8(p) ((int8_t)pgm_read_byte(p))
#    define LTDRNN_READ_I16(p) ((int16_t)pgm_read_word(p))
#    define LTDRNN_READ_I32(p) ((int32_t)pgm_read_dword(p))
#    define LTDRNN_FLASH_LPM 1
#  else
#    define LTDRNN_FLASH
#    define LTDRNN_READ_F32(p) (*(p))
#    define LTDRNN_READ_I8(p) (*(p))
#    define LTDRNN_READ_I16(p) (*(p))
#    define LTDRNN_READ_I32(p) (*(p))
#  endif
#endif"""

C_TYPES = {
    "float": ("float", "F32", 4),
    "int8": ("int8_t", "I8", 1),
    "int16": ("int16_t", "I16", 2),
    "int32": ("int32_t", "I32", 4),
}


class Constants:
    """The flash arrays of one generated source and their bytes."""

    def __init__(self) -> None:
        self.arrays: List[str] = []
        self.bytes = 0
        self.kinds: Dict[str, str] = {}

    def define(self, label: str, kind: str, items: List[str]) -> str:
        if label in self.kinds:
            raise AssertionError(f"array {label} defined twice")
        ctype, _, size = C_TYPES[kind]
        self.kinds[label] = kind
        rows = [", ".join(items[i : i + 8]) for i in range(0, len(items), 8)]
        body = ",\n    ".join(rows)
        self.arrays.append(f"static const {ctype} {label}[{len(items)}] LTDRNN_FLASH = {{\n    {body}\n}};")
        self.bytes += size * len(items)
        return label

    def read(self, label: str, index: str) -> str:
        """C expression reading element ``index`` of the flash array ``label``."""
        return f"LTDRNN_READ_{C_TYPES[self.kinds[label]][1]}({label} + {index})"


def float_literal(value: float) -> str:
    """A float literal that reads back as the same float32 (9 significant digits)."""
    from .step import ExportError

    if not np.isfinite(value):
        raise ExportError(f"weights: expected finite values, got {value!r} (the model has diverged)")
    text = f"{float(np.float32(value)):.9g}"
    return text + ("f" if any(c in text for c in ".e") else ".0f")


class Emitter:
    """References to values at an element index, and the body of the step, for one plan and dialect."""

    def __init__(self, graph: Graph, plan: Plan, dialect) -> None:
        self.graph, self.plan, self.dialect = graph, plan, dialect
        self.input_name = "x"  # "xn" when the float step normalises its input first

    def ref(self, value: Value, index: str) -> str:
        """C expression reading ``value`` at element ``index`` (``index`` is ignored for length 1)."""
        storage = self.plan.storage[value.index]
        index = "0" if value.size == 1 else index
        kind = storage.kind
        if kind == "local":
            return value.name
        if kind == "view":
            return self._view(value, index)
        if kind == "const":
            return self.dialect.constants.read(self.dialect.constant(value), index)
        if kind == "scalar":
            return self.dialect.scalar(value)
        base, _, offset = self.pointer(value).partition(" + ")
        return f"{base}[{offset} + {index}]" if offset else f"{base}[{index}]"

    def _view(self, value: Value, index: str) -> str:
        source, kind = value.args[0], value.attrs["kind"]
        if kind == "slice":
            return self.ref(source, f"{value.attrs['offset']} + {index}")
        if kind == "roll":
            return self.ref(source, f"({index} == 0 ? {value.size - 1} : {index} - 1)")
        half = value.size // 2
        return f"({index} < {half} ? {self.ref(source, f'{half} + {index}')} : {self.dialect.zero})"

    def pointer(self, value: Value) -> str:
        """C pointer to ``value``'s first element (a value stored contiguously)."""
        storage = self.plan.storage[value.index]
        kind = storage.kind
        if kind == "input":
            return self.input_name
        if kind == "output":
            return "out"
        if kind == "buffer":
            return storage.buffer
        if kind in ("state", "slot"):
            row = value.attrs.get("row", 0) if kind == "state" else 0
            return _offset("state", storage.part.offset + row * storage.part.size)
        if kind == "view" and value.attrs["kind"] == "slice":
            return _offset(self.pointer(value.args[0]), value.attrs["offset"])
        raise AssertionError(f"{value} is not stored contiguously ({kind})")

    def value_type_at(self, value: Value) -> str:
        """The C element type of the array ``value`` is read from."""
        storage = self.plan.storage[value.index]
        if storage.kind in ("state", "slot"):
            return self.dialect.state_type
        if storage.kind == "view":
            return self.value_type_at(value.args[0])
        if storage.kind == "buffer":
            return self.dialect.buffer_type(self.plan.kinds.get(storage.buffer))
        if storage.kind in ("input", "output"):
            return self.dialect.ctype
        return self.dialect.value_type(value)

    def body(self) -> List[str]:
        lines = [
            f"{self.dialect.buffer_type(self.plan.kinds.get(name))} {name}[{size}];"
            for name, size in self.plan.buffers.items()
        ]
        for unit in self.plan.units:
            if unit.kind == "vector":
                value = unit.values[0]
                lines += self.dialect.vector(value, self)
                continue
            lines.append(f"for (int j = 0; j < {unit.size}; ++j) {{")
            for value in unit.values:
                expression = self.dialect.element(value, self)
                storage = self.plan.storage[value.index]
                if storage.kind == "local":
                    lines.append(f"    const {self.dialect.value_type(value)} {value.name} = {expression};")
                else:
                    lines.append(f"    {self.ref(value, 'j')} = {expression};")
            lines.append("}")
        for kind, part, value in self.plan.copies:
            lines += self._store(kind, part, value)
        return lines

    def _store(self, kind: str, part, value: Value) -> List[str]:
        ctype, size = self.dialect.state_type, part.size
        source = self.pointer(value)
        last = part.offset + (part.rows - 1) * size
        target = part.offset if kind == "write" else last
        if self.dialect.value_type(value) != ctype:  # a narrower value into a wider state: element by element
            copy = [f"for (int j = 0; j < {size}; ++j) state[{target} + j] = {source}[j];"]
        else:
            copy = [f"memcpy({_offset('state', target)}, {source}, sizeof({ctype}) * {size});"]
        if kind == "write":
            return copy
        lines = []
        if part.rows > 1:
            lines.append(
                f"memmove({_offset('state', part.offset)}, {_offset('state', part.offset + size)}, "
                f"sizeof({ctype}) * {(part.rows - 1) * size});"
            )
        return lines + copy

    @property
    def scratch_bytes(self) -> int:
        buffers = sum(
            size * self.dialect.kind_bytes(self.plan.kinds.get(name)) for name, size in self.plan.buffers.items()
        )
        return buffers + self.dialect.block_bytes


def _offset(pointer: str, offset: int) -> str:
    return pointer if offset == 0 else f"{pointer} + {offset}"


def rows_loop(rows: int, lines: List[str]) -> List[str]:
    """``for (int r = 0; r < rows; ++r) { lines }``."""
    return [f"for (int r = 0; r < {rows}; ++r) {{", *("    " + line for line in lines), "}"]
