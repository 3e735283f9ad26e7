"""Each cell the C export handles, written once as an :class:`~ltdrnn.export.ir.Graph` step.

Every builder follows the cell's streaming formulation in the library: the torch.nn equations for LSTM
and GRU, the residual updates of FastRNN and FastGRNN (low-rank factors kept as two products), SRNN's
input network and shift, MIST's softmax mix of delayed states, SA-RNN's coordinator and its GRU or LSTM
candidate, and for TARNN and iRNN the fused forms their fast paths use, so options folded into those
(TARNN's readings, iRNN's projection and low rank) need no code of their own. The five source cells are read
through their fronts' public operands (``ops.<cell>.operands(cell)``), the tensors and codes their fast
paths run on, never through their attributes.
The Euler loops of TARNN and iRNN are unrolled: each of the K steps has its own step size, and in the
integer code its own number format.

    build_graph(step: StreamingStep) -> Graph        # the whole model: embedding, layers, pooling, head
"""

from __future__ import annotations

import copy
from typing import Callable, Dict, List, Tuple

import torch

from ..ops import irnn as ops_irnn
from ..ops import mist as ops_mist
from ..ops import sarnn as ops_sarnn
from ..ops import srnn as ops_srnn
from ..ops import tarnn as ops_tarnn
from .ir import Graph, StatePart, Value
from .step import ExportError, StreamingStep

Builder = Callable[[Graph, object, str, Value, List[StatePart]], Value]
BUILDERS: Dict[str, Builder] = {}


def builds(*names: str):
    def add(function: Builder) -> Builder:
        for name in names:
            BUILDERS[name] = function
        return function

    return add


def _number(value) -> float:
    return float(value.detach().double()) if isinstance(value, torch.Tensor) else float(value)


def _sigmoid_of(parameter) -> float:
    return float(torch.sigmoid(parameter.detach().double()))


@builds("lstm")
def _lstm(g: Graph, cell, pre: str, x: Value, parts) -> Value:
    h_part, c_part = parts
    h, c = g.read(h_part), g.read(c_part)
    bias = cell.bias_ih + cell.bias_hh if cell.bias else None
    gates = g.linear([(pre + "w_ih", cell.weight_ih, x), (pre + "w_hh", cell.weight_hh, h)], bias, pre + "lstm")
    h_new, c_new = _lstm_update(g, cell.hidden_size, gates, h, c)
    g.write(h_part, h_new)
    g.write(c_part, c_new)
    return h_new


def _lstm_update(g: Graph, hidden: int, gates: Value, h: Value, c: Value) -> Tuple[Value, Value]:
    """torch.nn.LSTM's update from the gate sums (i, f, g, o)."""
    i, f, cand, o = (g.slice(gates, k * hidden, hidden) for k in range(4))
    c_new = g.add(g.mul(g.act("sigmoid", f), c), g.mul(g.act("sigmoid", i), g.act("tanh", cand)))
    return g.mul(g.act("sigmoid", o), g.act("tanh", c_new)), c_new


@builds("gru")
def _gru(g: Graph, cell, pre: str, x: Value, parts) -> Value:
    (h_part,) = parts
    h = g.read(h_part)
    gi = g.linear([(pre + "w_ih", cell.weight_ih, x)], cell.bias_ih if cell.bias else None, pre + "gi")
    gh = g.linear([(pre + "w_hh", cell.weight_hh, h)], cell.bias_hh if cell.bias else None, pre + "gh")
    h_new = _gru_update(g, cell.hidden_size, gi, gh, h)
    g.write(h_part, h_new)
    return h_new


def _gru_update(g: Graph, hidden: int, gi: Value, gh: Value, h: Value) -> Value:
    """torch.nn.GRU's update: ``(1 - z) n + z h``."""
    part = lambda v, k: g.slice(v, k * hidden, hidden)  # noqa: E731
    r = g.act("sigmoid", g.add(part(gi, 0), part(gh, 0)))
    z = g.act("sigmoid", g.add(part(gi, 1), part(gh, 1)))
    n = g.act("tanh", g.add(part(gi, 2), g.mul(r, part(gh, 2))))
    return g.add(n, g.mul(z, g.sub(h, n)))


