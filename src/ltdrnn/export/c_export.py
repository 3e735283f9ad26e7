"""Generate a self-contained C99 step (source + header) from a :class:`~ltdrnn.export.step.StreamingStep`.

The generated code has the weights as ``const`` arrays, no ``malloc`` (scratch lives on the stack, in
arrays of compile-time size) and needs only ``<math.h>``/``<string.h>``/``<stdint.h>``. Its API::

    void NAME_init(float *state);                               /* zeros, NAME_STATE_SIZE floats */
    void NAME_step(const float *x, float *state, float *out);   /* one time step, batch 1 */

``state`` is the packed state of :class:`~ltdrnn.export.step.StreamingStep` (same layout), ``out`` the
head's output (logits of a classifier). Every cell body follows the cell's streaming formulation in
the library (the fused forms of TARNN and iRNN: ``input_weights``/``state_weights``, ``input_map``/
``recurrent_operator``), so its numbers match eager PyTorch to float rounding.

``int8=True`` stores every weight matrix per output row (channel) as symmetric int8,
``w[r, c] ~ scale[r] * q[r, c]`` with ``scale[r] = max_c |w[r, c]| / 127``; a row's products are summed
in float and scaled once. Biases and per-unit vectors stay float (a few hundred bytes).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np
import torch
from torch import Tensor

from .step import ExportError, StreamingStep

HELPERS = {
    "sigmoid": "static float sigmoid_(float v) { return 1.0f / (1.0f + expf(-v)); }",
    "relu": "static float relu_(float v) { return v > 0.0f ? v : 0.0f; }",
    "mv": """/* out[r] += sum_c w[r * cols + c] v[c] */
static void mv(float *out, const float *w, const float *v, int rows, int cols)
{
    for (int r = 0; r < rows; ++r) {
        const float *row = w + r * cols;
        float acc = 0.0f;
        for (int c = 0; c < cols; ++c) acc += row[c] * v[c];
        out[r] += acc;
    }
}""",
    "mv_q8": """/* out[r] += scale[r] * sum_c q[r * cols + c] v[c]  (int8 weights, per-row scale) */
static void mv_q8(float *out, const int8_t *q, const float *scale, const float *v, int rows, int cols)
{
    for (int r = 0; r < rows; ++r) {
        const int8_t *row = q + r * cols;
        float acc = 0.0f;
        for (int c = 0; c < cols; ++c) acc += (float)row[c] * v[c];
        out[r] += scale[r] * acc;
    }
}""",
}
ACTIVATIONS = {"relu": "relu_({})", "tanh": "tanhf({})", "sigmoid": "sigmoid_({})"}


@dataclass
class CSource:
    """Generated files and their costs: ``weight_bytes`` of the const arrays, ``state_bytes`` of the
    caller's state, ``scratch_bytes`` of the largest stack scratch the step uses at once."""

    name: str
    header: str
    source: str
    weight_bytes: int
    state_bytes: int
    scratch_bytes: int


