"""The analyses a claim's runs may ask for, measured on the trained model in float64:
``gradient_vs_lag`` (MIST Fig. 2) and ``jacobian_ratio`` (iRNN Fig. 3b, also traced during training);
and ``recall``, a finished copy run's accuracy on its recall steps, re-measured from its checkpoint."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List

from .claims import RunSpec
from .expressions import Unmeasured

# What each analysis differentiates with respect to, stored with it: a row measured under another
# definition is stale (``.store``). Before 2026-11-25 gradient_vs_lag followed the cell's whole state
# (MIST's ring buffer, LSTM's h and c), not MIST Fig. 2's h_t.
DEFINITIONS = {"gradient_vs_lag": "the output h_t of each step"}


def traces_training(spec: RunSpec) -> bool:
    """Whether an analysis of ``spec`` is measured during training (``jacobian_ratio``'s trace over the
    steps), so that a run continued from a checkpoint would lose part of it."""
    return "jacobian_ratio" in spec.analyses


class AnalysisWatcher:
    """A training callback: keeps the model, and for ``jacobian_ratio`` measures the ratio every
    ``train.eval_every`` steps on 32 fixed validation sequences (iRNN Fig. 3b over iterations).
    ``gradient_vs_lag`` is measured after training on 100 test examples drawn with a fixed seed."""

    def __init__(self, spec: RunSpec, cfg) -> None:
        self.spec, self.cfg = spec, cfg
        self.model = None
        self.every = cfg.train.eval_every or 50
        self.trace: List[Dict[str, float]] = []
        self._batch = None

    def __call__(self, state: Dict[str, Any]) -> None:
        self.model = state["model"]
        if traces_training(self.spec) and state["step"] % self.every == 0:
            x = self.batch("val", 32)[0][0]
            self.trace.append({"step": state["step"], **jacobian_ratio(self.model, x)})

    def batch(self, split: str, size: int):
        if self._batch is None or self._batch[0] != split:
            import torch

            from ..tasks.base import build_task

            task = build_task(self.cfg.task.name, **self.cfg.task.options)
            dataset = task.dataset(split)
            # a fixed random sample: stored splits may be ordered by class
            order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))[:size]
            x, y, lengths = task.collate([dataset[i] for i in order.tolist()])
            self._batch = (split, (x, y, lengths), task.info)
        return self._batch[1], self._batch[2]

    def finish(self, record: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
        """The analyses of the trained model (the weights at the last step)."""
        out: Dict[str, Dict[str, Any]] = {}
        if self.model is None:
            return out
        if "gradient_vs_lag" in self.spec.analyses:
            from ..analysis.gradients import gradient_vs_lag

            self._batch = None
            (x, y, lengths), info = self.batch("test", 100)
            model, x = _in_float64(self.model, x)
            batch = (x, y, lengths)
            curve = [float(v) for v in gradient_vs_lag(model, batch, info)]
            # relative to the peak: how large the gradient is near the loss depends on the head and the
            # loss, how much of it is left far away is what the claim is about
            peak = max(curve)
            out["gradient_vs_lag"] = {
                "curve": curve,
                "ratio": curve[-1] / peak if peak else math.nan,
                "examples": int(x.shape[0]),
                "step": record["timings"]["steps"],
                "dtype": "float64",
                "of": DEFINITIONS["gradient_vs_lag"],
            }
        if "jacobian_ratio" in self.spec.analyses:
            final = jacobian_ratio(self.model, self.batch("val", 32)[0][0])
            steps = record["timings"]["steps"]
            trace = [t for t in self.trace if t["step"] != steps] + [{"step": steps, **final}]
            out["jacobian_ratio"] = {**final, "trace": trace}
        return out


# How far a checkpoint's re-measured test cross entropy may lie from its row's (relative): evaluation
# at another thread count sums in another order; the re-measured held-out copy rows of 2026-11-30 all
# matched within it, and a row whose stored number is 1% off is refused (tests/test_reproduce.py)
RECALL_TOLERANCE = 1e-4


def recall_from_checkpoint(row: Dict[str, Any]) -> Dict[str, Any]:
    """``recall`` of a finished copy run whose row predates ``recall_accuracy`` in the test metrics: the
    accuracy on the recall steps of its test split, from the checkpoint its test numbers came from. Of
    ``best.pt`` and ``last.pt`` in its run directory, the one that gives the row's test cross entropy
    again (within :data:`RECALL_TOLERANCE`) is that checkpoint; if neither does, nothing is measured."""
    from ..checkpoint import BEST, CHECKPOINT
    from ..evaluation import evaluate_checkpoint

    run_dir = Path(row.get("run_dir") or "")
    stored = ((row.get("metrics") or {}).get("test") or {}).get("cross_entropy")
    if row.get("task") != "copy" or stored is None:
        raise Unmeasured(f"run {row.get('name')!r} is not a finished copy run: it has no recall steps")
    found = []
    for name in (BEST, CHECKPOINT):
        if not (run_dir / name).is_file():
            continue
        test = evaluate_checkpoint(run_dir / name, "test")
        if abs(test["cross_entropy"] - stored) <= RECALL_TOLERANCE * abs(stored):
            return {
                "accuracy": test["recall_accuracy"],
                "cross_entropy": test["cross_entropy"],
                "checkpoint": str(run_dir / name),
            }
        found.append(f"{name} {test['cross_entropy']:.6g}")
    why = f"its checkpoints give another test cross entropy ({', '.join(found)})" if found else "it has none"
    raise Unmeasured(
        f"run directory {str(run_dir)!r}: expected the checkpoint tested for the row (test cross entropy "
        f"{stored:.6g}), but {why}"
    )


def jacobian_ratio(model, x, probes: int = 8, seed: int = 0) -> Dict[str, float]:
    """``||dh_T/dh_1||_F``, ``||dh_T/dh_{T-1}||_F`` (means over the batch) and their ratio (iRNN Fig. 3b).

    ``h_t`` is the first layer's whole state after step t. Frobenius norms are estimated with
    ``probes`` Gaussian vectors v (``E||v^T J||^2 = ||J||_F^2``); the same v serve both Jacobians.
    Computed in float64 on a copy of the model (a product of T Jacobians underflows float32 long before
    float64). Needs a one-layer, one-direction model; the global RNG is left untouched.
    """
    import torch

    from ..analysis.gradients import cell_inputs, single_cell
    from ..cells.base import time_slices

    model, x = _in_float64(model, x)
    cell = single_cell(model, "jacobian_ratio")
    generator = torch.Generator().manual_seed(seed)
    with torch.enable_grad():
        slices = time_slices(cell.precompute(cell_inputs(model, x).detach()))
        if len(slices) < 3:
            raise ValueError(f"jacobian_ratio: expected sequences of at least 3 steps, got {len(slices)}")
        state = cell.init_state(x.shape[0], x.device, x.dtype)
        kept = {}
        for t, p_t in enumerate(slices):
            _, state = cell.step(p_t, state)
            if t in (0, len(slices) - 2):
                kept[t] = _float_tensors(state)
        last = _float_tensors(state)
        starts = list(kept)
        squares = {t: torch.zeros(x.shape[0], dtype=torch.float64) for t in starts}
        for _ in range(probes):
            vs = [torch.randn(s.shape, generator=generator, dtype=s.dtype) for s in last]
            # one backward pass gives v^T J for both starting points
            grads = iter(
                torch.autograd.grad(
                    last, [s for t in starts for s in kept[t]], grad_outputs=vs, retain_graph=True, allow_unused=True
                )
            )
            for t in starts:
                for _ in kept[t]:
                    g = next(grads)
                    if g is not None:
                        squares[t] += (g.detach().flatten(1) ** 2).sum(1)
    first, previous = (float((squares[t] / probes).sqrt().mean()) for t in (0, len(slices) - 2))
    return {"first": first, "previous": previous, "ratio": first / previous if previous else math.nan}


def _in_float64(model, x):
    """A float64 copy of ``model`` in eval mode and ``x`` in float64 (token ids stay integers)."""
    import copy

    twin = copy.deepcopy(model).double().eval()
    return twin, (x.double() if x.is_floating_point() else x)


def _float_tensors(state) -> List[Any]:
    import torch

    if isinstance(state, torch.Tensor):
        return [state] if state.is_floating_point() and state.requires_grad else []
    return [t for part in state for t in _float_tensors(part)]
