"""``ltdrnn bench``: the speed benchmark's command line (the run itself is :mod:`ltdrnn.bench`)."""

from __future__ import annotations

import json
import shlex

import torch

from ..bench.runner import DEFAULT_SECTIONS, SECTIONS
from ..bench.subjects import SHAPES, VARIANTS
from .common import with_command


def add_commands(sub) -> None:
    parser = sub.add_parser(
        "bench",
        help="speed of every registered cell against nn.LSTM / nn.GRU",
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
    parser.add_argument("--out", default="bench.json", help="JSON output path (default bench.json)")
    parser.add_argument("--markdown", help="markdown output path (default: printed only)")
    parser.add_argument(
        "--render",
        metavar="JSON",
        help="measure nothing: render the markdown of an earlier run's JSON (with --markdown to write it)",
    )
    with_command(parser, "bench", cmd_bench)


def cmd_bench(args) -> int:
    from ..bench import parse_options, registry_subjects, render_markdown, run, settings_from, split_names
    from ..bench.runner import enable_crash_traceback

    enable_crash_traceback()
    if args.render:
        with open(args.render) as handle:
            result = json.load(handle)
    else:
        settings = settings_from(args)
        subjects = registry_subjects(split_names(args.cells) if args.cells else None, parse_options(args.option))
        result = run(settings, subjects, "ltdrnn " + shlex.join(args.argv))
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)
    markdown = render_markdown(result)
    if args.markdown:
        with open(args.markdown, "w") as handle:
            handle.write(markdown + "\n")
    print(markdown)
    return 0
