"""The Triton operators ``torch.ops.ltdrnn.*_triton_forward/backward`` check their operands before any launch, as
the C++ operators do: each bad operand (shape, dtype, device, contiguity, lengths' size and range, the codes the
kernels compile on) raises a clear error naming the operator and the operand, where the kernels would read out of
bounds or compute nonsense. The operators are called directly, in Triton's interpreter on the CPU
(tests/triton_helpers.py); every case changes one operand of a call that runs."""

from __future__ import annotations

import functools
import re

import pytest
import torch

from triton_helpers import DEVICE, DTYPE, requires_triton

pytestmark = requires_triton

T, B, H = 4, 3, 32
CELLS = ("tarnn", "irnn", "srnn", "mist", "sarnn")
#: the ten operators; ``valid`` gives each the operands of a small call (a backward: its forward's outputs)
OPERATORS = [f"{cell}_triton_{way}" for cell in CELLS for way in ("forward", "backward")]
#: the operand whose sizes fix the others', per operator
LEADS = {"tarnn_triton_forward": "p", "tarnn_triton_backward": "args", "irnn_triton_forward": "c",
         "irnn_triton_backward": "phis", "srnn_triton_forward": "beta", "srnn_triton_backward": "out",
         "mist_triton_forward": "p", "mist_triton_backward": "reset_mixed", "sarnn_triton_forward": "coord_in",
         "sarnn_triton_backward": "news"}  # fmt: skip


def rand(*shape, dtype=DTYPE):
    return torch.randn(shape, dtype=dtype, device=DEVICE) * 0.3


def op(name: str):
    from ltdrnn.ops import irnn_triton, mist_triton, sarnn_triton, srnn_triton, tarnn_triton  # noqa: F401

    return getattr(torch.ops.ltdrnn, name)


def lengths():
    return torch.tensor([T, 2, 3], device=DEVICE)


@functools.lru_cache(maxsize=None)
def valid(name: str) -> tuple:
    """``(operands (dict, in the schema's order), outputs)`` of a call that runs."""
    torch.manual_seed(0)
    make = {
        "tarnn_triton_forward": lambda: dict(p=rand(T, B, 3 * H), s0=rand(B, H), sw=rand(3 * H, H), u=rand(H, H),
                                             eta=rand(2).abs(), lengths=lengths(), activation=1, coupled=False,
                                             a_diag=-1.0, inside=True),
        "irnn_triton_forward": lambda: dict(c=rand(T, B, H), a=rand(0), h0=rand(B, H), m=rand(H, H), ug=rand(0),
                                            eta=rand(1).abs(), alpha=rand(1).abs(), lengths=lengths(), activation=0,
                                            s=1.0, r=1.0),
        "srnn_triton_forward": lambda: dict(beta=rand(T, B, H), h0=rand(B, H), lengths=lengths(), activation=1),
        "mist_triton_forward": lambda: dict(p=rand(T, B, 2 + 2 * H), history0=rand(B, 2, H), w_hh=rand(2 + H, H),
                                            w_mix=rand(H, H), lengths=lengths()),
        "sarnn_triton_forward": lambda: dict(gi=rand(T, B, 3 * H), coord_in=rand(T, B, H), h0=rand(B, H),
                                             w_hh=rand(3 * H, H), b_hh=rand(3 * H), coord_weight=rand(H),
                                             lengths=lengths(), state_grad=True),
    }  # fmt: skip
    if name.endswith("forward"):
        operands = make[name]()
        return operands, op(name)(*operands.values())
    forward, outputs = valid(name.replace("backward", "forward"))
    operands = _backward_operands(name, forward, outputs)
    return operands, op(name)(*operands.values())


