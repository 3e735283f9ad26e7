"""Fuzz: the cell and layer APIs of every registry entry on random shapes, dtypes, lengths, states and
non-finite values.

Property: a call either raises ValueError/TypeError whose message starts with the parameter at fault,
or returns what the reference path returns (``backend="reference"``; for the layer, each sequence run
alone at its own length). Never a crash, never a silently different value.
"""

import math

import pytest
import torch

import ltdrnn
import triton_helpers  # noqa: F401  (on the CPU: Triton's interpreter, chosen before any kernel is defined)
from ltdrnn.cells.registry import build, entry, list_cells
from ltdrnn.ops.triton_support import triton_installed

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

D, H = 3, 16  # H >= 16: clockwork needs H >= its 10 modules, iRNN H >= its default rank
PARAMETERS = ("x", "x_t", "state", "lengths", "input", "batch_first")
CELLS = list_cells()
#: cells that draw random numbers (random_updates) are only held to "no crash, zero padding"
RANDOM = {name for name in CELLS if not entry(name).deterministic}
_BUILT = {}


def cell_of(name):
    if name not in _BUILT:
        torch.manual_seed(0)
        _BUILT[name] = build(name, D, H, **_small(name))
    return _BUILT[name]


def _small(name):
    return {"K": 2} if name in ("tarnn", "irnn") else {}


def assert_names_a_parameter(error):
    assert isinstance(error, (ValueError, TypeError)), repr(error)
    assert str(error).split(":")[0].split("[")[0] in PARAMETERS, str(error)


@st.composite
def inputs(draw, name):
    """``(x, state, lengths, poison_in_padding_only)`` for ``cell.scan``: mostly valid, sometimes not."""
    cell = cell_of(name)
    steps, batch = draw(st.integers(0, 5)), draw(st.integers(0, 3))
    rank = draw(st.sampled_from([3, 3, 3, 3, 2, 4]))
    features = draw(st.sampled_from([D, D, D, D + 1]))
    shape = {2: (steps, features), 3: (steps, batch, features), 4: (steps, batch, features, 1)}[rank]
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    x = torch.randn(shape, generator=generator)
    x = x.to(draw(st.sampled_from([torch.float32] * 6 + [torch.float64, torch.int64, torch.bool])))
    lengths = draw(st.sampled_from(["none", "valid", "valid", "zero", "long", "bool", "float", "shape"]))
    if lengths == "valid" and steps and batch:
        lengths = torch.tensor([draw(st.integers(1, steps)) for _ in range(batch)])
    else:
        lengths = {
            "none": None,
            "zero": torch.zeros(batch, dtype=torch.long),
            "long": torch.full((batch,), steps + 1),
            "bool": torch.ones(batch, dtype=torch.bool),
            "float": torch.ones(batch),
            "shape": torch.ones(batch + 1, dtype=torch.long),
            "valid": None,
        }[lengths]
    state = draw(st.sampled_from(["none", "good", "good", "batch", "width", "dtype", "kind"]))
    good = cell.init_state(max(batch, 1))
    tensors = list(good) if isinstance(good, tuple) else [good]
    change = {
        "none": None,
        "good": lambda t: t.clone(),
        "batch": lambda t: t[:1].repeat(batch + 1, *[1] * (t.dim() - 1)),
        "width": lambda t: torch.cat([t, t[..., :1]], -1),
        "dtype": lambda t: t.double(),
        "kind": None,
    }[state]
    if state == "none":
        state = None
    elif state == "kind":
        state = tensors[0] if isinstance(good, tuple) else (good, good)
    else:
        changed = [change(t) for t in tensors]
        state = tuple(changed) if isinstance(good, tuple) else changed[0]
    poison = draw(st.sampled_from([None, None, math.nan, math.inf, -math.inf]))
    padding_only = draw(st.booleans())
    if poison is not None and x.is_floating_point() and x.numel():
        flat = x.view(-1)
        flat[draw(st.integers(0, flat.numel() - 1))] = poison
        if (
            padding_only
            and rank == 3
            and isinstance(lengths, torch.Tensor)
            and lengths.dtype == torch.long
            and lengths.shape == (batch,)
            and steps
            and batch
        ):
            keep = torch.arange(steps)[:, None] < lengths.clamp(max=steps)[None]
            x = torch.where(keep[..., None] & ~torch.isfinite(x), torch.zeros_like(x), x)
    return x, state, lengths


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)


