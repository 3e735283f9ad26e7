"""The shared cell test-suite: every registry entry and each of its variants, every implementation.

Sizes come from the entry's ``test_options`` (keys ``input_size`` and ``hidden_size`` there override
the defaults below; the rest are constructor options), merged with the variant's options.
"""

from __future__ import annotations

import io

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import ltdrnn
from ltdrnn.cells.base import map_state

D_IN, HIDDEN = 3, 6


def _cases():
    cases = []
    for name in ltdrnn.list_cells():
        entry = ltdrnn.entry(name)
        cases.append(pytest.param(name, {}, id=name))
        for variant, options in entry.variants.items():
            cases.append(pytest.param(name, options, id=f"{name}-{variant}"))
    return cases


CASES = _cases()


def sizes_and_options(name, variant_options, **overrides):
    options = {**ltdrnn.entry(name).test_options, **variant_options, **overrides}
    return options.pop("input_size", D_IN), options.pop("hidden_size", HIDDEN), options


def make_cell(name, variant_options, seed=0, **overrides):
    torch.manual_seed(seed)
    d, h, options = sizes_and_options(name, variant_options, **overrides)
    return ltdrnn.build(name, d, h, **options)


def make_layer(name, variant_options, seed=0, **layer_kwargs):
    torch.manual_seed(seed)
    d, h, options = sizes_and_options(name, variant_options)
    return ltdrnn.Recurrent(name, d, h, **layer_kwargs, **options)


def reseeded(name, fn, *args, **kwargs):
    """Call ``fn`` with the generator reset for cells that draw random numbers in forward."""
    if not ltdrnn.entry(name).deterministic:
        torch.manual_seed(1234)
    return fn(*args, **kwargs)


def flat(state):
    return torch.cat([s.reshape(-1) for s in (state if isinstance(state, tuple) else (state,))])


def assert_close(a, b, what, atol=1e-5, rtol=1e-4):
    torch.testing.assert_close(a, b, atol=atol, rtol=rtol, msg=lambda m: f"{what}: {m}")


def backends(cell):
    return list(cell.backends)


# ---- sequence semantics ---------------------------------------------------------------------------
@pytest.mark.parametrize("name,variant", CASES)
def test_step_by_step_equals_scan_for_every_backend(name, variant):
    cell = make_cell(name, variant)
    x = torch.randn(9, 2, cell.input_size)
    state, steps = None, []
    reseeded(name, lambda: None)
    for x_t in x:
        h, state = cell(x_t, state)
        steps.append(h)
    for backend in backends(cell):
        out, final = reseeded(name, cell.scan, x, backend=backend)
        assert_close(out, torch.stack(steps), f"{backend} outputs")
        assert_close(flat(final), flat(state), f"{backend} final state")


@pytest.mark.parametrize("name,variant", CASES)
def test_chunked_with_carried_state_equals_whole(name, variant):
    cell = make_cell(name, variant)
    x = torch.randn(11, 3, cell.input_size)
    for backend in backends(cell):
        whole, final = reseeded(name, cell.scan, x, backend=backend)
        reseeded(name, lambda: None)
        first, state = cell.scan(x[:4], backend=backend)
        second, state = cell.scan(x[4:], state, backend=backend)
        assert_close(torch.cat([first, second]), whole, f"{backend} outputs")
        assert_close(flat(state), flat(final), f"{backend} final state")


@pytest.mark.parametrize("name,variant", CASES)
def test_lengths_and_packed_equal_each_sequence_alone(name, variant):
    layer = make_layer(name, variant)
    lengths = torch.tensor([7, 3, 5, 1])
    x = torch.randn(4, 7, layer.input_size)
    for backend in backends(layer.cells[0]):
        for cell in layer.cells:
            cell.backend = backend
        out, final = reseeded(name, layer, x, lengths=lengths)
        for b, n in enumerate(lengths.tolist()):
            alone, alone_final = reseeded(name, layer, x[b : b + 1, :n])
            assert_close(out[b, :n], alone[0], f"{backend} outputs of sequence {b}")
            assert torch.all(out[b, n:] == 0), f"{backend}: outputs past the length must be zero"
            assert_close(
                flat(map_state(lambda s: s[:, b], final)), flat(alone_final), f"{backend} final state of sequence {b}"
            )
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        packed_out, packed_final = reseeded(name, layer, packed)
        padded, _ = pad_packed_sequence(packed_out, batch_first=True)
        assert_close(padded, out, f"{backend} packed outputs")
        assert_close(flat(packed_final), flat(final), f"{backend} packed final state")


