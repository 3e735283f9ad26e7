"""MIST RNN: the paper's equations and initialisation, history semantics, fast paths, gradient claim."""

from __future__ import annotations

import math

import pytest
import torch

import ltdrnn
from stream_helpers import check_streaming_matches_reference


def make(input_size=3, hidden_size=6, seed=0, **options):
    torch.manual_seed(seed)
    return ltdrnn.build("mist", input_size, hidden_size, **options)


def paper_mist(cell, x):
    """Eqs. 17-19 written out with the paper's separate matrices, states kept in a dict by time."""
    nd, hidden = cell.num_delays, cell.hidden_size
    w_ah, w_rh = cell.weight_hh[:nd], cell.weight_hh[nd:]
    w_ax, w_rx, w_x = cell.weight_ih[:nd], cell.weight_ih[nd : nd + hidden], cell.weight_ih[nd + hidden :]
    b_a, b_r, b = cell.bias[:nd], cell.bias[nd : nd + hidden], cell.bias[nd + hidden :]
    h = {}

    def state(t):
        return h.get(t, torch.zeros(x.shape[1], hidden))  # h_t = 0 for t < 1

    for t in range(1, x.shape[0] + 1):
        x_t = x[t - 1]
        a = torch.softmax(state(t - 1) @ w_ah.t() + x_t @ w_ax.t() + b_a, -1)
        r = torch.sigmoid(state(t - 1) @ w_rh.t() + x_t @ w_rx.t() + b_r)
        mix = sum(a[:, i : i + 1] * state(t - 2**i) for i in range(nd))
        h[t] = torch.tanh((r * mix) @ cell.weight_mix.t() + x_t @ w_x.t() + b)
    return torch.stack([h[t] for t in range(1, x.shape[0] + 1)])


