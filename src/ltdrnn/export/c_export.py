"""Generate a self-contained C99 step (source + header) from a :class:`~ltdrnn.export.step.StreamingStep`.

The model is described once as a graph (``cells_ir.py``), scheduled into loops (``schedule.py``) and
written in one of two dialects (``c_emit.py``): float32 (``c_float.py``), or integer (``int8=True``,
``c_fixed.py``: int8 weights, int16 values, int32 sums, no float on the step). The API (``c_api.py``)::

    NAME_state_t state;                                      /* the whole state: a struct of one array */
    void NAME_init(NAME_state_t *state);                                   /* at every sequence start */
    int NAME_step(const NAME_input_t x[], NAME_state_t *state, NAME_output_t out[]);  /* NAME_OK or < 0 */
    int NAME_quantise(const float x[], NAME_input_t x_q[]);           /* integer: the input's int16 form */
    int NAME_quantise_adc(const int32_t counts[], NAME_input_t x_q[]);     /* integer, with an ADC map */
    int NAME_normalise_window(float *window, int length);      /* series normalised one by one in training */

``NAME_input_t`` and ``NAME_output_t`` are ``float`` or ``int16_t``; the state's array holds ``float``,
``int16_t`` or ``int32_t`` (an integer state that accumulates, see ``c_fixed.py``) in the layout of
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

from . import c_api, ir, schedule
from .c_emit import STORAGE_MACROS, Constants, Emitter, float_literal
from .c_fixed import FixedDialect
from .c_float import FloatDialect
from .cells_ir import build_graph
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

__all__ = ["CSource", "check_name", "generate_c"]


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
    adc: Optional[Dict[str, List[float]]] = None  # the sensor's units = counts * scale + offset per channel

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
    adc: Optional[Dict[str, Any]] = None,
) -> CSource:
    """The C source and header of ``step`` under the symbol prefix ``name``.

    ``int8``: the integer step; its number formats are calibrated on ``calibration`` ``(B, T, d)`` (the
    training split's inputs, normalised as the model sees them), which it requires. ``contract``: the
    input/output contract (``ltdrnn.export.contract``) written into the header; with a per-channel
    normalisation the C applies it (the float step inside ``NAME_step``, the integer one in
    ``NAME_quantise``); with a per-series one (``contract["input"]["window"]``) the source gets
    ``NAME_normalise_window``. ``adc``: ``{"scale", "offset"}`` of the sensor's ``units = counts scale +
    offset`` (one number or one per channel): the integer step gets ``NAME_quantise_adc``.
    """
    check_name(name)
    contract = contract or {}
    given = contract.get("input") or {}
    scaling, window = given.get("channel"), given.get("window")
    adc = _check_adc(adc, int8, window, step.input_size)
    graph = build_graph(step)
    if int8:
        if calibration is None:
            raise ExportError("int8: the integer C step needs calibration inputs (the run's training split)")
        dialect = FixedDialect(graph, ir.value_ranges(graph, calibration))
    else:
        dialect = FloatDialect()
    plan = schedule.plan(graph, dialect.kind)
    emitter = Emitter(graph, plan, dialect)
    if scaling and not int8:
        emitter.input_name = "xn"
    body = emitter.body()
    weight_bytes = dialect.constants.bytes
    helpers = dialect.helper_source()
    prelude = _normalise(dialect, scaling, step.input_size) if scaling and not int8 else []
    upper = name.upper()
    inputs = Constants()  # the arrays of the functions that take float input
    functions = _input_functions(inputs, dialect, scaling, window, step.input_size, name, int8)
    integer_inputs = Constants()
    if adc:
        functions += "\n" + c_api.quantise_adc(integer_inputs, adc, scaling, step.input_size, name, dialect.input_frac)
    scratch = emitter.scratch_bytes + (4 * step.input_size if prelude else 0)
    costs = {
        "weight_bytes": weight_bytes,
        "flash_bytes": dialect.constants.bytes + inputs.bytes + integer_inputs.bytes,
        "state_bytes": STATE_BYTES[dialect.state_type] * graph.state_size,
        "scratch_bytes": scratch,
        "stack_bytes": scratch + FRAME_ALLOWANCE,
    }
    what = _describe(step, int8)
    header = c_api.header(name, step, int8, what, costs, contract, dialect, adc, window)
    check = [] if int8 else c_api.input_check(step.input_size, upper)
    finish = [f"return {upper}_OK;"] if int8 else c_api.state_check(upper)
    source = _SOURCE.format(
        name=name,
        upper=upper,
        what=what,
        state=dialect.state_type,
        macros=STORAGE_MACROS,
        shift_check=f"typedef char {name}_needs_arithmetic_shift[(-2 >> 1) == -1 ? 1 : -1];\n\n" if int8 else "",
        helpers=helpers,
        arrays="\n".join(dialect.constants.arrays + integer_inputs.arrays),
        init="\n    ".join(dialect.init_lines(graph.init_state(), graph.state_size, upper)),
        inputs=functions,
        step=c_api.signature(name, "step", state="model_state"),
        body="\n".join("    " + line for line in check + prelude + body + finish),
    )
    extra = {}
    if int8:
        extra = {"input_frac": dialect.input_frac, "output_frac": dialect.output_frac, "adc": adc}
    return CSource(name, header, source, int8, dialect.state_type, **costs, **extra)


def _check_adc(adc, int8: bool, window, size: int):
    """The ADC mapping, for the integer step of a model whose input is not normalised per window."""
    if adc is None:
        return None
    if not int8:
        raise ExportError(
            "adc (--adc-scale): the ADC helper feeds the integer step; export with --int8, or convert counts to "
            "units (counts * scale + offset) before the float step"
        )
    if window:
        raise ExportError(
            "adc (--adc-scale): the model's training series were z-normalised one by one, so each window must be "
            "normalised as a whole (NAME_normalise_window, then NAME_quantise); a fixed counts-to-input map "
            "cannot do that. Export without --adc-scale"
        )
    return c_api.check_adc(adc, size)


def _input_functions(constants, dialect, scaling, window, size: int, name: str, int8: bool) -> str:
    """The functions that take float input (the integer step's behind ``LTDRNN_NO_FLOAT``): the
    finiteness test, ``NAME_quantise`` and ``NAME_normalise_window``."""
    parts = [c_api.FINITE.format(name=name)]
    if int8:
        parts.append(c_api.quantise(constants, scaling, size, name, dialect.input_frac))
    if window:
        parts.append(c_api.normalise_window(name, size, window["ddof"]))
    if not int8:
        return "\n\n".join(parts) + "\n"
    return "\n\n".join([f"#if !defined({c_api.NO_FLOAT})", *constants.arrays, *parts, "#endif"]) + "\n"


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


_SOURCE = """/* {name}: generated by ltdrnn's C exporter ({what}). */
#include "{name}.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

{macros}

{shift_check}{arrays}

{helpers}

{inputs}
void {name}_init({upper}_state_t *model_state)
{{
    {state} *const state = model_state->values;
    {init}
}}

{step}
{{
    {state} *const state = model_state->values;
{body}
}}
"""
