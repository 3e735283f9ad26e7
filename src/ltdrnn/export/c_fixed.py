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
Biases and per-unit constants are int16 in the output's format (int32 where they do not fit). The C helpers
(``c_kernels.py``) take the products on AVR with the 8 x 8-bit multiplier (``dot_q``: MULS and MULSU in
inline assembly; ``mul_hi``: two 16 x 16-bit products), everywhere else in plain C: the same exact sums.

Accumulating states. A state part that is its own old value plus or times a change (TARNN's ``s + delta``,
an LSTM's cell, the gated states of GRU, FastGRNN and SA-RNN, iRNN's residual, a max pool) is an
``int32_t`` with 15 more fractional bits, and so is every value computed from it by additions, products,
selections and maxima, and every term that feeds it back through relu and linear maps (``formats``):
a change per step far below the int16 resolution of the state's range would otherwise vanish (a trained
TARNN, |state| up to 160, agreed on 75% of GunPoint's test sequences with an int16 state). A wide value
stays within +-2^30 (``sat30``: two add without overflow); it enters a linear map as two int16 halves
``hi 2^15 + lo``, both multiplied by the int8 weights; a product with it is ``mul_hi`` (int32 x int16
without 64-bit arithmetic), and a constant near +-1 multiplies it as ``a (+-1) + a (c -+ 1)``. The state
array is then ``int32_t`` (``NAME_state_t``).

