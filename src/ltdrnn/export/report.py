"""The export report: which targets an export meets, and the report as a short markdown page."""

from __future__ import annotations

from typing import Any, Dict, Optional

from ..results.report import markdown_table

TARGETS = {"max_abs_error": 1e-5, "agreement": 1.0, "int8_agreement": 0.99, "c_speedup": 10.0}


def targets(report) -> Dict[str, Optional[bool]]:
    """Which targets this export meets (None: not measured or not applicable)."""
    parity, latency = report["parity"] or {}, report["latency_us"] or {}
    error, agreement = parity.get("max_abs_error"), parity.get("agreement")
    relative = parity.get("max_rel_error")
    speedup = latency.get("c_speedup_vs_torch_step")
    fp32 = not report["int8"]
    return {
        "fp32_max_abs_error<=1e-5": None if not fp32 or error is None else error <= TARGETS["max_abs_error"],
        "fp32_max_rel_error<=1e-5": None if not fp32 or relative is None else relative <= TARGETS["max_abs_error"],
        "fp32_agreement=100%": None if not fp32 or agreement is None else agreement >= TARGETS["agreement"],
        "int8_agreement>=99%": None if fp32 or agreement is None else agreement >= TARGETS["int8_agreement"],
        "c_step>=10x_faster": None if speedup is None else speedup >= TARGETS["c_speedup"],
    }


def summary(report: Dict[str, Any]) -> str:
    """The report as a short markdown page."""
    sizes, weights, memory = report["sizes"], report["weight_bytes"], report["memory_bytes"]
    kind = ", int8" if report["int8"] else ""
    lines = [
        f"# Export of {'+'.join(report['cells'])} ({report['format']}{kind})",
        "",
        f"Source: `{report['source']}`; task: {report['task']}; "
        f"d={sizes['input']}, H={sizes['hidden']}, outputs={sizes['outputs']}, state={sizes['state']} values.",
        "",
        "Files: " + ", ".join(f"`{name}` ({size:,} B)" for name, size in report["files"].items()),
        "",
        f"Weights: {weights['fp32']:,} B fp32"
        + (f", {weights['int8']:,} B int8" if weights["int8"] else "")
        + f"; state {memory['state']:,} B"
        + (f", scratch {memory['scratch']:,} B" if memory["scratch"] else ""),
        "",
    ]
    lines += _c_costs(report)
    parity, measures = report["parity"], []
    if parity:
        measures += [
            ["test sequences", parity["sequences"]],
            [
                "max abs error vs eager",
                f"{parity['max_abs_error']:.3g} (largest output "
                f"{parity['output_scale']:.3g}; relative {parity['max_rel_error']:.2g})",
            ],
            ["max abs error vs eager on the reference path", f"{parity['max_abs_error_vs_reference']:.3g}"],
            ["eager float32 vs float64 (rounding)", f"{parity['eager_rounding_error']:.3g}"],
        ]
        if parity["agreement"] is not None:
            measures += [
                ["prediction agreement", f"{100 * parity['agreement']:.2f}%"],
                [
                    "accuracy eager / export",
                    f"{100 * parity['accuracy_eager']:.2f}% / "
                    f"{100 * parity['accuracy_export']:.2f}% (delta {100 * parity['accuracy_delta']:+.2f} pt)",
                ],
            ]
    for key, value in (report["latency_us"] or {}).items():
        if key.endswith("speedup_vs_torch_step"):
            measures.append(["C step speed-up over Recurrent.step", f"{value:.1f}x"])
        else:
            measures.append([f"latency per step, batch 1: {key}", f"{value:.2f} us"])
    if measures:
        lines.append(markdown_table([["measure", "value"], *measures]))
    met = [f"{k}: {'yes' if v else 'NO'}" for k, v in (report["targets"] or {}).items() if v is not None]
    if met:
        lines += ["", "Targets: " + "; ".join(met)]
    lines += _contract(report.get("contract") or {})
    if report["notes"]:
        lines += ["", "Notes: " + "; ".join(report["notes"])]
    return "\n".join(lines) + "\n"


def _c_costs(report) -> list:
    """The generated C's flash, RAM and stack, and which microcontrollers it fits (host-side check)."""
    costs = report.get("c") or {}
    rows = [
        [kind, f"{c['flash_bytes']:,}", f"{c['state_bytes']:,}", f"{c['stack_bytes']:,}", f"{c['ram_bytes']:,}"]
        for kind, c in costs.items()
        if c
    ]
    if not rows:
        return []
    lines = [markdown_table([["C step", "flash (constants)", "state", "stack (estimate)", "RAM"], *rows]), ""]
    fits = report.get("fits") or {}
    for mcu, kinds in fits.items():
        said = ", ".join(f"{kind} {'fits' if verdict['fits'] else 'does NOT fit'}" for kind, verdict in kinds.items())
        lines.append(f"- {mcu}: {said} (constants and RAM against the chip, before code)")
    return lines + [""]


def _contract(contract) -> list:
    if not contract:
        return []
    lines = ["", "Contract:", "", f"- input: {contract['input']['text']}", f"- outputs: {contract['outputs']}"]
    lines.append(f"- reset: {contract['reset'].replace('NAME_', '')}")
    if contract.get("validated"):
        lines.append(f"- validated: {contract['validated']}")
    return lines
