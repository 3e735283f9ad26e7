"""Plots of one finished run, from its run directory (``ltdrnn plot RUN_DIR``).

Loads the best checkpoint, runs a validation batch through the model and draws what applies:

    curves     learning curve from the run's history (and ||dh_T/dh_1|| if it was tracked)
    lag        gradient norm versus lag (MIST Fig. 2)
    mask       update pattern, for cells that record ``aux["update_mask"]`` (SA-RNN, skipping cells)
    beta       time constants over time, for cells that record ``aux["beta"]`` (TARNN)
    unshifted  the hidden state with SRNN's cyclic shift undone (SRNN only)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional, Sequence

import torch

from . import gradients, plots

KINDS = ("curves", "lag", "mask", "beta", "unshifted")


def plot_run(
    run_dir: str | Path, out_dir: str | Path | None = None, kinds: Optional[Sequence[str]] = None, batch_size: int = 16
) -> List[Path]:
    """Write the requested (default: every applicable) plots of a run; returns the files written."""
    from ..checkpoint import restore_model

    run_dir = Path(run_dir)
    out_dir = Path(out_dir) if out_dir is not None else run_dir / "plots"
    unknown = set(kinds or ()) - set(KINDS)
    if unknown:
        raise ValueError(f"plots: unknown kind {sorted(unknown)[0]!r}; expected some of {', '.join(KINDS)}")
    wanted = set(kinds or KINDS)
    cfg, task, model = restore_model(run_dir)
    model.eval()
    dataset = task.dataset("val")
    batch = task.collate([dataset[i] for i in range(min(batch_size, len(dataset)))])
    label = f"{cfg.model.cell} on {cfg.task.name}"
    written: List[Path] = []

    if "curves" in wanted and (run_dir / "result.json").exists():
        record = json.loads((run_dir / "result.json").read_text())
        record["metric_name"] = record["metrics"]["metric_name"]
        written.append(plots.learning_curves([record], out_dir / "curves.png", label))
        if any("jacobian_norm" in h for h in record["history"]):
            written.append(plots.jacobian_during_training([record], out_dir / "jacobian.png"))
    single = model.rnn.num_layers == 1 and not model.rnn.bidirectional
    if "lag" in wanted and single and batch.lengths is None:
        curve = gradients.gradient_vs_lag(model, batch, task.info)
        written.append(
            plots.gradient_lag_plot(
                {cfg.model.cell: curve}, out_dir / "gradient_vs_lag.png", f"gradient norm vs lag: {label}"
            )
        )
    with torch.no_grad():
        x = model.embed(batch.x) if model.embed is not None else batch.x
        outputs, _ = model.rnn(x, lengths=batch.lengths)
    aux = model.aux[0]
    if "mask" in wanted and "update_mask" in aux:
        written.append(plots.update_pattern(aux, out_dir / "update_mask.png", title=f"update pattern: {label}"))
    if "beta" in wanted and "beta" in aux:
        written.append(plots.beta_over_time(aux, out_dir / "beta.png", title=f"beta: {label}"))
    if "unshifted" in wanted and cfg.model.cell == "srnn":
        written.append(plots.unshifted_state(outputs.transpose(0, 1), out_dir / "srnn_unshifted.png"))
    return [p for p in written if p is not None]