@pytest.mark.parametrize("backend", ["reference", "list", "torch", "cpp"])
def test_every_backend_computes_equations_17_to_19(backend):
    cell = make(num_delays=4)
    with torch.no_grad():
        cell.bias.normal_()  # nonzero biases, so each is checked against its own equation
    x = torch.randn(20, 2, 3)
    out, history = cell.scan(x, backend=backend)
    torch.testing.assert_close(out, paper_mist(cell, x), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(history, out[-8:].transpose(0, 1))  # history[:, -k] = h_{T+1-k}


def test_default_has_eight_delays_up_to_128_and_a_history_of_128_states():
    cell = make()
    assert cell.delays == (1, 2, 4, 8, 16, 32, 64, 128)
    assert cell.init_state(5).shape == (5, 128, 6)
    assert torch.equal(cell.init_state(5), torch.zeros(5, 128, 6))


def test_init_is_normal_with_std_one_over_sqrt_hidden_and_zero_biases():
    cell = make(input_size=64, hidden_size=400)
    for weight in (cell.weight_hh, cell.weight_ih, cell.weight_mix):
        assert abs(weight.std().item() * math.sqrt(400) - 1) < 0.03
        assert abs(weight.mean().item()) < 0.1 / math.sqrt(400)
    assert torch.equal(cell.bias, torch.zeros_like(cell.bias))


def test_parameter_count_of_the_pmnist_configuration():
    cell = ltdrnn.build("mist", 1, 139)
    count = sum(p.numel() for p in cell.parameters())
    assert count == 40_326  # + a 1,400-parameter 10-class head = 41,726, the paper's "approx. 42,000"
    (entry_count,) = ltdrnn.entry("mist").param_counts
    assert entry_count.low <= count <= entry_count.high


def test_fused_equals_reference_with_all_eight_delays_lengths_and_a_carried_history():
    cell = make(hidden_size=5)
    x = torch.randn(300, 3, 3)
    history = 0.5 * torch.randn(3, 128, 5)
    lengths = torch.tensor([300, 140, 7])
    results = {}
    for backend in ("reference", "torch"):
        cell.zero_grad()
        xi, hi = x.clone().requires_grad_(), history.clone().requires_grad_()
        out, final = cell.scan(xi, hi, lengths=lengths, backend=backend)
        (out.sin().sum() + final.cos().sum()).backward()
        results[backend] = [out, final, xi.grad, hi.grad] + [p.grad for p in cell.parameters()]
    for a, b in zip(results["torch"], results["reference"]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_streaming_forward_equals_scan():
    cell = make()
    x = torch.randn(10, 2, 3)
    state, outs = None, []
    for x_t in x:
        h, state = cell(x_t, state)
        outs.append(h)
    out, final = cell.scan(x)
    torch.testing.assert_close(torch.stack(outs), out)
    torch.testing.assert_close(state, final)


def test_streaming_without_gradients_uses_the_kernel_and_equals_scan():
    cell = make(num_delays=4)
    x = torch.randn(12, 3, 3)
    with torch.no_grad():
        state, outs = None, []
        for x_t in x:
            h, state = cell(x_t, state)
            outs.append(h)
        out, final = cell.scan(x, backend="reference")
    torch.testing.assert_close(torch.stack(outs), out)
    torch.testing.assert_close(state, final)


@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_a_non_finite_history_row_the_step_does_not_read_still_streams_in_the_kernel(poison, monkeypatch):
    """Only the delayed rows h_{t-2^i} enter the step: a NaN elsewhere is copied into the new history bit
    for bit, as the reference's concatenation copies it, so the compiled step may run."""
    from ltdrnn.ops import kernels

    if not kernels.load_torch_ops("mist"):
        pytest.skip("csrc/mist.cpp does not build here")
    cell = make(num_delays=4)
    read = {cell.history_size - k for k in cell.delays}
    unread = next(i for i in range(cell.history_size) if i not in read)
    history = torch.randn(2, cell.history_size, 6)
    history[1, unread, 2] = poison
    x_t = torch.randn(2, 3)
    calls = []
    real = kernels.run_stream_kernel
    monkeypatch.setattr(kernels, "run_stream_kernel", lambda *a: calls.append(real(*a)) or calls[-1])
    with torch.no_grad():
        h, new_history = cell.stream_step(x_t, history, "cpp")
        expected_h, expected_history = cell.scan(x_t[None], history, backend="reference")
    assert calls and calls[0] is not None, "the kernel must take a history whose read rows are finite"
    torch.testing.assert_close(h, expected_h[0])
    torch.testing.assert_close(new_history, expected_history, equal_nan=True)
    copied = new_history[1, unread - 1, 2].item()
    assert copied == poison or (math.isnan(poison) and math.isnan(copied))
    history[1, cell.history_size - 2, 0] = poison  # a read row (delay 2): the kernel declines it
    calls.clear()
    with torch.no_grad():
        h, new_history = cell.stream_step(x_t, history, "cpp")
        expected_h, expected_history = cell.scan(x_t[None], history, backend="reference")
    assert calls == [None]  # declined: the reference step ran instead
    torch.testing.assert_close(h, expected_h[0], equal_nan=True)
    torch.testing.assert_close(new_history, expected_history, equal_nan=True)


def test_clear_errors_for_options():
    with pytest.raises(ValueError, match="num_delays"):
        make(num_delays=0)
    with pytest.raises(ValueError, match="num_delays"):
        make(num_delays=30)


# ---- the paper's gradient claim (Fig. 2) -----------------------------------------------------------
def gradient_norm(x, run, h_start):
    """Mean over the batch of ||d(sum of h_T) / dh_{T - tau}||, with h_{T - tau} = ``h_start``."""
    h_start = h_start.clone().requires_grad_()
    (grad,) = torch.autograd.grad(run(h_start, x).sum(), h_start)
    return grad.norm(dim=-1).mean().item()


def test_mist_gradient_500_steps_back_is_orders_of_magnitude_above_a_simple_rnn():
    hidden, tau, batch = 32, 500, 8
    torch.manual_seed(0)
    x = torch.randn(tau, batch, 1)
    mist = ltdrnn.build("mist", 1, hidden, backend="torch")
    std = 1 / math.sqrt(hidden)  # the paper initialises every model this way
    w_h, w_x = torch.randn(hidden, hidden) * std, torch.randn(hidden, 1) * std

    def run_mist(h, x):  # h_{T - tau} is the newest state of a zero history
        history = torch.cat([torch.zeros(batch, 127, hidden), h[:, None]], 1)
        return mist.scan(x, history)[0][-1]

    def run_rnn(h, x):  # simple RNN, Eq. 2
        for x_t in x:
            h = torch.tanh(h @ w_h.t() + x_t @ w_x.t())
        return h

    h_start = torch.tanh(torch.randn(batch, hidden))
    mist_norm = gradient_norm(x, run_mist, h_start)
    rnn_norm = gradient_norm(x, run_rnn, h_start)
    assert mist_norm > 1e-8, mist_norm  # MIST keeps a usable signal (about 1e-5 at this size)
    assert mist_norm > 1e3 * rnn_norm, (mist_norm, rnn_norm)  # the RNN's is about 1e-11 or below


def test_the_cpp_backend_falls_back_to_pytorch_when_kernels_are_unavailable(monkeypatch):
    cell = make(num_delays=4)
    x, history = torch.randn(30, 2, 3), torch.randn(2, 8, 6)
    results = {}
    for backend, disabled in (("cpp", "1"), ("cpp", "0"), ("reference", "0")):
        monkeypatch.setenv("LTDRNN_NO_KERNELS", disabled)
        cell.zero_grad()
        xi, hi = x.clone().requires_grad_(), history.clone().requires_grad_()
        out, final = cell.scan(xi, hi, backend=backend)
        (out.sin().sum() + final.sum()).backward()
        results[backend, disabled] = [out, final, xi.grad, hi.grad] + [p.grad for p in cell.parameters()]
    for key in (("cpp", "1"), ("cpp", "0")):
        for a, b in zip(results[key], results["reference", "0"]):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kernels", [True, False])
@pytest.mark.parametrize("batch", [1, 3, 9])
@pytest.mark.parametrize("num_delays", [1, 4])
def test_compiled_streaming_step_equals_the_reference(monkeypatch, kernels, batch, num_delays):
    """The one-call C step (batch <= STREAM_MAX_BATCH, kernels on) and its fallbacks, through the
    cell and through the layer's step."""
    cell = make(num_delays=num_delays)
    x, history0 = torch.randn(12, batch, 3), torch.randn(batch, cell.history_size, 6)
    check_streaming_matches_reference(monkeypatch, kernels, cell, x, history0)


@pytest.mark.parametrize("batch", [3, 1])
def test_compiled_loops_equal_the_pytorch_loop_in_float64_at_T_1000_and_2_threads(monkeypatch, batch):
    """Every output and gradient (all parameters, x, the initial history) of the compiled whole-sequence
    loops (mist_forward / mist_backward) against the Python loop over PyTorch ops, with all 8 delays and a
    carried history; at 2 threads, batch 3 makes blocks of 2 and 1 rows, batch 1 a single block."""
    from ltdrnn.ops.kernels import load_torch_ops

    if not load_torch_ops("mist"):
        pytest.skip("kernels off (LTDRNN_NO_KERNELS) or csrc/mist.cpp does not build here")
    import ltdrnn.ops.mist_torch as mist_module

    calls = []
    real = torch.ops.ltdrnn.mist_backward
    monkeypatch.setattr(mist_module.torch.ops.ltdrnn, "mist_backward", lambda *a: calls.append(1) or real(*a))
    cell = make(hidden_size=6, seed=3, dtype=torch.float64)
    with torch.no_grad():
        cell.bias.normal_()
    x = torch.randn(1000, batch, 3, dtype=torch.float64)
    history = 0.5 * torch.randn(batch, 128, 6, dtype=torch.float64)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    results = {}
    try:
        for backend in ("cpp", "torch"):
            cell.zero_grad()
            xi, hi = x.clone().requires_grad_(), history.clone().requires_grad_()
            out, final = cell.scan(xi, hi, backend=backend)
            (out.sin().sum() + final.cos().sum()).backward()
            results[backend] = [out, final, xi.grad, hi.grad] + [p.grad for p in cell.parameters()]
    finally:
        torch.set_num_threads(threads)
    assert calls == [1], "the compiled loop did not run"
    for a, b in zip(results["cpp"], results["torch"]):
        assert b.abs().max() > 0
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("used", ["outputs", "final", "states", "outputs+final"])
@pytest.mark.parametrize("x_grad", [True, False])
@pytest.mark.parametrize("batch", [5, 0])
def test_compiled_backward_equals_the_pytorch_loop_for_every_output_used(used, x_grad, batch):
    """mist_backward reads the outputs' gradient (whichever of the three outputs the loss uses) without a
    copy into its work buffer, and sums the parameter gradients per thread block; at 3 threads batch 5
    makes blocks of 2, 2 and 1 rows, and a history of 5 rows is one longer than the longest delay."""
    from ltdrnn.ops.kernels import load_torch_ops
    from ltdrnn.ops.mist_torch import MISTScan

    if not load_torch_ops("mist"):
        pytest.skip("kernels off (LTDRNN_NO_KERNELS) or csrc/mist.cpp does not build here")
    torch.manual_seed(0)
    steps, hidden, nd, d, f64 = 11, 4, 3, 2, torch.float64
    x = torch.randn(steps, batch, d, dtype=f64, requires_grad=x_grad)
    history_rows = torch.randn(5, batch, hidden, dtype=f64, requires_grad=True)
    history = history_rows.transpose(0, 1)  # laid out as a carried history is: a view of the last states
    weights = [torch.randn(nd + 2 * hidden, d, dtype=f64), torch.randn(nd + 2 * hidden, dtype=f64)]
    weights += [0.4 * torch.randn(nd + hidden, hidden, dtype=f64), 0.4 * torch.randn(hidden, hidden, dtype=f64)]
    weights = [w.requires_grad_() for w in weights]
    inputs = ([x] if x_grad else []) + [history_rows] + weights
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    results = {}
    try:
        for kernel in (True, False):
            outputs, final, states = MISTScan.apply(x, history, *weights, (1, 2, 4), kernel)
            losses = {"outputs": outputs.sin().sum(), "final": final.cos().sum(), "states": (states * states).sum()}
            loss = sum(losses[name] for name in used.split("+"))
            results[kernel] = (outputs, *torch.autograd.grad(loss, inputs))
    finally:
        torch.set_num_threads(threads)
    for compiled, pytorch in zip(results[True], results[False]):
        torch.testing.assert_close(compiled, pytorch, atol=1e-10, rtol=1e-9)
