"""The run of ``ltdrnn bench``: its settings from the command's options, and the chosen sections (the
command line itself is :mod:`ltdrnn.cli.bench`)."""

from __future__ import annotations

import ast
import faulthandler
import io
import re
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any, Dict, List, Sequence

from .alone import reference_checks, slowed_warning
from .host import health, load_average
from .probes import measure_malloc, measure_memory
from .profile import measure_profile
from .report import evaluate_targets
from .sections import flops_records, measure_scaling, measure_sequences, measure_skip, measure_stream
from .subjects import LSTM, SHAPES, Shape, Subject
from .timing import Settings, machine_description, matmul_peak, prepare_process, progress

SCHEMA = "ltdrnn.bench/2"
SECTIONS = ("train", "inference", "stream", "memory", "scaling", "flops", "skip", "profile", "malloc")
DEFAULT_SECTIONS = ("train", "inference", "stream", "memory", "scaling", "flops", "skip")


QUICK = {"shapes": "adding", "repeats": 3, "warmup": 2, "lengths": "250,1000", "skip_fractions": "0,0.5,0.9"}
FULL = {
    "shapes": ",".join(SHAPES),
    "repeats": 5,
    "warmup": 2,
    "lengths": "250,1000,4000",
    "skip_fractions": "0,0.25,0.5,0.75,0.9",
}


def parse_options(items: Sequence[str]) -> Dict[str, Dict[str, Any]]:
    """``["tarnn.K=1", "tarnn[K=1].backend=reference"]`` -> ``{"tarnn": {"K": 1}, "tarnn[K=1]": {...}}``."""
    options: Dict[str, Dict[str, Any]] = {}
    for item in items:
        match = re.fullmatch(r"(?P<name>[\w.]+?(\[[^\]]*\])?)\.(?P<key>\w+)=(?P<value>.*)", item)
        if match is None:
            raise ValueError(f"--option: expected NAME.KEY=VALUE (e.g. tarnn.K=1), got {item!r}")
        options.setdefault(match["name"], {})[match["key"]] = literal(match["value"])
    return options


def split_names(text: str) -> List[str]:
    """``"srnn,irnn[K=1,lowrank]"`` -> ``["srnn", "irnn[K=1,lowrank]"]``: commas inside brackets stay."""
    return [name.strip() for name in re.split(r",(?![^\[]*\])", text) if name.strip()]


def literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_shapes(text: str) -> List[Shape]:
    shapes = []
    for name in filter(None, (part.strip() for part in text.split(","))):
        custom = re.fullmatch(r"(\d+)x(\d+)", name)
        if name in SHAPES:
            shapes.append(SHAPES[name])
        elif custom:
            shapes.append(Shape(name, int(custom[1]), int(custom[2])))
        else:
            raise ValueError(f"--shapes: unknown shape {name!r}; expected {', '.join(SHAPES)} or TxD (e.g. 100x3)")
    return shapes