def _states_close(a, b):
    for p, q in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
        _close(p, q)


@pytest.mark.parametrize("name", CELLS)
@settings(max_examples=12)
@given(data=st.data())
def test_scan_raises_clearly_or_equals_the_reference(name, data):
    cell = cell_of(name)
    x, state, lengths = data.draw(inputs(name))
    try:
        with torch.no_grad():
            out, final = cell.scan(x, state, lengths)
    except (ValueError, TypeError) as error:
        assert_names_a_parameter(error)
        return
    steps, batch = x.shape[:2]
    valid = (
        torch.ones(steps, batch, dtype=torch.bool) if lengths is None else torch.arange(steps)[:, None] < lengths[None]
    )
    if torch.isfinite(x[valid]).all() and name not in RANDOM:
        clean = torch.where(valid[..., None], x, torch.zeros_like(x))
        with torch.no_grad():
            ref_out, ref_final = cell.scan(clean, state, lengths, backend="reference")
        _close(out, ref_out)
        _states_close(final, ref_final)
        assert torch.isfinite(out).all()
    assert (out[~valid] == 0).all()


@pytest.mark.parametrize("name", CELLS)
@settings(max_examples=6)
@given(data=st.data())
def test_the_per_step_call_raises_clearly_or_equals_a_one_step_reference_scan(name, data):
    cell = cell_of(name)
    x, state, _ = data.draw(inputs(name))
    x_t = x[0] if x.dim() >= 2 and x.shape[0] else x
    try:
        with torch.no_grad():
            h, final = cell(x_t, state)
    except (ValueError, TypeError) as error:
        assert_names_a_parameter(error)
        return
    if not torch.isfinite(x_t).all() or name in RANDOM:
        return  # garbage in: no crash is all that is asked (padding is the scan test's business)
    with torch.no_grad():
        ref_out, ref_final = cell.scan(x_t[None], state, backend="reference")
    _close(h, ref_out[0])
    _states_close(final, ref_final)


@pytest.mark.parametrize("name", CELLS)
@settings(max_examples=4)
@given(data=st.data())
def test_the_layer_equals_each_sequence_run_alone(name, data):
    batch_first = data.draw(st.sampled_from([True, True, False, "no", 1]))
    bidirectional = data.draw(st.booleans())
    try:
        torch.manual_seed(0)
        layer = ltdrnn.Recurrent(
            name,
            D,
            H,
            num_layers=data.draw(st.integers(1, 2)),
            batch_first=batch_first,
            bidirectional=bidirectional,
            **_small(name),
        )
    except (ValueError, TypeError) as error:
        assert_names_a_parameter(error)
        return
    batch, steps = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4))
    lengths = torch.tensor([data.draw(st.integers(1, steps)) for _ in range(batch)])
    x = torch.randn(batch, steps, D, generator=torch.Generator().manual_seed(data.draw(st.integers(0, 99))))
    with torch.no_grad():
        out, final = layer(x if batch_first else x.transpose(0, 1), lengths=lengths)
        out = out if batch_first else out.transpose(0, 1)
        assert all((out[b, n:] == 0).all() for b, n in enumerate(lengths.tolist()))
        if name in RANDOM:
            return
        for b, n in enumerate(lengths.tolist()):
            alone, alone_final = layer((x[b : b + 1, :n] if batch_first else x[b : b + 1, :n].transpose(0, 1)))
            alone = alone if batch_first else alone.transpose(0, 1)
            _close(out[b, :n], alone[0])
            assert (out[b, n:] == 0).all()
            pick = lambda s: s[:, b : b + 1]
            _states_close(tuple(map(pick, final)) if isinstance(final, tuple) else pick(final), alone_final)


