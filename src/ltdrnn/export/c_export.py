"""Generate a self-contained C99 step (source + header) from a :class:`~ltdrnn.export.step.StreamingStep`.

The model is described once as a graph (``cells_ir.py``), scheduled into loops (``schedule.py``) and
written in one of two dialects (``c_emit.py``): float32 (``c_float.py``), or integer (``int8=True``,
``c_fixed.py``: int8 weights, int16 values, int32 sums, no float on the step). The API::

    void NAME_init(NAME_state_t *state);                                   /* at every sequence start */
    void NAME_step(const NAME_value_t *x, NAME_state_t *state, NAME_value_t *out);   /* one time step */
    void NAME_quantise(const float *x, int16_t *x_q);          /* integer export: the input's int16 form */

``NAME_value_t`` is ``float`` or ``int16_t``, ``NAME_state_t`` ``float``, ``int16_t`` or ``int32_t`` (an integer
state that accumulates, see ``c_fixed.py``); ``state`` has the layout of
:class:`~ltdrnn.export.step.StreamingStep`'s packed state. No ``malloc``, no mutable static data (scratch
is on the stack, of compile-time size), constants in flash behind one storage macro (``LTDRNN_FLASH``).
The header states the input/output contract and the flash, RAM and stack the model needs, and stops
the build with ``#error`` when they exceed a budget (on AVR by default the chip's own RAM and flash).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

from . import ir, schedule
from .c_emit import STORAGE_MACROS, Emitter, float_literal
from .c_fixed import FixedDialect, quantize_rows
from .c_float import FloatDialect
from .cells_ir import build_graph, check_c_supported, supported_cells
from .step import ExportError, StreamingStep

#: stack a step needs beyond its scratch arrays (saved registers, call frames of the helpers); the
#: device tests hold the measured stack of every model against it (AVR and Cortex-M4)
FRAME_ALLOWANCE = 128
STATE_BYTES = {"float": 4, "int16_t": 2, "int32_t": 4}

RESERVED = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum", "extern",
    "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short", "signed",
    "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while",
    "asm", "bool", "true", "false", "main", "errno", "assert", "setup", "loop",
}  # fmt: skip
NAME_LIMIT = 40

__all__ = ["CSource", "check_c_supported", "check_name", "generate_c", "quantize_rows", "supported_cells"]


@dataclass
class CSource:
    """Generated files and their costs in bytes: ``weight_bytes`` (the model's constants), ``flash_bytes``
    (every constant: weights, activation tables, input scaling), ``state_bytes`` (the caller's state),
    ``scratch_bytes`` (the step's stack arrays), ``stack_bytes`` (scratch + call frames, an upper
    estimate); for the integer step the fractional bits of input and output."""

    name: str
    header: str
    source: str
    int8: bool
    state_type: str  # the C type of the state's elements: float, int16_t, or int32_t (accumulating states)
    weight_bytes: int
    flash_bytes: int
    state_bytes: int
    scratch_bytes: int
    stack_bytes: int
    input_frac: Optional[int] = None
    output_frac: Optional[int] = None
    formats: Dict[str, int] = field(default_factory=dict)

    @property
    def ram_bytes(self) -> int:
        return self.state_bytes + self.stack_bytes


def check_name(name) -> str:
    """``name`` if it can be a file base name and a C symbol prefix, else :class:`ExportError`."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ExportError(
            f"name (--name): expected a C identifier (letters, digits, _; not starting with a digit), got {name!r}"
        )
    if len(name) > NAME_LIMIT:
        raise ExportError(f"name (--name): expected at most {NAME_LIMIT} characters, got {len(name)} ({name[:20]}...)")
    if name.lower() in RESERVED or name.startswith("__") or re.match(r"_[A-Z]", name):
        raise ExportError(
            f"name (--name): {name!r} is a C keyword, a reserved identifier (leading __ or _ and a capital) or a "
            "name the device program needs (main, setup, loop); choose another"
        )
    if re.fullmatch(r"(con|prn|aux|nul|com\d|lpt\d)", name.lower()):
        raise ExportError(
            f"name (--name): {name!r} is a device name on Windows, not a usable file name; choose another"
        )
    return name


def generate_c(
    step: StreamingStep,
    name: str,
    int8: bool = False,
    calibration: Optional[np.ndarray] = None,
    contract: Optional[Dict[str, Any]] = None,
) -> CSource:
    """The C source and header of ``step`` under the symbol prefix ``name``.

    ``int8``: the integer step; its number formats are calibrated on ``calibration`` ``(B, T, d)`` (the
    training split's inputs, normalised as the model sees them), which it requires. ``contract``: the
    input/output contract (``ltdrnn.export.contract``) written into the header; with a per-channel
    normalisation the C applies it (the float step inside ``NAME_step``, the integer one in ``NAME_quantise``).
    """
    check_name(name)
    graph = build_graph(step)
    if int8:
        if calibration is None:
            raise ExportError("int8: the integer C step needs calibration inputs (the run's training split)")
        dialect = FixedDialect(graph, ir.value_ranges(graph, calibration))
    else:
        dialect = FloatDialect()
    plan = schedule.plan(graph, dialect.kind)
    contract = contract or {}
    scaling = (contract.get("input") or {}).get("channel")
    emitter = Emitter(graph, plan, dialect)
    if scaling and not int8:
        emitter.input_name = "xn"
    body = emitter.body()
    weight_bytes = dialect.constants.bytes
    helpers = dialect.helper_source()
    prelude = _normalise(dialect, scaling, step.input_size) if scaling and not int8 else []
    quantise = _quantise(dialect, scaling, step.input_size, name) if int8 else ""
    flash = dialect.constants.bytes
    scratch = emitter.scratch_bytes + (4 * step.input_size if prelude else 0)
    costs = {
        "weight_bytes": weight_bytes,
        "flash_bytes": flash,
        "state_bytes": STATE_BYTES[dialect.state_type] * graph.state_size,
        "scratch_bytes": scratch,
        "stack_bytes": scratch + FRAME_ALLOWANCE,
    }
    upper = name.upper()
    what = _describe(step, int8)
    header = _header(name, step, int8, what, costs, contract, dialect)
    source = _SOURCE.format(
        name=name,
        what=what,
        ctype=dialect.ctype,
        state=dialect.state_type,
        macros=STORAGE_MACROS,
        shift_check=f"typedef char {name}_needs_arithmetic_shift[(-2 >> 1) == -1 ? 1 : -1];\n\n" if int8 else "",
        helpers=helpers,
        arrays="\n".join(dialect.constants.arrays),
        init="\n    ".join(dialect.init_lines(graph.init_state(), graph.state_size, upper)),
        quantise=quantise,
        body="\n".join("    " + line for line in prelude + body),
    )
    extra = {}
    if int8:
        extra = {"input_frac": dialect.input_frac, "output_frac": dialect.output_frac}
    return CSource(name, header, source, int8, dialect.state_type, **costs, **extra)


def _describe(step: StreamingStep, int8: bool) -> str:
    cells = "+".join(c.registry_name for c in step.cells)
    arithmetic = "int8 weights, int16 values, int32 sums" if int8 else "float32"
    return f"{cells}, d={step.input_size}, H={step.cells[-1].hidden_size}, outputs={step.output_size}, {arithmetic}"


def _normalise(dialect, scaling, size: int) -> List[str]:
    """``xn = (x - mean) / std`` per channel, before the float step."""
    mean = dialect.constants.define("input_mean", "float", [float_literal(v) for v in scaling["mean"]])
    std = dialect.constants.define("input_std", "float", [float_literal(v) for v in scaling["std"]])
    read = dialect.constants.read
    return [
        f"float xn[{size}];",
        f"for (int i = 0; i < {size}; ++i) xn[i] = (x[i] - {read(mean, 'i')}) / {read(std, 'i')};",
    ]


def _quantise(dialect, scaling, size: int, name: str) -> str:
    """``NAME_quantise``: normalise (per channel) and round the input into its int16 format."""
    scale = float_literal(2.0**dialect.input_frac)
    value = f"x[i] * {scale}"
    if scaling:
        mean = dialect.constants.define("input_mean", "float", [float_literal(v) for v in scaling["mean"]])
        std = dialect.constants.define("input_std", "float", [float_literal(v) for v in scaling["std"]])
        read = dialect.constants.read
        value = f"(x[i] - {read(mean, 'i')}) / {read(std, 'i')} * {scale}"
    return (
        f"void {name}_quantise(const float *x, int16_t *x_q)\n{{\n"
        f"    for (int i = 0; i < {size}; ++i) {{\n"
        f"        const float v = {value};\n"
        "        x_q[i] = v != v ? 0 : v >= 32767.0f ? 32767 : v <= -32768.0f ? -32768 : "
        "(int16_t)(v < 0.0f ? v - 0.5f : v + 0.5f);\n"
        "    }\n}\n\n"
    )


def _header(name, step, int8, what, costs, contract, dialect) -> str:
    upper = name.upper()
    defines = {
        "INPUT_SIZE": step.input_size,
        "STATE_SIZE": step.state_size,
        "OUTPUT_SIZE": step.output_size,
        "INTEGER": int(int8),
        "FLASH_BYTES": costs["flash_bytes"],
        "WEIGHT_BYTES": costs["weight_bytes"],
        "STATE_BYTES": costs["state_bytes"],
        "SCRATCH_BYTES": costs["scratch_bytes"],
        "STACK_BYTES": costs["stack_bytes"],
        "RAM_BYTES": costs["state_bytes"] + costs["stack_bytes"],
    }
    if int8:
        defines.update(INPUT_FRAC=dialect.input_frac, OUTPUT_FRAC=dialect.output_frac)
    if contract.get("validated_length"):
        defines["VALIDATED_LENGTH"] = contract["validated_length"]
    lines = [f"#define {upper}_{key} {value}" for key, value in defines.items()]
    names = contract.get("classes") or [f"y{k}" for k in range(step.output_size)]
    lines.append(f"#define {upper}_CLASS_NAMES " + ", ".join(_c_string(n) for n in names))
    ram, flash = defines["RAM_BYTES"], defines["FLASH_BYTES"]
    api = [f"void {name}_init({upper}_state_t *state);"]
    if int8:
        api.append(f"void {name}_quantise(const float *x, int16_t *x_q);")
    api.append(f"void {name}_step(const {upper}_value_t *x, {upper}_state_t *state, {upper}_value_t *out);")
    return _HEADER.format(
        name=name,
        upper=upper,
        what=what,
        contract=_contract_comment(contract, int8, upper),
        defines="\n".join(lines),
        ctype="int16_t" if int8 else "float",
        state_type=dialect.state_type,
        api="\n".join(api),
        ram=ram,
        flash=flash,
        state=costs["state_bytes"],
        stack=costs["stack_bytes"],
    )


def _c_string(text: str) -> str:
    """A C string literal of ``text`` (printable ASCII kept, other UTF-8 bytes as octal escapes)."""
    body = "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\?' else f"\\{b:03o}" for b in str(text).encode())
    return f'"{body}"'


def _wrap(text: str, width: int = 100) -> List[str]:
    import textwrap

    return textwrap.wrap(text, width - 4) or [""]


def _contract_comment(contract: Dict[str, Any], int8: bool, upper: str) -> str:
    """The input/output contract as the header's comment lines."""
    entries = []
    given = contract.get("input") or {}
    text = given.get("text", "none stated: feed the model's input as the task gave it in training")
    entries.append(("input", text))
    if int8:
        entries.append(
            (
                "integer input",
                f"x_q[i] = round(x_n[i] * 2^{upper}_INPUT_FRAC), saturated to int16, where x_n is the "
                f"normalised input ({'NAME_quantise does it' if given.get('channel') else 'NAME_quantise rounds it'})",
            )
        )
        entries.append(("integer output", f"out[k] / 2^{upper}_OUTPUT_FRAC is output k (argmax picks the class)"))
    if contract.get("outputs"):
        entries.append(("outputs", contract["outputs"]))
    if contract.get("reset"):
        entries.append(("reset", contract["reset"]))
    if contract.get("validated"):
        entries.append(("validated", contract["validated"]))
    lines = []
    for key, text in entries:
        wrapped = _wrap(f"{key}: {text}".replace("NAME_", upper.lower() + "_").replace("*/", "* /"))
        lines += [f" *   {wrapped[0]}"] + [f" *     {line}" for line in wrapped[1:]]
    return "\n".join(lines)


_HEADER = """/* {name}: one streaming step of a ltdrnn model ({what}).
 * Generated by ltdrnn's C exporter; C99, no malloc, no mutable static data. Batch 1.
 *
 *   {upper}_state_t state[{upper}_STATE_SIZE];  {upper}_value_t out[{upper}_OUTPUT_SIZE];
 *   {name}_init(state);                      at the start of every sequence
 *   for each time step: {name}_step(x, state, out);   out: the head's output after this step
 *
 * Contract
{contract}
 *
 * Memory: {flash} B of constants in flash ({upper}_FLASH_BYTES); RAM {ram} B = the caller's state {state} B
 * + stack {stack} B (scratch arrays + an allowance for call frames). The build stops with #error when
 * they exceed LTDRNN_RAM_BUDGET / LTDRNN_FLASH_BUDGET (bytes; on AVR by default the chip's own RAM and
 * flash from <avr/io.h>); set them lower to leave room for the rest of the program.
 */
#ifndef {upper}_H
#define {upper}_H

#include <stdint.h>

{defines}

typedef {ctype} {upper}_value_t;  /* input, output */
typedef {state_type} {upper}_state_t;  /* state (int32_t where an integer state accumulates) */

#if defined(__AVR__)
#  include <avr/io.h>
#  if !defined(LTDRNN_RAM_BUDGET) && defined(RAMEND) && defined(RAMSTART)
#    define LTDRNN_RAM_BUDGET (RAMEND - RAMSTART + 1)
#  endif
#  if !defined(LTDRNN_FLASH_BUDGET) && defined(FLASHEND)
#    define LTDRNN_FLASH_BUDGET (FLASHEND + 1L)
#  endif
#  if {upper}_FLASH_BYTES > 65535
#    error "{name}: more than 64 KiB of constants; AVR's near flash reads (pgm_read_*) reach the first 64 KiB"
#  endif
#endif
#if defined(LTDRNN_RAM_BUDGET) && {upper}_RAM_BYTES > LTDRNN_RAM_BUDGET
#  error "{name}: needs {ram} B of RAM (state {state} B + stack {stack} B), more than LTDRNN_RAM_BUDGET"
#endif
#if defined(LTDRNN_FLASH_BUDGET) && {upper}_FLASH_BYTES > LTDRNN_FLASH_BUDGET
#  error "{name}: needs {flash} B of flash for its constants, more than LTDRNN_FLASH_BUDGET"
#endif

#ifdef __cplusplus
extern "C" {{
#endif

{api}

#ifdef __cplusplus
}}
#endif

#endif
"""

_SOURCE = """/* {name}: generated by ltdrnn's C exporter ({what}). */
#include "{name}.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

{macros}

{shift_check}{arrays}

{helpers}

void {name}_init({state} *state)
{{
    {init}
}}

{quantise}void {name}_step(const {ctype} *x, {state} *state, {ctype} *out)
{{
{body}
}}
"""
