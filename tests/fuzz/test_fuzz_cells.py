"""Fuzz: the cell and layer APIs of every registry entry on random shapes, dtypes, lengths, states and
non-finite values.

Property: a call either raises ValueError/TypeError whose message starts with the parameter at fault,
or returns what the reference path returns (``impl="reference"``; for the layer, each sequence run
alone at its own length). Never a crash, never a silently different value.
"""

import math

import pytest
import torch

import ltdrnn
from ltdrnn.cells.registry import build, entry, list_cells

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
            ref_out, ref_final = cell.scan(clean, state, lengths, impl="reference")
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
        ref_out, ref_final = cell.scan(x_t[None], state, impl="reference")
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
