"""The ``ltdrnn`` command, the one place the package parses command lines.

ltdrnn run [--group main] [--seeds ...] [--jobs N]    the comparison: every preset of a group, table + report
ltdrnn train PRESET|FILE [KEY=VALUE ...] [--set KEY=VALUE] [--resume] [--run-dir DIR]
ltdrnn eval RUN_DIR|CHECKPOINT [--split test]
ltdrnn report [--store DB] [--out report] [--study NAME]
ltdrnn plot RUN_DIR [--kinds curves,lag,mask,beta,unshifted]
ltdrnn list cells|tasks|presets
ltdrnn export RUN_DIR|CHECKPOINT --format onnx|pt2|c [--int8] [--out DIR] [--mcu atmega328p|cortex-m4]
ltdrnn device-table RUN_DIR... [--sequences N] [--json FILE]
ltdrnn bench [--cells ...] [--quick]                  speed against nn.LSTM / nn.GRU
ltdrnn sweep run|report|list                          Optuna sweeps
ltdrnn reproduce list|run|report|check                the papers' claims -> REPRODUCTION.md
ltdrnn ucr sets|run|report                            the UCR/UEA benchmark

One module per command group (:mod:`.harness`: run, train, eval, report, plot, list; :mod:`.export`,
:mod:`.bench`, :mod:`.sweep`, :mod:`.reproduce`, :mod:`.ucr`); the flags they share are defined once in
:mod:`.common`. The application packages never import this one.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from . import bench, export, harness, reproduce, sweep, ucr

GROUPS = (harness, export, bench, sweep, reproduce, ucr)


def main(argv: Optional[List[str]] = None) -> int:
    """Run one command; a user mistake ends as one line on stderr and exit code 2, Ctrl-C as 130.
    Usage errors are argparse's (usage and message on stderr, SystemExit 2)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    args.argv = argv  # the command line as given (the benchmark records it)
    name = getattr(args, "command_name", "")
    if getattr(args, "handler", None) is None:
        args.help_parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print(f"ltdrnn {name}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        if not is_user_error(error):
            raise
        message = " ".join(str(error).split()) or type(error).__name__
        print(f"ltdrnn {name}: {message}", file=sys.stderr)
        return 2


def is_user_error(error: BaseException) -> bool:
    """Whether ``error`` reports bad input or a bad environment rather than a bug: value errors (which
    name the parameter), files that cannot be read or written, missing optional extras, and the
    package's own errors (a stored run, an unwritable results store). Bugs keep their traceback."""
    return isinstance(error, (ValueError, OSError, ImportError)) or type(error).__module__.split(".")[0] == "ltdrnn"


def parse(argv: List[str]) -> argparse.Namespace:
    """Parse a command line; a group may take words the parser leaves over (``train``'s KEY=VALUE
    overrides after its options: argparse alone stops collecting a positional list at the first option)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    extra = harness.after_parsing(args, extra)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ltdrnn", description="Recurrent cells for long-term dependencies: train, evaluate, compare and report."
    )
    parser.set_defaults(handler=None, help_parser=parser, command_name="")
    sub = parser.add_subparsers(metavar="COMMAND")
    for group in GROUPS:
        group.add_commands(sub)
    return parser