def int_list(flag: str, text: str) -> List[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise ValueError(f"{flag}: expected positive integers, got {text!r}")
    return values


def fraction_list(text: str) -> List[float]:
    values = [float(v) for v in text.split(",") if v.strip()]
    if not values or not all(0.0 <= v <= 1.0 for v in values):
        raise ValueError(f"--skip-fractions: expected numbers in [0, 1], got {text!r}")
    return values


def settings_from(args: Any) -> Settings:
    """The settings of a run from the options of ``ltdrnn bench`` (any object with their attributes:
    ``quick``, ``sections``, ``shapes``, ``batch``, ...); ValueError names the option."""
    preset = QUICK if args.quick else FULL
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        raise ValueError(f"--sections: unknown {', '.join(unknown)}; expected some of {', '.join(SECTIONS)}")
    for flag, value in (
        ("--batch", args.batch),
        ("--hidden", args.hidden),
        ("--threads", args.threads),
        ("--stream-steps", args.stream_steps),
    ):
        if value <= 0:
            raise ValueError(f"{flag}: expected a positive integer, got {value}")
    repeats = preset["repeats"] if args.repeats is None else args.repeats
    warmup = preset["warmup"] if args.warmup is None else args.warmup
    if repeats <= 0 or warmup < 0:
        raise ValueError(f"--repeats/--warmup: expected repeats >= 1 and warmup >= 0, got {repeats}, {warmup}")
    return Settings(
        shapes=parse_shapes(args.shapes or preset["shapes"]),
        batch=args.batch,
        hidden=args.hidden,
        repeats=repeats,
        warmup=warmup,
        lengths=int_list("--lengths", args.lengths or preset["lengths"]),
        scaling_shape=parse_shapes(args.scaling_shape)[0],
        stream_steps=args.stream_steps,
        skip_fractions=fraction_list(args.skip_fractions or preset["skip_fractions"]),
        sections=sections,
        threads=args.threads,
        malloc_tuning=args.malloc_tuning,
        alone_reference=args.alone_reference,
    )


def run(settings: Settings, subjects: Sequence[Subject], command: str) -> Dict[str, Any]:
    """Every selected section; returns the JSON-ready result (see docs/benchmarks.md for the schema)."""
    malloc_active = prepare_process(settings.threads, settings.malloc_tuning)
    errors: List[Dict[str, Any]] = []
    peak = matmul_peak(settings.threads)
    described = {}
    for subject in subjects:
        try:
            described[subject.name] = subject.describe(settings.shapes[0].input_size, settings.hidden)
        except Exception as error:
            subject.error = f"{type(error).__name__}: {error}"
            described[subject.name] = {
                "cell": subject.cell,
                "options": subject.options,
                "family": subject.family,
                "aliases": subject.aliases,
                "error": subject.error,
            }
    result: Dict[str, Any] = {
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "machine": machine_description(settings.threads, peak, malloc_active),
        "settings": {
            **asdict(settings),
            "shapes": [s.name for s in settings.shapes],
            "shape_sizes": {s.name: asdict(s) for s in settings.shapes},
            "scaling_shape": settings.scaling_shape.name,
        },
        "subjects": described,
        "errors": errors,
    }
    timings = measure_sequences(subjects, settings, errors)
    result.update(timings)
    if "stream" in settings.sections:
        result["stream"] = measure_stream(subjects, settings, errors)
    if "memory" in settings.sections:
        result["memory"] = measure_memory(subjects, settings, errors)
    if "scaling" in settings.sections:
        result["scaling"] = measure_scaling(subjects, settings, errors)
    if "flops" in settings.sections:
        result["flops"] = flops_records(subjects, settings, timings, peak["gflops"], errors)
    if "skip" in settings.sections:
        result["skip"] = measure_skip(settings, errors)
    if "profile" in settings.sections:
        result["profile"] = measure_profile(subjects, settings, errors)
    if "malloc" in settings.sections:
        result["malloc"] = measure_malloc(subjects, settings, errors)
    for subject in subjects:
        if subject.error is not None:
            errors.append({"subject": subject.name, "section": "all", "shape": "-", "error": subject.error})
    result["targets"] = evaluate_targets(result)
    # quiet? nn.LSTM as usual (bench/host.py)? references slowed by their neighbours (bench/alone.py)?
    result["health"] = assess(result, subjects, settings, errors)
    for warning in result["health"]["warnings"]:
        progress(f"WARNING: {warning}")
    return result


def enable_crash_traceback() -> None:
    """A crash inside a cell's native kernel cannot be caught; at least print where it happened."""
    try:
        faulthandler.enable()
    except io.UnsupportedOperation:  # stderr without a file descriptor (captured, e.g. by pytest)
        pass


def assess(result: Dict[str, Any], subjects, settings, errors: List[Dict[str, Any]]) -> Dict[str, Any]:
    """:func:`.host.health` of a finished run: nn.LSTM's flops records are the ``flops`` section's, or computed
    from its training medians when that section did not run. Records the load average at the end, and
    compares each reference's interleaved time with its time alone (``bench/alone.py``)."""
    result["machine"]["load_average_end"] = load_average()
    records = [r for r in result.get("flops", []) if r["subject"] == LSTM]
    if not records and result.get("train"):
        timings = {"train": result["train"], "inference": result.get("inference", [])}
        lstm = [s for s in subjects if s.name == LSTM]
        records = flops_records(lstm, settings, timings, result["machine"]["matmul_peak"]["gflops"], errors)
    verdict = health(result, records)
    verdict["references"] = reference_checks(result)
    verdict["warnings"] += [slowed_warning(row) for row in verdict["references"] if row["slowed"]]
    return verdict