def _backward_operands(name: str, f: dict, out: tuple) -> dict:
    if name == "tarnn_triton_backward":
        states, betas, cs, args, deltas = out
        return dict(grad=rand(*states.shape), states=states, betas=betas, cs=cs, args=args, deltas=deltas, sw=f["sw"],
                    u=f["u"], eta=f["eta"], lengths=f["lengths"], activation=1, coupled=False, a_diag=-1.0,
                    inside=True)  # fmt: skip
    if name == "irnn_triton_backward":
        states, phis, us = out
        return dict(grad=rand(*states.shape), states=states, phis=phis, us=us, m=f["m"], ug=f["ug"], eta=f["eta"],
                    alpha=f["alpha"], lengths=f["lengths"], activation=0, s=1.0, r=1.0)  # fmt: skip
    if name == "srnn_triton_backward":
        return dict(grad=rand(*out.shape), out=out, lengths=f["lengths"], activation=1)
    if name == "mist_triton_backward":
        states, gates, reset_mixed = out
        return dict(grad=rand(*states.shape), states=states, gates=gates, reset_mixed=reset_mixed, w_hh=f["w_hh"],
                    w_mix=f["w_mix"], lengths=f["lengths"])  # fmt: skip
    states, probs, masks, gates, news = out
    return dict(grad=rand(*states.shape), grad_probs=rand(*probs.shape), states=states, probs=probs, masks=masks,
                gates=gates, news=news, w_hh=f["w_hh"], coord_weight=f["coord_weight"],
                lengths=f["lengths"])  # fmt: skip


def strided(t):
    """``t`` with its shape and values, not contiguous."""
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def integers(t):
    return t.round().to(torch.int64)


def other_float(t):
    """``t`` in the other of float32 and float64 (the kernels' two state dtypes)."""
    return t.to(torch.float32 if t.dtype == torch.float64 else torch.float64)


