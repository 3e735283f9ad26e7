"""A small dataflow description of one streaming step, shared by the C generators and the calibration.

Every cell the C export handles is written once as a :class:`Graph` (``export/cells_ir.py``): vectors
of a fixed length per time step, built from the input ``x``, the state and constants by a handful of
operations. Three consumers read it:

- :func:`evaluate` runs it in float64 numpy over a batch (the reference the tests hold against the
  eager model, and the calibration of the integer path's number formats, :func:`value_ranges`);
- ``c_float.py`` writes it as float C;
- ``c_fixed.py`` writes it as integer C (int8 weights, int16 values, int32 accumulation).

Operations (``n`` is a value's length; a length-1 operand of an elementwise operation is broadcast):

    linear   y[r] = bias[r] + addend[r] + sum_t sum_c W_t[r, c] v_t[c]     (vector op: needs whole inputs)
    add, sub, mul, div, maximum                                        (elementwise, two operands)
    act      relu | tanh | sigmoid                                     (elementwise)
    select   y = where(cond > threshold, a, b)                         (elementwise)
    softmax  y = exp(v - max v) / sum exp(v - max v)                   (vector op)
    combine  y[j] = sum_i w[i] rows_i[j]                               (vector op: MIST's mix of delays)
    view     a window of a value: slice (offset), roll (y[j] = v[j-1 mod n]) or upper (y[j] = v[n/2 + j]
             for j < n/2, else 0); never stored, read through
    input, state, const (a vector kept in flash), scalar (a literal)

State parts keep their rows (``rows`` vectors of ``size``); ``write(part, value)`` replaces a one-row part,
``push(part, value)`` drops a part's oldest row and appends ``value`` (MIST's history). Writes take effect
after the step. ``output(value)`` is the head's output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

ELEMENTWISE = ("add", "sub", "mul", "div", "maximum", "act", "select")
ACTIVATIONS = ("relu", "tanh", "sigmoid")


@dataclass(eq=False)
class Value:
    """One vector of the step. ``op`` names how it is computed from ``args`` (other values)."""

    index: int
    op: str
    size: int
    args: Tuple["Value", ...] = ()
    attrs: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"v{self.index}"

    def __repr__(self) -> str:
        return f"<{self.name} {self.op} n={self.size}>"


@dataclass(eq=False)
class StatePart:
    """``rows`` vectors of ``size`` at ``offset`` (in elements) of the packed state; ``init`` ``(rows, size)``."""

    name: str
    rows: int
    size: int
    offset: int
    init: np.ndarray


@dataclass(frozen=True)
class Term:
    """One product of a linear operation: ``label`` names the matrix, ``weight`` is ``(rows, cols)`` float64.

    ``origin`` says where the matrix comes from, for messages: the model's parameter (its qualified name)
    when it is one as it is, else the module whose parameters it is computed from (empty if unknown);
    ``derived`` tells the two apart."""

    label: str
    weight: np.ndarray
    origin: str = ""
    derived: bool = False


class Graph:
    """The step as a list of values in evaluation order, its state parts, writes and output."""

    def __init__(self, input_size: int) -> None:
        self.values: List[Value] = []
        self.parts: List[StatePart] = []
        self.writes: List[Tuple[str, StatePart, Value]] = []  # ("write" | "push", part, value)
        self.result: Optional[Value] = None
        self.labels: set = set()
        self.matrices: Dict[str, np.ndarray] = {}  # a matrix used by several linear maps is stored once
        # where matrices come from, for messages (build_graph fills them): parameters by id, the module
        # being built, and the largest |value| of every parameter
        self.parameter_names: Dict[int, str] = {}
        self.scope = ""
        self.peaks: Dict[str, float] = {}
        self.x = self._add("input", input_size)

    # ---- building --------------------------------------------------------------------------------
    def _add(self, op: str, size: int, args: Sequence[Value] = (), **attrs) -> Value:
        value = Value(len(self.values), op, size, tuple(args), attrs)
        self.values.append(value)
        return value

    def _label(self, label: str) -> str:
        if label in self.labels:
            raise AssertionError(f"constant {label} defined twice")
        self.labels.add(label)
        return label

    def part(self, name: str, rows: int, size: int, init: np.ndarray | None = None) -> StatePart:
        offset = sum(p.rows * p.size for p in self.parts)
        init = np.zeros((rows, size)) if init is None else np.asarray(init, np.float64).reshape(rows, size)
        self.parts.append(StatePart(name, rows, size, offset, init))
        return self.parts[-1]

    def read(self, part: StatePart, row: int = 0) -> Value:
        return self._add("state", part.size, part=part, row=row)

    def const(self, label: str, vector) -> Value:
        array = _array(vector).reshape(-1)
        origin = self.parameter_names.get(id(vector), "")
        return self._add("const", array.size, label=self._label(label), data=array, origin=origin)

    def scalar(self, number: float) -> Value:
        return self._add("scalar", 1, number=float(number))

    def linear(self, terms: Sequence[Tuple[str, object, Value]], bias=None, label: str = "", addend=None) -> Value:
        """``sum_t W_t v_t (+ bias, a constant named label + "_b") (+ addend, a value)``."""
        built, inputs = [], []
        rows = None
        for name, weight, vector in terms:
            w = _array(weight)
            if w.ndim != 2 or w.shape[1] != vector.size or rows not in (None, w.shape[0]):
                raise AssertionError(f"{name}: matrix {w.shape} does not fit {vector} / {rows} rows")
            rows = w.shape[0]
            if name in self.matrices and np.array_equal(self.matrices[name], w):
                w = self.matrices[name]  # the same matrix again (an Euler step's U): one copy in the C
            else:
                self.matrices[self._label(name)] = w
            parameter = self.parameter_names.get(id(weight))
            built.append(Term(name, w, parameter or self.scope, parameter is None))
            inputs.append(vector)
        b = None if bias is None else _array(bias).reshape(-1)
        if addend is not None:
            inputs.append(addend)
        return self._add(
            "linear",
            rows,
            inputs,
            terms=tuple(built),
            bias=b,
            bias_label=self._label(label + "_b") if b is not None else None,
            addend=addend is not None,
        )

    def _elementwise(self, op: str, *operands, **attrs) -> Value:
        args = [o if isinstance(o, Value) else self.scalar(o) for o in operands]
        size = max(a.size for a in args)
        if any(a.size not in (1, size) for a in args):
            raise AssertionError(f"{op}: operand sizes {[a.size for a in args]} do not broadcast")
        return self._add(op, size, args, **attrs)

    def add(self, a, b) -> Value:
        return self._elementwise("add", a, b)

    def sub(self, a, b) -> Value:
        return self._elementwise("sub", a, b)

    def mul(self, a, b) -> Value:
        return self._elementwise("mul", a, b)

    def div(self, a, b) -> Value:
        return self._elementwise("div", a, b)

    def maximum(self, a, b) -> Value:
        return self._elementwise("maximum", a, b)

    def act(self, function: str, a: Value) -> Value:
        if function not in ACTIVATIONS:
            raise AssertionError(f"activation {function!r}")
        return self._elementwise("act", a, function=function)

    def select(self, condition: Value, threshold: float, a, b) -> Value:
        return self._elementwise("select", condition, a, b, threshold=float(threshold))

    def softmax(self, v: Value) -> Value:
        return self._add("softmax", v.size, [v])

    def combine(self, weights: Value, rows: Sequence[Value]) -> Value:
        if weights.size != len(rows) or len({r.size for r in rows}) != 1:
            raise AssertionError("combine: one weight per row, rows of one size")
        return self._add("combine", rows[0].size, [weights, *rows])

    def slice(self, v: Value, start: int, size: int) -> Value:
        if start < 0 or start + size > v.size:
            raise AssertionError(f"slice [{start}, {start + size}) of {v}")
        if start == 0 and size == v.size:
            return v
        return self._add("view", size, [v], kind="slice", offset=start)

    def roll(self, v: Value) -> Value:
        """``y[j] = v[j - 1]``, ``y[0] = v[n - 1]`` (torch.roll by +1)."""
        return self._add("view", v.size, [v], kind="roll", offset=0)

    def upper(self, v: Value) -> Value:
        """``y[j] = v[n/2 + j]`` for ``j < n/2``, 0 above (TARNN's coupled A)."""
        return self._add("view", v.size, [v], kind="upper", offset=0)

    def write(self, part: StatePart, value: Value) -> None:
        if part.rows != 1 or value.size != part.size:
            raise AssertionError(f"write {value} to {part.name}")
        self.writes.append(("write", part, value))

    def push(self, part: StatePart, value: Value) -> None:
        if value.size != part.size:
            raise AssertionError(f"push {value} to {part.name}")
        self.writes.append(("push", part, value))

    def output(self, value: Value) -> None:
        self.result = value

    # ---- reading ---------------------------------------------------------------------------------
    @property
    def state_size(self) -> int:
        return sum(p.rows * p.size for p in self.parts)

    def init_state(self) -> np.ndarray:
        """The packed initial state ``(S,)``."""
        return np.concatenate([p.init.reshape(-1) for p in self.parts]) if self.parts else np.zeros(0)

    def users(self) -> Dict[int, List[Value]]:
        """For every value index, the values that read it."""
        found: Dict[int, List[Value]] = {v.index: [] for v in self.values}
        for value in self.values:
            for arg in value.args:
                found[arg.index].append(value)
        return found


def _array(value) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().to("cpu").double().numpy()
    return np.array(value, dtype=np.float64)


# ---- float64 evaluation (the reference) and calibration ------------------------------------------------
def _view(value: Value, source: np.ndarray) -> np.ndarray:
    kind, offset = value.attrs["kind"], value.attrs["offset"]
    if kind == "slice":
        return source[:, offset : offset + value.size]
    if kind == "roll":
        return np.roll(source, 1, axis=1)
    half = value.size // 2
    out = np.zeros_like(source)
    out[:, :half] = source[:, half : 2 * half]
    return out


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * v))


