"""``Recurrent.step`` at batch 1 on a CUDA device replays a captured CUDA graph (ltdrnn.graphs): it equals the
eager step, sees in-place parameter changes, and never changes a tensor it returned earlier. The path is off on
the CPU (checked here everywhere); the CUDA checks run where a GPU is visible (benchmarks/gpu_check.sh)."""

from __future__ import annotations

import pytest
import torch

import ltdrnn
from ltdrnn.graphs import graphs_apply

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CUDA-graph step cannot run")
SOURCE = ["tarnn", "srnn", "irnn", "sarnn", "mist"]


def layer(name, device):
    torch.manual_seed(0)
    return ltdrnn.Recurrent(name, 3, 16, num_layers=2, **ltdrnn.entry(name).test_options).to(device).eval()


def stream(rnn, xs, graphs):
    rnn.cuda_graph_steps = graphs
    state, outputs = None, []
    with torch.no_grad():
        for x in xs:
            y, state = rnn.step(x, state)
            outputs.append(y)
    return torch.stack(outputs), state


def test_the_graph_path_is_off_on_the_cpu():
    rnn = layer("tarnn", "cpu")
    with torch.no_grad():
        assert not graphs_apply(rnn, torch.randn(1, 3))


@cuda
@pytest.mark.parametrize("name", SOURCE + ["lstm"])
def test_graphed_steps_equal_eager_steps(name):
    rnn = layer(name, "cuda")
    xs = torch.randn(12, 1, 3, device="cuda")
    eager, eager_state = stream(rnn, xs, graphs=False)
    graphed, graphed_state = stream(rnn, xs, graphs=True)
    assert not rnn.__dict__.get("_graph_failed", False), "capture failed: the comparison would test the eager path"
    torch.testing.assert_close(graphed, eager)
    for a, b in zip(graphed_state if isinstance(graphed_state, tuple) else (graphed_state,),
                    eager_state if isinstance(eager_state, tuple) else (eager_state,)):  # fmt: skip
        torch.testing.assert_close(a, b)


@cuda
def test_an_in_place_parameter_change_between_steps_is_seen():
    rnn = layer("tarnn", "cuda")
    xs = torch.randn(4, 1, 3, device="cuda")
    stream(rnn, xs, graphs=True)
    with torch.no_grad():
        for p in rnn.parameters():
            p.mul_(0.5)
    eager, _ = stream(rnn, xs, graphs=False)
    graphed, _ = stream(rnn, xs, graphs=True)
    torch.testing.assert_close(graphed, eager)


@cuda
def test_a_returned_output_is_not_changed_by_later_steps():
    rnn = layer("srnn", "cuda")
    with torch.no_grad():
        y, state = rnn.step(torch.randn(1, 3, device="cuda"))
        kept = y.clone()
        rnn.step(torch.randn(1, 3, device="cuda"), state)
    assert torch.equal(y, kept)


@cuda
def test_a_failed_capture_streams_eagerly_and_leaves_random_numbers_working(monkeypatch):
    """A step that reads data back (here the NaN check as it ran before captures skipped it) cannot be captured:
    the layer warns, streams eagerly with the eager values, and the device's generator still draws."""
    import ltdrnn.ops.tarnn as tarnn_module

    rnn = layer("tarnn", "cuda")
    xs = torch.randn(6, 1, 3, device="cuda")
    eager, _ = stream(rnn, xs, graphs=False)
    monkeypatch.setattr(tarnn_module, "holds_non_finite", lambda x, s: not bool(torch.isfinite(x).all()))
    with pytest.warns(RuntimeWarning, match="CUDA graph capture failed"):
        streamed, _ = stream(rnn, xs, graphs=True)
    assert rnn.__dict__.get("_graph_failed")
    torch.testing.assert_close(streamed, eager)
    torch.manual_seed(3)
    first = torch.randn(4, device="cuda")
    torch.manual_seed(3)
    assert torch.equal(first, torch.randn(4, device="cuda"))
