"""The public C API of a generated step: the header, and the input helpers around ``NAME_step``.

    typedef struct { T values[NAME_STATE_SIZE]; } NAME_state_t;     the whole state, one type
    void NAME_init(NAME_state_t *state);
    int NAME_step(const NAME_input_t x[NAME_INPUT_SIZE], NAME_state_t *state, NAME_output_t out[NAME_OUTPUT_SIZE]);
    int NAME_quantise(const float x[NAME_INPUT_SIZE], NAME_input_t x_q[NAME_INPUT_SIZE]);          --int8
    int NAME_quantise_adc(const int32_t counts[NAME_INPUT_SIZE], NAME_input_t x_q[NAME_INPUT_SIZE]);
                                                                           --int8 with an ADC mapping
    int NAME_normalise_window(float *window, int length);      training series z-normalised one by one

The state is a struct, not an array whose element type the caller picks: an ``int16_t`` array declared for
an ``int32_t`` state was half the size the step wrote, and since the functions take ``NAME_state_t *``
such a declaration no longer compiles (an incompatible pointer: an error under ``-Werror`` and in C++).
Every function that takes input returns a status, ``NAME_OK`` or a negative ``NAME_ERR_*``: a NaN or an
infinity is refused before anything is written, instead of turning the state non-finite and the output
into class 0.

In the integer build the functions that take float sit inside ``#if !defined(LTDRNN_NO_FLOAT)``: a
program that feeds ADC counts through ``NAME_quantise_adc`` defines ``LTDRNN_NO_FLOAT`` and has no float
in the model at all.
"""

from __future__ import annotations

import math
import re
import textwrap
from typing import Any, Dict, List, Optional

from .c_emit import float_literal
from .step import ExportError

#: an ADC count's magnitude limit: |count| * the helper's 15-bit half multipliers stay below 2^31
ADC_LIMIT = 65535
NO_FLOAT = "LTDRNN_NO_FLOAT"

STATUS = """#define {upper}_OK 0
#define {upper}_ERR_NONFINITE (-1) /* a NaN or infinite input: nothing was written, the state unchanged */
#define {upper}_ERR_STATE (-2)     /* float step: the state turned non-finite (a stream far past the tested):
                                    {name}_init before the next step */
#define {upper}_ERR_RANGE (-3)     /* out of range (|ADC count| > {limit}, a window under 2 samples) */"""

FINITE = """/* 0 for NaN and the infinities (all exponent bits set): a bit test, which -ffast-math cannot remove */
typedef char {name}_float_is_32_bits[sizeof(float) == 4 ? 1 : -1];
static int finite_(float v)
{{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return (bits & 0x7F800000UL) != 0x7F800000UL;
}}"""


def declarations(name: str, int8: bool, adc: bool, window: bool) -> str:
    """The API's prototypes; the integer build's float functions behind ``LTDRNN_NO_FLOAT``."""
    lines = [f"void {name}_init(NAME_state_t *state);", f"{signature(name, 'step')};"]
    floats = [f"{signature(name, 'quantise')};"] if int8 else []
    if window:
        floats.append(f"int {name}_normalise_window(float *window, int length);")
    if int8 and floats:
        floats = [f"#if !defined({NO_FLOAT})", *floats, "#endif"]
    lines += floats
    if adc:
        lines.append(f"{signature(name, 'quantise_adc')};")
    return "\n".join(lines).replace("NAME_", name.upper() + "_")


SIGNATURES = {
    "step": "const NAME_input_t x[NAME_INPUT_SIZE], NAME_state_t *state, NAME_output_t out[NAME_OUTPUT_SIZE]",
    "quantise": "const float x[NAME_INPUT_SIZE], NAME_input_t x_q[NAME_INPUT_SIZE]",
    "quantise_adc": "const int32_t counts[NAME_INPUT_SIZE], NAME_input_t x_q[NAME_INPUT_SIZE]",
}


def signature(name: str, function: str, state: str = "state") -> str:
    """``int NAME_function(parameters)`` as the header declares it and the source defines it."""
    parameters = SIGNATURES[function].replace("*state", f"*{state}").replace("NAME_", name.upper() + "_")
    return f"int {name}_{function}({parameters})"


