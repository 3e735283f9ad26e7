"""ONNX export of the streaming step (torch.onnx's exporter), checked by onnx and run by onnxruntime.

Graph: inputs ``x (B, d)``, ``state (B, S)``; outputs ``y (B, o)``, ``state_out (B, S)``; the batch is
dynamic; opset :data:`OPSET`. ``int8``: weight-only, per output channel, symmetric
(:func:`quantize_weights`): every weight matrix of a ``MatMul``/``Gemm`` is stored as int8 with one float
scale per output channel and read through ``DequantizeLinear``; activations and state stay float, as in
the C export's int8 step.
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
#: onnxruntime session option: the compute precision of the int8 weight-only MatMuls it fuses
MATMULNBITS_ACCURACY = "session.qdq_matmulnbits_accuracy_level"


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
    """torch.onnx logs warnings about optional packages and its passes on every call; none of them
    concerns these small graphs."""
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


def quantize_weights(source: Path, target: Path) -> int:
    """Weight-only int8: ``W ~ scale * q`` per output channel, symmetric, products in float.

    Every float matrix initializer that is the weight of a ``MatMul`` (``x @ W``, ``W (K, N)``: channel
    axis 1) or ``Gemm`` (``B``, channel axis 0 with ``transB=1``, else 1) becomes an int8 initializer
    ``q`` and a float scale per channel, quantised by :func:`~ltdrnn.export.c_fixed.quantize_rows`
    (the C export's int8 weights are the same numbers), and ``DequantizeLinear(q, scale, axis)`` gives the
    graph its float weight back. Biases, per-unit vectors and the activations stay float: onnxruntime's
    quantisers do not fit (``quantize_dynamic`` and ``quantize_static`` quantise the activations per
    tensor too, which costs prediction agreement on recurrent states of wide range; its weight-only
    ``MatMulNBits`` is blockwise, a Microsoft-domain operator and 8-bit only in QOperator form).
    Returns how many matrices were quantised.
    """
    onnx = require("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from .c_fixed import quantize_rows

    model = onnx.load(str(source))
    graph = model.graph
    axes: dict = {}
    for node in graph.node:
        if node.op_type == "MatMul":
            axes.setdefault(node.input[1], set()).add(1)
        elif node.op_type == "Gemm":
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            axes.setdefault(node.input[1], set()).add(0 if trans_b else 1)
    dequantize, kept = [], []
    for tensor in graph.initializer:
        axis = axes.get(tensor.name, set())
        if len(axis) != 1 or tensor.data_type != TensorProto.FLOAT or len(tensor.dims) != 2:
            kept.append(tensor)
            continue
        axis = axis.pop()
        weight = numpy_helper.to_array(tensor)
        q, scale = quantize_rows(torch.tensor(weight if axis == 0 else weight.T))
        kept += [
            numpy_helper.from_array(q if axis == 0 else np.ascontiguousarray(q.T), f"{tensor.name}_q8"),
            numpy_helper.from_array(scale, f"{tensor.name}_scale"),
        ]
        dequantize.append(
            helper.make_node(
                "DequantizeLinear", [f"{tensor.name}_q8", f"{tensor.name}_scale"], [tensor.name], axis=axis
            )
        )
    del graph.initializer[:]
    graph.initializer.extend(kept)
    nodes = dequantize + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.save(model, str(target))
    return len(dequantize)


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
    # onnxruntime (seen with 1.32) fuses DequantizeLinear -> MatMul into MatMulNBits, which by default (level 4)
    # quantises the activations to int8 on the fly; level 1 computes in float32, as the int8 graph means
    options.add_session_config_entry(MATMULNBITS_ACCURACY, "1")
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
    files, notes = [path], [f"opset {check(path)}"]
    if int8:
        files.append(out / f"{name}.int8.onnx")
        matrices = quantize_weights(path, files[-1])
        check(files[-1])
        notes.append(f"int8: {matrices} weight matrices int8 per output channel, activations float")
    return {"files": files, "step": session_step(files[-1]), "notes": notes}
