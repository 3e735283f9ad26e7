"""``ltdrnn bench``: the command line, the settings it makes, and the run of the chosen sections."""

from __future__ import annotations

import argparse
import ast
import faulthandler
import io
import json
import re
import shlex
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional, Sequence

import torch

from .gpu import add_arguments as add_gpu_arguments
from .gpu import main_gpu
from .probes import measure_malloc, measure_memory, memory_probe, timing_probe
from .profile import measure_profile
from .report import evaluate_targets, render_markdown
from .sections import flops_records, measure_scaling, measure_sequences, measure_skip, measure_stream
from .subjects import SHAPES, VARIANTS, Shape, Subject, registry_subjects
from .timing import Settings, machine_description, matmul_peak, prepare_process

SCHEMA = "ltdrnn.bench/1"
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ltdrnn bench",
        description="Speed of every registered cell against nn.LSTM / nn.GRU: training "
        "step, inference, streaming latency, memory, scaling in T, achieved GFLOP/s, SA-RNN skipping.",
    )
    parser.add_argument(
        "--cells",
        help="comma-separated registry names and/or variants "
        f"({', '.join(v.name for v in VARIANTS)}); default: all. nn.LSTM and nn.GRU always run",
    )
    parser.add_argument(
        "--shapes",
        help="comma-separated shapes: "
        + ", ".join(f"{s.name} (T={s.steps}, d={s.input_size})" for s in SHAPES.values())
        + ", or TxD (e.g. 100x3); default: all four (--quick: adding)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fast subset: adding shape, 3 repeats, 2 warm-ups, T in 250,1000 for scaling, skip fractions 0,0.5,0.9",
    )
    parser.add_argument("--batch", type=int, default=128, help="batch size B (default 128)")
    parser.add_argument("--hidden", type=int, default=128, help="hidden size H (default 128)")
    parser.add_argument("--repeats", type=int, help="timed runs per measurement (default 5; --quick 3)")
    parser.add_argument("--warmup", type=int, help="untimed runs first (default 2, also with --quick)")
    parser.add_argument("--lengths", help="T values of the scaling section (default 250,1000,4000)")
    parser.add_argument(
        "--scaling-shape", default="adding", help="shape whose d the scaling and skip sections use (default adding)"
    )
    parser.add_argument("--stream-steps", type=int, default=100, help="steps per streaming sample (default 100)")
    parser.add_argument("--skip-fractions", help="SA-RNN forced skip fractions (default 0,0.25,0.5,0.75,0.9)")
    parser.add_argument(
        "--sections",
        default=",".join(DEFAULT_SECTIONS),
        help=f"comma-separated subset of {', '.join(SECTIONS)} (default: all but profile and malloc)",
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME.KEY=VALUE",
        help="constructor option for a cell (all its subjects) or one subject, e.g. "
        "--option tarnn.K=1 or --option 'tarnn[K=1].impl=reference'; repeatable",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=torch.get_num_threads(),
        help=f"torch threads (default {torch.get_num_threads()})",
    )
    parser.add_argument(
        "--no-malloc-tuning",
        dest="malloc_tuning",
        action="store_false",
        help="keep glibc's default malloc settings (default: apply MALLOC_MMAP_MAX_=0 and a "
        "large MALLOC_TRIM_THRESHOLD_ through mallopt at start-up)",
    )
    add_gpu_arguments(parser)
    parser.add_argument("--out", default="bench.json", help="JSON output path (default bench.json)")
    parser.add_argument("--markdown", help="markdown output path (default: printed only)")
    parser.add_argument(
        "--render",
        metavar="JSON",
        help="measure nothing: render the markdown of an earlier run's JSON (with --markdown to write it)",
    )
    return parser


def parse_options(items: Sequence[str]) -> Dict[str, Dict[str, Any]]:
    """``["tarnn.K=1", "tarnn[K=1].impl=reference"]`` -> ``{"tarnn": {"K": 1}, "tarnn[K=1]": {...}}``."""
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


def settings_from(args: argparse.Namespace) -> Settings:
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
    return result


def enable_crash_traceback() -> None:
    """A crash inside a cell's native kernel cannot be caught; at least print where it happened."""
    try:
        faulthandler.enable()
    except io.UnsupportedOperation:  # stderr without a file descriptor (captured, e.g. by pytest)
        pass


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for kind, probe in (("memory", memory_probe), ("timing", timing_probe)):
        if argv[:1] == [f"--{kind}-probe"]:
            print(json.dumps(probe(json.loads(argv[1]))))
            return 0
    parser = build_parser()
    args = parser.parse_args(argv)
    enable_crash_traceback()
    if args.device == "cuda" and not args.render:
        return main_gpu(args, parser, argv)
    if args.render:
        with open(args.render) as handle:
            result = json.load(handle)
    else:
        try:
            settings = settings_from(args)
            cells = split_names(args.cells) if args.cells else None
            subjects = registry_subjects(cells, parse_options(args.option))
        except ValueError as error:
            parser.error(str(error))
        result = run(settings, subjects, "ltdrnn bench " + shlex.join(argv))
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)
    markdown = render_markdown(result)
    if args.markdown:
        with open(args.markdown, "w") as handle:
            handle.write(markdown + "\n")
    print(markdown)
    return 0