@pytest.mark.parametrize("name,variant", CASES)
def test_two_layers_equal_two_chained_cells(name, variant):
    layer = make_layer(name, variant, num_layers=2)
    x = torch.randn(3, 6, layer.input_size)
    out, final = reseeded(name, layer, x)
    reseeded(name, lambda: None)
    h0, s0 = layer.cells[0].scan(x.transpose(0, 1))
    h1, s1 = layer.cells[1].scan(h0)
    assert_close(out, h1.transpose(0, 1), "outputs")
    assert_close(
        flat(final),
        flat(torch.stack([s0, s1]) if torch.is_tensor(s0) else tuple(torch.stack(p) for p in zip(s0, s1))),
        "final state",
    )


@pytest.mark.parametrize("name,variant", CASES)
def test_bidirectional_backward_half_reads_the_reversed_sequence(name, variant):
    layer = make_layer(name, variant, bidirectional=True)
    hidden = layer.hidden_size
    x = torch.randn(2, 6, layer.input_size)
    lengths = torch.tensor([6, 4])
    out, _ = reseeded(name, layer, x, lengths=lengths)
    assert out.shape[-1] == 2 * hidden
    for b, n in enumerate(lengths.tolist()):
        reseeded(name, lambda: None)
        forward, _ = layer.cells[0].scan(x[b : b + 1, :n].transpose(0, 1))
        backward, _ = layer.cells[1].scan(x[b : b + 1, :n].flip(1).transpose(0, 1))
        if ltdrnn.entry(name).deterministic:
            assert_close(out[b, :n, :hidden], forward[:, 0], f"forward half of sequence {b}")
            assert_close(out[b, :n, hidden:], backward.flip(0)[:, 0], f"backward half of sequence {b}")


@pytest.mark.parametrize("name,variant", CASES)
def test_streaming_step_equals_forward_and_unbatched_equals_batch_of_one(name, variant):
    layer = make_layer(name, variant, num_layers=2)
    x = torch.randn(2, 5, layer.input_size)
    out, final = reseeded(name, layer, x)
    reseeded(name, lambda: None)
    state, ys = None, []
    for t in range(x.shape[1]):
        y, state = layer.step(x[:, t], state)
        ys.append(y)
    assert_close(torch.stack(ys, 1), out, "streamed outputs")
    assert_close(flat(state), flat(final), "streamed state")
    single, single_final = reseeded(name, layer, x[0])
    batch_of_one, b1_final = reseeded(name, layer, x[:1])
    assert_close(single, batch_of_one[0], "unbatched outputs")
    assert_close(flat(single_final), flat(b1_final), "unbatched final state")


# ---- gradients ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,variant", CASES)
def test_gradcheck_float64(name, variant):
    entry = ltdrnn.entry(name)
    if not entry.gradcheck:
        pytest.skip(f"{name}: backward is a deliberate surrogate (straight-through), not the gradient")
    if not entry.deterministic:
        pytest.skip(f"{name}: random forward")
    cell = make_cell(name, variant, dtype=torch.float64)
    names = [n for n, p in cell.named_parameters() if p.requires_grad]
    params = tuple(dict(cell.named_parameters())[n].detach().clone().requires_grad_() for n in names)
    x = torch.randn(4, 2, cell.input_size, dtype=torch.float64, requires_grad=True)
    for backend in backends(cell):
        scan = ScanCall(cell, backend)

        def run(x, *values):
            outputs, final = torch.func.functional_call(scan, {f"cell.{n}": v for n, v in zip(names, values)}, (x,))
            return outputs, flat(final)

        assert torch.autograd.gradcheck(run, (x, *params), eps=1e-6, atol=1e-5, fast_mode=True), backend


class ScanCall(torch.nn.Module):
    """``cell.scan(x, backend=backend)`` as a module forward, so functional_call can swap its parameters."""

    def __init__(self, cell, backend):
        super().__init__()
        self.cell, self.backend = cell, backend

    def forward(self, x):
        return self.cell.scan(x, backend=self.backend)


