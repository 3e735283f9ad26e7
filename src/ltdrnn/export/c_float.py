"""The float32 dialect of the C step: every value a ``float``, weights ``float`` in flash, libm's
``tanhf``/``expf``. It computes what eager PyTorch computes, to float32 rounding."""

from __future__ import annotations

from typing import List

from .c_emit import Constants, Emitter, float_literal, rows_loop
from .ir import Value

HELPERS = {
    "sigmoid": "static float sigmoid_(float v) { return 1.0f / (1.0f + expf(-v)); }",
    "dot": """/* sum_c w[c] v[c], w in flash */
static float dot(const float *w, const float *v, int cols)
{
    float acc = 0.0f;
    for (int c = 0; c < cols; ++c) acc += LTDRNN_READ_F32(w + c) * v[c];
    return acc;
}""",
}

BINARY = {"add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})", "div": "({a} / {b})"}


class FloatDialect:
    ctype = state_type = "float"
    value_bytes = 4
    zero = "0.0f"
    int8 = False
    block_bytes = 0  # no vector operation declares arrays of its own

    @staticmethod
    def kind(value: Value) -> None:
        return None

    @staticmethod
    def value_type(value: Value) -> str:
        return "float"

    @staticmethod
    def buffer_type(kind) -> str:
        return "float"

    @staticmethod
    def kind_bytes(kind) -> int:
        return 4

    def __init__(self) -> None:
        self.constants = Constants()
        self.helpers: set = set()
        self.labels: dict = {}

    # ---- constants ---------------------------------------------------------------------------------
    def constant(self, value: Value) -> str:
        label = value.attrs["label"]
        if label not in self.constants.kinds:
            self.constants.define(label, "float", [float_literal(v) for v in value.attrs["data"]])
        return label

    def _array(self, label: str, data) -> str:
        if label not in self.constants.kinds:
            self.constants.define(label, "float", [float_literal(v) for v in data.reshape(-1)])
        return label

    def scalar(self, value: Value) -> str:
        return float_literal(value.attrs["number"])

    # ---- elementwise -------------------------------------------------------------------------------
    def element(self, value: Value, emit: Emitter) -> str:
        args = [emit.ref(a, "j") for a in value.args]
        op = value.op
        if op in BINARY:
            return BINARY[op].format(a=args[0], b=args[1])
        if op == "maximum":  # NaN propagates, as torch.maximum
            return f"({args[0]} != {args[0]} || {args[0]} > {args[1]} ? {args[0]} : {args[1]})"
        if op == "select":
            return f"({args[0]} > {float_literal(value.attrs['threshold'])} ? {args[1]} : {args[2]})"
        function = value.attrs["function"]
        if function == "relu":  # NaN stays NaN
            return f"({args[0]} < 0.0f ? 0.0f : {args[0]})"
        if function == "tanh":
            return f"tanhf({args[0]})"
        self.helpers.add("sigmoid")
        return f"sigmoid_({args[0]})"

    # ---- vector operations -------------------------------------------------------------------------
    def vector(self, value: Value, emit: Emitter) -> List[str]:
        return getattr(self, "_" + value.op)(value, emit)

    def _linear(self, value: Value, emit: Emitter) -> List[str]:
        attrs = value.attrs
        self.helpers.add("dot")
        start = (
            self.constants.read(self._array(attrs["bias_label"], attrs["bias"]), "r")
            if attrs["bias"] is not None
            else "0.0f"
        )
        if attrs["addend"]:
            start = (
                f"{start} + {emit.ref(value.args[-1], 'r')}"
                if attrs["bias"] is not None
                else emit.ref(value.args[-1], "r")
            )
        lines = [f"float acc = {start};"]
        declarations = []
        for k, (term, vector) in enumerate(zip(attrs["terms"], value.args)):
            rows, cols = term.weight.shape
            label = self._array(term.label, term.weight)
            declarations.append(f"const float *w{k} = {label};")
            lines += [f"acc += dot(w{k}, {emit.pointer(vector)}, {cols});", f"w{k} += {cols};"]
        lines.append(f"{emit.pointer(value)}[r] = acc;")
        return ["{", *("    " + d for d in declarations), *("    " + s for s in rows_loop(value.size, lines)), "}"]

    def _softmax(self, value: Value, emit: Emitter) -> List[str]:
        n, src, dst = value.size, emit.pointer(value.args[0]), emit.pointer(value)
        return [
            "{",
            f"    float top = {src}[0], total = 0.0f;",
            f"    for (int i = 1; i < {n}; ++i) top = {src}[i] > top ? {src}[i] : top;",
            f"    for (int i = 0; i < {n}; ++i) {{ {dst}[i] = expf({src}[i] - top); total += {dst}[i]; }}",
            f"    for (int i = 0; i < {n}; ++i) {dst}[i] /= total;",
            "}",
        ]

    def _combine(self, value: Value, emit: Emitter) -> List[str]:
        weights, rows = value.args[0], value.args[1:]
        w = emit.pointer(weights)
        terms = " + ".join(f"{w}[{i}] * {emit.ref(row, 'j')}" for i, row in enumerate(rows))
        return [f"for (int j = 0; j < {value.size}; ++j) {emit.pointer(value)}[j] = {terms};"]

    # ---- the file ------------------------------------------------------------------------------------
    def helper_source(self) -> str:
        return "\n\n".join(HELPERS[h] for h in ("sigmoid", "dot") if h in self.helpers)

    def init_lines(self, initial, state_size: int, upper: str) -> List[str]:
        import numpy as np

        if not np.any(initial):
            return [f"memset(state, 0, sizeof(float) * {upper}_STATE_SIZE);"]
        lines = []
        for start in range(state_size):
            v = float(initial[start])
            if v != 0.0:
                lines.append(f"state[{start}] = {'-INFINITY' if v == float('-inf') else float_literal(v)};")
        return [f"memset(state, 0, sizeof(float) * {upper}_STATE_SIZE);", *lines]