ACT = {"relu": lambda v: np.maximum(v, 0.0), "tanh": np.tanh, "sigmoid": _sigmoid}


def _compute(value: Value, args: List[np.ndarray], x: np.ndarray, state: np.ndarray) -> np.ndarray:
    op, batch = value.op, x.shape[0]
    if op == "input":
        return x
    if op == "state":
        part = value.attrs["part"]
        start = part.offset + value.attrs["row"] * part.size
        return state[:, start : start + part.size]
    if op == "const":
        return np.broadcast_to(value.attrs["data"], (batch, value.size))
    if op == "scalar":
        return np.full((batch, 1), value.attrs["number"])
    if op == "linear":
        terms = value.attrs["terms"]
        out = sum(v @ t.weight.T for t, v in zip(terms, args))
        if value.attrs["bias"] is not None:
            out = out + value.attrs["bias"]
        if value.attrs["addend"]:
            out = out + args[-1]
        return out
    if op == "view":
        return _view(value, args[0])
    if op == "softmax":
        e = np.exp(args[0] - args[0].max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if op == "combine":
        weights, rows = args[0], args[1:]
        return sum(weights[:, i : i + 1] * row for i, row in enumerate(rows))
    if op == "act":
        return ACT[value.attrs["function"]](args[0])
    if op == "select":
        return np.where(args[0] > value.attrs["threshold"], args[1], args[2])
    a, b = args
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum}[op](
            a, b
        )