Activations. ``tanh`` is a 193-entry table on [0, 6] (steps of 1/32, odd symmetry, linear interpolation,
input read in Q12; error <= 1.2e-4 from the table and its interpolation, same again from the Q12 input);
``sigmoid(x) = (1 + tanh(x/2)) / 2`` uses the same table; ``exp`` (MIST's softmax) is ``2^(x log2 e)``
with a 33-entry table of ``2^f`` on [0, 1]; ``relu`` is a comparison. The softmax normalises with one
integer division per step. Right shifts of negative numbers must be arithmetic (gcc and clang guarantee
it; the source checks it at compile time).
"""

from __future__ import annotations

import math
import re
from typing import Dict, List, Tuple

import numpy as np
import torch

from .c_emit import Constants, Emitter, rows_loop
from .c_kernels import HELPERS, POW2_TABLE, TANH_RANGE, TANH_TABLE
from .ir import Graph, Value
from .step import ExportError

MARGIN = 2.0  # headroom over the calibration range before a value saturates
DEFAULT_FRAC = 12  # a value that was always 0 on the calibration data: range +-8
FRAC_LIMITS = (-6, 24)
INT16_MAX = 32767
MAX_COLUMNS = (2**31 - 1) // (127 * 32768)  # int32 row sums cannot overflow below this many columns
WIDE_EXTRA = 15  # an int32 value of an accumulating state carries 15 more fractional bits than its int16 form


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


def conv_wide(expr: str, source: int, target: int, source_wide: bool) -> str:
    """``expr`` as an int32 with ``target`` bits for a wide (int32, within +-2^30) result: a left shift
    that could pass 2^30 clamps its operand first."""
    shift = target - source
    if shift <= 0:
        return conv(expr, source, target)
    if shift > 30:
        raise ExportError(f"fixed point: a {shift}-bit left shift (value ranges too far apart)")
    limit = 2 ** (30 - shift)
    if not source_wide and shift <= 15:
        return f"((int32_t){expr} * {1 << shift}L)"
    clamped = f"((int32_t){expr} > {limit}L ? {limit}L : (int32_t){expr} < -{limit}L ? -{limit}L : {expr})"
    return f"((int32_t){clamped} * {1 << shift}L)"


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
    zero = "0"
    int8 = True

    def __init__(self, graph: Graph, ranges: Dict[int, float]) -> None:
        self.graph = graph
        self.ranges = ranges
        self.constants = Constants()
        self.helpers: set = {"sat"}
        self.frac, self.wide = formats(graph, ranges)
        self.const_frac: Dict[str, int] = {}
        self.block_bytes = 0  # the largest set of arrays one vector operation declares for itself
        self.state_type = (
            "int32_t" if any(v.op == "state" and v.index in self.wide for v in graph.values) else "int16_t"
        )
        if self.state_type == "int32_t":
            self.helpers.add("wide")

    # ---- types -------------------------------------------------------------------------------------
    def kind(self, value: Value) -> str:
        return "wide" if value.index in self.wide else "narrow"

    def value_type(self, value: Value) -> str:
        return "int32_t" if value.index in self.wide else "int16_t"

    @staticmethod
    def buffer_type(kind) -> str:
        return "int32_t" if kind == "wide" else "int16_t"

    @staticmethod
    def kind_bytes(kind) -> int:
        return 4 if kind == "wide" else 2

    def narrow_frac(self, value: Value) -> int:
        """The fractional bits of ``value`` as an int16 (a wide value carries WIDE_EXTRA more)."""
        return self._fixed(value) - (WIDE_EXTRA if value.index in self.wide else 0)

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
        try:
            return self._element(value, emit)
        except ExportError as error:
            if not str(error).startswith("fixed point: "):
                raise
            raise ExportError(self._far_apart(value, str(error)[len("fixed point: ") :])) from None

    def _far_apart(self, value: Value, detail: str) -> str:
        """An operation whose operands' formats are too far apart for an int32 shift, with the parameters
        among its operands (a huge bias is the usual cause)."""
        named = [a.attrs["origin"] for a in value.args if a.op == "const" and a.attrs.get("origin")]
        what = " and ".join(
            f"parameter {name!r} (|values| up to {self.graph.peaks[name]:.3g})" if name in self.graph.peaks else name
            for name in named
        )
        return (
            f"int8: {what + ' is' if what else 'the values of one operation are'} out of the integer step's range: "
            f"{detail}; export the fp32 C step instead (without --int8)"
        )

    def _element(self, value: Value, emit: Emitter) -> str:
        out = self.frac[value.index]
        wide = value.index in self.wide
        saturate = "sat30" if wide else "sat16"
        op, args = value.op, value.args
        if op == "div":
            raise ExportError(
                "pooling mean: the integer C step does not support mean pooling (a running mean needs a "
                "division per step); export float C, or use pooling last or max"
            )
        if op in ("add", "sub"):
            terms = [self._term(a, emit, out, wide) for a in args]
            return f"{saturate}({terms[0]} {'+' if op == 'add' else '-'} {terms[1]})"
        if op == "mul":
            return f"{saturate}({self._product(args[0], args[1], emit, out, wide)})"
        if op == "maximum":
            a, b = (self._term(x, emit, out, wide) for x in args)
            return f"{saturate}({a} > {b} ? {a} : {b})"
        if op == "select":
            condition = args[0]
            threshold = math.floor(value.attrs["threshold"] * 2.0 ** self._fixed(condition))
            a, b = (self._term(x, emit, out, wide) for x in args[1:])
            return f"{saturate}({emit.ref(condition, 'j')} > {threshold}L ? {a} : {b})"
        return self._activation(value, value.attrs["function"], args[0], emit, out)

    def _term(self, a: Value, emit: Emitter, out: int, wide: bool) -> str:
        """``a`` as an int32 in the output format ``out`` (a scalar as a literal)."""
        if a.op == "scalar":
            return f"{int(round(a.attrs['number'] * 2.0**out))}L"
        return self._convert(emit.ref(a, "j"), self._fixed(a), out, a.index in self.wide, wide)

    def _convert(self, expr: str, source: int, target: int, source_wide: bool, target_wide: bool) -> str:
        if not target_wide:
            return conv(expr, source, target)
        return conv_wide(expr, source, target, source_wide)

    def _narrow(self, a: Value, emit: Emitter) -> Tuple[str, int]:
        """``a`` as an int16 expression and its fractional bits (a scalar as its mantissa)."""
        if a.op == "scalar":
            q, f = mantissa(a.attrs["number"])
            return str(q), f
        if a.index in self.wide:
            f = self.narrow_frac(a)
            return f"sat16({conv(emit.ref(a, 'j'), self._fixed(a), f)})", f
        return emit.ref(a, "j"), self._fixed(a)

    def _product(self, a: Value, b: Value, emit: Emitter, out: int, wide: bool) -> str:
        if a.op == "scalar" or (b.index in self.wide and a.index not in self.wide):
            a, b = b, a
        if b.op == "scalar" and b.attrs["number"] == 0.0:
            return "0"
        if b.op == "scalar" and a.index in self.wide and abs(round(b.attrs["number"])) == 1:
            # c near +-1 (a decay 1 - eta alpha, a gate's 0.999): a (+-1) + a (c -+ 1), so that the small
            # c -+ 1 keeps its own 15 bits; a 15-bit c would move the fixed point of a slow leak
            whole = int(round(b.attrs["number"]))
            self.helpers.add("dot")
            q, f = mantissa(b.attrs["number"] - whole)
            term = self._convert(emit.ref(a, "j"), self._fixed(a), out, True, wide)
            if q == 0:
                return term if whole == 1 else f"(-{term})"
            rest = self._convert(f"mul_hi({emit.ref(a, 'j')}, {q})", self._fixed(a) + f - 16, out, True, wide)
            return f"({'' if whole == 1 else '-'}{term} + {rest})"
        factor, f = self._narrow(b, emit)
        if a.index in self.wide:  # int32 x int16 without a 64-bit product: round(a b / 2^16)
            self.helpers.add("dot")
            product, bits = f"mul_hi({emit.ref(a, 'j')}, {factor})", self._fixed(a) + f - 16
        else:
            product, bits = f"((int32_t){emit.ref(a, 'j')} * {factor})", self._fixed(a) + f
        return self._convert(product, bits, out, a.index in self.wide, wide)

    def _activation(self, value: Value, function: str, a: Value, emit: Emitter, out: int) -> str:
        x, f = emit.ref(a, "j"), self._fixed(a)
        if function == "relu":
            if value.index in self.wide:
                return f"sat30({x} > 0 ? {conv_wide(x, f, out, a.index in self.wide)} : 0)"
            return f"sat16({x} > 0 ? {conv(x, f, out)} : 0)"
        if function == "tanh":
            self.helpers.add("tanh")
            return f"sat16({conv(f'tanh_q15({conv(x, f, 12)})', 15, out)})"
        self.helpers |= {"tanh", "sigmoid"}
        return f"sat16({conv(f'sigmoid_q15({conv(x, f, 11)})', 15, out)})"

    # ---- vector operations -------------------------------------------------------------------------
    def vector(self, value: Value, emit: Emitter) -> List[str]:
        return getattr(self, "_" + value.op)(value, emit)

    def _linear(self, value: Value, emit: Emitter) -> List[str]:
        attrs, out = value.attrs, self.frac[value.index]
        wide = value.index in self.wide
        self.helpers.add("dot")
        start = []
        if attrs["bias"] is not None:
            start.append(self._bias(attrs["bias_label"], attrs["bias"], out))
        if attrs["addend"]:
            addend = value.args[-1]
            start.append(
                self._convert(emit.ref(addend, "r"), self._fixed(addend), out, addend.index in self.wide, wide)
            )
        if wide and len(start) == 2:  # two terms within +-2^30 each: their sum fits, then back to the rails
            start = [f"sat30({start[0]} + {start[1]})"]
        lines = [f"int32_t acc = {' + '.join(start) if start else '0'};"] + (["int32_t p;"] if wide else [])
        declarations = []
        for k, (term, vector) in enumerate(zip(attrs["terms"], value.args)):
            rows, cols = term.weight.shape
            if cols > MAX_COLUMNS:
                raise ExportError(f"{term.label}: {cols} columns; the int32 row sums hold at most {MAX_COLUMNS}")
            declarations.append(f"const int8_t *w{k} = {term.label}_q;")
            for source, source_frac, prep in self._inputs(vector, k, cols, emit):
                declarations += prep
                q, m_label, shift = self._matrix(term, source_frac, out, value)
                product = f"mul_hi(dot_q(w{k}, {source}, {cols}), {self.constants.read(m_label, 'r')})"
                if wide:  # the int32 row sum keeps its bits: the sum of two rails-bound terms cannot overflow
                    # (the product once in p: the clamp reads it three times, and dot_q's flash reads keep a
                    # compiler from merging the calls)
                    lines.append(f"p = {product};")
                    lines.append(f"acc = sat30(acc + sat30({_wide_shift('p', shift)}));")
                else:
                    lines.append(f"acc += {_shift(product, shift)};")
            lines.append(f"w{k} += {cols};")
        lines.append(f"{emit.pointer(value)}[r] = {'acc' if wide else 'sat16(acc)'};")
        copies = sum(int(n) for d in declarations if d.startswith("int16_t") for n in re.findall(r"\[(\d+)\]", d))
        self.block_bytes = max(self.block_bytes, 2 * copies)
        return ["{", *("    " + d for d in declarations), *("    " + s for s in rows_loop(value.size, lines)), "}"]

    def _inputs(self, vector: Value, k: int, cols: int, emit: Emitter):
        """``(int16 array, its fractional bits, C lines that fill it)`` for each part of a linear map's input.

        A narrow value is read in place. A wide value (int32, within +-2^30) enters as two int16 halves,
        ``v = hi 2^15 + lo``, each multiplied by the int8 matrix: its full precision at twice the products.
        A narrow value kept in an int32 state is copied into an int16 array."""
        if emit.value_type_at(vector) == "int16_t":
            return [(emit.pointer(vector), self._fixed(vector), [])]
        value, f = emit.ref(vector, "c"), self._fixed(vector)
        if vector.index not in self.wide:
            return [
                (f"n{k}", f, [f"int16_t n{k}[{cols}];", f"for (int c = 0; c < {cols}; ++c) n{k}[c] = sat16({value});"])
            ]
        fill = [
            f"int16_t n{k}[{cols}], l{k}[{cols}];",
            f"for (int c = 0; c < {cols}; ++c) {{",
            f"    n{k}[c] = (int16_t)((({value}) + 16384) >> 15);",
            f"    l{k}[c] = (int16_t)(({value}) - (int32_t)n{k}[c] * 32768L);",
            "}",
        ]
        return [(f"n{k}", f - WIDE_EXTRA, fill), (f"l{k}", f, [])]

    def _bias(self, label: str, bias: np.ndarray, out: int) -> str:
        values = [int(round(v * 2.0**out)) for v in bias]
        kind = "int16" if all(abs(v) <= INT16_MAX for v in values) else "int32"
        if label not in self.constants.kinds:
            self.constants.define(label, kind, [str(v) if kind == "int16" else f"{v}L" for v in values])
        return f"(int32_t){self.constants.read(label, 'r')}"

    def _matrix(self, term, source: int, out: int, value: Value) -> Tuple[str, str, int]:
        """The int8 matrix, its per-row multipliers and the shift ``e`` of one linear term."""
        q, scale = quantize_rows(term.weight)
        exact = scale.astype(np.float64) * 2.0 ** (out - source + 16)
        shift = min(30, math.floor(math.log2(INT16_MAX / exact.max())))
        m = np.rint(exact * 2.0**shift).astype(np.int64)
        if 16 + shift < 0:
            raise ExportError(self._out_of_range(term, float(scale.max()), source, out, value))
        q_label, m_label = term.label + "_q", term.label + "_m"
        if q_label not in self.constants.kinds:  # m does not depend on the formats: the shift absorbs them
            self.constants.define(q_label, "int8", [str(v) for v in q.reshape(-1)])
            self.constants.define(m_label, "int16", [str(v) for v in m])
        return q_label, m_label, shift

    def _out_of_range(self, term, step: float, source: int, out: int, value: Value) -> str:
        """Why a matrix's int8 weights cannot reach its output's format (a weight far larger than the rest):
        one int8 step of them times one step of the input is more than the output's format takes."""
        what = f"parameter {term.origin!r} (the C step's matrix {term.label})"
        if term.derived:  # name the layer's largest parameter, the likely cause
            own = {k: v for k, v in self.graph.peaks.items() if k.startswith(term.origin + ".") or not term.origin}
            largest = max(own, key=own.get, default=None)
            what = f"the C step's matrix {term.label}" + (
                f", computed from {largest!r} (|w| up to {own[largest]:.3g}) and others," if largest else ""
            )
        return (
            f"int8: {what} is out of the integer step's range: its weights reach |w| = {127 * step:.3g}, and one "
            f"int8 step of them ({step:.3g}) times one step of its input ({2.0**-source:.3g}) is more than its "
            f"output's format takes ({INT16_MAX * 2.0**-out:.3g}; the output reached "
            f"{self.ranges.get(value.index, 0.0):.3g} on the calibration data); export the fp32 C step instead "
            "(without --int8)"
        )

    def _softmax(self, value: Value, emit: Emitter) -> List[str]:
        self.helpers.add("exp")
        self.block_bytes = max(self.block_bytes, 4 * value.size)
        n, src, dst = value.size, emit.pointer(value.args[0]), emit.pointer(value)
        to_q12 = conv(f"((int32_t){src}[i] - top)", self._fixed(value.args[0]), 12)
        return [
            "{",
            f"    int16_t top = {src}[0];",
            f"    int32_t total = 0, e[{n}], reciprocal;",
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
            conv(f"mul_hi({emit.ref(row, 'j')}, {w}[{i}])", 15 + self._fixed(row) - 16, out)
            if row.index in self.wide
            else conv(f"((int32_t){w}[{i}] * {emit.ref(row, 'j')})", 15 + self._fixed(row), out)
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
        parts += [HELPERS[h] for h in ("sat", "wide", "dot", "tanh", "sigmoid", "exp") if h in self.helpers]
        return "\n\n".join(parts)

    @property
    def table_bytes(self) -> int:
        return 2 * (len(TANH_TABLE) * ("tanh" in self.helpers) + len(POW2_TABLE) * ("exp" in self.helpers))

    def init_lines(self, initial, state_size: int, upper: str) -> List[str]:
        lines = [f"memset(state, 0, sizeof({self.state_type}) * {upper}_STATE_SIZE);"]
        for part in self.graph.parts:
            f = self.part_frac(part)
            top = 2**30 - 1 if self.part_wide(part) else INT16_MAX
            for k, v in enumerate(part.init.reshape(-1)):
                if v != 0.0:
                    q = -top if v == -math.inf else max(-top, min(top, int(round(v * 2.0**f))))
                    lines.append(f"state[{part.offset + k}] = {q}L;")
        return lines

    def part_wide(self, part) -> bool:
        return any(v.op == "state" and v.attrs["part"] is part and v.index in self.wide for v in self.graph.values)

    def part_frac(self, part) -> int:
        reads = [v for v in self.graph.values if v.op == "state" and v.attrs["part"] is part]
        return self.frac[reads[0].index] if reads else DEFAULT_FRAC

    @property
    def input_frac(self) -> int:
        return self.frac[self.graph.x.index]

    @property
    def output_frac(self) -> int:
        return self.frac[self.graph.result.index]


def _wide_shift(expr: str, shift: int) -> str:
    """``expr / 2^shift`` rounded, for an int32 result within +-2^30: a left shift clamps first."""
    if shift >= 0:
        return _shift(expr, shift)
    limit = 2 ** (30 + shift)
    return f"((int32_t)(({expr}) > {limit}L ? {limit}L : ({expr}) < -{limit}L ? -{limit}L : ({expr})) * {1 << -shift}L)"


def _shift(expr: str, shift: int) -> str:
    """``expr / 2^shift`` rounded (a left shift for a negative ``shift``)."""
    if shift == 0:
        return expr
    if shift < 0:
        return f"({expr} * {1 << -shift})"
    return f"(({expr} + {1 << (shift - 1)}) >> {shift})"


def formats(graph: Graph, ranges: Dict[int, float]) -> Tuple[Dict[int, int], set]:
    """Fractional bits of every value from its calibrated range, and the wide (int32) values.

    A state part is wide when the value written to it is its own old value plus or times something,
    through additions, products, selections and maxima only (an accumulator: TARNN's state, an LSTM's cell,
    the gated states of GRU, FastGRNN, SA-RNN, iRNN's residual): a small change per step would vanish in
    an int16 of the state's range. Its values and everything computed from them by those operations are
    int32 with WIDE_EXTRA more fractional bits; a product with one is ``mul_hi`` (no 64-bit arithmetic)."""
    frac: Dict[int, int] = {}
    for value in graph.values:
        if value.op == "view":
            frac[value.index] = frac[value.args[0].index]
        elif value.op == "softmax" or (value.op == "act" and value.attrs["function"] in ("tanh", "sigmoid")):
            frac[value.index] = 15
        else:
            frac[value.index] = frac_bits(ranges.get(value.index, 0.0))
    wide = _wide_values(graph)
    for part in graph.parts:  # one format per state part: its reads and what is written to it
        reads = [v for v in graph.values if v.op == "state" and v.attrs["part"] is part]
        written = [v for _, p, v in graph.writes if p is part]
        finite = part.init[np.isfinite(part.init)]
        largest = max([ranges.get(v.index, 0.0) for v in reads + written] + [float(np.abs(finite).max(initial=0.0))])
        f = frac_bits(largest)
        for v in reads + written:
            frac[v.index] = f
    for value in graph.values:  # views follow their (possibly re-formatted) source; wide values gain bits
        if value.op == "view":
            frac[value.index] = frac[value.args[0].index]
        elif value.index in wide:
            frac[value.index] += WIDE_EXTRA
    return frac, wide


ACCUMULATING = ("add", "sub", "mul", "select", "maximum")


def _wide_values(graph: Graph) -> set:
    """The values of accumulating state parts (see :func:`formats`), those computed from them, and those
    that feed them: the terms of an accumulation, back through relu and into the sums of linear maps."""
    users = graph.users()
    wide: set = set()
    for kind, part, written in graph.writes:
        reads = {v.index for v in graph.values if v.op == "state" and v.attrs["part"] is part}
        reached, frontier = set(), list(reads)
        while frontier:  # forward from the part's reads through the accumulating operations
            index = frontier.pop()
            for user in users[index]:
                through = user.op in ACCUMULATING and not (user.op == "select" and user.args[0].index == index)
                if (through or user.op == "view") and user.index not in reached:
                    reached.add(user.index)
                    frontier.append(user.index)
        if written.index in reached:
            wide |= reads
    if not wide:
        return wide
    changed = True
    while changed:
        changed = False
        for value in graph.values:
            operands = value.args[1:] if value.op == "select" else value.args
            # forward: accumulating operations (and views) of a wide value are wide
            if value.index not in wide and (value.op in ACCUMULATING or value.op == "view"):
                if any(a.index in wide for a in operands):
                    wide.add(value.index)
                    changed = True
            # backward: the terms of a wide accumulation, through relu, views and linear maps (a low-rank
            # product's inner factor too: a wide input enters a linear map at full precision)
            if value.index in wide and (value.op in ACCUMULATING or _is_relu(value) or value.op in ("view", "linear")):
                for a in operands:
                    feeds = (
                        a.op in ("linear", "view")
                        if value.op == "linear"
                        else (a.op in ACCUMULATING or a.op in ("linear", "view") or _is_relu(a))
                    )
                    if feeds and a.index not in wide:
                        wide.add(a.index)
                        changed = True
    return wide


def _is_relu(value: Value) -> bool:
    return value.op == "act" and value.attrs["function"] == "relu"
