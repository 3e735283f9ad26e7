"""Every registry cell under torch.autocast (bf16) with float32 parameters: the state stays float32 and, on the
paths that run with autocast off (all but "triton"), every output and gradient equals the run without autocast;
streaming and the layer accept autocast's bf16 inputs. On a CUDA device (LTDRNN_TEST_DEVICE=cuda) the same
checks run there too; the Triton path's bf16 products are checked in tests/cells/test_triton_autocast.py."""

from __future__ import annotations

import os

import pytest
import torch

import ltdrnn

DEVICES = ["cpu"] + (["cuda"] if os.environ.get("LTDRNN_TEST_DEVICE") == "cuda" else [])


def build(name, device, **options):
    torch.manual_seed(0)
    options = {**ltdrnn.entry(name).test_options, **options}
    if name in ("srnn", "irnn", "tarnn", "sarnn", "mist") and device == "cuda":
        options["backend"] = "cpp" if name in ("tarnn", "irnn", "sarnn") else "reference"  # Triton's: elsewhere
    return ltdrnn.build(name, 3, 8, **options).to(device)


def states(state):
    return state if isinstance(state, tuple) else (state,)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ltdrnn.list_cells())
def test_every_cell_runs_under_autocast_with_a_float32_state(name, device):
    cell = build(name, device)
    x = torch.randn(5, 3, 3, device=device)
    lengths = torch.tensor([5, 2, 4])
    results = []
    for amp in (False, True):
        cell.zero_grad()
        torch.manual_seed(1)  # cells that draw random update masks draw the same ones in both runs
        with torch.autocast(device, torch.bfloat16, enabled=amp):
            out, final = cell.scan(x, lengths=lengths)
        # backward outside autocast, as PyTorch recommends (its backward ops would take the autocast dtype)
        (out.sum() + sum(s.sum() for s in states(final) if s.is_floating_point())).backward()
        assert out.dtype == torch.float32
        assert all(s.dtype in (torch.float32, torch.int64) for s in states(final)), [s.dtype for s in states(final)]
        results.append((out.detach(), [p.grad.clone() for p in cell.parameters() if p.grad is not None]))
    (out, grads), (amp_out, amp_grads) = results
    torch.testing.assert_close(amp_out, out)
    for grad, amp_grad in zip(grads, amp_grads):
        torch.testing.assert_close(amp_grad, grad)


@pytest.mark.parametrize("name", ["tarnn", "srnn", "irnn", "sarnn", "mist", "lstm", "clockwork"])
def test_streaming_and_the_layer_under_autocast_take_bf16_input(name):
    torch.manual_seed(0)
    rnn = ltdrnn.Recurrent(name, 3, 8, **ltdrnn.entry(name).test_options)
    x = torch.randn(2, 4, 3).bfloat16()  # what an autocast layer before this one hands over
    expected, expected_final = rnn(x.float())
    with torch.no_grad():
        state, steps = None, []
        for t in range(4):
            y, state = rnn.step(x.float()[:, t], state)
            steps.append(y)
    with torch.autocast("cpu", torch.bfloat16):
        out, final = rnn(x)
        with torch.no_grad():
            amp_state, amp_steps = None, []
            for t in range(4):
                y, amp_state = rnn.step(x[:, t], amp_state)
                amp_steps.append(y)
    assert out.dtype == torch.float32 and all(s.dtype in (torch.float32, torch.int64) for s in states(final))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(torch.stack(amp_steps), torch.stack(steps))