def evaluate(graph: Graph, x: np.ndarray, state: np.ndarray, record: Optional[Dict[int, np.ndarray]] = None):
    """One step over a batch in float64: ``x (B, d), state (B, S) -> (y (B, o), state (B, S))``.

    ``record`` (a dict) receives every value's array, by index."""
    x = np.asarray(x, np.float64)
    state = np.asarray(state, np.float64)
    computed: Dict[int, np.ndarray] = {}
    for value in graph.values:
        result = _compute(value, [computed[a.index] for a in value.args], x, state)
        computed[value.index] = np.broadcast_to(result, (x.shape[0], value.size))
    new = state.copy()
    for kind, part, value in graph.writes:
        start, stop = part.offset, part.offset + part.rows * part.size
        if kind == "write":
            new[:, start:stop] = computed[value.index]
        else:
            new[:, start : stop - part.size] = state[:, start + part.size : stop]
            new[:, stop - part.size : stop] = computed[value.index]
    if record is not None:
        record.update(computed)
    return computed[graph.result.index].copy(), new


def run(graph: Graph, x: np.ndarray, lengths: Optional[Sequence[int]] = None) -> np.ndarray:
    """``x (B, T, d) -> (B, o)``: the output after each sequence's last true step (float64)."""
    from .step import run_sequences

    state = np.tile(graph.init_state(), (x.shape[0], 1))
    return run_sequences(lambda x_t, s: evaluate(graph, x_t, s), state, np.asarray(x, np.float64), lengths)


def value_ranges(graph: Graph, x: np.ndarray, lengths: Optional[Sequence[int]] = None) -> Dict[int, float]:
    """The largest ``|v|`` of every value over every true step of every sequence of ``x (B, T, d)``.

    Non-finite values are left out (a diverged calibration run is reported by the caller)."""
    x = np.asarray(x, np.float64)
    batch, steps = x.shape[:2]
    ends = np.full(batch, steps) if lengths is None else np.asarray(lengths)
    state = np.tile(graph.init_state(), (batch, 1))
    largest = {v.index: 0.0 for v in graph.values}
    for t in range(steps):
        live = ends > t
        record: Dict[int, np.ndarray] = {}
        _, state = evaluate(graph, x[:, t], state, record)
        for index, array in record.items():
            seen = np.abs(array[live])
            seen = seen[np.isfinite(seen)]
            if seen.size:
                largest[index] = max(largest[index], float(seen.max()))
    return largest