def quantize_rows(weight: Tensor) -> Tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row int8: ``(q (rows, cols) int8, scale (rows,) float32)``, ``w ~ scale[:, None] * q``."""
    w = weight.detach().to(torch.float64).cpu().numpy()
    scale = np.abs(w).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


class Program:
    """Collects the const arrays, the helpers used and the body of one generated step."""

    def __init__(self, int8: bool) -> None:
        self.int8 = int8
        self.arrays: List[str] = []
        self.helpers: set = set()
        self.weight_bytes = 0
        self.scratch_floats = 0
        self.names: set = set()

    def _define(self, ctype: str, label: str, values: np.ndarray, fmt: Callable) -> None:
        if label in self.names:
            raise AssertionError(f"array {label} defined twice")
        self.names.add(label)
        items = [fmt(v) for v in values.reshape(-1).tolist()]
        rows = [", ".join(items[i : i + 8]) for i in range(0, len(items), 8)]
        self.arrays.append(f"static const {ctype} {label}[{len(items)}] = {{\n    " + ",\n    ".join(rows) + "\n};")
        self.weight_bytes += values.size * values.itemsize

    def vector(self, label: str, tensor: Tensor) -> str:
        """A float array (biases, per-unit vectors, step sizes); returns its C name."""
        values = tensor.detach().to(torch.float32).cpu().numpy()
        self._define("float", label, values, _float)
        return label

    def matrix(self, label: str, weight: Tensor) -> "Matrix":
        """A weight matrix ``(rows, cols)``, int8 per row when quantising."""
        if weight.dim() != 2:
            raise AssertionError(f"{label}: expected a matrix, got shape {tuple(weight.shape)}")
        rows, cols = weight.shape
        if self.int8:
            q, scale = quantize_rows(weight)
            self._define("int8_t", label + "_q", q, str)
            self._define("float", label + "_s", scale, _float)
        else:
            self.vector(label, weight)
        return Matrix(label, rows, cols, self.int8)

    def matvec(self, out: str, m: "Matrix", v: str) -> str:
        """C statement: ``out += M v``."""
        if m.int8:
            self.helpers.add("mv_q8")
            return f"mv_q8({out}, {m.label}_q, {m.label}_s, {v}, {m.rows}, {m.cols});"
        self.helpers.add("mv")
        return f"mv({out}, {m.label}, {v}, {m.rows}, {m.cols});"

    def buffers(self, **sizes: int) -> List[str]:
        """Declarations of stack scratch arrays (size 0: none); the largest set counts as the step's scratch."""
        self.scratch_floats = max(self.scratch_floats, sum(sizes.values()))
        return [f"float {label}[{size}];" for label, size in sizes.items() if size]

    def act(self, name: str, expr: str) -> str:
        if name == "relu":
            self.helpers.add("relu")
        if name == "sigmoid":
            self.helpers.add("sigmoid")
        return ACTIVATIONS[name].format(expr)

    def sigmoid(self, expr: str) -> str:
        return self.act("sigmoid", expr)


@dataclass(frozen=True)
class Matrix:
    label: str
    rows: int
    cols: int
    int8: bool


def _float(value: float) -> str:
    """A float literal that reads back as the same float32 (9 significant digits)."""
    if not np.isfinite(value):
        raise ExportError(f"weights: expected finite values, got {value!r} (the model has diverged)")
    text = f"{value:.9g}"
    return text + ("f" if any(c in text for c in ".e") else ".0f")


def _init_from(label: str, bias: str | None, size: int) -> str:
    """``label = bias`` (a copy of a const vector) or zeros."""
    if bias is None:
        return f"memset({label}, 0, sizeof(float) * {size});"
    return f"memcpy({label}, {bias}, sizeof(float) * {size});"


# ---- one emitter per cell family: (program, cell, prefix, input C name) -> (C lines, output C name) ----
Emitter = Callable[[Program, object, str, str, str], Tuple[List[str], str]]
EMITTERS: Dict[str, Emitter] = {}


def emitter(*names: str):
    def add(function: Emitter) -> Emitter:
        for name in names:
            EMITTERS[name] = function
        return function

    return add


@emitter("lstm")
def _lstm(p: Program, cell, pre: str, x: str, s: str):
    hidden = cell.hidden_size
    w_ih, w_hh = p.matrix(pre + "w_ih", cell.weight_ih), p.matrix(pre + "w_hh", cell.weight_hh)
    bias = p.vector(pre + "bias", cell.bias_ih + cell.bias_hh) if cell.bias else None
    lines = p.buffers(g=4 * hidden) + [
        _init_from("g", bias, 4 * hidden),
        p.matvec("g", w_ih, x),
        p.matvec("g", w_hh, s),
        f"float *h = {s}, *c = {s} + {hidden};",
    ]
    lines += _lstm_update(p, hidden, "g", "c[j] = cn; h[j] = hn;")
    return lines, s


def _lstm_update(p: Program, hidden: int, g: str, store: str) -> List[str]:
    """The torch.nn.LSTM cell update from the gate sums ``g`` (i, f, g, o); ``store`` keeps ``cn``, ``hn``."""
    return [
        f"for (int j = 0; j < {hidden}; ++j) {{",
        f"    const float cn = {p.sigmoid(f'{g}[{hidden} + j]')} * c[j] + "
        f"{p.sigmoid(f'{g}[j]')} * tanhf({g}[{2 * hidden} + j]);",
        f"    const float hn = {p.sigmoid(f'{g}[{3 * hidden} + j]')} * tanhf(cn);",
        f"    {store}",
        "}",
    ]