#: (operator, {operand: bad value from the valid operands}, the operand the error names, error type)
CASES = [
    # the report's cases: a 2x2 M for H = 32, a one-row eta for T = 50, activation code 99, an integer beta
    ("irnn_triton_forward", {"m": lambda o: rand(2, 2)}, "m", ValueError),
    ("tarnn_triton_forward", {"p": lambda o: rand(50, B, 3 * H), "eta": lambda o: rand(1, 2)}, "eta", ValueError),
    ("irnn_triton_forward", {"c": lambda o: rand(50, B, H), "eta": lambda o: rand(1, 1)}, "eta", ValueError),
    ("irnn_triton_backward", {"eta": lambda o: rand(1, 1)}, "eta", ValueError),
    ("tarnn_triton_forward", {"activation": lambda o: 99}, "activation", ValueError),
    ("tarnn_triton_backward", {"activation": lambda o: 99}, "activation", ValueError),
    ("irnn_triton_forward", {"activation": lambda o: -1}, "activation", ValueError),
    ("srnn_triton_forward", {"activation": lambda o: 99}, "activation", ValueError),
    ("srnn_triton_backward", {"activation": lambda o: 3}, "activation", ValueError),
    ("srnn_triton_forward", {"beta": lambda o: integers(o["beta"])}, "beta", TypeError),
    # shapes
    ("tarnn_triton_forward", {"p": lambda o: rand(T, B, 3 * H + 1)}, "p", ValueError),
    ("tarnn_triton_forward", {"sw": lambda o: rand(2, 2)}, "sw", ValueError),
    ("tarnn_triton_forward", {"s0": lambda o: rand(B + 1, H)}, "s0", ValueError),
    ("tarnn_triton_forward", {"eta": lambda o: rand()}, "eta", ValueError),
    ("tarnn_triton_backward", {"deltas": lambda o: o["deltas"][:, :1].contiguous()}, "deltas", ValueError),
    ("tarnn_triton_backward", {"grad": lambda o: rand(T, B, H)}, "grad", ValueError),
    ("tarnn_triton_backward", {"eta": lambda o: rand(3)}, "eta", ValueError),
    ("irnn_triton_forward", {"eta": lambda o: rand(T + 1, 2)}, "eta", ValueError),
    ("irnn_triton_backward", {"eta": lambda o: rand(2)}, "phis", ValueError),  # phi holds one Euler step
    ("irnn_triton_forward", {"alpha": lambda o: rand(2)}, "alpha", ValueError),
    ("irnn_triton_forward", {"ug": lambda o: rand(H, H)}, "a", ValueError),
    ("irnn_triton_forward", {"h0": lambda o: rand(B, H - 1)}, "h0", ValueError),
    ("irnn_triton_backward", {"us": lambda o: rand(T, B, H)}, "us", ValueError),
    ("irnn_triton_backward", {"states": lambda o: o["states"][1:]}, "states", ValueError),
    ("srnn_triton_forward", {"h0": lambda o: rand(B, H + 1)}, "h0", ValueError),
    ("srnn_triton_backward", {"grad": lambda o: rand(T + 1, B, H)}, "grad", ValueError),
    ("mist_triton_forward", {"w_hh": lambda o: rand(H, H)}, "w_hh", ValueError),
    ("mist_triton_forward", {"w_mix": lambda o: rand(2, 2)}, "w_mix", ValueError),
    ("mist_triton_forward", {"p": lambda o: rand(T, B, 2 * H)}, "p", ValueError),
    (
        "mist_triton_forward",
        {"history0": lambda o: rand(B, 1, H), "w_hh": lambda o: rand(3 + H, H)},
        "history0",
        ValueError,
    ),  # fmt: skip
    ("mist_triton_backward", {"gates": lambda o: rand(T, B, H)}, "gates", ValueError),
    ("mist_triton_backward", {"states": lambda o: o["states"][1:].contiguous()}, "states", ValueError),
    ("mist_triton_backward", {"grad": lambda o: rand(T, B, H)}, "grad", ValueError),
    ("sarnn_triton_forward", {"b_hh": lambda o: rand(H)}, "b_hh", ValueError),
    ("sarnn_triton_forward", {"gi": lambda o: rand(T, B, H)}, "gi", ValueError),
    ("sarnn_triton_forward", {"coord_weight": lambda o: rand(3 * H)}, "coord_weight", ValueError),
    ("sarnn_triton_backward", {"grad_probs": lambda o: rand(T + 1, B, H)}, "grad_probs", ValueError),
    ("sarnn_triton_backward", {"masks": lambda o: o["masks"][:, :1].contiguous()}, "masks", ValueError),
    # dtypes, devices, contiguity of the buffers the backward reads as they are
    ("tarnn_triton_forward", {"u": lambda o: integers(o["u"])}, "u", TypeError),
    ("tarnn_triton_backward", {"args": lambda o: o["args"].half()}, "args", TypeError),
    ("tarnn_triton_backward", {"states": lambda o: strided(o["states"])}, "states", ValueError),
    ("irnn_triton_backward", {"states": lambda o: other_float(o["states"])}, "states", TypeError),
    ("srnn_triton_backward", {"out": lambda o: strided(o["out"])}, "out", ValueError),
    ("sarnn_triton_forward", {"h0": lambda o: integers(o["h0"])}, "h0", TypeError),
    ("sarnn_triton_backward", {"gates": lambda o: strided(o["gates"])}, "gates", ValueError),
    # the codes the kernels compile on
    ("tarnn_triton_forward", {"a_diag": lambda o: 0.5}, "a_diag", ValueError),
    (
        "tarnn_triton_forward",
        {
            "p": lambda o: rand(T, B, 99),
            "s0": lambda o: rand(B, 33),
            "sw": lambda o: rand(99, 33),
            "u": lambda o: rand(33, 33),
            "coupled": lambda o: True,
        },
        "coupled",
        ValueError,
    ),  # fmt: skip
    ("irnn_triton_forward", {"s": lambda o: float("inf")}, "s", ValueError),
    ("irnn_triton_backward", {"r": lambda o: float("nan")}, "r", ValueError),
]
#: lengths of the wrong size, values or dtype, for every operator (T = 4, B = 3)
BAD_LENGTHS = {
    "one element": torch.tensor([2]),
    "negative": torch.tensor([-3, 2, 3]),
    "zero": torch.tensor([0, 2, 3]),
    "past T": torch.tensor([T + 1, 2, 3]),
    "floats": torch.tensor([4.0, 2.0, 3.0]),
    "two dimensions": torch.tensor([[4, 2, 3]]),
}


