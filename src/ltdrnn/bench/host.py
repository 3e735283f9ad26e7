"""The host a benchmark ran on, and whether its numbers can be trusted: the CPU's model and vector
instruction sets, torch's BLAS and oneDNN versions, the load average before and after, and nn.LSTM's
efficiency against what it usually reaches on a host of the same kind.

nn.LSTM is the reference of every ratio, and its speed depends on the host far more than ours does
(oneDNN's LSTM used AVX-512 to twice its AVX2-era speed), so a run records what decides it and warns when
the machine was busy or when nn.LSTM ran far below its usual share of the sgemm peak
(``docs/benchmarks.md``, "Trusting a run").
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional, Sequence

import torch

#: The ``/proc/cpuinfo`` flags recorded with every run: the vector instruction sets that decide which
#: kernels torch's libraries and ours use.
ISA_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)

#: A run is quiet when the 1-minute load average, at its start and at its end, is at most the benchmark's
#: own torch threads plus this margin (a quiet 2-core host showed 1.2-1.9 at the starts of 2-thread runs,
#: its own threads; other jobs add about one per busy core).
QUIET_LOAD_MARGIN = 1.0

#: nn.LSTM's usual share of the sgemm peak, training step at pixel-MNIST shape (T = 784, d = 1, B = 128,
#: H = 128), by the host's ISA label: the lowest of three quiet runs at 2 threads (93-120 % on a
#: 2-core AVX-512 EPYC). Only hosts we have measured quietly are listed.
LSTM_USUAL_PEAK_FRACTION = {"AVX-512": 0.93}
#: Below this fraction of its usual share, nn.LSTM is "far below": every ratio to it is then too kind.
LSTM_FAR_BELOW = 0.75
#: The shape the usual shares were measured at.
LSTM_REFERENCE_SHAPE = "pixel_mnist"


def cpu_flags() -> List[str]:
    """The recorded :data:`ISA_FLAGS` the CPU has (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("flags"):
                    present = set(line.split(":", 1)[1].split())
                    return [flag for flag in ISA_FLAGS if flag in present]
    except OSError:
        pass
    return []


def isa_label(flags: Sequence[str]) -> str:
    """The widest vector instruction set among ``flags``: ``AMX``, ``AVX-512``, ``AVX2`` or ``other``."""
    if "amx_tile" in flags:
        return "AMX"
    if "avx512f" in flags:
        return "AVX-512"
    if "avx2" in flags:
        return "AVX2"
    return "other"


def library_versions() -> Dict[str, Optional[str]]:
    """torch's BLAS and oneDNN (from ``torch.__config__.show()``), and the ISA torch's own kernels use."""
    shown = torch.__config__.show()

    def line_with(pattern: str) -> Optional[str]:
        match = re.search(pattern, shown)
        return match.group(1).strip() if match else None

    blas = line_with(r"BLAS_INFO=(\w+)")
    return {
        "blas": blas,
        "blas_version": line_with(r"- (Intel\(R\) oneAPI Math Kernel Library[^\n]*|OpenBLAS[^\n]*)"),
        "onednn": line_with(r"- (Intel\(R\) MKL-DNN v[^\n]*|oneDNN v[^\n]*)"),
        "onednn_available": bool(torch.backends.mkldnn.is_available()),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


#: Environment variables that keep torch's libraries or our kernels below the CPU's widest instruction set
#: (to time another host's code paths on this one); a run records those that are set.
ISA_LIMITS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")


def isa_limits() -> Dict[str, str]:
    """The :data:`ISA_LIMITS` set in this process, and our kernels' ``-march`` when it is not ``native``."""
    from ..ops.kernels import kernel_arch

    limits = {name: os.environ[name] for name in ISA_LIMITS if os.environ.get(name)}
    if kernel_arch() != "native":
        limits["LTDRNN_KERNEL_ARCH"] = kernel_arch()
    return limits


def host_description() -> Dict[str, Any]:
    """The ``machine`` fields this module adds: ISA flags and label, what limits them, library versions."""
    flags = cpu_flags()
    return {"isa_flags": flags, "isa": isa_label(flags), "isa_limits": isa_limits(), **library_versions()}


def load_average() -> Optional[List[float]]:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def health(result: Dict[str, Any], lstm_flops: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Whether the run can be trusted: the quiet check and nn.LSTM's efficiency, with a warning for each
    problem. ``lstm_flops`` are nn.LSTM's flops records (``sections.flops_records``)."""
    machine = result["machine"]
    limit = machine["torch_threads"] + QUIET_LOAD_MARGIN
    loads = [machine.get("load_average"), machine.get("load_average_end")]
    busiest = max((load[0] for load in loads if load), default=None)
    warnings = []
    if busiest is not None and busiest > limit:
        warnings.append(
            f"the machine was not quiet: 1-minute load average {busiest:.1f} > {limit:.1f} (torch threads + "
            f"{QUIET_LOAD_MARGIN:g}); every time is too slow and the ratios to nn.LSTM are unreliable"
        )
    # a host whose libraries are kept below its ISA is no host of that kind: no usual share, no verdict
    usual = None if machine.get("isa_limits") else LSTM_USUAL_PEAK_FRACTION.get(machine.get("isa", ""))
    lstm = []
    for record in lstm_flops:
        fraction = record.get("train_peak_fraction")
        row = {
            "shape": record["shape"],
            "train_gflops": record.get("train_gflops"),
            "train_peak_fraction": fraction,
            "usual_peak_fraction": usual if record["shape"] == LSTM_REFERENCE_SHAPE else None,
        }
        row["far_below_usual"] = (
            None if fraction is None or row["usual_peak_fraction"] is None else fraction < LSTM_FAR_BELOW * usual
        )
        if row["far_below_usual"]:
            warnings.append(
                f"nn.LSTM ran at {100 * fraction:.0f}% of the sgemm peak at {record['shape']}, far below its usual "
                f"{100 * usual:.0f}% on {machine['isa']} hosts: it was slowed, or oneDNN's LSTM is weaker on this "
                "CPU; every ratio to it is kinder than against an nn.LSTM at its usual speed"
            )
        lstm.append(row)
    quiet = busiest is None or busiest <= limit
    return {"quiet": quiet, "quiet_load_limit": limit, "lstm": lstm, "warnings": warnings}
