"""The input/output contract of an export: what to feed the step, what comes out, when to reset, and how
far it was validated. It goes into ``report.json`` (``contract``) and the C header's comment.

    contract(step, task, split) -> {"input", "outputs", "classes", "reset", "validated_length", ...}
    stability(step, task, split, steps) -> how the state behaves on a long stream without reset

Input: a per-channel standardisation with the training split's statistics (``standardize=True`` of the
UCR/UEA task) is streaming-compatible and is applied inside the C step (``(x - mean) / std``) or, for the
integer step, in ``NAME_quantise``; the ONNX and pt2 steps take the standardised input and the contract
gives the numbers. A per-series z-normalisation (``znorm=True``) needs the whole series before its first
step: the contract says so, and that the export is then not a streaming model. The same holds for a data set
whose series were z-normalised one by one before it shipped (UCR's GunPoint): the contract reads it off the
training series, and a device must z-normalise every window (``NAME_normalise_window`` in C).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np
import torch

from .step import StreamingStep

#: the long-stream probe: this many steps without reset, on this many streams of test sequences
PROBE_STEPS = 10000
PROBE_STREAMS = 4
#: per-series normalisation is read off training series whose mean and std are within this of 0 and 1
WINDOW_TOLERANCE = 1e-3
WINDOW_SERIES = 256


def input_contract(task) -> Dict[str, Any]:
    """``{"text", "channel": {"mean", "std"} | None, "window": {...} | None, "streaming": bool}`` of a task's
    input scaling; ``window`` (:func:`per_series_normalisation`) when each training series was z-normalised
    on its own, which a device must repeat on every window."""
    extra = dict(task.info.extra or {}) if task is not None else {}
    name = task.info.name if task is not None else None
    channel = None
    if extra.get("standardize") and extra.get("channel_mean") is not None:
        channel = {"mean": [float(v) for v in extra["channel_mean"]], "std": [float(v) for v in extra["channel_std"]]}
    window = per_series_normalisation(task, channel) if task is not None else None
    standardised = (
        f"per channel x_n[i] = (x[i] - mean[i]) / std[i] with the training split's statistics, "
        f"mean = {_list(channel['mean'])}, std = {_list(channel['std'])}; the C step applies it "
        "(feed raw x), the onnx and pt2 steps take x_n"
        if channel
        else ""
    )
    if window is not None:
        text = _window_text(window)
        if channel:
            text += "; then " + standardised
        return {"text": text, "channel": channel, "window": window, "streaming": False}
    if channel:
        return {"text": standardised, "channel": channel, "window": None, "streaming": True}
    if task is None:
        text = "not known (no task): feed the input as the model was trained on it"
    else:
        text = f"x as task {name!r} yields it (no scaling beyond the task's own, see docs/tasks.md)"
    return {"text": text, "channel": None, "window": None, "streaming": True}


def per_series_normalisation(task, channel=None) -> Optional[Dict[str, Any]]:
    """``{"ddof", "source", "series", "largest_deviation"}`` when each training series was z-normalised per
    channel on its own, else None: the task's ``znorm`` option (ddof 0), or training data whose every
    series (up to :data:`WINDOW_SERIES`, the per-channel standardisation ``channel`` undone) has mean 0
    and standard deviation 1 within :data:`WINDOW_TOLERANCE` (UCR's GunPoint ships so, ddof 1)."""
    extra = task.info.extra or {}
    if extra.get("znorm"):
        return {"ddof": 0, "source": "the task's znorm option", "series": None, "largest_deviation": None}
    if task.info.input_kind == "tokens":
        return None
    dataset = task.dataset("train")
    series = [dataset[i][0].double().numpy() for i in range(min(len(dataset), WINDOW_SERIES))]
    series = [s.reshape(len(s), -1) for s in series if len(s) > 2]
    if not series:
        return None
    if channel is not None:
        series = [s * np.asarray(channel["std"]) + np.asarray(channel["mean"]) for s in series]
    means = np.stack([s.mean(0) for s in series])
    best = None
    for ddof in (0, 1):
        stds = np.stack([s.std(0, ddof=ddof) for s in series])
        flat = stds <= WINDOW_TOLERANCE  # a constant channel: shifted to 0, not scaled (as znorm leaves it)
        deviation = float(max(np.abs(means).max(), np.abs(np.where(flat, 1.0, stds) - 1.0).max()))
        if deviation <= WINDOW_TOLERANCE and not flat.all() and (best is None or deviation < best[1]):
            best = (ddof, deviation)
    if best is None:
        return None
    return {"ddof": best[0], "source": "the training data", "series": len(series), "largest_deviation": best[1]}


def _window_text(window: Dict[str, Any]) -> str:
    if window["series"] is None:
        how = "each series z-normalised per channel over its own length (znorm)"
        advice = "; train with task.options.standardize=true (per channel, training statistics) to stream"
    else:
        how = (
            f"the training series were z-normalised one by one (each of the {window['series']} read has per-channel "
            f"mean 0 and standard deviation 1 with ddof {window['ddof']}, within {window['largest_deviation']:.1g})"
        )
        advice = ""
    return (
        f"{how}: this needs the whole series in advance, so the export is not a streaming model. On a device, "
        f"z-normalise each window per channel (ddof {window['ddof']}; NAME_normalise_window in C) before its first "
        f"step, and run each window as one sequence from the initial state{advice}"
    )


def _list(values) -> str:
    return "[" + ", ".join(f"{v:.7g}" for v in values) + "]"


def contract(step: StreamingStep, task, split: str = "test", measured: bool = True) -> Dict[str, Any]:
    """The contract of ``step`` trained on ``task``; with ``measured`` also the validated length and the
    long-stream probe (:func:`stability`), measured on ``split``."""
    given = input_contract(task)
    info = task.info if task is not None else None
    classes = None
    if info is not None and info.loss == "cross_entropy":
        names = (info.extra or {}).get("classes")
        classes = [str(c) for c in names] if names else [str(k) for k in range(step.output_size)]
        outputs = (
            "logits of classes "
            + ", ".join(f"{k}: {c!r}" for k, c in enumerate(classes))
            + " (argmax is the prediction)"
        )
    elif info is not None:
        outputs = f"{step.output_size} regression output(s) of task {info.name!r}"
    else:
        outputs = f"{step.output_size} output(s) of the head"
    result: Dict[str, Any] = {
        "input": given,
        "classes": classes,
        "outputs": outputs,
        "reset": (
            "start every sequence from the initial state (NAME_init in C; report.json initial_state) and read the "
            "output after its last sample: the model was trained on independent sequences, each from that state; "
            "a stream without sequence boundaries needs a reset at least every reset_within steps (NAME_RESET_WITHIN "
            "in C: the longest stretch without reset that was tested and held)"
        ),
        "pooling": step.pooling,
        "validated_length": None,
        "reset_within": None,
        "stability": None,
        "validated": None,
    }
    if measured and task is not None:
        lengths = [len(task.dataset(split)[i][0]) for i in range(len(task.dataset(split)))]
        result["validated_length"] = int(max(lengths))
        result["stability"] = stability(step, task, split, max(PROBE_STEPS, 20 * result["validated_length"]))
        result["validated"] = _validated_text(result["validated_length"], result["stability"], split)
        result["reset_within"] = reset_within(result["validated_length"], result["stability"])
    return result


def reset_within(length: int, probe: Dict[str, Any]) -> int:
    """The longest stretch without reset that was tested and held: the long-stream probe's steps where the
    state stayed bounded, else the validated length."""
    return probe["steps"] if probe["bounded"] else length


@torch.no_grad()
def stability(step: StreamingStep, task, split: str = "test", steps: int = PROBE_STEPS) -> Dict[str, Any]:
    """Run the eager step on :data:`PROBE_STREAMS` streams of ``split``'s sequences, one after another
    without reset, for ``steps`` steps; report the largest ``|state|`` within the first sequence length
    and over the whole stream, and the first step with a non-finite state (None: none)."""
    dataset = task.dataset(split)
    series = [dataset[i][0].float() for i in range(len(dataset))]
    generator = np.random.default_rng(0)
    streams = []
    for _ in range(PROBE_STREAMS):
        pieces, total = [], 0
        while total < steps:
            piece = series[int(generator.integers(len(series)))]
            pieces.append(piece)
            total += len(piece)
        streams.append(torch.cat(pieces)[:steps])
    x = torch.stack(streams)
    state = step.init_state(x.shape[0]).to(x.dtype)
    validated = max(len(s) for s in series)
    largest, largest_validated, first_bad = 0.0, 0.0, None
    for t in range(steps):
        _, state = step(x[:, t], state)
        finite = torch.isfinite(state)
        if not finite.all():
            first_bad = t + 1
            break
        value = float(state.abs().max())
        largest = max(largest, value)
        if t < validated:
            largest_validated = largest
    return {
        "steps": steps,
        "streams": PROBE_STREAMS,
        "max_abs_state_validated": largest_validated,
        "max_abs_state": largest,
        "first_non_finite_step": first_bad,
        "bounded": first_bad is None and largest <= 2.0 * max(largest_validated, 1e-12),
    }


def _validated_text(length: int, probe: Optional[Dict[str, Any]], split: str) -> str:
    text = f"sequences of up to {length} steps (the {split} split; parity measured on them)"
    if probe is None:
        return text
    n = f"{probe['steps']:,}"
    if probe["first_non_finite_step"] is not None:
        return text + (
            f"; without reset the state turns non-finite at step {probe['first_non_finite_step']:,} of a stream "
            f"of {split} sequences: reset at least every {length} steps"
        )
    if not probe["bounded"]:
        return text + (
            f"; without reset |state| grows from {probe['max_abs_state_validated']:.3g} (first {length} steps) to "
            f"{probe['max_abs_state']:.3g} over {n} steps: outside what was validated, reset every {length} steps"
        )
    return text + (
        f"; without reset |state| stays within {probe['max_abs_state']:.3g} over {n} steps "
        f"({probe['max_abs_state_validated']:.3g} in the first {length})"
    )
