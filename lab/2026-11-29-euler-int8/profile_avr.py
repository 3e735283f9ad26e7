"""Where a generated C step spends its cycles on the simulated ATmega328P.

Builds EXPORT_DIR/NAME.c (an `ltdrnn export RUN --format c [--int8]` directory, or a hand-edited copy of
one) into the device tests' AVR firmware with -g, runs the first N test sequences of RUN through
simavr_profile.c (cycles per program address while a step runs), and prints the cycles per step by
function (the outermost symbol: the step itself, dot_q, mul_hi, libgcc's __mulhisi3 ...) and by source
line of the step (inlined code is charged to the line of the step it was inlined into).

    .venv/bin/python lab/2026-11-29-euler-int8/profile_avr.py RUN EXPORT_DIR [--sequences 2] [--lines 40]
"""

from __future__ import annotations

import argparse
import bisect
import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from ltdrnn.export import devices, load_trained
from ltdrnn.export.contract import contract
from ltdrnn.export.device_table import quantised, raw, test_inputs
from ltdrnn.export.step import StreamingStep

HERE = Path(__file__).resolve().parent


class Generated:  # what devices._write_model and quantised() read from a CSource
    def __init__(self, folder: Path) -> None:
        (self.source_path,) = [p for p in folder.glob("*.c")]
        self.name = self.source_path.stem
        self.source = self.source_path.read_text()
        self.header = self.source_path.with_suffix(".h").read_text()
        self.int8 = "_INTEGER 1" in self.header


def stream(inputs: np.ndarray, int8: bool) -> bytes:
    dtype = np.dtype("<i2") if int8 else np.dtype("<f4")
    data = bytearray()
    for b in range(inputs.shape[0]):
        data += b"r"
        for t in range(inputs.shape[1]):
            data += b"s" + np.ascontiguousarray(inputs[b, t], dtype=dtype).tobytes()
        data += b"o"
    return bytes(data + b"q")


def symbols(elf: Path):
    rows = []
    for line in subprocess.run(["avr-nm", "-n", "-S", str(elf)], capture_output=True, text=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tT":
            rows.append((int(parts[0], 16), parts[3]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run")
    parser.add_argument("export_dir")
    parser.add_argument("--sequences", type=int, default=2)
    parser.add_argument("--lines", type=int, default=40)
    args = parser.parse_args()
    generated = Generated(Path(args.export_dir))
    model, _, task = load_trained(args.run)
    agreed = contract(StreamingStep(model), task, measured=False)
    x, _, _ = test_inputs(task, args.sequences)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        x_raw = raw(x, agreed)
        inputs = quantised(generated, x_raw, work) if generated.int8 else x_raw
        (work / f"{generated.name}.h").write_text(generated.header)
        (work / f"{generated.name}.c").write_text(generated.source)
        elf = work / "firmware.elf"
        flags = [f"-DLTDRNN_MODEL={generated.name}", f"-DLTDRNN_MODEL_UPPER={generated.name.upper()}"]
        subprocess.run(
            ["avr-gcc", *devices.AVR_FLAGS, "-g", f"-I{work}", f"-I{devices.FIRMWARE}", *flags, "-o", str(elf),
             str(devices.FIRMWARE / "avr_main.c"), str(work / f"{generated.name}.c"), "-Wl,--gc-sections", "-lm"],
            check=True,
        )  # fmt: skip
        size = subprocess.run(["avr-size", "-A", str(elf)], capture_output=True, text=True).stdout
        text = int(re.search(r"^\.text\s+(\d+)", size, re.M).group(1))
        harness = work / "simavr_profile"
        subprocess.run(
            ["cc", "-O2", "-std=gnu99", "-I/usr/include/simavr", "-o", str(harness), str(HERE / "simavr_profile.c"),
             "-lsimavr"],
            check=True,
        )  # fmt: skip
        result = subprocess.run(
            [str(harness), str(elf), "atmega328p", "16000000", str(work / "out.bin"), str(work / "profile.txt")],
            input=stream(inputs, generated.int8),
            capture_output=True,
            check=True,
        )
        steps, total = (int(v) for v in re.search(rb"steps (\d+) cycles_total (\d+)", result.stdout).groups())
        profile = np.loadtxt(work / "profile.txt", dtype=np.int64).reshape(-1, 3)
        table = symbols(elf)
        starts = [a for a, _ in table]
        by_function: Counter = Counter()
        calls: Counter = Counter()
        entry = {address: name for address, name in table}
        for pc, cycles, hits in profile:
            by_function[table[bisect.bisect_right(starts, pc) - 1][1]] += cycles
            if pc in entry:
                calls[entry[pc]] += hits
        lines = subprocess.run(
            ["avr-addr2line", "-e", str(elf)], input="\n".join(hex(pc) for pc, _, _ in profile),
            capture_output=True, text=True,
        ).stdout.splitlines()  # fmt: skip
        by_line: Counter = Counter()
        for (pc, cycles, _), where in zip(profile, lines):
            name = Path(where.split(" ")[0]).name
            by_line[name] += cycles
    print(f"{generated.name}: {steps} steps, {total / steps:,.0f} cycles/step, .text {text} B")
    print("by function (cycles/step, share, calls/step):")
    for name, cycles in by_function.most_common():
        print(f"  {name:28s} {cycles / steps:12,.0f} {cycles / total:7.1%} {calls[name] / steps:9,.1f}")
    source = generated.source.splitlines()
    print("by source line (cycles/step, share):")
    for where, cycles in by_line.most_common(args.lines):
        file, _, number = where.partition(":")
        ours = file == generated.source_path.name and number.isdigit()
        text_line = source[int(number) - 1].strip()[:110] if ours else ""
        print(f"  {where:24s} {cycles / steps:10,.0f} {cycles / total:6.1%}  {text_line}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