@emitter("gru")
def _gru(p: Program, cell, pre: str, x: str, s: str):
    hidden = cell.hidden_size
    w_ih, w_hh = p.matrix(pre + "w_ih", cell.weight_ih), p.matrix(pre + "w_hh", cell.weight_hh)
    b_ih = p.vector(pre + "b_ih", cell.bias_ih) if cell.bias else None
    b_hh = p.vector(pre + "b_hh", cell.bias_hh) if cell.bias else None
    lines = p.buffers(gi=3 * hidden, gh=3 * hidden) + [
        _init_from("gi", b_ih, 3 * hidden),
        _init_from("gh", b_hh, 3 * hidden),
        p.matvec("gi", w_ih, x),
        p.matvec("gh", w_hh, s),
    ]
    return lines + _gru_update(p, hidden, s, "{h}[j] = cand;"), s


def _gru_update(p: Program, hidden: int, h: str, assign: str) -> List[str]:
    """torch.nn.GRU's update from ``gi``, ``gh``; ``assign`` stores ``cand`` (``{h}`` is the state)."""
    return [
        f"for (int j = 0; j < {hidden}; ++j) {{",
        f"    const float r = {p.sigmoid('gi[j] + gh[j]')};",
        f"    const float z = {p.sigmoid(f'gi[{hidden} + j] + gh[{hidden} + j]')};",
        f"    const float n = tanhf(gi[{2 * hidden} + j] + r * gh[{2 * hidden} + j]);",
        f"    const float cand = (1.0f - z) * n + z * {h}[j];",
        "    " + assign.format(h=h),
        "}",
    ]


def _fast_preactivation(p: Program, cell, pre: str, x: str, s: str, bias: str | None) -> List[str]:
    """``a = bias + W x + U h`` into ``a``, with low-rank ``W``/``U`` as two products each."""
    hidden = cell.hidden_size
    lines = p.buffers(a=hidden, wx=cell.w_rank or 0, uh=cell.u_rank or 0) + [_init_from("a", bias, hidden)]
    for label, factors, v, tmp in (("w", cell.W, x, "wx"), ("u", cell.U, s, "uh")):
        if len(factors) == 1:
            lines.append(p.matvec("a", p.matrix(pre + label, factors[0]), v))
        else:
            first, second = p.matrix(pre + label + "1", factors[0]), p.matrix(pre + label + "2", factors[1])
            lines += [f"memset({tmp}, 0, sizeof {tmp});", p.matvec(tmp, second, v), p.matvec("a", first, tmp)]
    return lines


@emitter("fastrnn")
def _fastrnn(p: Program, cell, pre: str, x: str, s: str):
    bias = p.vector(pre + "bias", cell.bias)
    alpha, beta = float(torch.sigmoid(cell.alpha.detach().float())), float(torch.sigmoid(cell.beta.detach().float()))
    lines = _fast_preactivation(p, cell, pre, x, s, bias) + [
        f"for (int j = 0; j < {cell.hidden_size}; ++j)",
        f"    {s}[j] = {_float(alpha)} * {p.act(cell.nonlinearity, 'a[j]')} + {_float(beta)} * {s}[j];",
    ]
    return lines, s


@emitter("fastgrnn")
def _fastgrnn(p: Program, cell, pre: str, x: str, s: str):
    b_z, b_h = p.vector(pre + "b_gate", cell.bias_gate), p.vector(pre + "b_update", cell.bias_update)
    zeta, nu = float(torch.sigmoid(cell.zeta.detach().float())), float(torch.sigmoid(cell.nu.detach().float()))
    lines = _fast_preactivation(p, cell, pre, x, s, None) + [
        f"for (int j = 0; j < {cell.hidden_size}; ++j) {{",
        f"    const float z = {p.act(cell.gate_nonlinearity, f'a[j] + {b_z}[j]')};",
        f"    const float cand = {p.act(cell.update_nonlinearity, f'a[j] + {b_h}[j]')};",
        f"    {s}[j] = ({_float(zeta)} * (1.0f - z) + {_float(nu)}) * cand + z * {s}[j];",
        "}",
    ]
    return lines, s