@pytest.mark.slow
@pytest.mark.parametrize("name,variant", CASES)
def test_every_fast_backend_equals_the_reference_at_long_T(name, variant):
    cell = make_cell(name, variant)
    # "triton" on CPU tensors runs Triton's interpreter, minutes at this length: tests/cells/test_triton_*.py
    # hold it to the reference at small sizes
    fast = [i for i in backends(cell) if i not in ("reference", "triton")]
    if not fast:
        pytest.skip(f"{name} has only the reference implementation")
    x = torch.randn(1200, 2, cell.input_size)
    state = map_state(lambda s: s + 0.1 * torch.randn_like(s) if s.is_floating_point() else s, cell.init_state(2))
    ref = _outputs_and_grads(name, cell, x, state, "reference")
    for backend in fast:
        got = _outputs_and_grads(name, cell, x, state, backend)
        for key in ref:
            # where gradients grow over 1,200 steps (SA-RNN's reach 1e14 at this init) float32 rounding
            # scales with them: the absolute tolerance is taken relative to the tensor's largest entry
            scale = max(1.0, ref[key].abs().max().item())
            assert_close(got[key], ref[key], f"{backend} vs reference: {key}", atol=2e-4 * scale, rtol=2e-3)


def _outputs_and_grads(name, cell, x, state, backend):
    cell.zero_grad()
    x = x.clone().requires_grad_()
    state = map_state(lambda s: s.clone().requires_grad_() if s.is_floating_point() else s, state)
    out, final = reseeded(name, cell.scan, x, state, backend=backend)
    weights = torch.linspace(-1, 1, out.numel()).view_as(out)
    (out * weights).sum().backward() if not torch.is_tensor(final) else ((out * weights).sum() + final.sum()).backward()
    result = {"outputs": out.detach(), "final": flat(final).detach(), "grad x": x.grad}
    for n, p in cell.named_parameters():
        if p.grad is not None:
            result[f"grad {n}"] = p.grad.clone()
    return result


# ---- persistence, device/dtype, errors ------------------------------------------------------------
@pytest.mark.parametrize("name,variant", CASES)
def test_state_dict_round_trip(name, variant):
    a = make_layer(name, variant, seed=1)
    b = make_layer(name, variant, seed=2)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b.load_state_dict(torch.load(buffer))
    x = torch.randn(2, 5, a.input_size)
    out_a, _ = reseeded(name, a, x)
    out_b, _ = reseeded(name, b, x)
    assert torch.equal(out_a, out_b)


@pytest.mark.parametrize("name,variant", CASES)
def test_device_and_dtype_keywords(name, variant):
    cell = make_cell(name, variant, device="cpu", dtype=torch.float64)
    tensors = list(cell.parameters()) + [b for b in cell.buffers() if b.is_floating_point()]
    assert tensors and all(t.dtype == torch.float64 and t.device.type == "cpu" for t in tensors)
    out, _ = reseeded(name, cell.scan, torch.randn(3, 2, cell.input_size, dtype=torch.float64))
    assert out.dtype == torch.float64


@pytest.mark.parametrize("name", ltdrnn.list_cells())
def test_clear_errors(name):
    layer = make_layer(name, {})
    d = layer.input_size
    with pytest.raises(ValueError, match="input_size"):
        layer(torch.randn(2, 4, d + 1))
    with pytest.raises(TypeError, match="dtype"):
        layer(torch.randn(2, 4, d, dtype=torch.float64))
    with pytest.raises(TypeError, match="floating"):
        layer(torch.ones(2, 4, d, dtype=torch.long))
    with pytest.raises(ValueError, match="lengths"):
        layer(torch.randn(2, 4, d), lengths=torch.tensor([5, 2]))
    with pytest.raises(ValueError, match="lengths"):
        layer(torch.randn(2, 4, d), lengths=torch.tensor([0, 2]))
    with pytest.raises(ValueError, match="lengths"):
        layer(torch.randn(2, 4, d), lengths=torch.tensor([3]))
    with pytest.raises(ValueError, match="state"):
        layer(torch.randn(2, 4, d), state=layer.init_state(3))
    _, h, options = sizes_and_options(name, {})
    with pytest.raises(ValueError, match="hidden_size"):
        ltdrnn.build(name, d, 0, **options)
    with pytest.raises(ValueError, match="backend"):
        ltdrnn.build(name, d, h, **{**options, "backend": "no-such-backend"})


@pytest.mark.parametrize("name", ltdrnn.list_cells())
def test_losses_are_finite_named_scalars(name):
    layer = make_layer(name, {})
    reseeded(name, layer, torch.randn(2, 5, layer.input_size))
    for key, value in layer.losses().items():
        assert isinstance(key, str) and value.dim() == 0 and torch.isfinite(value), key


@pytest.mark.parametrize("name", ltdrnn.list_cells())
def test_module_apply_reaches_every_submodule(name):
    # nn.Module.apply is how users initialise weights (layer.apply(init_fn)); a cell must not shadow it
    layer = make_layer(name, {})
    visited = []
    assert layer.apply(visited.append) is layer
    assert {id(m) for m in visited} == {id(m) for m in layer.modules()} and visited[-1] is layer
