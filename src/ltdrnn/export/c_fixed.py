"""The integer dialect of the C step: int8 weights, int16 values, int32 sums, no float on the step.

Number formats. Every value ``v`` of the graph is an ``int16_t`` ``q`` with ``v ~ q / 2^f``: ``f`` (its
fractional bits) comes from the largest ``|v|`` seen on calibration data (the training split) times a
margin of 2, so ``|v|`` may double before it saturates; sigmoid, tanh and softmax outputs are Q15. A
state part has one format for everything read from and written to it. Every stored and every
intermediate value is rounded to nearest and saturated to int16, so an out-of-range value clips instead
of wrapping around.

Weights. Every matrix is int8 per output row, ``W[r, c] ~ s_r q[r, c]`` (symmetric, ``s_r = max_c |W[r, c]|
/ 127``, :func:`quantize_rows`). A row's products are summed in int32 and brought to the output format by
one multiplication: ``y_r = round(acc_r m_r / 2^(16 + e))`` with ``m_r = round(s_r 2^(f_y - f_v + 16 + e))``
an int16 per row and ``e`` one shift per matrix (chosen so that the largest ``|m_r|`` is in [2^14, 2^15)).
Biases and per-unit constants are int16 in the output's format (int32 where they do not fit).

Activations. ``tanh`` is a 193-entry table on [0, 6] (steps of 1/32, odd symmetry, linear interpolation,
input read in Q12; error <= 1.2e-4 from the table and its interpolation, same again from the Q12 input);
``sigmoid(x) = (1 + tanh(x/2)) / 2`` uses the same table; ``exp`` (MIST's softmax) is ``2^(x log2 e)``
with a 33-entry table of ``2^f`` on [0, 1]; ``relu`` is a comparison. The softmax normalises with one
integer division per step. Right shifts of negative numbers must be arithmetic (gcc and clang guarantee
it; the source checks it at compile time).
"""

from __future__ import annotations

import math
from typing import Dict, List, Tuple

import numpy as np
import torch

from .c_emit import Constants, Emitter, rows_loop
from .ir import Graph, Value
from .step import ExportError

MARGIN = 2.0  # headroom over the calibration range before a value saturates
DEFAULT_FRAC = 12  # a value that was always 0 on the calibration data: range +-8
FRAC_LIMITS = (-6, 24)
INT16_MAX = 32767
TABLE_STEP_BITS = 5  # tanh table step 1/32
TANH_RANGE = 6
MAX_COLUMNS = (2**31 - 1) // (127 * 32768)  # int32 row sums cannot overflow below this many columns


def quantize_rows(weight) -> Tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row int8: ``(q (rows, cols) int8, scale (rows,) float32)``, ``w ~ scale[:, None] * q``."""
    w = weight.detach().to(torch.float64).cpu().numpy() if isinstance(weight, torch.Tensor) else np.asarray(weight)
    scale = np.abs(w).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


def frac_bits(largest: float, margin: float = MARGIN) -> int:
    """Fractional bits of an int16 format holding ``|v| <= largest * margin``."""
    if not largest > 0 or not math.isfinite(largest):
        return DEFAULT_FRAC
    bits = math.floor(math.log2(32768 / (largest * margin)))
    return int(min(max(bits, FRAC_LIMITS[0]), FRAC_LIMITS[1]))


def _table(function, points: int, step: float) -> List[int]:
    return [int(round(function(i * step))) for i in range(points)]


TANH_TABLE = _table(lambda v: math.tanh(v) * 32768, TANH_RANGE * 2**TABLE_STEP_BITS + 1, 2.0**-TABLE_STEP_BITS)
TANH_TABLE = [min(v, INT16_MAX) for v in TANH_TABLE]
POW2_TABLE = _table(lambda v: (2.0**v - 1.0) * 16384, 33, 1 / 32)  # 2^f - 1 in Q14, f in [0, 1]

HELPERS = {
    "sat": """static int16_t sat16(int32_t v) { return v > 32767 ? 32767 : v < -32768 ? -32768 : (int16_t)v; }""",
    "dot": """/* sum_c w[c] v[c]: int8 weights (flash) times int16 values, in int32 */
static int32_t dot_q(const int8_t *w, const int16_t *v, int cols)
{
    int32_t acc = 0;
    for (int c = 0; c < cols; ++c) acc += (int32_t)(int16_t)LTDRNN_READ_I8(w + c) * v[c];
    return acc;
}

/* round(a m / 2^16) without a 64-bit product */
static int32_t mul_hi(int32_t a, int16_t m)
{
    const int32_t high = (int32_t)(int16_t)(a >> 16) * m;
    const int32_t low = ((int32_t)(uint16_t)(a & 0xFFFF) * m + 32768) >> 16;
    return high + low;
}""",
    "tanh": """/* tanh(x) in Q15 for x in Q12: a table of tanh on [0, 6] in steps of 1/32, interpolated */
