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
        "--option tarnn.K=1 or --option 'tarnn[K=1].backend=reference'; repeatable",
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
    parser.add_argument(
        "--no-alone-reference",
        dest="alone_reference",
        action="store_false",
        help="time nn.LSTM and nn.GRU only interleaved with the cells: quicker, but their neighbours may slow them "
        "(default: also each alone in a fresh process per section and shape, and the ratios use the faster time)",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        choices=("cpu", "cuda"),
        help="cpu (default): the CPU benchmark above; cuda: the source cells' Triton paths against cuDNN on a GPU",
    )
    parser.add_argument("--hidden-sizes", default="128,256,512", help="--device cuda: hidden sizes")
    parser.add_argument(
        "--loop-hidden-sizes", default="128", help="--device cuda: hidden sizes that also time each cell's PyTorch loop"
    )
    parser.add_argument(
        "--tf32",
        action="store_true",
        help="--device cuda: float32 products on TF32 tensor cores (torch.backends.cuda.matmul.allow_tf32, which the "
        "Triton kernels follow; cuDNN's RNNs use TF32 by default)",
    )
    parser.add_argument(
        "--time-budget", type=float, default=300.0, help="--device cuda: seconds after which no measurement starts"
    )
    parser.add_argument("--out", default="bench.json", help="JSON output path (default bench.json)")
    parser.add_argument("--markdown", help="markdown output path (default: printed only)")
    parser.add_argument(
        "--render",
        metavar="JSON",
        help="measure nothing: render the markdown of an earlier run's JSON (with --markdown to write it)",
    )
    with_command(parser, "bench", cmd_bench)


def check_schema(result, path: str) -> None:
    """ValueError naming ``--render`` unless ``result`` is a run of a schema this version renders."""
    from ..bench import SCHEMA
    from ..bench.gpu import SCHEMA as GPU_SCHEMA

    schema = result.get("schema") if isinstance(result, dict) else None
    if schema not in (SCHEMA, GPU_SCHEMA):
        raise ValueError(
            f"--render: expected a benchmark result of schema {SCHEMA!r} or {GPU_SCHEMA!r}, got {schema!r} in "
            f"{path}; render an older run with the ltdrnn version that made it"
        )


def cmd_bench(args) -> int:
    from ..bench import parse_options, registry_subjects, render_markdown, run, settings_from, split_names
    from ..bench.runner import enable_crash_traceback

    enable_crash_traceback()
    if args.render:
        with open(args.render) as handle:
            result = json.load(handle)
        check_schema(result, args.render)
    elif args.device == "cuda":
        from ..bench import gpu

        result = gpu.run_gpu(gpu.gpu_settings(args), "ltdrnn " + shlex.join(args.argv))
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)
    else:
        settings = settings_from(args)
        subjects = registry_subjects(split_names(args.cells) if args.cells else None, parse_options(args.option))
        result = run(settings, subjects, "ltdrnn " + shlex.join(args.argv))
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)
    from ..bench.gpu import SCHEMA as GPU_SCHEMA
    from ..bench.gpu import render

    if result.get("schema") == GPU_SCHEMA:
        markdown = render(result)
    else:
        markdown = render_markdown(result)
    if args.markdown:
        with open(args.markdown, "w") as handle:
            handle.write(markdown + "\n")
    print(markdown)
    return 0