# ---- the step counter of per-time-step step sizes ----------------------------------------------------------
@settings(max_examples=20)
@given(data=st.data())
def test_step_counters_without_room_are_refused_by_name_in_every_backend(data):
    """``state[1]`` of TARNN's and iRNN's per-time-step step sizes: a scan of T steps (a streaming call: 1) runs
    exactly when every counter lies in ``[0, max_length - T]`` and then equals the reference and moves each
    counter by T; otherwise it raises, naming ``state[1]`` (or ``max_length`` where T alone is too long)."""
    name = data.draw(st.sampled_from(["tarnn", "irnn"]))
    backend = data.draw(st.sampled_from(["reference", "torch", "cpp"] + (["triton"] if triton_installed() else [])))
    max_length, steps, batch = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 5)), data.draw(st.integers(1, 3))
    counters = torch.tensor([data.draw(st.integers(-3, 8)) for _ in range(batch)])
    streaming = data.draw(st.booleans())
    torch.manual_seed(0)
    cell = build(name, D, H, K=1, backend=backend, eta_per_time_step=True, max_length=max_length, dtype=torch.float64)
    x = torch.randn(1 if streaming else steps, batch, D, dtype=torch.float64)
    state = (0.1 * torch.randn(batch, H, dtype=torch.float64), counters)
    room = max_length - x.shape[0]
    try:
        with torch.no_grad():
            out, (final, moved) = cell(x[0], state) if streaming else cell.scan(x, state)
    except ValueError as error:
        assert str(error).startswith("state[1]: " if room >= 0 else "max_length: "), str(error)
        assert not (0 <= int(counters.min()) and int(counters.max()) <= room)
        return
    assert 0 <= int(counters.min()) and int(counters.max()) <= room
    with torch.no_grad():
        ref_out, (ref_final, ref_moved) = cell.scan(x, state, backend="reference")
    _close(out, ref_out[0] if streaming else ref_out)
    _close(final, ref_final)
    assert torch.equal(moved, counters + x.shape[0]) and torch.equal(ref_moved, moved)


# ---- the Triton operators' operands -------------------------------------------------------------------------
#: each operator's operands in its schema's order: a tensor's shape in the sizes T, B, H, K, N (MIST's history),
#: n (MIST's delays) and G (1 with iRNN's gate, else 0), "saved" where it is a buffer its forward wrote, or a code
OPERANDS = {
    "tarnn_triton_forward": dict(p="T, B, 3*H", s0="B, H", sw="3*H, H", u="H, H", eta="K,", lengths="lengths",
                                 activation="act", coupled="no", a_diag="a_diag", inside="yes"),
    "tarnn_triton_backward": dict(grad="T+1, B, H", states="saved T+1, B, H", betas="saved T, B, H",
                                  cs="saved T, B, H", args="saved T, K, B, H", deltas="saved T, K, B, H", sw="3*H, H",
                                  u="H, H", eta="T, K", lengths="lengths", activation="act", coupled="no",
                                  a_diag="a_diag", inside="yes"),
    "irnn_triton_forward": dict(c="T, B, H", a="G*T, B, H", h0="B, H", m="H, H", ug="G*H, H", eta="1,",
                                alpha="1,", lengths="lengths", activation="act", s="one", r="one"),
    "irnn_triton_backward": dict(grad="T+1, B, H", states="saved T+1, B, H", phis="saved T, B, H",
                                 us="saved G*T, B, H", m="H, H", ug="G*H, H", eta="T, 1", alpha="1,",
                                 lengths="lengths", activation="act", s="one", r="one"),
    "srnn_triton_forward": dict(beta="T, B, H", h0="B, H", lengths="lengths", activation="act"),
    "srnn_triton_backward": dict(grad="T, B, H", out="saved T, B, H", lengths="lengths", activation="act"),
    "mist_triton_forward": dict(p="T, B, n+2*H", history0="B, N, H", w_hh="n+H, H", w_mix="H, H", lengths="lengths"),
    "mist_triton_backward": dict(grad="N+T, B, H", states="saved N+T, B, H", gates="saved T, B, n+H",
                                 reset_mixed="saved T, B, H", w_hh="n+H, H", w_mix="H, H", lengths="lengths"),
    "sarnn_triton_forward": dict(gi="T, B, 3*H", coord_in="T, B, H", h0="B, H", w_hh="3*H, H", b_hh="3*H,",
                                 coord_weight="H,", lengths="lengths", state_grad="yes"),
    "sarnn_triton_backward": dict(grad="T+1, B, H", grad_probs="T, B, H", states="saved T+1, B, H",
                                  probs="saved T, B, H", masks="saved T, B, H", gates="saved T, B, 3*H",
                                  news="saved T, B, H", w_hh="3*H, H", coord_weight="H,", lengths="lengths"),
}  # fmt: skip
CODES = {"act": 1, "no": False, "yes": True, "a_diag": -1.0, "one": 1.0}
BAD_CODES = {"act": [-1, 3, 99], "no": [2], "yes": [-1], "a_diag": [0.5, 1.0], "one": [math.inf, math.nan]}


