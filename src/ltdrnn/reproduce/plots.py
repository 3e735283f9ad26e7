"""The plots of a claim: validation curves, gradient norm versus lag, the gradient ratio during training.
Each cell has one colour (``cell_colour``); further runs of a cell get another line style. The step axis
is logarithmic where the runs' lengths differ by 20x or more (adding-200: 1,000 to 100,000 steps)."""

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
    for label, seeds in measurements.seeds.items():
        for i, row in enumerate(seeds):
            points = [
                (h["step"], h["val_metric"])
                for h in row.get("history") or []
                if h.get("val_metric") is not None and math.isfinite(h["val_metric"])
            ]
            if points:
                ax.plot(
                    *zip(*points),
                    marker=".",
                    label=label if i == 0 else None,
                    color=cell_colour(row.get("cell") or label),
                    linestyle=style[label],
                )
                drawn = True
    if drawn:
        first = next(iter(measurements.rows.values()))
        metrics = first.get("metrics") or {}
        baseline = metrics.get("baseline")
        ylabel = f"validation {first.get('metric_name') or 'metric'}"
        if (
            baseline is not None
            and len({(r.get("metrics") or {}).get("baseline") for r in measurements.rows.values()}) == 1
        ):
            ax.axhline(baseline, color="grey", linestyle="--", linewidth=1, label="trivial baseline")
            if metrics.get("higher_is_better") is False and baseline > 0:
                # errors span decades (1e-10 to the baseline), and a diverged run's spike would flatten the rest
                ax.set_yscale("log")
                ax.set_ylim(top=10 * baseline)
                ylabel += "\n(log; above 10x the baseline: off the chart)"
        xlabel = "optimiser step"
        if wide_step_range(measurements):
            # runs of 1,000 and 100,000 steps: on a linear axis the short ones sit in the first pixel
            ax.set_xscale("log")
            xlabel += " (log)"
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_title(f"{claim.id}: validation curves, per seed")
        ax.legend(fontsize=7)
        paths.append(plots.save_figure(fig, root / f"{claim.id}-curves.png"))
    else:
        plt.close(fig)
    curves = {
        label: [torch.tensor(a["gradient_vs_lag"]["curve"]) for a in found if "gradient_vs_lag" in a]
        for label, found in measurements.analyses_of.items()
        if any("gradient_vs_lag" in a for a in found)
    }
    if curves:
        paths.append(
            gradient_lag_plot(
                curves,
                root / f"{claim.id}-gradient-lag.png",
                title=f"{claim.id}: gradient norm vs lag, 100 examples, per seed",
            )
        )
    traces = {
        label: [a["jacobian_ratio"]["trace"] for a in found if "jacobian_ratio" in a]
        for label, found in measurements.analyses_of.items()
    }
    if any(traces.values()):
        fig, ax = plt.subplots(figsize=(6, 3.4))
        for label, seeds in traces.items():
            row = measurements.rows.get(label, {})
            for i, trace in enumerate(seeds):
                ax.plot(
                    [t["step"] for t in trace],
                    [max(t["ratio"], 1e-30) for t in trace],
                    marker=".",
                    label=label if i == 0 else None,
                    color=cell_colour(row.get("cell") or label),
                    linestyle=style.get(label, "-"),
                )
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_yscale("log")
        ax.set_xlabel("iteration")
        ax.set_ylabel("||dh_T/dh_1|| / ||dh_T/dh_(T-1)||\n(float64; an underflow to 0 drawn at 1e-30)", fontsize=8)
        ax.set_title(f"{claim.id}: gradient ratio during training, per seed")
        ax.legend(fontsize=7)
        paths.append(plots.save_figure(fig, root / f"{claim.id}-jacobian-ratio.png"))
    return paths


LOG_STEPS_RATIO = 20


def wide_step_range(measurements: Measurements) -> bool:
    """Whether the runs' last validated steps differ by :data:`LOG_STEPS_RATIO` or more, so the curves
    need a log step axis."""
    last = [
        max((h["step"] for h in row.get("history") or [] if h.get("val_metric") is not None), default=0)
        for rows in measurements.seeds.values()
        for row in rows
    ]
    last = [step for step in last if step > 0]
    return bool(last) and max(last) >= LOG_STEPS_RATIO * min(last)


def _line_styles(rows: Dict[str, Dict[str, Any]]) -> Dict[str, str]:
    """A line style per run label: the runs of one cell share its colour (``cell_colour``), so the
    second, third, ... run of a cell (another reading, another K) gets a dashed, dotted, ... line."""
    cycle, seen, out = ("-", "--", ":", "-."), {}, {}
    for label, row in rows.items():
        cell = row.get("cell") or label
        out[label] = cycle[seen.get(cell, 0) % len(cycle)]
        seen[cell] = seen.get(cell, 0) + 1
    return out