def _low_rank(g: Graph, label: str, factors, v: Value) -> Tuple[str, object, Value]:
    """A linear term ``W v`` with ``W`` one matrix or two factors ``W_1 W_2`` (``W_2 v`` first)."""
    if len(factors) == 1:
        return label, factors[0], v
    inner = g.linear([(label + "2", factors[1], v)])
    return label + "1", factors[0], inner


def _fast_preactivation(g: Graph, cell, pre: str, x: Value, h: Value, bias, bias_label: str) -> Value:
    terms = [_low_rank(g, pre + "w", cell.W, x), _low_rank(g, pre + "u", cell.U, h)]
    return g.linear(terms, bias, bias_label)


@builds("fastrnn")
def _fastrnn(g: Graph, cell, pre: str, x: Value, parts) -> Value:
    (h_part,) = parts
    h = g.read(h_part)
    a = _fast_preactivation(g, cell, pre, x, h, cell.bias, pre + "a")
    alpha, beta = _sigmoid_of(cell.alpha), _sigmoid_of(cell.beta)
    h_new = g.add(g.mul(g.act(cell.nonlinearity, a), alpha), g.mul(h, beta))
    g.write(h_part, h_new)
    return h_new


@builds("fastgrnn")
def _fastgrnn(g: Graph, cell, pre: str, x: Value, parts) -> Value:
    (h_part,) = parts
    h = g.read(h_part)
    a = _fast_preactivation(g, cell, pre, x, h, None, "")
    z = g.act(cell.gate_nonlinearity, g.add(a, g.const(pre + "b_gate", cell.bias_gate)))
    cand = g.act(cell.update_nonlinearity, g.add(a, g.const(pre + "b_update", cell.bias_update)))
    zeta, nu = _sigmoid_of(cell.zeta), _sigmoid_of(cell.nu)
    # (zeta (1 - z) + nu) cand + z h = (zeta + nu) cand + z (h - zeta cand)
    h_new = g.add(g.mul(cand, zeta + nu), g.mul(z, g.sub(h, g.mul(cand, zeta))))
    g.write(h_part, h_new)
    return h_new


@builds("srnn")
def _srnn(g: Graph, cell, pre: str, x: Value, parts) -> Value:
    op = ops_srnn.operands(cell)
    (h_part,) = parts
    h = g.read(h_part)
    feature = x
    for index, (weight, bias) in enumerate(op.hidden):
        name = f"{pre}fr{index}"
        feature = g.act("relu", g.linear([(name + "_w", weight, feature)], bias, name))
    beta = g.linear([(pre + "out_w", op.out_weight, feature)], op.out_bias, pre + "out")
    if op.gate_weight is not None:
        gate = g.linear([(pre + "gate_w", op.gate_weight, x)], op.gate_bias, pre + "gate")
        beta = g.mul(beta, g.act("sigmoid", gate))
    # h_t = act(roll(h_{t-1}, 1) + beta): unit j reads unit j - 1, unit 0 reads the last (op.shift is 1)
    h_new = g.act("relu" if op.relu else "tanh", g.add(g.roll(h), beta))
    g.write(h_part, h_new)
    return h_new


@builds("mist")
def _mist(g: Graph, cell, pre: str, x: Value, parts) -> Value:
    op = ops_mist.operands(cell)
    (history,) = parts
    hidden, delays, n = op.weight_mix.shape[0], len(op.delays), op.history_size
    split = delays + hidden
    previous = g.read(history, n - 1)
    gates = g.linear(
        [(pre + "w_gates_x", op.weight_ih[:split], x), (pre + "w_hh", op.weight_hh, previous)],
        op.bias[:split],
        pre + "gates",
    )
    mix = g.softmax(g.slice(gates, 0, delays))
    # the state k steps back is row N - k of the history (oldest first)
    delayed = [previous if k == 1 else g.read(history, n - k) for k in op.delays]
    reset = g.act("sigmoid", g.slice(gates, delays, hidden))
    mixed = g.mul(g.combine(mix, delayed), reset)
    h_new = g.act(
        "tanh",
        g.linear(
            [(pre + "w_state_x", op.weight_ih[split:], x), (pre + "w_mix", op.weight_mix, mixed)],
            op.bias[split:],
            pre + "state",
        ),
    )
    g.push(history, h_new)
    return h_new


