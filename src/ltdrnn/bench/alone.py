"""The references at their best: nn.LSTM and nn.GRU timed alone, each in a fresh process.

Interleaved with many subjects in one process, the references ran slower than alone (nn.LSTM's training
step 383-437 ms in a run of six cells, 300-310 ms alone, same host and hour: allocator state, caches and
threads shared with the neighbours), which made every ratio to them kinder. So each reference is also
timed alone, right after the interleaved measurement of the same section and shape, in a new interpreter
(``python -m ltdrnn.bench --alone-probe SPEC``) with the same threads, malloc tuning, warm-up, repeats and
seeded input, and with no other subject built. The ratios divide by the faster of the two times
(:func:`.timing.reference_time`), and a run warns when the interleaved time is more than
:data:`SLOWED_LIMIT` times the alone one.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Dict, List, Optional, Sequence

from .probes import run_probe, subject_spec
from .subjects import TORCH_SUBJECTS, Shape, Subject
from .timing import (
    INPUT_SEED,
    REFERENCE_FIELDS,
    Settings,
    inference_pass,
    interleaved_samples,
    median,
    prepare_process,
    progress,
    stream_runs,
    train_step,
)

#: Interleaved slower than alone by more than this factor: the run warns that the neighbours slowed the reference.
SLOWED_LIMIT = 1.10


def alone_probe(spec: Dict[str, Any]) -> Dict[str, List[float]]:
    """Run inside a fresh process: seconds per sample of one subject, the only one built, in one section.

    ``train`` / ``inference`` give ``{"run": samples}``; ``stream`` gives ``{"cell": ..., "layer": ...}``
    (seconds per loop of ``stream_steps`` steps, as in the interleaved section)."""
    prepare_process(spec["threads"], spec["malloc_tuning"])
    subject, shape = Subject(**spec["subject"]), Shape(**spec["shape"])
    layer = subject.layer(shape.input_size, spec["hidden"])
    if spec["section"] == "stream":
        cell_loop, layer_loop = stream_runs(subject, layer, shape.input_size, spec["hidden"], spec["stream_steps"])
        runs = {"cell": cell_loop, "layer": layer_loop}
    else:
        make = train_step if spec["section"] == "train" else inference_pass
        runs = {"run": make(layer, shape.batch(spec["batch"], seed=INPUT_SEED))}
    errors: List[Dict[str, Any]] = []
    samples = interleaved_samples(runs, spec["repeats"], spec["warmup"], errors, {})
    if errors:
        raise RuntimeError(errors[0]["error"])
    return samples


def measure_alone(
    subjects: Sequence[Subject], section: str, shape: Shape, settings: Settings, errors: List[Dict[str, Any]]
) -> Dict[str, Dict[str, List[float]]]:
    """:func:`alone_probe` of each reference among ``subjects`` (nn.LSTM, nn.GRU), one fresh process each:
    ``{reference: {run: samples}}``; nothing when ``settings.alone_reference`` is off. A probe that fails
    is recorded in ``errors`` and its reference keeps its interleaved time."""
    if not settings.alone_reference:
        return {}
    references = [s for s in subjects if s.name in TORCH_SUBJECTS and s.error is None]
    where = shape.name if section == "stream" else f"{shape.name} (T={shape.steps})"
    progress(f"{section} {where}: {', '.join(s.name for s in references)} alone, a fresh process each")
    spec = {
        "section": section,
        "shape": asdict(shape),
        "batch": settings.batch,
        "hidden": settings.hidden,
        "threads": settings.threads,
        "malloc_tuning": settings.malloc_tuning,
        "repeats": settings.repeats,
        "warmup": settings.warmup,
        "stream_steps": settings.stream_steps,
    }
    out = {}
    for subject in references:
        try:
            out[subject.name] = run_probe("alone", {**spec, "subject": subject_spec(subject)})
        except Exception as error:
            errors.append(
                {
                    "section": f"{section} (alone)",
                    "shape": shape.name,
                    "subject": subject.name,
                    "error": f"{type(error).__name__}: {error}",
                }
            )
    return out


def attach_alone(record: Dict[str, Any], key: str, samples: List[float]) -> None:
    """Record a reference's alone ``samples`` next to its interleaved ``record[key]``: ``alone_<samples>``,
    ``alone_<key>`` and which of the two its ratios use (:data:`.timing.REFERENCE_FIELDS`)."""
    record["alone_" + key.replace("median", "samples")] = samples
    record["alone_" + key] = alone = median(samples)
    record[REFERENCE_FIELDS[key]] = "alone" if alone < record[key] else "interleaved"


# ---- the check -----------------------------------------------------------------------------------------
TIMED_KEYS = {"train": ("median",), "inference": ("median",), "stream": ("cell_median", "layer_median")}


def reference_checks(result: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Each reference time measured both ways: interleaved, alone, ``slowdown`` = interleaved / alone and
    ``slowed`` = slowdown > :data:`SLOWED_LIMIT`. Empty for a run without the alone pass."""
    rows = []
    for section, keys in TIMED_KEYS.items():
        for record in result.get(section, []):
            for key in keys:
                if record.get("alone_" + key) is not None:
                    rows.append(
                        check_row(record["subject"], section, record["shape"], key, record[key], record["alone_" + key])
                    )
    for record in result.get("scaling", []):
        for steps, interleaved, alone in zip(record["lengths"], record["medians"], record.get("alone_medians") or []):
            if alone is not None:
                rows.append(
                    check_row(
                        record["subject"], "scaling", f"{record['shape']} T={steps}", "median", interleaved, alone
                    )
                )
    return rows


def check_row(subject: str, section: str, shape: str, key: str, interleaved: float, alone: float) -> Dict[str, Any]:
    slowdown = interleaved / alone
    return {
        "subject": subject,
        "section": section,
        "shape": shape,
        "key": key,
        "interleaved": interleaved,
        "alone": alone,
        "slowdown": slowdown,
        "slowed": slowdown > SLOWED_LIMIT,
    }


def slowed_warning(row: Dict[str, Any]) -> str:
    return (
        f"{measured(row)} at {row['shape']} took {seconds(row['interleaved'])} interleaved with the other subjects, "
        f"{row['slowdown']:.2f}x its {seconds(row['alone'])} alone (more than {SLOWED_LIMIT:.2f}x): its neighbours "
        "slowed it; the ratios use the alone time"
    )


def measured(row: Dict[str, Any]) -> str:
    if row["key"] == "cell_median":
        return f"{row['subject']}Cell's streaming step"
    if row["key"] == "layer_median":
        return f"{row['subject']}'s one-step streaming call"
    return f"{row['subject']}'s {'inference pass' if row['section'] == 'inference' else 'training step'}"


def seconds(value: Optional[float]) -> str:
    """Seconds from 1 s (a loaded machine), milliseconds, or microseconds below 1 ms (the streaming steps)."""
    if value is None:
        return "-"
    if value >= 1.0:
        return f"{value:.4g} s"
    return f"{value * 1e3:.4g} ms" if value >= 1e-3 else f"{value * 1e6:.4g} µs"
