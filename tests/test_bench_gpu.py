"""``ltdrnn bench --device cuda``'s machinery (ltdrnn.bench.gpu) run on the CPU at a tiny shape, the Triton paths
in the interpreter: every section and subject is measured, the targets are evaluated from the records, the JSON
and the markdown name the device; a flag error is a clear message, no traceback. On a GPU the real run is
benchmarks/gpu_check.sh."""

from __future__ import annotations

import json

import pytest
import torch

from ltdrnn.bench import gpu
from ltdrnn.cli import main
from triton_helpers import requires_triton


@pytest.mark.slow
@requires_triton
def test_the_gpu_run_measures_every_section_and_evaluates_the_targets(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(gpu, "DEVICE", "cpu")
    out, markdown = tmp_path / "gpu.json", tmp_path / "gpu.md"
    argv = ["bench", "--device", "cuda", "--shapes", "4x1", "--batch", "3", "--hidden-sizes", "16,32"]
    argv += ["--loop-hidden-sizes", "16", "--cells", "srnn[relu],tarnn[K=1]", "--repeats", "1", "--warmup", "1"]
    argv += ["--stream-steps", "2", "--out", str(out), "--markdown", str(markdown)]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert result["schema"] == gpu.SCHEMA and result["device"]["name"] == "cpu" and not result["errors"]
    train = {(r["subject"], r["path"], r["hidden"]) for r in result["train"]}
    assert ("srnn[relu]", "triton", 32) in train and ("tarnn[K=1]", "loop", 16) in train
    assert ("tarnn[K=1]", "loop", 32) not in train  # loops only at --loop-hidden-sizes
    assert {r["path"] for r in result["stream"] if r["subject"] == "srnn[relu]"} == {"graph", "eager"}
    assert {r["subject"] for r in result["amp"]} >= {"nn.LSTM", "srnn[relu]"}
    speedups = [t for t in result["targets"] if "PyTorch loop" in t["target"]]
    times = {(r["subject"], r["path"]): r["median"] for r in result["train"] if r["hidden"] == 16}
    assert speedups[0]["measured"] == pytest.approx(times[("srnn[relu]", "loop")] / times[("srnn[relu]", "triton")])
    assert "**targets**" in markdown.read_text()


def test_a_gpu_run_without_a_gpu_is_a_clear_error(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    assert main(["bench", "--device", "cuda"]) == 2
    assert "ltdrnn bench: --device cuda: no CUDA device is visible" in capsys.readouterr().err


def test_a_graph_row_whose_capture_failed_is_an_error_not_an_eager_timing():
    class Layer:
        pass

    layer = Layer()
    timed = gpu.graphed_only(layer, lambda: None)
    timed()  # captured: measured as is
    layer._graph_failed = True  # what ltdrnn.graphs sets when the capture fails
    with pytest.raises(RuntimeError, match="capture failed"):
        timed()