@emitter("srnn")
def _srnn(p: Program, cell, pre: str, x: str, s: str):
    hidden, k = cell.hidden_size, cell.hyper_size
    lines = p.buffers(
        f0=k if cell.fr_layers else 0,
        f1=k if cell.fr_layers > 1 else 0,
        beta=hidden,
        gate=hidden if cell.gate else 0,
        hn=hidden,
    )
    feature = x
    for index, layer in enumerate(cell.fr_hidden):
        buf = f"f{index % 2}"
        lines += [
            _init_from(buf, p.vector(f"{pre}fr{index}_b", layer.bias), k),
            p.matvec(buf, p.matrix(f"{pre}fr{index}_w", layer.weight), feature),
            f"for (int i = 0; i < {k}; ++i) {buf}[i] = {p.act('relu', f'{buf}[i]')};",
        ]
        feature = buf
    lines += [
        _init_from("beta", p.vector(pre + "out_b", cell.fr_out.bias), hidden),
        p.matvec("beta", p.matrix(pre + "out_w", cell.fr_out.weight), feature),
    ]
    if cell.gate:
        lines += [
            _init_from("gate", p.vector(pre + "gate_b", cell.gate_layer.bias), hidden),
            p.matvec("gate", p.matrix(pre + "gate_w", cell.gate_layer.weight), x),
            f"for (int j = 0; j < {hidden}; ++j) beta[j] *= {p.sigmoid('gate[j]')};",
        ]
    # h_t = act(roll(h_{t-1}, 1) + beta): unit j reads unit j - 1, unit 0 reads the last
    lines += [
        f"hn[0] = {p.act(cell.activation, f'{s}[{hidden - 1}] + beta[0]')};",
        f"for (int j = 1; j < {hidden}; ++j) hn[j] = {p.act(cell.activation, f'{s}[j - 1] + beta[j]')};",
        f"memcpy({s}, hn, sizeof hn);",
    ]
    return lines, s


@emitter("mist")
def _mist(p: Program, cell, pre: str, x: str, s: str):
    hidden, nd, n = cell.hidden_size, cell.num_delays, cell.history_size
    split = nd + hidden
    w_gates = p.matrix(pre + "w_gates_x", cell.weight_ih[:split])
    w_state = p.matrix(pre + "w_state_x", cell.weight_ih[split:])
    b_gates, b_state = p.vector(pre + "b_gates", cell.bias[:split]), p.vector(pre + "b_state", cell.bias[split:])
    w_hh, w_mix = p.matrix(pre + "w_hh", cell.weight_hh), p.matrix(pre + "w_mix", cell.weight_mix)
    prev = f"{s} + {(n - 1) * hidden}"
    lines = p.buffers(gates=split, hn=hidden, rm=hidden) + [
        _init_from("gates", b_gates, split),
        p.matvec("gates", w_gates, x),
        p.matvec("gates", w_hh, prev),
        "float top = gates[0], total = 0.0f;",
        f"for (int i = 1; i < {nd}; ++i) top = gates[i] > top ? gates[i] : top;",
        f"for (int i = 0; i < {nd}; ++i) {{ gates[i] = expf(gates[i] - top); total += gates[i]; }}",
        f"for (int i = 0; i < {nd}; ++i) gates[i] /= total;",
        "memset(rm, 0, sizeof rm);",
        f"for (int i = 0; i < {nd}; ++i) {{   /* the state 2^i steps back is row N - 2^i of the history */",
        f"    const float *delayed = {s} + ({n} - (1 << i)) * {hidden};",
        f"    for (int j = 0; j < {hidden}; ++j) rm[j] += gates[i] * delayed[j];",
        "}",
        f"for (int j = 0; j < {hidden}; ++j) rm[j] *= {p.sigmoid(f'gates[{nd} + j]')};",
        _init_from("hn", b_state, hidden),
        p.matvec("hn", w_state, x),
        p.matvec("hn", w_mix, "rm"),
        f"for (int j = 0; j < {hidden}; ++j) hn[j] = tanhf(hn[j]);",
        f"memmove({s}, {s} + {hidden}, sizeof(float) * {(n - 1) * hidden});",
        f"memcpy({prev}, hn, sizeof hn);",
    ]
    return lines, prev


