"""Microcontrollers: does a generated C step fit one (a host-side check), and how does it run on one
(cross-compiled and simulated).

- :data:`MCUS` and :func:`fits`: the constants (flash) and the state plus stack (RAM) of a generated
  step against a chip, before the rest of the program. ``export(..., mcu=NAME)`` refuses a C step that
  does not fit (:func:`require_fit`).
- :func:`run_avr`: build the step with ``avr-gcc`` for an ATmega328P (``firmware/avr_main.c``) and run it
  in simavr (``firmware/simavr_harness.c``, built against ``libsimavr``): outputs, cycles per step,
  flash, static RAM and the measured stack.
- :func:`run_cortex_m4`: build it with ``arm-none-eabi-gcc`` for a Cortex-M4F (hard float) and run it on
  QEMU's ``mps2-an386`` board with semihosting (``firmware/arm_main.c``): outputs, instructions per step
  (QEMU counts instructions, not cycles: ``-icount shift=0`` makes its clock advance 1 ns per
  instruction, read through SysTick), flash, static RAM and the measured stack.

The toolchains are Debian's ``gcc-avr avr-libc simavr libsimavr-dev gcc-arm-none-eabi
libnewlib-arm-none-eabi qemu-system-arm``; :func:`missing` says which are absent.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

import numpy as np

from .c_export import CSource
from .step import ExportError

FIRMWARE = Path(__file__).with_name("firmware")
AVR_FLAGS = (
    "-mmcu=atmega328p",
    "-Os",
    "-std=c99",
    "-Wall",
    "-Wextra",
    "-pedantic",
    "-Werror",
    "-ffunction-sections",
    "-fdata-sections",
)  # fmt: skip  (Arduino's own optimisation and section flags; unused functions are dropped at link)
ARM_FLAGS = (
    "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-O2", "-std=c99", "-Wall",
    "-Wextra", "-pedantic", "-Werror", "-ffunction-sections", "-fdata-sections",
)  # fmt: skip
AVR_HZ = 16_000_000
QEMU_NS_PER_INSTRUCTION = 1  # -icount shift=0
MPS2_SYSCLK_HZ = 25_000_000  # SysTick's core clock on mps2-an385/an386
TOOLS = {
    "avr": {"avr-gcc": "gcc-avr", "avr-size": "binutils-avr", "cc": "gcc"},
    "cortex-m4": {"arm-none-eabi-gcc": "gcc-arm-none-eabi", "arm-none-eabi-size": "binutils-arm-none-eabi",
                  "qemu-system-arm": "qemu-system-arm"},
}  # fmt: skip


@dataclass(frozen=True)
class MCU:
    """A chip's flash and RAM in bytes, and what the simulated runs use."""

    name: str
    core: str
    flash: int
    ram: int
    note: str


MCUS: Dict[str, MCU] = {
    "atmega328p": MCU("atmega328p", "AVR, 8-bit, no FPU", 32 * 1024, 2 * 1024, "Arduino Uno/Nano; simavr"),
    "cortex-m4": MCU(
        "cortex-m4", "Cortex-M4F", 256 * 1024, 64 * 1024, "a mid-range M4F (e.g. STM32F401); QEMU mps2-an386"
    ),
}


def fits(costs: Dict[str, Optional[CSource]]) -> Dict[str, Dict[str, dict]]:
    """``{mcu: {"fp32" | "int8": {"flash", "ram", "fits"}}}`` for the generated steps in ``costs`` (constants
    against flash, state + stack estimate against RAM; the program's code and other data come on top)."""
    verdicts: Dict[str, Dict[str, dict]] = {}
    for mcu in MCUS.values():
        verdicts[mcu.name] = {}
        for kind, generated in costs.items():
            if generated is None:
                continue
            flash, ram = generated.flash_bytes, generated.ram_bytes
            verdicts[mcu.name][kind] = {"flash": flash, "ram": ram, "fits": flash <= mcu.flash and ram <= mcu.ram}
    return verdicts


def require_fit(verdicts, mcu: str, kind: str) -> None:
    """Raise :class:`ExportError` unless the ``kind`` C step fits ``mcu``."""
    verdict = verdicts.get(mcu, {}).get(kind)
    if verdict is None or verdict["fits"]:
        return
    chip = MCUS[mcu]
    raise ExportError(
        f"mcu {mcu}: the {kind} C step needs {verdict['flash']:,} B of constants (the chip has {chip.flash:,} B of "
        f"flash) and {verdict['ram']:,} B of RAM for its state and stack (the chip has {chip.ram:,} B); "
        "use a smaller model (hidden_size, rank, MIST's num_delays) or --int8"
    )


