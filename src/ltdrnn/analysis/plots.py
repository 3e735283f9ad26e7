"""PNG plots. matplotlib is imported when a plot is made, with the Agg backend (no display needed).

Every function writes one file and returns its path (``learning_curves`` returns None when the runs
have no history to draw). Lines are coloured by :func:`cell_colour`, so a cell has the same colour in
every plot.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Dict, Optional, Sequence, Union

import torch
from torch import Tensor

# The five source cells and the LSTM they are compared with; no grey, which marks the trivial baseline.
CELL_COLOURS = {
    "tarnn": "#1f77b4",
    "srnn": "#ff7f0e",
    "mist": "#2ca02c",
    "irnn": "#d62728",
    "sarnn": "#9467bd",
    "lstm": "#000000",
}
# Other cells draw from colours none of the above uses; a stable hash (crc32, unlike hash() not salted per
# process) picks one, so two baselines may share a colour but a cell never changes it.
OTHER_COLOURS = (
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#17becf",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#dbdb8d",
    "#9edae5",
)


def cell_colour(label: str) -> str:
    """The colour of a cell's lines, as ``"#rrggbb"``: fixed for the source cells and LSTM, else picked
    by name. ``label`` is a cell name, optionally with options as the report writes them
    (``"tarnn[reading=code]"`` is coloured as ``"tarnn"``)."""
    cell = label.split("[", 1)[0]
    if cell in CELL_COLOURS:
        return CELL_COLOURS[cell]
    return OTHER_COLOURS[zlib.crc32(cell.encode()) % len(OTHER_COLOURS)]


def _legend_once(label: str, drawn: set) -> Optional[str]:
    """``label`` the first time it is drawn in a plot, else None: several seeds of a cell make one legend
    entry."""
    if label in drawn:
        return None
    drawn.add(label)
    return label


def pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path, dpi: int = 110, crop: bool = False) -> Path:
    """Write ``fig`` to ``path`` (parents created) and close it. ``crop`` cuts the image to what is drawn
    instead of laying the axes out again: for figures drawn by another library whose axes
    ``tight_layout`` cannot arrange (aeon's critical-difference diagram)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if crop:
        fig.savefig(path, dpi=dpi, bbox_inches="tight")
    else:
        fig.tight_layout()
        fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def learning_curves(rows: Sequence[Dict], path, title: str = "") -> Optional[Path]:
    """Validation metric against optimiser steps, one line per stored run (label and colour: its cell)."""
    drawn = [r for r in rows if r.get("history")]
    if not drawn:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    labelled: set = set()
    for row in drawn:
        steps = [h["step"] for h in row["history"]]
        values = [h.get("val_metric") for h in row["history"]]
        ax.plot(steps, values, marker=".", color=cell_colour(row["cell"]), label=_legend_once(row["cell"], labelled))
    metric = drawn[0].get("metric_name") or "metric"
    baseline = (drawn[0].get("metrics") or {}).get("baseline")
    if baseline is not None:
        ax.axhline(baseline, color="grey", linestyle="--", linewidth=1, label="trivial baseline")
    ax.set_xlabel("optimiser step")
    ax.set_ylabel(f"validation {metric}")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def gradient_lag_plot(
    curves: Dict[str, Union[Tensor, Sequence[Tensor]]], path, title: str = "gradient norm vs lag"
) -> Path:
    """``curves``: label -> ``(T,)`` from :func:`~ltdrnn.analysis.gradients.gradient_vs_lag`, or a list of
    them (one per seed: lines of one colour, one legend entry); log scale."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for label, found in curves.items():
        for i, values in enumerate([found] if isinstance(found, Tensor) else found):
            ax.semilogy(
                range(len(values)),
                values.clamp_min(1e-30).tolist(),
                color=cell_colour(label),
                label=label if i == 0 else None,
            )
    ax.set_xlabel("lag tau (steps before the loss)")
    ax.set_ylabel("mean ||dL/dh_{T-tau}||")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def jacobian_during_training(rows: Sequence[Dict], path, title: str = "||dh_T/dh_1|| during training") -> Path:
    """The ``jacobian_norm`` entries of run histories (``train.track_gradients=true``) against steps."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    labelled: set = set()
    for row in rows:
        points = [(h["step"], h["jacobian_norm"]) for h in row.get("history") or [] if "jacobian_norm" in h]
        if points:
            ax.semilogy(
                *zip(*points), marker=".", color=cell_colour(row["cell"]), label=_legend_once(row["cell"], labelled)
            )
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("||dh_T/dh_1||_F (estimate)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def _image(values: Tensor, path, title: str, ylabel: str, cmap: str, colorbar: bool = True) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.2))
    shown = ax.imshow(
        values.detach().float().cpu().T.numpy(), aspect="auto", interpolation="nearest", cmap=cmap, origin="lower"
    )
    ax.set_xlabel("time step t")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if colorbar:
        fig.colorbar(shown, ax=ax)
    return save_figure(fig, path)


def update_pattern(aux: Dict[str, Tensor], path, sequence: int = 0, title: str = "update pattern") -> Path:
    """SA-RNN's ``aux["update_mask"] (T, B, H)`` of one sequence as an image (units x time)."""
    return _image(aux["update_mask"][:, sequence], path, title, "hidden unit", "Greys")


def beta_over_time(aux: Dict[str, Tensor], path, sequence: int = 0, title: str = "TARNN beta") -> Path:
    """TARNN's time constants ``aux["beta"] (T, B, H)`` of one sequence (units x time)."""
    return _image(aux["beta"][:, sequence], path, title, "hidden unit", "viridis")


def unshifted_state(
    outputs: Tensor, path, shift: int = 1, sequence: int = 0, title: str = "SRNN hidden state, un-shifted"
) -> Path:
    """SRNN's outputs ``(T, B, H)`` with the cyclic shift undone: ``g_t = roll(h_t, -shift * (t+1))``,
    so a unit keeps its row over time (``shift``: the roll the cell applies per step)."""
    return _image(unshift(outputs[:, sequence], shift), path, title, "unit (un-shifted)", "magma")


def unshift(h: Tensor, shift: int = 1) -> Tensor:
    """``(T, H) -> (T, H)``: row ``t`` rolled by ``-shift * (t + 1)``, undoing ``t + 1`` cyclic shifts."""
    return torch.stack([torch.roll(h_t, -shift * (t + 1)) for t, h_t in enumerate(h.unbind(0))])