def types(upper: str, int8: bool, state_type: str) -> str:
    """The state struct (and a compile-time check of its size), the input and output element types."""
    value = "int16_t" if int8 else "float"
    said_in = "the int16 input (NAME_quantise)" if int8 else "the raw input"
    said_out = f"the outputs times 2^{upper}_OUTPUT_FRAC" if int8 else "the outputs"
    return (
        f"/* the whole state of one stream ({upper}_STATE_BYTES): declare one, pass its address */\n"
        f"typedef struct {{ {state_type} values[{upper}_STATE_SIZE]; }} {upper}_state_t;\n"
        f"typedef char {upper.lower()}_state_bytes_check[sizeof({upper}_state_t) == {upper}_STATE_BYTES ? 1 : -1];\n"
        f"typedef {value} {upper}_input_t;  /* x[{upper}_INPUT_SIZE] of the step: {said_in} */\n"
        f"typedef {value} {upper}_output_t;  /* out[{upper}_OUTPUT_SIZE]: {said_out} */"
    ).replace("NAME_", upper.lower() + "_")


def input_check(size: int, upper: str) -> List[str]:
    """The float step's first lines: a non-finite input returns before anything is written."""
    return [f"for (int i = 0; i < {size}; ++i) if (!finite_(x[i])) return {upper}_ERR_NONFINITE;"]


def state_check(upper: str) -> List[str]:
    """The float step's last lines: a state that has turned non-finite is reported."""
    return [
        f"for (int i = 0; i < {upper}_STATE_SIZE; ++i) if (!finite_(state[i])) return {upper}_ERR_STATE;",
        f"return {upper}_OK;",
    ]


def quantise(constants, scaling, size: int, name: str, frac: int) -> str:
    """``NAME_quantise``: refuse a non-finite input, normalise (per channel) and round into int16."""
    scale = float_literal(2.0**frac)
    value = f"x[i] * {scale}"
    if scaling:
        mean, std = _scaling_arrays(constants, scaling)
        value = f"(x[i] - {constants.read(mean, 'i')}) / {constants.read(std, 'i')} * {scale}"
    upper = name.upper()
    return (
        f"{signature(name, 'quantise')}\n{{\n"
        f"    for (int i = 0; i < {size}; ++i) if (!finite_(x[i])) return {upper}_ERR_NONFINITE;\n"
        f"    for (int i = 0; i < {size}; ++i) {{\n"
        f"        const float v = {value};\n"
        "        x_q[i] = v >= 32767.0f ? 32767 : v <= -32768.0f ? -32768\n"
        "                 : (int16_t)(v < 0.0f ? v - 0.5f : v + 0.5f);\n"
        "    }\n"
        f"    return {upper}_OK;\n}}\n"
    )


def _scaling_arrays(constants, scaling):
    if "input_mean" not in constants.kinds:
        constants.define("input_mean", "float", [float_literal(v) for v in scaling["mean"]])
        constants.define("input_std", "float", [float_literal(v) for v in scaling["std"]])
    return "input_mean", "input_std"


def normalise_window(name: str, size: int, ddof: int) -> str:
    """``NAME_normalise_window``: each channel of a window to mean 0 and standard deviation 1, as each
    training series was (values scaled by the channel's peak first, so no square overflows)."""
    upper = name.upper()
    at = f"(long)t * {size}"
    return f"""/* z-normalise window[t * {upper}_INPUT_SIZE + i] (channel i of sample t, t < length) in place, each
   channel to mean 0 and standard deviation 1 (ddof {ddof}), as each training series was; a channel whose
   spread is below 1e-8 of its peak is only shifted, as in training */
int {name}_normalise_window(float *window, int length)
{{
    if (length < 2) return {upper}_ERR_RANGE;
    for (long k = 0; k < (long)length * {size}; ++k) if (!finite_(window[k])) return {upper}_ERR_NONFINITE;
    for (int i = 0; i < {size}; ++i) {{
        float *const v = window + i;
        float peak = 0.0f, mean = 0.0f, spread = 0.0f;
        for (int t = 0; t < length; ++t) peak = fabsf(v[{at}]) > peak ? fabsf(v[{at}]) : peak;
        if (peak == 0.0f) continue; /* all zero: normalised already */
        const float unit = 1.0f / peak;
        for (int t = 0; t < length; ++t) mean += v[{at}] * unit;
        mean /= (float)length;
        for (int t = 0; t < length; ++t) spread += (v[{at}] * unit - mean) * (v[{at}] * unit - mean);
        spread = sqrtf(spread / (float)(length - {ddof}));
        const float divide = spread > 1e-8f ? spread : unit;
        for (int t = 0; t < length; ++t) v[{at}] = (v[{at}] * unit - mean) / divide;
    }}
    return {upper}_OK;
}}
"""