@emitter("sarnn")
def _sarnn(p: Program, cell, pre: str, x: str, s: str):
    hidden = cell.hidden_size
    half = 0.5 * cell.slope  # the coordinator exactly as SARNN.precompute/coordinate scale it
    coord_w = p.matrix(pre + "coord_w", cell.coord_weight_ih * half)
    coord_b = p.vector(pre + "coord_b", cell.coord_bias * half + 0.5)
    coord_h = p.vector(pre + "coord_h", cell.scaled_coord_weight())
    gates = 3 if cell.recurrence == "gru" else 4
    w_ih, w_hh = p.matrix(pre + "w_ih", cell.weight_ih), p.matrix(pre + "w_hh", cell.weight_hh)
    b_ih, b_hh = p.vector(pre + "b_ih", cell.bias_ih), p.vector(pre + "b_hh", cell.bias_hh)
    lines = p.buffers(u=hidden, gi=gates * hidden, gh=gates * hidden) + [
        _init_from("u", coord_b, hidden),
        p.matvec("u", coord_w, x),
        # u_t = 1[hard_sigmoid(...) > 1/2]; the clamp does not change the decision
        f"for (int j = 0; j < {hidden}; ++j) u[j] = (u[j] + {coord_h}[j] * {s}[j]) > 0.5f;",
        _init_from("gi", b_ih, gates * hidden),
        _init_from("gh", b_hh, gates * hidden),
        p.matvec("gi", w_ih, x),
        p.matvec("gh", w_hh, s),
    ]
    if cell.recurrence == "gru":
        return lines + _gru_update(p, hidden, s, "if (u[j] > 0.5f) {h}[j] = cand;"), s
    lines += [f"for (int j = 0; j < {gates * hidden}; ++j) gi[j] += gh[j];", f"float *h = {s}, *c = {s} + {hidden};"]
    return lines + _lstm_update(p, hidden, "gi", "if (u[j] > 0.5f) { c[j] = cn; h[j] = hn; }"), s


@emitter("tarnn")
def _tarnn(p: Program, cell, pre: str, x: str, s: str):
    hidden, k = cell.hidden_size, cell.K
    weight, bias = cell.input_weights()
    w_in, b_in = p.matrix(pre + "w_in", weight), p.vector(pre + "b_in", bias)
    w_state, u = p.matrix(pre + "w_state", cell.state_weights()), p.matrix(pre + "u", cell.weight_U)
    eta = p.vector(pre + "eta", cell.steps.values())
    inside = cell.gate == "inside"
    coupled = (
        f"    if (k) for (int j = 0; j < {hidden // 2}; ++j) g[j] += delta[{hidden // 2} + j];"
        if cell.A_kind == "coupled"
        else None
    )
    # the fused formulation (cells/fused/tarnn.py, FusedTARNN): [c, q, r] = P + s [B2 + A; W2 + U; U_s]^T, delta_0 = 0,
    # G_k = phi(q + U delta_k) + c + A delta_k, delta_{k+1} = delta_k + eta_k (beta) G_k
    lines = p.buffers(qa=3 * hidden, beta=hidden, delta=hidden, arg=hidden, g=hidden) + [
        _init_from("qa", b_in, 3 * hidden),
        p.matvec("qa", w_in, x),
        p.matvec("qa", w_state, s),
        f"for (int j = 0; j < {hidden}; ++j) {{ beta[j] = {p.sigmoid(f'qa[{2 * hidden} + j]')}; delta[j] = 0.0f; }}",
        f"for (int k = 0; k < {k}; ++k) {{",
        f"    memcpy(arg, qa + {hidden}, sizeof arg);",
        "    if (k) " + p.matvec("arg", u, "delta"),
        f"    for (int j = 0; j < {hidden}; ++j) g[j] = {p.act(cell.activation, 'arg[j]')} + qa[j] - delta[j];",
        *([coupled] if coupled else []),
        f"    for (int j = 0; j < {hidden}; ++j) delta[j] += {eta}[k] * {'beta[j] * ' if inside else ''}g[j];",
        "}",
        f"for (int j = 0; j < {hidden}; ++j) {s}[j] += {'' if inside else 'beta[j] * '}delta[j];",
    ]
    return lines, s