def missing(target: str) -> Optional[str]:
    """None when ``target``'s (``avr`` or ``cortex-m4``) tools are installed, else what is missing."""
    absent = [f"{tool} (Debian: {package})" for tool, package in TOOLS[target].items() if shutil.which(tool) is None]
    if target == "avr" and not Path("/usr/include/simavr/sim_avr.h").is_file():
        absent.append("libsimavr headers (Debian: libsimavr-dev)")
    if target == "cortex-m4" and not absent:
        probe = subprocess.run(["arm-none-eabi-gcc", "-print-file-name=libm.a"], capture_output=True, text=True)
        if probe.stdout.strip() in ("", "libm.a"):
            absent.append("newlib (Debian: libnewlib-arm-none-eabi)")
    return "; ".join(absent) or None


def _run(command, text: bool = True, **options) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in command], capture_output=True, text=text, **options)
    if result.returncode != 0:
        said = result.stderr or result.stdout
        said = said if text else said.decode(errors="replace")
        raise ExportError(f"{Path(str(command[0])).name} failed ({result.returncode}):\n{said[-2000:]}")
    return result


def _sections(tool: str, elf: Path) -> Dict[str, int]:
    text = _run([tool, "-A", elf]).stdout
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\.\w+)\s+(\d+)\s+\d+", text, re.M)}


def _write_model(work: Path, generated: CSource) -> None:
    (work / f"{generated.name}.h").write_text(generated.header)
    (work / f"{generated.name}.c").write_text(generated.source)


def _model_defines(generated: CSource):
    return [f"-DLTDRNN_MODEL={generated.name}", f"-DLTDRNN_MODEL_UPPER={generated.name.upper()}"]


def _value_dtype(generated: CSource):
    return np.dtype("<i2") if generated.int8 else np.dtype("<f4")


def _outputs(raw: np.ndarray, generated: CSource) -> np.ndarray:
    raw = raw.astype(np.float64)
    return raw / 2.0**generated.output_frac if generated.int8 else raw


def build_simavr_harness(work: Path) -> Path:
    """The simavr runner (``firmware/simavr_harness.c``) compiled for the host."""
    binary = work / "simavr_harness"
    if not binary.exists():
        _run(
            [
                "cc",
                "-O2",
                "-std=gnu99",
                "-I/usr/include/simavr",
                "-o",
                binary,
                FIRMWARE / "simavr_harness.c",
                "-lsimavr",
            ]
        )
    return binary


def run_avr(generated: CSource, inputs: np.ndarray, lengths=None, work: Optional[Path] = None) -> dict:
    """Run ``generated`` on a simulated ATmega328P at 16 MHz over ``inputs (N, T, d)`` (raw floats for a
    float step, int16 from ``NAME_quantise`` for the integer step), each sequence from ``NAME_init``.

    Returns ``{"outputs" (N, o) after each sequence's last step, "cycles_per_step", "cycles_max",
    "flash" (.text + .data), "static_ram" (.data + .bss), "stack" (the whole program's high-water mark),
    "step_stack" (below the test loop's frame), "ram" (static + stack)}``."""
    reason = missing("avr")
    if reason:
        raise ExportError(f"avr: missing {reason}")
    with tempfile.TemporaryDirectory(prefix="ltdrnn-avr-") as scratch:
        work = Path(work or scratch)
        _write_model(work, generated)
        elf = work / "firmware_avr.elf"
        _run(["avr-gcc", *AVR_FLAGS, f"-I{work}", f"-I{FIRMWARE}", *_model_defines(generated), "-o", elf,
              FIRMWARE / "avr_main.c", work / f"{generated.name}.c", "-Wl,--gc-sections", "-lm"])  # fmt: skip
        sections = _sections("avr-size", elf)
        dtype, n = _value_dtype(generated), inputs.shape[0]
        ends = [inputs.shape[1]] * n if lengths is None else [int(v) for v in lengths]
        stream = bytearray()
        for b in range(n):
            stream += b"r"
            for t in range(ends[b]):
                stream += b"s" + np.ascontiguousarray(inputs[b, t], dtype=dtype).tobytes()
            stream += b"o"
        stream += b"q"
        output = work / "output.bin"
        harness = build_simavr_harness(work)
        result = _run([harness, elf, "atmega328p", AVR_HZ, output], text=False, input=bytes(stream))
        counts = re.search(r"steps (\d+) cycles_total (\d+) cycles_max (\d+)", result.stdout.decode(errors="replace"))
        raw = output.read_bytes()
    width = generated_output_bytes(generated)
    if len(raw) != n * width + 4:  # the firmware stops at a step's status other than NAME_OK
        raise ExportError(f"avr: a step returned an error status after {(len(raw) - 4) // width} of {n} sequences")
    outputs = np.frombuffer(raw[: n * width], dtype=dtype).reshape(n, -1)
    stack, step_stack = np.frombuffer(raw[n * width : n * width + 4], dtype="<u2")
    steps = int(counts.group(1))
    static = sections.get(".data", 0) + sections.get(".bss", 0)
    return {
        "outputs": _outputs(outputs, generated),
        "steps": steps,
        "cycles_per_step": int(counts.group(2)) / max(steps, 1),
        "cycles_max": int(counts.group(3)),
        "us_per_step_16mhz": int(counts.group(2)) / max(steps, 1) / (AVR_HZ / 1e6),
        "flash": sections.get(".text", 0) + sections.get(".data", 0),
        "static_ram": static,
        "stack": int(stack),
        "step_stack": int(step_stack),
        "ram": static + int(stack),
    }


