"""``ltdrnn export``: a trained run's streaming step as ONNX, torch.export or C, with its parity and latency."""

from __future__ import annotations

import sys

from .common import with_command


def add_commands(sub) -> None:
    export = sub.add_parser(
        "export",
        help="export a trained run's streaming step (ONNX, torch.export, C) and measure its parity and latency",
    )
    export.add_argument("path", help="run directory or checkpoint file")
    export.add_argument("--format", required=True, choices=("onnx", "pt2", "c"))
    export.add_argument(
        "--int8", action="store_true", help="c: integer step (int8 weights, int16 values); onnx: int8 weights"
    )
    export.add_argument("--out", help="export directory (default: RUN_DIR/export-FORMAT[-int8])")
    export.add_argument("--name", help="file base name and C symbol prefix (default: ltdrnn_CELL)")
    export.add_argument("--no-measure", action="store_true", help="write the files only (no parity/latency)")
    export.add_argument("--latency-steps", type=int, default=20000, help="timed steps per latency figure")
    export.add_argument(
        "--mcu", choices=("atmega328p", "cortex-m4"), help="c: refuse a step that does not fit this microcontroller"
    )
    export.add_argument(
        "--adc-scale",
        help="c --int8: the sensor's units per ADC count (one number, or one per channel, comma-separated): "
        "adds NAME_quantise_adc, integer counts to the step's input without float",
    )
    export.add_argument(
        "--adc-offset",
        help="c --int8: the sensor's units at count 0 (default 0; with --adc-scale); a list that starts with a "
        "minus sign needs '=': --adc-offset=-50,-100",
    )
    with_command(export, "export", cmd_export)
    table = sub.add_parser(
        "device-table",
        help="run trained runs' C steps (fp32, int8) on a simulated ATmega328P and Cortex-M4; print the table",
    )
    table.add_argument("runs", nargs="+", help="run directories")
    table.add_argument("--sequences", type=int, help="the first N test sequences (default: all)")
    table.add_argument("--json", help="write every number to this file")
    with_command(table, "device-table", cmd_device_table)


def cmd_export(args) -> int:
    from ..export import ExportError, export, summary

    try:
        report = export(
            args.path,
            args.format,
            args.out,
            int8=args.int8,
            name=args.name,
            measure=not args.no_measure,
            latency_steps=args.latency_steps,
            mcu=args.mcu,
            adc=_adc(args.adc_scale, args.adc_offset),
        )
    except ExportError as error:
        print(f"ltdrnn export: {error}", file=sys.stderr)
        return 2
    print(summary(report))
    print(f"written: {report['out']} (report.json, report.md)")
    return 0


def _adc(scale, offset):
    """``{"scale", "offset"}`` of ``--adc-scale`` and ``--adc-offset`` (comma-separated numbers), or None."""
    from ..export import ExportError

    if scale is None:
        if offset is not None:
            raise ExportError("adc offset (--adc-offset): given without --adc-scale, the units per count")
        return None
    mapping = {}
    for key, option, text in (("scale", "--adc-scale", scale), ("offset", "--adc-offset", offset or "0")):
        try:
            mapping[key] = [float(v) for v in text.split(",")]
        except ValueError:
            raise ExportError(f"adc {key} ({option}): expected comma-separated numbers, got {text!r}") from None
    return mapping


def cmd_device_table(args) -> int:
    import json
    from pathlib import Path

    from ..export import ExportError
    from ..export.device_table import markdown, measure_runs

    if args.sequences is not None and args.sequences < 1:
        print(f"ltdrnn device-table: sequences: expected a positive integer, got {args.sequences}", file=sys.stderr)
        return 2
    try:
        rows = measure_runs(args.runs, args.sequences)
    except ExportError as error:
        print(f"ltdrnn device-table: {error}", file=sys.stderr)
        return 2
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    print(markdown(rows))
    return 0