@emitter("irnn")
def _irnn(p: Program, cell, pre: str, x: str, s: str):
    from ..cells.fused.irnn import dense_operator

    hidden = cell.hidden_size
    weight, bias = cell.input_map()
    first, second = cell.recurrent_operator()
    m = first if second is None else dense_operator(first, second)
    w_in, b_in, m_op = p.matrix(pre + "w_in", weight), p.vector(pre + "b_in", bias), p.matrix(pre + "m", m)
    eta = p.vector(pre + "eta", cell.steps.values())
    with torch.no_grad():
        alpha = _float(float(cell.alpha()))
    from ..cells.irnn import READINGS

    start, keep = (_float(v) for v in READINGS[cell.reading])
    # in y = g + h_{t-1}: y_0 = start * h, y_{i+1} = y_i + eta_i (phi(M y_i + c) - alpha y_i),
    # h_t = y_K - keep * h (keep = 0: the residual reading, h_t = y_K)
    lines = p.buffers(c=hidden, y=hidden, drive=hidden) + [
        _init_from("c", b_in, hidden),
        p.matvec("c", w_in, x),
        f"for (int j = 0; j < {hidden}; ++j) y[j] = {start} * {s}[j];",
        f"for (int i = 0; i < {cell.K}; ++i) {{",
        "    memcpy(drive, c, sizeof drive);",
        "    " + p.matvec("drive", m_op, "y"),
        f"    for (int j = 0; j < {hidden}; ++j) y[j] += {eta}[i] * ({p.act(cell.activation, 'drive[j]')} - "
        f"{alpha} * y[j]);",
        "}",
        f"for (int j = 0; j < {hidden}; ++j) {s}[j] = y[j] - {keep} * {s}[j];",
    ]
    return lines, s


def supported_cells() -> List[str]:
    """Registry names the C generator handles."""
    return sorted(EMITTERS)


def check_c_supported(cell) -> None:
    """Raise :class:`ExportError` for a cell (or cell option) the C generator does not handle."""
    name = getattr(cell, "registry_name", type(cell).__name__)
    if name not in EMITTERS:
        raise ExportError(
            f"cell {name!r}: export to C is not supported (supported: "
            f"{', '.join(supported_cells())}); the onnx and pt2 formats may work for it"
        )
    unsupported = UNSUPPORTED_OPTIONS.get(name)
    if unsupported:
        reason = unsupported(cell)
        if reason:
            raise ExportError(f"cell {name!r}: export to C is not supported with {reason}")


UNSUPPORTED_OPTIONS: Dict[str, Callable[[object], str | None]] = {
    "tarnn": lambda c: "eta_per_time_step=True" if c.per_time_step else None,
    "irnn": lambda c: "eta_per_time_step=True" if c.per_time_step else None,
}