@builds("sarnn")
def _sarnn(g: Graph, cell, pre: str, x: Value, parts) -> Value:
    op = ops_sarnn.operands(cell)
    hidden = op.coord_weight_h.shape[0]
    h = g.read(parts[0])
    coordinator = g.linear([(pre + "coord_w", op.coord_weight_x, x)], op.coord_bias, pre + "coord")
    # u_t = 1[hard_sigmoid(...) > 1/2]; the clamp does not change the decision
    decision = g.add(coordinator, g.mul(h, g.const(pre + "coord_h", op.coord_weight_h)))
    gi = g.linear([(pre + "w_ih", op.weight_ih, x)], op.bias_ih, pre + "gi")
    gh = g.linear([(pre + "w_hh", op.weight_hh, h)], op.bias_hh, pre + "gh")
    if op.recurrence == "gru":
        h_new = g.select(decision, 0.5, _gru_update(g, hidden, gi, gh, h), h)
        g.write(parts[0], h_new)
        return h_new
    c = g.read(parts[1])
    h_cand, c_cand = _lstm_update(g, hidden, g.add(gi, gh), h, c)
    h_new = g.select(decision, 0.5, h_cand, h)
    g.write(parts[0], h_new)
    g.write(parts[1], g.select(decision, 0.5, c_cand, c))
    return h_new


def _apply_a(g: Graph, op: ops_tarnn.TARNNOperands, z: Value) -> Value:
    """``A z`` for TARNN's fixed ``A`` (``a_diagonal I``, plus ``+I`` on the upper right when coupled)."""
    result = g.mul(z, op.a_diagonal)
    return g.add(result, g.upper(z)) if op.coupled else result


@builds("tarnn")
def _tarnn(g: Graph, cell, pre: str, x: Value, parts) -> Value:
    op = ops_tarnn.operands(cell)
    (s_part,) = parts
    hidden = op.weight_U.shape[0]
    s = g.read(s_part)
    # [c, q, r] = W_in x + b + [B2; W2 + U; U_s] s: the linear term without A z (and the code reading's
    # damping -s), the pre-activation of the first Euler step (z_0 = s) and beta's. A z and -s are kept
    # apart, elementwise on z = s + delta: near equilibrium G is a small difference of terms of the size of
    # the state, and the integer step computes those in the state's own (wide) precision.
    first = torch.cat([op.weight_B2, op.state_weights[hidden:]])
    qa = g.linear([(pre + "w_in", op.weight, x), (pre + "w_state", first, s)], op.bias, pre + "in")
    c, q, r = (g.slice(qa, k * hidden, hidden) for k in range(3))
    beta = g.act("sigmoid", r)
    inside = op.gate_inside
    delta = None  # z_k = s + delta_k, delta_0 = 0
    for eta in op.eta.detach().double().tolist():
        # G_k = phi(q + U delta_k) + c + A z_k (- s with the code reading's damping)
        arg = q if delta is None else g.linear([(pre + "u", op.weight_U, delta)], addend=q)
        z = s if delta is None else g.add(s, delta)
        grad = g.add(g.add(g.act(op.activation, arg), c), _apply_a(g, op, z))
        if op.damping:
            grad = g.sub(grad, s)
        # eta first: eta G is the step's small change (a finer integer format than G's)
        change = g.mul(beta, g.mul(grad, eta)) if inside else g.mul(grad, eta)
        delta = change if delta is None else g.add(delta, change)
    s_new = g.add(s, delta if inside else g.mul(beta, delta))
    g.write(s_part, s_new)
    return s_new