@st.composite
def operator_call(draw):
    """``(operator, operands, changed)``: valid operands of one Triton operator, with up to two of them changed
    (``changed``: their names)."""
    name = draw(st.sampled_from(sorted(OPERANDS)))
    delays = draw(st.integers(1, 3))
    sizes = dict(T=draw(st.integers(1, 3)), B=draw(st.integers(1, 3)), H=draw(st.sampled_from([1, 2, 5, 16])),
                 K=draw(st.integers(1, 2)), n=delays, N=2 ** (delays - 1), G=draw(st.integers(0, 1)))  # fmt: skip
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    operands = {}
    for operand, spec in OPERANDS[name].items():
        if spec in CODES:
            operands[operand] = CODES[spec]
        elif spec == "lengths":
            lengths = [draw(st.integers(1, sizes["T"])) for _ in range(sizes["B"])]
            operands[operand] = draw(st.sampled_from([None, torch.tensor(lengths)]))
        else:
            shape = eval(f"({spec.removeprefix('saved ')})", {}, sizes)
            operands[operand] = 0.3 * torch.randn(shape, generator=generator, dtype=torch.float64)
    count = draw(st.sampled_from([1, 1, 2, 0]))
    changed = draw(st.lists(st.sampled_from(list(operands)), min_size=count, max_size=count, unique=True))
    for operand in changed:
        operands[operand] = draw(changed_operand(operands[operand], OPERANDS[name][operand], sizes["T"]))
    return name, operands, changed


@st.composite
def changed_operand(draw, value, spec: str, steps: int):
    if spec in CODES:
        return draw(st.sampled_from(BAD_CODES[spec]))
    if spec == "lengths":
        bad = [[0], [-1], [steps + 1], [1, 1, 1, 1]]
        return torch.tensor(draw(st.sampled_from(bad)))
    kind = draw(st.sampled_from(["size", "size", "dims", "dtype", "strided"]))
    if kind == "size" and value.dim():
        axis = draw(st.integers(0, value.dim() - 1))
        size = max(value.shape[axis] + draw(st.sampled_from([-1, 1, 2])), 0)
        return torch.zeros(*value.shape[:axis], size, *value.shape[axis + 1 :], dtype=value.dtype)
    if kind == "dims":
        return value[None] if draw(st.booleans()) or not value.dim() else value[..., 0]
    if kind == "dtype":
        return value.to(draw(st.sampled_from([torch.int64, torch.bool, torch.float16, torch.float32])))
    return value.transpose(0, -1).contiguous().transpose(0, -1) if value.dim() > 1 else value[::1]


def _flat(outputs):
    return outputs if isinstance(outputs, tuple) else (outputs,)


@pytest.mark.skipif(not triton_installed(), reason="triton is not installed")
@settings(max_examples=30)
@given(call=operator_call())
def test_triton_operators_refuse_bad_operands_by_name_or_run_as_their_fake(call):
    """A Triton operator given operands with up to two of them changed (shape, dims, dtype, strides, lengths,
    codes) raises ValueError/TypeError naming itself and one of its operands, or runs to outputs of the shapes
    and dtypes its fake implementation gives, finite; with none changed, it runs."""
    name, operands, changed = call
    from ltdrnn.ops import irnn_triton, mist_triton, sarnn_triton, srnn_triton, tarnn_triton  # noqa: F401

    operator = getattr(torch.ops.ltdrnn, name)
    try:
        outputs = operator(*operands.values())
    except (ValueError, TypeError) as error:
        assert changed, f"valid operands refused: {error}"
        named = str(error).removeprefix(f"ltdrnn::{name}: ").split(" ")[0].split("'")[0]
        assert named in operands, str(error)
        return
    on_meta = [v.to("meta") if isinstance(v, torch.Tensor) else v for v in operands.values()]
    for got, fake in zip(_flat(outputs), _flat(operator(*on_meta))):
        assert got.shape == fake.shape and got.dtype == fake.dtype
        assert bool(torch.isfinite(got).all())