def check_name(name) -> str:
    """``name`` if it can be a file base name and a C symbol prefix, else :class:`ExportError`."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ExportError(
            f"name: expected a C identifier (letters, digits, _; not starting with a digit), got {name!r}"
        )
    return name


def generate_c(step: StreamingStep, name: str, int8: bool = False) -> CSource:
    """The C source and header of ``step`` under the symbol prefix ``name`` (a C identifier)."""
    check_name(name)
    for cell in step.cells:
        check_c_supported(cell)
    model = step.model
    p = Program(int8)
    body: List[str] = []
    x = "x"
    if model.embed is not None:
        body += p.buffers(embedded=model.embed.out_features) + [
            "memset(embedded, 0, sizeof embedded);",
            p.matvec("embedded", p.matrix("embed_w", model.embed.weight), x),
        ]
        x = "embedded"
    offsets = [next(part.offset for part in step.parts if part.layer == i) for i in range(len(step.cells))]
    layer_scratch = []
    for index, cell in enumerate(step.cells):
        p.scratch_floats = 0
        lines, out = EMITTERS[cell.registry_name](p, cell, f"l{index}_", x, "s")
        layer_scratch.append(p.scratch_floats)
        body += [f"/* layer {index}: {cell.registry_name} */", "{", f"    float *s = state + {offsets[index]};"]
        body += ["    " + line for line in lines]
        if index + 1 < len(step.cells):  # the next layer reads this layer's output
            body += [f"    memcpy(layer_out, {out}, sizeof(float) * {cell.hidden_size});"]
        else:
            body += [
                f"    {_init_from('out', p.vector('head_b', model.output.bias), model.output.out_features)}",
                "    " + p.matvec("out", p.matrix("head_w", model.output.weight), out),
            ]
        body.append("}")
        x = "layer_out"
    hidden_between = max((c.hidden_size for c in step.cells[:-1]), default=0)
    prelude = [f"float layer_out[{hidden_between}];"] if hidden_between else []
    scratch = max(layer_scratch) + hidden_between + (model.embed.out_features if model.embed is not None else 0)
    upper = name.upper()
    header = _HEADER.format(
        name=name, upper=upper, d=step.input_size, s=step.state_size, o=step.output_size, what=_describe(step, int8)
    )
    initial = step.init_state(1)[0]
    init = (
        f"memset(state, 0, sizeof(float) * {upper}_STATE_SIZE);"
        if not initial.any()
        else f"memcpy(state, {p.vector('initial_state', initial)}, sizeof(float) * {upper}_STATE_SIZE);"
    )
    helpers = "\n\n".join(HELPERS[h] for h in ("sigmoid", "relu", "mv", "mv_q8") if h in p.helpers)
    source = _SOURCE.format(
        name=name,
        upper=upper,
        what=_describe(step, int8),
        helpers=helpers,
        arrays="\n".join(p.arrays),
        init=init,
        body="\n".join("    " + line for line in prelude + body),
    )
    return CSource(name, header, source, p.weight_bytes, 4 * step.state_size, 4 * scratch)


def _describe(step: StreamingStep, int8: bool) -> str:
    cells = "+".join(c.registry_name for c in step.cells)
    return (
        f"{cells}, d={step.input_size}, H={step.cells[-1].hidden_size}, outputs={step.output_size}, "
        f"weights {'int8 per output row (float scale)' if int8 else 'float32'}"
    )


_HEADER = """/* {name}: one streaming step of a ltdrnn model ({what}).
 * Generated by ltdrnn's C exporter; C99, no malloc, needs only libm. Batch 1, float32 input/state/output.
 *
 *   float state[{upper}_STATE_SIZE];  {name}_init(state);
 *   for each time step: {name}_step(x, state, out);   out = the head's output at that step
 */
#ifndef {upper}_H
#define {upper}_H

#define {upper}_INPUT_SIZE {d}
#define {upper}_STATE_SIZE {s}
#define {upper}_OUTPUT_SIZE {o}

