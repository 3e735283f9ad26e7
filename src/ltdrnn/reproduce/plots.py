"""The plots of a claim: validation curves, gradient norm versus lag, the gradient ratio during training.
Each cell has one colour (``cell_colour``); further runs of a cell get another line style."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List

from .claims import Claim
from .measurements import Measurements


def make_plots(claim: Claim, measurements: Measurements, root: Path) -> List[Path]:
    """Learning curves of the claim's runs, and the plots of its analyses."""
    import torch

    from ..analysis import plots
    from ..analysis.plots import cell_colour, gradient_lag_plot

    paths = []
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    drawn = False
    style = _line_styles(measurements.rows)
    for label, row in measurements.rows.items():
        points = [
            (h["step"], h["val_metric"])
            for h in row.get("history") or []
            if h.get("val_metric") is not None and math.isfinite(h["val_metric"])
        ]
        if points:
            ax.plot(
                *zip(*points),
                marker=".",
                label=label,
                color=cell_colour(row.get("cell") or label),
                linestyle=style[label],
            )
            drawn = True
    if drawn:
        first = next(iter(measurements.rows.values()))
        baseline = (first.get("metrics") or {}).get("baseline")
        if (
            baseline is not None
            and len({(r.get("metrics") or {}).get("baseline") for r in measurements.rows.values()}) == 1
        ):
            ax.axhline(baseline, color="grey", linestyle="--", linewidth=1, label="trivial baseline")
        ax.set_xlabel("optimiser step")
        ax.set_ylabel(f"validation {first.get('metric_name') or 'metric'}")
        ax.set_title(f"{claim.id}: validation curves")
        ax.legend(fontsize=7)
        paths.append(plots.save_figure(fig, root / f"{claim.id}-curves.png"))
    else:
        plt.close(fig)
    curves = {
        label: torch.tensor(a["gradient_vs_lag"]["curve"])
        for label, a in measurements.analyses.items()
        if "gradient_vs_lag" in a
    }
    if curves:
        paths.append(
            gradient_lag_plot(
                curves,
                root / f"{claim.id}-gradient-lag.png",
                title=f"{claim.id}: mean ||dL/dstate_(T-tau)|| (100 examples)",
            )
        )
    traces = {
        label: a["jacobian_ratio"]["trace"] for label, a in measurements.analyses.items() if "jacobian_ratio" in a
    }
    if traces:
        fig, ax = plt.subplots(figsize=(6, 3.4))
        for label, trace in traces.items():
            row = measurements.rows.get(label, {})
            ax.plot(
                [t["step"] for t in trace],
                [max(t["ratio"], 1e-30) for t in trace],
                marker=".",
                label=label,
                color=cell_colour(row.get("cell") or label),
                linestyle=style.get(label, "-"),
            )
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_yscale("log")
        ax.set_xlabel("iteration")
        ax.set_ylabel("||dh_T/dh_1|| / ||dh_T/dh_(T-1)||\n(float32 underflow drawn at 1e-30)", fontsize=8)
        ax.set_title(f"{claim.id}: gradient ratio during training")
        ax.legend(fontsize=7)
        paths.append(plots.save_figure(fig, root / f"{claim.id}-jacobian-ratio.png"))
    return paths


def _line_styles(rows: Dict[str, Dict[str, Any]]) -> Dict[str, str]:
    """A line style per run label: the runs of one cell share its colour (``cell_colour``), so the
    second, third, ... run of a cell (another reading, another K) gets a dashed, dotted, ... line."""
    cycle, seen, out = ("-", "--", ":", "-."), {}, {}
    for label, row in rows.items():
        cell = row.get("cell") or label
        out[label] = cycle[seen.get(cell, 0) % len(cycle)]
        seen[cell] = seen.get(cell, 0) + 1
    return out