# ---- ADC counts to the integer input, without float --------------------------------------------------------
def check_adc(adc, size: int) -> Optional[Dict[str, List[float]]]:
    """``{"scale": [d], "offset": [d]}`` from ``adc`` (``{"scale": s or [d], "offset": o or [d]}``), or
    an :class:`ExportError` naming the bad value."""
    if adc is None:
        return None
    if not isinstance(adc, dict) or "scale" not in adc or set(adc) - {"scale", "offset"}:
        raise ExportError(f"adc: expected {{'scale': units per count, 'offset': units at count 0}}, got {adc!r}")
    result = {}
    for key, option in (("scale", "--adc-scale"), ("offset", "--adc-offset")):
        given = adc.get(key, 0.0)
        values = list(given) if isinstance(given, (list, tuple)) else [given]
        if len(values) == 1:
            values = values * size
        bad = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)]
        if len(values) != size or bad:
            raise ExportError(
                f"adc {key} ({option}): expected one finite number or {size} (one per input channel), got {given!r}"
            )
        if key == "scale" and 0.0 in values:
            raise ExportError(f"adc scale ({option}): expected non-zero units per count, got {given!r}")
        result[key] = [float(v) for v in values]
    return result


def adc_constants(adc, scaling, frac: int, size: int):
    """Per channel ``(a, b, shift)`` of ``x_q = (counts a / 2^15 + b) >> shift``, the integer form of
    ``round(((counts scale + offset) - mean) / std 2^frac)``: ``shift`` as large as keeps ``|counts a /
    2^15|`` (counts up to :data:`ADC_LIMIT`) and ``|b|`` within 2^29, so their sum fits an int32, and
    ``b`` carries the rounding half."""
    rows = []
    for i in range(size):
        mean = scaling["mean"][i] if scaling else 0.0
        std = scaling["std"][i] if scaling else 1.0
        slope = adc["scale"][i] * 2.0**frac / std
        start = (adc["offset"][i] - mean) * 2.0**frac / std
        room = [math.log2(2.0**29 / (abs(slope) * ADC_LIMIT))] + ([math.log2(2.0**29 / abs(start))] if start else [])
        shift = min(30, math.floor(min(room)))
        if shift < 0:
            raise ExportError(
                f"adc (--adc-scale, --adc-offset): channel {i}: one count is {slope:.3g} steps of the integer input "
                f"and count 0 is {start:.3g} steps; the integer helper takes at most 2^29 / {ADC_LIMIT} and 2^29"
            )
        rounding = 1 << (shift - 1) if shift > 0 else 0
        rows.append((int(round(slope * 2.0 ** (shift + 15))), int(round(start * 2.0**shift)) + rounding, shift))
    return rows


def quantise_adc(constants, adc, scaling, size: int, name: str, frac: int) -> str:
    """``NAME_quantise_adc``: ADC counts into the int16 input with integer arithmetic only."""
    rows = adc_constants(adc, scaling, frac, size)
    constants.define("adc_a", "int32", [f"{a}L" for a, _, _ in rows])
    constants.define("adc_b", "int32", [f"{b}L" for _, b, _ in rows])
    constants.define("adc_shift", "int8", [str(s) for _, _, s in rows])
    upper, read = name.upper(), constants.read
    limit = f"{ADC_LIMIT}L"
    return f"""/* counts -> x_q = round(((counts scale + offset) - mean) / std 2^{upper}_INPUT_FRAC) without float: per
   channel (counts a / 2^15 + b) >> shift, a taken in two 15-bit halves so that no product passes 2^31 */
{signature(name, "quantise_adc")}
{{
    for (int i = 0; i < {size}; ++i) if (counts[i] > {limit} || counts[i] < -{limit}) return {upper}_ERR_RANGE;
    for (int i = 0; i < {size}; ++i) {{
        const int32_t c = counts[i], a = {read("adc_a", "i")};
        const int32_t acc = c * (a >> 15) + ((c * (a & 32767L)) >> 15) + {read("adc_b", "i")};
        x_q[i] = sat16(acc >> {read("adc_shift", "i")});
    }}
    return {upper}_OK;
}}
"""


# ---- the header -----------------------------------------------------------------------------------------
def c_string(text: str) -> str:
    """A C string literal of ``text`` (printable ASCII kept, other UTF-8 bytes as octal escapes)."""
    body = "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\?' else f"\\{b:03o}" for b in str(text).encode())
    return f'"{body}"'


def _wrap(text: str, width: int = 100) -> List[str]:
    return textwrap.wrap(text, width - 4) or [""]