static int32_t tanh_q15(int32_t x)
{
    const int32_t ax = x < 0 ? -x : x;
    int32_t y = 32767;
    if (ax < (int32_t)TANH_END << 12) {
        const int i = (int)(ax >> 7), f = (int)(ax & 127);
        const int32_t a = LTDRNN_READ_I16(tanh_table + i), b = LTDRNN_READ_I16(tanh_table + i + 1);
        y = a + (((b - a) * f + 64) >> 7);
    }
    return x < 0 ? -y : y;
}""",
    "sigmoid": """/* sigmoid(x) = (1 + tanh(x / 2)) / 2 in Q15 (1.0 = 32768), from x / 2 in Q12 (that is, x in Q11) */
static int32_t sigmoid_q15(int32_t half) { return (tanh_q15(half) + 32769) >> 1; }""",
    "exp": """/* exp(x) in Q15 (1.0 = 32768) for x <= 0 in Q12: 2^(x log2 e), a table of 2^f - 1 on [0, 1] */
static int32_t exp_q15(int32_t x)
{
    if (x < -16L * 4096) return 0;
    const int32_t y = (x * 23638L + 8192) >> 14;             /* x log2(e), Q12 */
    const int shift = (int)(-(y >> 12));                      /* 2^y = 2^(y & 4095 / 4096) / 2^shift */
    const int i = (int)((y & 4095) >> 7), f = (int)(y & 127);
    const int32_t a = LTDRNN_READ_I16(pow2_table + i), b = LTDRNN_READ_I16(pow2_table + i + 1);
    const int32_t p = 2 * (16384 + a + (((b - a) * f + 64) >> 7));
    return shift > 16 ? 0 : (p + ((1L << shift) >> 1)) >> shift;
}""",
}


def conv(expr: str, source: int, target: int) -> str:
    """``expr`` (an integer with ``source`` fractional bits) as an int32 with ``target`` bits, rounded."""
    shift = target - source
    if shift == 0:
        return f"(int32_t){expr}"
    if shift > 0:
        if shift > 16:
            raise ExportError(
                f"fixed point: a {shift}-bit left shift would overflow int32 (value ranges too far apart)"
            )
        return f"((int32_t){expr} * {1 << shift})"
    if -shift > 30:
        return "0"
    return f"(((int32_t){expr} + {1 << (-shift - 1)}) >> {-shift})"


def mantissa(number: float, limit: int = INT16_MAX) -> Tuple[int, int]:
    """``(q, f)`` with ``number ~ q / 2^f``, ``|q| <= limit`` as large as possible (``q = 0`` for 0)."""
    if number == 0.0:
        return 0, 0
    f = math.floor(math.log2(limit / abs(number)))
    q = int(round(number * 2.0**f))
    while abs(q) > limit:
        f -= 1
        q = int(round(number * 2.0**f))
    return q, f


class FixedDialect:
    ctype = "int16_t"
    value_bytes = 2
    zero = "0"
    int8 = True

    def __init__(self, graph: Graph, ranges: Dict[int, float]) -> None:
        self.graph = graph
        self.constants = Constants()
        self.helpers: set = {"sat"}
        self.frac = formats(graph, ranges)
        self.const_frac: Dict[str, int] = {}

    # ---- constants ---------------------------------------------------------------------------------
    def constant(self, value: Value) -> str:
        label = value.attrs["label"]
        if label not in self.constants.kinds:
            data = value.attrs["data"]
            _, f = mantissa(float(np.abs(data).max()) if data.size else 0.0)
            self.const_frac[label] = f
            self.constants.define(label, "int16", [str(int(round(v * 2.0**f))) for v in data])
        return label

    def scalar(self, value: Value) -> str:
        raise AssertionError("scalars are folded into the operations of the integer dialect")

    def _fixed(self, a: Value) -> int:
        return self.const_frac[self.constant(a)] if a.op == "const" else self.frac[a.index]

    # ---- elementwise -------------------------------------------------------------------------------
    def element(self, value: Value, emit: Emitter) -> str:
        out = self.frac[value.index]
        op, args = value.op, value.args
        if op == "div":
            raise ExportError(
                "pooling mean: the integer C step does not support mean pooling (a running mean needs a "
                "division per step); export float C, or use pooling last or max"
            )
        if op in ("add", "sub"):
            terms = [self._term(a, emit, out) for a in args]
            return f"sat16({terms[0]} {'+' if op == 'add' else '-'} {terms[1]})"
        if op == "mul":
            return f"sat16({self._product(args[0], args[1], emit, out)})"
        if op == "maximum":
            a, b = (self._term(x, emit, out) for x in args)
            return f"sat16({a} > {b} ? {a} : {b})"
        if op == "select":
            condition = args[0]
            threshold = math.floor(value.attrs["threshold"] * 2.0 ** self._fixed(condition))
            a, b = (self._term(x, emit, out) for x in args[1:])
            return f"sat16({emit.ref(condition, 'j')} > {threshold} ? {a} : {b})"
        return self._activation(value.attrs["function"], args[0], emit, out)

    def _term(self, a: Value, emit: Emitter, out: int) -> str:
        """``a`` as an int32 in the output format ``out`` (a scalar as a literal)."""
        if a.op == "scalar":
            return str(int(round(a.attrs["number"] * 2.0**out)))
        return conv(emit.ref(a, "j"), self._fixed(a), out)

    def _product(self, a: Value, b: Value, emit: Emitter, out: int) -> str:
        if a.op == "scalar":
            a, b = b, a
        if b.op == "scalar":
            q, f = mantissa(b.attrs["number"])
            if q == 0:
                return "0"
            return conv(f"((int32_t){emit.ref(a, 'j')} * {q})", self._fixed(a) + f, out)
        return conv(f"((int32_t){emit.ref(a, 'j')} * {emit.ref(b, 'j')})", self._fixed(a) + self._fixed(b), out)

    def _activation(self, function: str, a: Value, emit: Emitter, out: int) -> str:
        x = emit.ref(a, "j")
        if function == "relu":
            return f"sat16({x} > 0 ? {conv(x, self._fixed(a), out)} : 0)"
        if function == "tanh":
            self.helpers.add("tanh")
            return f"sat16({conv(f'tanh_q15({conv(x, self._fixed(a), 12)})', 15, out)})"
        self.helpers |= {"tanh", "sigmoid"}
        return f"sat16({conv(f'sigmoid_q15({conv(x, self._fixed(a), 11)})', 15, out)})"

    # ---- vector operations -------------------------------------------------------------------------
    def vector(self, value: Value, emit: Emitter) -> List[str]:
        return getattr(self, "_" + value.op)(value, emit)

    def _linear(self, value: Value, emit: Emitter) -> List[str]:
        attrs, out = value.attrs, self.frac[value.index]
        self.helpers.add("dot")
        start = []
        if attrs["bias"] is not None:
            start.append(self._bias(attrs["bias_label"], attrs["bias"], out))
        if attrs["addend"]:
            addend = value.args[-1]
            start.append(conv(emit.ref(addend, "r"), self._fixed(addend), out))
        lines = [f"int32_t acc = {' + '.join(start) if start else '0'};"]
        declarations = []
        for k, (term, vector) in enumerate(zip(attrs["terms"], value.args)):
            rows, cols = term.weight.shape
            if cols > MAX_COLUMNS:
                raise ExportError(f"{term.label}: {cols} columns; the int32 row sums hold at most {MAX_COLUMNS}")
            q, m_label, shift = self._matrix(term, self._fixed(vector), out)
            declarations.append(f"const int8_t *w{k} = {q};")
            product = f"mul_hi(dot_q(w{k}, {emit.pointer(vector)}, {cols}), {self.constants.read(m_label, 'r')})"
            lines += [f"acc += {_shift(product, shift)};", f"w{k} += {cols};"]
        lines.append(f"{emit.pointer(value)}[r] = sat16(acc);")
        return ["{", *("    " + d for d in declarations), *("    " + s for s in rows_loop(value.size, lines)), "}"]

    def _bias(self, label: str, bias: np.ndarray, out: int) -> str:
        values = [int(round(v * 2.0**out)) for v in bias]
        kind = "int16" if all(abs(v) <= INT16_MAX for v in values) else "int32"
        if label not in self.constants.kinds:
            self.constants.define(label, kind, [str(v) if kind == "int16" else f"{v}L" for v in values])
        return f"(int32_t){self.constants.read(label, 'r')}"

    def _matrix(self, term, source: int, out: int) -> Tuple[str, str, int]:
        """The int8 matrix, its per-row multipliers and the shift ``e`` of one linear term."""
        q, scale = quantize_rows(term.weight)
        exact = scale.astype(np.float64) * 2.0 ** (out - source + 16)
        shift = min(30, math.floor(math.log2(INT16_MAX / exact.max())))
        m = np.rint(exact * 2.0**shift).astype(np.int64)
        if 16 + shift < 0:
            raise ExportError(f"{term.label}: its output format is too fine for its weights (shift {shift})")
        q_label = self.constants.define(term.label + "_q", "int8", [str(v) for v in q.reshape(-1)])
        m_label = self.constants.define(term.label + "_m", "int16", [str(v) for v in m])
        return q_label, m_label, shift

    def _softmax(self, value: Value, emit: Emitter) -> List[str]:
        self.helpers.add("exp")
        n, src, dst = value.size, emit.pointer(value.args[0]), emit.pointer(value)
        to_q12 = conv(f"((int32_t){src}[i] - top)", self._fixed(value.args[0]), 12)
        return [
            "{",
            f"    int16_t top = {src}[0];",
            "    int32_t total = 0, e[%d], reciprocal;" % n,
            f"    for (int i = 1; i < {n}; ++i) top = {src}[i] > top ? {src}[i] : top;",
            f"    for (int i = 0; i < {n}; ++i) {{ e[i] = exp_q15({to_q12}); total += e[i]; }}",
            "    reciprocal = ((1L << 30) + total / 2) / total;",
            f"    for (int i = 0; i < {n}; ++i) {dst}[i] = sat16((e[i] * reciprocal + 16384) >> 15);",
            "}",
        ]

    def _combine(self, value: Value, emit: Emitter) -> List[str]:
        weights, rows, out = value.args[0], value.args[1:], self.frac[value.index]
        w = emit.pointer(weights)
        terms = " + ".join(
            conv(f"((int32_t){w}[{i}] * {emit.ref(row, 'j')})", 15 + self._fixed(row), out)
            for i, row in enumerate(rows)
        )
        return [f"for (int j = 0; j < {value.size}; ++j) {emit.pointer(value)}[j] = sat16({terms});"]

    # ---- the file ------------------------------------------------------------------------------------
    def helper_source(self) -> str:
        parts = []
        if "tanh" in self.helpers:
            self.constants.define("tanh_table", "int16", [str(v) for v in TANH_TABLE])
            parts.append(f"#define TANH_END {TANH_RANGE}")
        if "exp" in self.helpers:
            self.constants.define("pow2_table", "int16", [str(v) for v in POW2_TABLE])
        parts += [HELPERS[h] for h in ("sat", "dot", "tanh", "sigmoid", "exp") if h in self.helpers]
        return "\n\n".join(parts)

    @property
    def table_bytes(self) -> int:
        return 2 * (len(TANH_TABLE) * ("tanh" in self.helpers) + len(POW2_TABLE) * ("exp" in self.helpers))

    def init_lines(self, initial, state_size: int, upper: str) -> List[str]:
        lines = [f"memset(state, 0, sizeof(int16_t) * {upper}_STATE_SIZE);"]
        for part in self.graph.parts:
            f = self.part_frac(part)
            for k, v in enumerate(part.init.reshape(-1)):
                if v != 0.0:
                    q = -32768 if v == -math.inf else max(-32768, min(INT16_MAX, int(round(v * 2.0**f))))
                    lines.append(f"state[{part.offset + k}] = {q};")
        return lines

    def part_frac(self, part) -> int:
        reads = [v for v in self.graph.values if v.op == "state" and v.attrs["part"] is part]
        return self.frac[reads[0].index] if reads else DEFAULT_FRAC

    @property
    def input_frac(self) -> int:
        return self.frac[self.graph.x.index]

    @property
    def output_frac(self) -> int:
        return self.frac[self.graph.result.index]


def _shift(expr: str, shift: int) -> str:
    """``expr / 2^shift`` rounded (a left shift for a negative ``shift``)."""
    if shift == 0:
        return expr
    if shift < 0:
        return f"({expr} * {1 << -shift})"
    return f"(({expr} + {1 << (shift - 1)}) >> {shift})"


def formats(graph: Graph, ranges: Dict[int, float]) -> Dict[int, int]:
    """Fractional bits of every value from its calibrated range (see the module docstring)."""
    frac: Dict[int, int] = {}
    for value in graph.values:
        if value.op == "view":
            frac[value.index] = frac[value.args[0].index]
        elif value.op == "softmax" or (value.op == "act" and value.attrs["function"] in ("tanh", "sigmoid")):
            frac[value.index] = 15
        else:
            frac[value.index] = frac_bits(ranges.get(value.index, 0.0))
    for part in graph.parts:  # one format per state part: its reads and what is written to it
        reads = [v for v in graph.values if v.op == "state" and v.attrs["part"] is part]
        written = [v for _, p, v in graph.writes if p is part]
        largest = max(
            [ranges.get(v.index, 0.0) for v in reads + written]
            + [float(np.abs(part.init[np.isfinite(part.init)]).max(initial=0.0))]
        )
        f = frac_bits(largest)
        for v in reads + written:
            frac[v.index] = f
    for value in graph.values:  # views follow their (possibly re-formatted) source
        if value.op == "view":
            frac[value.index] = frac[value.args[0].index]
    return frac