@builds("irnn")
def _irnn(g: Graph, cell, pre: str, x: Value, parts) -> Value:
    op = ops_irnn.operands(cell)
    (h_part,) = parts
    h = g.read(h_part)
    c = g.linear([(pre + "w_in", op.weight, x)], op.bias, pre + "in")
    alpha = _number(op.alpha)
    # in y = g + h_{t-1}: y_0 = start h, y_{i+1} = y_i + eta_i (phi(M y_i + c) - alpha y_i), h_t = y_K - keep h
    y = h if op.start == 1.0 else g.mul(h, op.start)
    for eta in op.eta.detach().double().tolist():
        if op.second is None:  # dense M
            pre_activation = g.linear([(pre + "m", op.first, y)], addend=c)
        else:  # M = I + V' H: the identity exact, the low-rank factors stored (and rounded) on their own
            low = g.linear([(pre + "m_v", op.first, g.linear([(pre + "m_h", op.second, y)]))], addend=c)
            pre_activation = g.add(y, low)
        drive = g.act(op.activation, pre_activation)
        y = g.add(g.mul(y, 1.0 - eta * alpha), g.mul(drive, eta))
    h_new = y if op.keep == 0.0 else g.sub(y, g.mul(h, op.keep))
    g.write(h_part, h_new)
    return h_new


def _irnn_unsupported(op: ops_irnn.IRNNOperands) -> str | None:
    if op.eta.dim() == 2:
        return "eta_per_time_step=True"
    return "gate='outside'" if op.gate_weight_h is not None else None


UNSUPPORTED_OPTIONS: Dict[str, Callable[[object], str | None]] = {
    "tarnn": lambda c: "eta_per_time_step=True" if ops_tarnn.operands(c).eta.dim() == 2 else None,
    "irnn": lambda c: _irnn_unsupported(ops_irnn.operands(c)),
}


def supported_cells() -> List[str]:
    """Registry names the C generator handles."""
    return sorted(BUILDERS)


def check_c_supported(cell) -> None:
    """Raise :class:`ExportError` for a cell (or cell option) the C generator does not handle."""
    name = getattr(cell, "registry_name", type(cell).__name__)
    if name not in BUILDERS:
        raise ExportError(
            f"cell {name!r}: export to C is not supported (supported: "
            f"{', '.join(supported_cells())}); the onnx and pt2 formats may work for it"
        )
    unsupported = UNSUPPORTED_OPTIONS.get(name)
    reason = unsupported(cell) if unsupported else None
    if reason:
        raise ExportError(f"cell {name!r}: export to C is not supported with {reason}")


def build_graph(step: StreamingStep) -> Graph:
    """The whole model's step: optional input embedding, every layer, the pooling, the head.

    Derived weights (TARNN's ``B2 + A``, iRNN's ``U^2``, SA-RNN's scaled coordinator) are computed in
    float64, from a float64 copy of the model, before the C rounds them."""
    for cell in step.cells:
        check_c_supported(cell)
    step = StreamingStep(copy.deepcopy(step.model).double())
    model = step.model
    g = Graph(step.input_size)
    g.parameter_names = {id(p): name for name, p in model.named_parameters()}
    g.peaks = {name: float(p.detach().abs().max()) for name, p in model.named_parameters() if p.numel()}
    modules = {id(m): name for name, m in model.named_modules()}
    initial = step.init_state(1)[0].detach().double().cpu().numpy()
    by_layer: Dict[int, List[StatePart]] = {}
    for index, part in enumerate(step.parts):
        rows, size = (part.shape[0], part.shape[1]) if len(part.shape) == 2 else (1, part.size)
        init = initial[part.offset : part.offset + part.size]
        by_layer.setdefault(part.layer, []).append(g.part(f"s{index}", rows, size, init))
    x = g.x
    if model.embed is not None:
        x = g.linear([("embed_w", model.embed.weight, x)])
    for index, cell in enumerate(step.cells):
        g.scope = modules.get(id(cell), "")
        x = BUILDERS[cell.registry_name](g, cell, f"l{index}_", x, by_layer[index])
    g.scope = ""
    x = _pool(g, step, x, by_layer.get(len(step.cells), []))
    g.output(g.linear([("head_w", model.output.weight, x)], model.output.bias, "head"))
    return g


def _pool(g: Graph, step: StreamingStep, x: Value, parts: List[StatePart]) -> Value:
    """The pooled reading of the top layer (StreamingStep's pooling state), or ``x`` for ``last``."""
    if step.pooling == "last":
        return x
    if step.pooling == "max":
        (part,) = parts
        pooled = g.maximum(g.read(part), x)
        g.write(part, pooled)
        return pooled
    total_part, count_part = parts
    total, count = g.add(g.read(total_part), x), g.add(g.read(count_part), 1.0)
    g.write(total_part, total)
    g.write(count_part, count)
    return g.div(total, count)