def contract_comment(contract: Dict[str, Any], int8: bool, upper: str, adc) -> str:
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
        if adc:
            mapping = ", ".join(
                f"{s:.7g} counts {'-' if o < 0 else '+'} {abs(o):.7g}" for s, o in zip(adc["scale"], adc["offset"])
            )
            entries.append(("ADC input", f"the sensor's units are x = ({mapping}) per channel; NAME_quantise_adc"))
        entries.append(("integer output", f"out[k] / 2^{upper}_OUTPUT_FRAC is output k (argmax picks the class)"))
    if contract.get("outputs"):
        entries.append(("outputs", contract["outputs"]))
    if contract.get("reset"):
        entries.append(("reset", contract["reset"]))
    if contract.get("validated"):
        entries.append(("validated", contract["validated"]))
    lines = []
    for key, text in entries:
        text = re.sub(r"NAME_(?=[A-Z])", upper + "_", f"{key}: {text}")  # a macro; else a function
        wrapped = _wrap(text.replace("NAME_", upper.lower() + "_").replace("*/", "* /"))
        lines += [f" *   {wrapped[0]}"] + [f" *     {line}" for line in wrapped[1:]]
    return "\n".join(lines)


def usage(name: str, int8: bool, adc, window: bool) -> str:
    """The header's first lines: how a program calls the step."""
    upper = name.upper()
    feed = f"{name}_step(x, &state, out)"
    lines = [
        f" *   {upper}_state_t state;        the whole state ({upper}_STATE_BYTES), one per stream",
        f" *   {upper}_input_t x[{upper}_INPUT_SIZE];   {upper}_output_t out[{upper}_OUTPUT_SIZE];",
        f" *   {name}_init(&state);                        at the start of every sequence",
    ]
    if window:
        lines.append(f" *   {name}_normalise_window(window, length);   each window first (see the contract)")
    lines.append(" *   for each sample:")
    if int8:
        lines.append(f" *       status = {name}_quantise(raw, x);      float raw input -> x")
        if adc:
            lines.append(f" *       (or {name}_quantise_adc(counts, x)     int32 ADC counts -> x, no float)")
    lines.append(f" *       status = {feed};      out: the head's output after this sample")
    lines.append(f" *   status: {upper}_OK (0) or a negative {upper}_ERR_* below")
    return "\n".join(lines)


def stream_defines(contract: Dict[str, Any]) -> Dict[str, int]:
    """``VALIDATED_LENGTH`` (the longest sequence parity was measured on) and ``RESET_WITHIN`` (the longest
    stretch without reset that was tested and held), where the contract has them."""
    keys = (("VALIDATED_LENGTH", "validated_length"), ("RESET_WITHIN", "reset_within"))
    return {macro: contract[key] for macro, key in keys if contract.get(key)}


def header(name, step, int8, what, costs, contract, dialect, adc, window) -> str:
    upper = name.upper()
    defines = {
        "INPUT_SIZE": step.input_size,
        "STATE_SIZE": step.state_size,
        "OUTPUT_SIZE": step.output_size,
        "INTEGER": int(int8),
        "NORMALISE_WINDOW": int(window is not None),
        "ADC_INPUT": int(adc is not None),
        "FLASH_BYTES": costs["flash_bytes"],
        "WEIGHT_BYTES": costs["weight_bytes"],
        "STATE_BYTES": costs["state_bytes"],
        "SCRATCH_BYTES": costs["scratch_bytes"],
        "STACK_BYTES": costs["stack_bytes"],
        "RAM_BYTES": costs["state_bytes"] + costs["stack_bytes"],
    }
    if int8:
        defines.update(INPUT_FRAC=dialect.input_frac, OUTPUT_FRAC=dialect.output_frac)
    defines.update(stream_defines(contract))
    lines = [f"#define {upper}_{key} {value}" for key, value in defines.items()]
    names = contract.get("classes") or [f"y{k}" for k in range(step.output_size)]
    lines.append(f"#define {upper}_CLASS_NAMES " + ", ".join(c_string(n) for n in names))
    ram, flash = defines["RAM_BYTES"], defines["FLASH_BYTES"]
    return HEADER.format(
        name=name,
        upper=upper,
        what=what,
        usage=usage(name, int8, adc, window is not None),
        contract=contract_comment(contract, int8, upper, adc),
        defines="\n".join(lines),
        status=STATUS.format(upper=upper, name=name, limit=ADC_LIMIT),
        types=types(upper, int8, dialect.state_type),
        api=declarations(name, int8, adc is not None, window is not None),
        ram=ram,
        flash=flash,
        state=costs["state_bytes"],
        stack=costs["stack_bytes"],
    )


HEADER = """/* {name}: one streaming step of a ltdrnn model ({what}).
 * Generated by ltdrnn's C exporter; C99, no malloc, no mutable static data. Batch 1.
 *
{usage}
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

{status}

{types}

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