def generated_output_bytes(generated: CSource) -> int:
    return _value_dtype(generated).itemsize * int(re.search(r"_OUTPUT_SIZE (\d+)", generated.header).group(1))


def run_cortex_m4(
    generated: CSource, inputs: np.ndarray, lengths=None, work: Optional[Path] = None, timeout: float = 600
) -> dict:
    """Run ``generated`` on QEMU's Cortex-M4 (mps2-an386) over ``inputs (N, T, d)`` compiled into the
    firmware (as for :func:`run_avr`). Returns ``{"outputs", "instructions_per_step", "flash", "static_ram",
    "stack", "step_stack", "ram"}``."""
    reason = missing("cortex-m4")
    if reason:
        raise ExportError(f"cortex-m4: missing {reason}")
    with tempfile.TemporaryDirectory(prefix="ltdrnn-m4-") as scratch:
        work = Path(work or scratch)
        _write_model(work, generated)
        n, steps = inputs.shape[:2]
        ends = [steps] * n if lengths is None else [int(v) for v in lengths]
        values = np.asarray(inputs, dtype=_value_dtype(generated)).reshape(-1)
        items = (
            ", ".join(str(int(v)) for v in values) if generated.int8 else ", ".join(f"{float(v)!r}f" for v in values)
        )
        (work / "probe_data.h").write_text(
            f"#define PROBE_SEQUENCES {n}\n#define PROBE_STEPS {steps}\n"
            f"static const int16_t probe_lengths[{n}] = {{{', '.join(map(str, ends))}}};\n"
            f"static const INPUT_T probe_inputs[{values.size}] = {{{items}}};\n"
        )
        elf, model = work / "firmware_m4.elf", work / "model.o"
        # the model under the strict flags; the firmware (a vector table of addresses) without -pedantic
        _run(["arm-none-eabi-gcc", *ARM_FLAGS, f"-I{work}", "-c", "-o", model, work / f"{generated.name}.c"])
        firmware_flags = [f for f in ARM_FLAGS if f != "-pedantic"]
        _run(["arm-none-eabi-gcc", *firmware_flags, f"-I{work}", f"-I{FIRMWARE}", *_model_defines(generated),
              "-T", FIRMWARE / "mps2_an386.ld", "-nostartfiles", "--specs=nano.specs", "--specs=nosys.specs",
              "-Wl,--gc-sections",
              "-o", elf, FIRMWARE / "arm_main.c", model, "-lm"])  # fmt: skip
        sections = _sections("arm-none-eabi-size", elf)
        probe_bytes = values.size * _value_dtype(generated).itemsize + 2 * n
        result = _run(
            ["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-monitor", "none", "-serial", "none",
             "-semihosting-config", "enable=on,target=native", "-icount", "shift=0", "-kernel", elf],
            timeout=timeout,
        )  # fmt: skip
    said = result.stdout + result.stderr  # QEMU writes semihosting output to stderr
    lines = said.splitlines()
    outputs = np.stack(
        [
            np.frombuffer(bytes.fromhex(line[4:]), dtype=_value_dtype(generated))
            for line in lines
            if line.startswith("out ")
        ]
    )
    summary = re.search(r"ticks (\d+) steps (\d+) stack (\d+) step_stack (\d+)", said)
    if summary is None or len(outputs) != n:
        raise ExportError(f"qemu: the firmware did not finish:\n{said[-1000:]}")
    ticks, count, stack, step_stack = (int(v) for v in summary.groups())
    static = sections.get(".data", 0) + sections.get(".bss", 0)
    return {
        "outputs": _outputs(np.stack(outputs), generated),
        "steps": count,
        "instructions_per_step": ticks * (1e9 / MPS2_SYSCLK_HZ) / QEMU_NS_PER_INSTRUCTION / max(count, 1),
        # the compiled-in probe inputs are in .text too: the model's flash leaves them out
        "flash": sections.get(".text", 0) + sections.get(".data", 0) - probe_bytes,
        "static_ram": static,
        "stack": stack,
        "step_stack": step_stack,
        "ram": static + stack,
    }