def call_with(name: str, changes: dict):
    """The operator on its valid operands (which run: ``valid``) with ``changes`` made."""
    operands, _ = valid(name)
    operands = dict(operands)
    operands.update({key: change(operands) for key, change in changes.items()})
    return op(name)(*operands.values())


def expect(name: str, operand: str) -> str:
    return re.escape(f"ltdrnn::{name}: {operand} must")


@pytest.mark.parametrize("name, changes, operand, error", CASES, ids=[f"{case[0]}:{case[2]}" for case in CASES])
def test_a_bad_operand_is_refused_by_name(name, changes, operand, error):
    with pytest.raises(error, match=expect(name, operand)):
        call_with(name, changes)


@pytest.mark.parametrize("case", list(BAD_LENGTHS))
@pytest.mark.parametrize("name", OPERATORS)
def test_bad_lengths_are_refused(name, case):
    bad = BAD_LENGTHS[case].to(DEVICE)
    with pytest.raises(ValueError, match=expect(name, "lengths")):
        call_with(name, {"lengths": lambda o: bad})


@pytest.mark.parametrize("name", OPERATORS)
def test_the_lead_operand_on_the_cpu_without_the_interpreter_is_refused(name, monkeypatch):
    """The kernels read raw pointers: a CPU tensor is theirs only in Triton's interpreter."""
    if DEVICE != "cpu":
        pytest.skip("the operands are on a GPU here")
    valid(name)  # the kernels are defined under the interpreter first
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match=expect(name, LEADS[name]) + ".*CUDA device"):
        call_with(name, {})


@pytest.mark.parametrize("name", OPERATORS)
def test_an_operand_on_another_device_is_refused(name):
    """Weights on the CPU beside a GPU lead (on the CPU alone, a meta tensor takes the operators' fake path and
    no kernel runs: the check itself is tested on Operands below)."""
    if DEVICE == "cpu":
        pytest.skip("one device here")
    weight = {"srnn_triton_forward": "h0", "srnn_triton_backward": "grad"}.get(name, "eta")
    weight = {"mist": "w_mix", "sarnn": "w_hh"}.get(name.split("_")[0], weight)
    with pytest.raises(ValueError, match=expect(name, weight) + ".*where"):
        call_with(name, {weight: lambda o: o[weight].cpu()})


def test_operands_refuse_a_tensor_on_another_device_than_the_lead():
    from ltdrnn.ops.triton_support import Operands

    check = Operands("ltdrnn::some_op", "x", rand(T, B, H), "(T, B, H)")
    check.tensor("w", rand(H, H), "(H, H)", (H, H))
    with pytest.raises(ValueError, match=re.escape("ltdrnn::some_op: w must be on ") + ".*where x is.*meta"):
        check.tensor("w", torch.empty(H, H, dtype=DTYPE, device="meta"), "(H, H)", (H, H))


def test_lengths_changed_in_place_after_their_check_are_checked_again():
    """The backward skips reading back lengths its forward checked, but not once they were changed in place."""
    operands, _ = valid("srnn_triton_backward")
    given = operands["lengths"].clone()
    operands = dict(operands, lengths=given)
    op("srnn_triton_backward")(*operands.values())
    given[1] = -1
    with pytest.raises(ValueError, match=expect("srnn_triton_backward", "lengths")):
        op("srnn_triton_backward")(*operands.values())
