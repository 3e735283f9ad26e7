"""The one dispatch point, ``ltdrnn.ops.resolve``: what ``"auto"`` picks, and where an explicit backend that cannot
run here goes (docs/architecture.md, "The fast paths")."""

from __future__ import annotations

import types

import pytest
import torch

import ltdrnn
from ltdrnn import ops
from ltdrnn.ops import kernels, triton_support

ON_CUDA = types.SimpleNamespace(device=torch.device("cuda"), is_cuda=True, is_cpu=False, dtype=torch.float32)
ON_CPU = torch.zeros(1)


@pytest.fixture
def no_triton(monkeypatch):
    monkeypatch.setattr(triton_support, "triton_runs_on", lambda x: False)


@pytest.fixture
def with_triton(monkeypatch):
    monkeypatch.setattr(triton_support, "triton_runs_on", lambda x: True)


def test_auto_takes_the_fastest_backend_that_runs(with_triton, monkeypatch):
    monkeypatch.setattr(kernels, "load_torch_ops", lambda kernel: True)
    assert ops.resolve("auto", ON_CUDA, kernel="tarnn") == "triton"
    assert ops.resolve("auto", ON_CPU, kernel="tarnn") == "cpp"  # Triton's interpreter is never the default
    assert ops.resolve("auto", ON_CPU, kernel=None) == "torch"  # a cell without compiled loops
    assert ops.resolve("auto", ON_CPU, offered=("reference", "torch", "triton"), kernel="tarnn") == "torch"
    assert ops.resolve("auto", ON_CUDA, offered=("reference",)) == "reference"


def test_an_explicit_backend_that_cannot_run_falls_to_the_next_one_down(no_triton, monkeypatch):
    monkeypatch.setenv("LTDRNN_NO_KERNELS", "1")
    assert ops.resolve("triton", ON_CPU, kernel="tarnn") == "torch"
    assert ops.resolve("cpp", ON_CPU, kernel="tarnn") == "torch"
    assert ops.resolve("cpp", ON_CUDA, kernel="tarnn") == "torch"  # no compiled loops on a GPU
    monkeypatch.delenv("LTDRNN_NO_KERNELS")
    monkeypatch.setattr(kernels, "load_torch_ops", lambda kernel: True)
    assert ops.resolve("triton", ON_CPU, kernel="tarnn") == "cpp"
    assert ops.resolve("torch", ON_CPU, kernel="tarnn") == "torch"  # never up: torch stays torch
    assert ops.resolve("reference", ON_CUDA, kernel="tarnn") == "reference"


def test_a_cell_s_own_variant_runs_as_named_and_an_unknown_backend_is_a_clear_error():
    offered = ("reference", "torch", "cpp", "closed_form", "triton")
    assert ops.resolve("closed_form", ON_CPU, offered, kernel="srnn") == "closed_form"
    with pytest.raises(ValueError, match=r"backend: expected one of 'auto', 'reference', .*got 'fused'"):
        ops.resolve("fused", ON_CPU, offered, kernel="srnn")


def test_the_cells_resolve_through_the_one_resolver(no_triton, monkeypatch):
    calls = []
    real = ops.resolve
    monkeypatch.setattr("ltdrnn.cells.base.resolve", lambda *a: calls.append(a) or real(*a))
    cell = ltdrnn.build("tarnn", 3, 8, K=1)
    x = torch.randn(4, 2, 3)
    cell.scan(x)
    assert calls and calls[0][1] is x and calls[0][2] == cell.backends and calls[0][3] == "tarnn"
    with pytest.raises(ValueError, match="backend: expected one of"):
        ltdrnn.build("tarnn", 3, 8, backend="fused")  # the old words are gone, with no alias


def test_a_stored_config_with_the_old_keyword_fails_with_the_new_word():
    from ltdrnn.checkpoint import build_task_and_model
    from ltdrnn.config import ConfigError, load_config

    cfg = load_config("quick/adding-tarnn", ["model.options.impl=fused"])
    with pytest.raises(ConfigError, match=r"model 'tarnn': impl: the keyword is backend now.*'fused' is 'cpp'"):
        build_task_and_model(cfg)
    _, model = build_task_and_model(load_config("quick/adding-tarnn", ["model.options.backend=cpp"]))
    assert model.rnn.cells[0].backend == "cpp"