#ifdef __cplusplus
extern "C" {{
#endif

void {name}_init(float *state);
void {name}_step(const float *x, float *state, float *out);

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

{helpers}

{arrays}

void {name}_init(float *state)
{{
    {init}
}}

void {name}_step(const float *x, float *state, float *out)
{{
{body}
}}
"""


# ---- writing, compiling and running the generated code ------------------------------------------------
CFLAGS = ("-std=c99", "-O2", "-Wall", "-Wextra", "-pedantic", "-Werror")


def find_compiler() -> str | None:
    """``$CC`` or the system's ``cc``; None when there is none."""
    return os.environ.get("CC") or shutil.which("cc")


def compile_c(sources, target: Path, shared: bool) -> Path:
    """Compile with the system compiler (warnings are errors): a shared library or an executable."""
    compiler = find_compiler()
    if compiler is None:
        raise ExportError("C compiler: none found (set CC or install cc) to compile the generated step")
    flags = ["-shared", "-fPIC"] if shared else []
    flags += sorted({f"-I{Path(source).parent}" for source in sources})
    result = subprocess.run(
        [compiler, *CFLAGS, *flags, "-o", str(target), *map(str, sources), "-lm"], capture_output=True, text=True
    )
    if result.returncode != 0:
        raise ExportError(f"C compiler: {compiler} failed on the generated code:\n{result.stderr[:2000]}")
    return target


def load_library(source: Path, name: str) -> ctypes.CDLL:
    """Compile ``source`` into a shared library and load it. The build directory is removed before
    returning: a loaded library stays mapped after its file is deleted (POSIX), and nothing is left in
    the temporary directory, even when the compiler fails."""
    with tempfile.TemporaryDirectory(prefix="ltdrnn-c-") as work:
        return ctypes.CDLL(str(compile_c([source], Path(work) / f"lib{name}.so", shared=True)))


def library_step(library: ctypes.CDLL, name: str, state_size: int, output_size: int):
    """``(x_t (B, d), state (B, S)) -> (y (B, o), state)`` calling ``NAME_step`` row by row (numpy)."""
    function = getattr(library, f"{name}_step")
    function.argtypes = [ctypes.c_void_p] * 3
    function.restype = None

    def run(x_t, state):
        x_t = np.ascontiguousarray(x_t, dtype=np.float32)
        state = np.array(state, dtype=np.float32, order="C")  # a copy: the C step updates it in place
        y = np.empty((x_t.shape[0], output_size), dtype=np.float32)
        for b in range(x_t.shape[0]):
            function(x_t[b].ctypes.data, state[b].ctypes.data, y[b].ctypes.data)
        return y, state

    return run


def step_latency_ns(header: Path, source: Path, name: str, steps: int) -> float:
    """CPU nanoseconds per call of the compiled ``NAME_step`` at batch 1, timed inside C on the thread's
    CPU clock (a loop of ``steps`` calls on a varying input after a warm-up), so neither Python or ctypes
    overhead nor waiting for a core on a shared machine is counted. The benchmark is built and run in a
    temporary directory that is removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="ltdrnn-c-") as work:
        bench = Path(work) / "bench_main.c"
        bench.write_text(_BENCH.format(name=name, upper=name.upper(), header=header.name, steps=steps))
        binary = compile_c([bench, source], Path(work) / "bench_step", shared=False)
        result = subprocess.run([str(binary)], capture_output=True, text=True, check=True)
    return float(result.stdout.split()[0])


_BENCH = """#define _POSIX_C_SOURCE 199309L
#include "{header}"
#include <stdio.h>
#include <time.h>

int main(void)
{{
    static float x[{upper}_INPUT_SIZE], state[{upper}_STATE_SIZE], out[{upper}_OUTPUT_SIZE];
    float sink = 0.0f;
    struct timespec start, stop;
    {name}_init(state);
    for (long i = 0; i < {steps} / 10 + 1; ++i) {{ x[0] = (float)(i % 7) * 0.1f; {name}_step(x, state, out); }}
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
    for (long i = 0; i < {steps}; ++i) {{
        for (int j = 0; j < {upper}_INPUT_SIZE; ++j) x[j] = (float)((i + j) % 7) * 0.1f - 0.3f;
        {name}_step(x, state, out);
        sink += out[0];
    }}
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &stop);
    double ns = (stop.tv_sec - start.tv_sec) * 1e9 + (stop.tv_nsec - start.tv_nsec);
    printf("%.3f %g\\n", ns / {steps}, (double)sink);
    return 0;
}}
"""


def write(step: StreamingStep, out: Path, name: str, int8: bool) -> dict:
    """Write ``NAME.c`` and ``NAME.h``; with a C compiler, also build them for the parity run."""
    generated = generate_c(step, name, int8)
    header, source = out / f"{name}.h", out / f"{name}.c"
    header.write_text(generated.header)
    source.write_text(generated.source)
    result = {"files": [source, header], "generated": generated, "notes": [], "step": None}
    if find_compiler() is None:
        result["notes"].append("no C compiler found: the generated code was not compiled, parity not measured")
        return result
    result["library"] = load_library(source, name)
    result["step"] = library_step(result["library"], name, step.state_size, step.output_size)
    return result
