"""The ``profile`` section: where one training step's time goes, per subject, from torch.profiler.

A training step at the first shape runs once under ``torch.profiler.profile`` (after ``--warmup``
untimed steps). Its wall time is split by the profiler's self times into

* ``matmul``: BLAS products (``aten::mm``, ``addmm``, ``bmm``, ...), the arithmetic the FLOPs count;
* ``compiled``: the library's own operators (``ltdrnn::*``: a whole time loop per call);
* ``other ops``: every other ATen operator (elementwise work, copies, views, fused library kernels
  such as nn.LSTM's oneDNN ones);
* ``outside ops``: the rest of the wall time, spent in no operator: Python (the time loops of the
  custom autograd Functions included), the autograd engine and the profiler's own bookkeeping.

``dispatches per step`` counts the operator calls made from Python or by the autograd engine (not
those nested inside another operator) divided by T: a Python loop's per-step cost is roughly that
count times a few microseconds. The profiler adds about a microsecond per event, so the split is a
picture of what bounds a subject, not a timing: the ``train`` section's medians are the timings.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Sequence

import torch

from .subjects import Subject
from .timing import Settings, built_layers, progress, train_step

MATMUL_OPS = frozenset(
    {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addmv", "aten::mv", "aten::addmm_"}
)


def measure_profile(
    subjects: Sequence[Subject], settings: Settings, errors: List[Dict[str, Any]]
) -> List[Dict[str, Any]]:
    """One profiled training step per subject at the first shape (see the module docstring)."""
    shape = settings.shapes[0]
    context = {"shape": shape.name, "section": "profile"}
    layers = built_layers(subjects, shape.input_size, settings.hidden, errors, context)
    x = shape.batch(settings.batch)
    progress(f"profile {shape.name} (T={shape.steps}): {len(layers)} subjects")
    records = []
    for name, layer in layers.items():
        step = train_step(layer, x)
        try:
            for _ in range(max(1, settings.warmup)):
                step()
            records.append({"subject": name, "shape": shape.name, **profile_split(step, shape.steps)})
        except Exception as error:
            errors.append({**context, "subject": name, "error": f"{type(error).__name__}: {error}"})
    return records


def profile_split(step, steps: int) -> Dict[str, Any]:
    """Wall ms of one profiled call of ``step`` and its split into matmul / compiled / other ops /
    outside ops (ms), plus operator dispatches per time step and the five costliest operators."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        step()
        wall_ms = (time.perf_counter() - start) * 1e3
    operators = [event for event in prof.events() if is_operator(event.name)]
    self_ms: Dict[str, float] = {}
    for event in operators:
        self_ms[event.name] = self_ms.get(event.name, 0.0) + event.self_cpu_time_total / 1e3
    matmul = sum(ms for op, ms in self_ms.items() if op in MATMUL_OPS)
    compiled = sum(ms for op, ms in self_ms.items() if op.startswith("ltdrnn::"))
    inside = sum(self_ms.values())
    # an operator called by another runs inside that call; only the outermost ones cost a dispatch
    dispatched = sum(1 for event in operators if event.cpu_parent is None or not is_operator(event.cpu_parent.name))
    costliest = sorted(self_ms.items(), key=lambda item: -item[1])[:5]
    return {
        "wall_ms": wall_ms,
        "matmul_ms": matmul,
        "compiled_ms": compiled,
        "other_ops_ms": inside - matmul - compiled,
        "outside_ops_ms": max(0.0, wall_ms - inside),
        "dispatches_per_step": dispatched / steps,
        "costliest_ops": [{"op": op, "ms": ms} for op, ms in costliest],
    }


def is_operator(name: str) -> bool:
    """ATen's operators and the library's own; not autograd nodes or Python-level records."""
    return name.startswith(("aten::", "ltdrnn::"))
