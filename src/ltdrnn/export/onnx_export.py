"""ONNX export of the streaming step (torch.onnx's exporter), checked by onnx and run by onnxruntime.

Graph: inputs ``x (B, d)``, ``state (B, S)``; outputs ``y (B, o)``, ``state_out (B, S)``; the batch is
dynamic; opset :data:`OPSET`. ``int8``: onnxruntime's dynamic quantisation with per-channel symmetric
int8 weights (``quantize_dynamic(per_channel=True, weight_type=QInt8)``): the matrix products become
``MatMulInteger`` on int8 weights and activations quantised on the fly, accumulating in int32.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import warnings
from pathlib import Path

import numpy as np
import torch

from .step import ExportError, StreamingStep

OPSET = 18


def require(module: str):
    """Import one of the ``export`` extra's modules, or say how to install it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        raise ExportError(
            f"format onnx: needs the module {error.name!r}; install the export extra: pip install 'ltdrnn[export]'"
        ) from None


@contextlib.contextmanager
def quiet():
    """torch.onnx and the quantiser log warnings about optional packages and pre-processing on every
    call; none of them concerns these small graphs."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "root")]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)


def export_onnx(step: StreamingStep, path: Path) -> None:
    """Write ``step`` as an ONNX graph with a dynamic batch."""
    require("onnxscript")
    batch = torch.export.Dim("batch")
    example = (torch.zeros(2, step.input_size), step.init_state(2))
    with quiet():
        program = torch.onnx.export(
            step,
            example,
            dynamo=True,
            opset_version=OPSET,
            verbose=False,
            input_names=["x", "state"],
            output_names=["y", "state_out"],
            dynamic_shapes={"x_t": {0: batch}, "state": {0: batch}},
        )
        program.save(str(path))


def quantize(source: Path, target: Path) -> None:
    """onnxruntime's dynamic quantisation, int8 weights per output channel."""
    quantization = require("onnxruntime.quantization")
    with quiet():
        quantization.quantize_dynamic(
            str(source), str(target), per_channel=True, weight_type=quantization.QuantType.QInt8
        )


def check(path: Path) -> int:
    """onnx's full checker; returns the graph's opset."""
    onnx = require("onnx")
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    return max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def session_step(path: Path):
    """``(x_t, state) -> (y, state)`` through an onnxruntime session (float32 numpy in and out)."""
    ort = require("onnxruntime")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def run(x_t, state):
        y, state = session.run(
            None,
            {"x": np.ascontiguousarray(x_t, dtype=np.float32), "state": np.ascontiguousarray(state, dtype=np.float32)},
        )
        return y, state

    return run


def write(step: StreamingStep, out: Path, name: str, int8: bool) -> dict:
    """Write ``NAME.onnx`` (and ``NAME.int8.onnx``), check them; returns files, a step runner, notes."""
    path = out / f"{name}.onnx"
    export_onnx(step, path)
    opset = check(path)
    files = [path]
    if int8:
        files.append(out / f"{name}.int8.onnx")
        quantize(path, files[-1])
        check(files[-1])
    return {"files": files, "step": session_step(files[-1]), "notes": [f"opset {opset}"]}
