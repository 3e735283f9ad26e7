"""SA-RNN adding T=500: the "jumps" in the stored histories, and what the skip fraction did meanwhile.

    python lab/2026-11-26-seed-screens/sarnn_jumps.py        (from the repository root)

A jump is an evaluation interval whose training-loss EMA (the trainer's 0.95 moving average) ends above
the 0.167 baseline and at least 1.5 times its previous value. Printed per run: the best validation MSE,
the test MSE and each jump (step, training EMA, validation MSE, skip fraction before -> after, epoch,
slope); then the change of the validation skip fraction in jump intervals against calm ones (the EMA
below the baseline at both ends).
"""

import json
import sqlite3
import statistics

BASELINE = 0.167
CLAIM = "select name, config, history, metric from runs where study = 'reproduce/sarnn-adding-500/paper'"
SCREENS = "select 'lr1e-4/slope5', config, history, metric from runs where cell = 'sarnn'"


def slope_at(config: dict, epoch: int) -> float:
    options = config["model"]["options"]
    if not options.get("anneal_slope", True):
        return options.get("slope", 1.0)
    return min(5.0, options.get("slope", 1.0) + options.get("slope_increment", 0.04) * epoch)


def main() -> None:
    rows = sqlite3.connect("reproduction/results.db").execute(CLAIM + " order by name, created").fetchall()
    rows += sqlite3.connect("lab/2026-11-23-screens/screens.db").execute(SCREENS).fetchall()
    jump_changes, calm_changes = [], []
    for name, config, history, metric in rows:
        config, history = json.loads(config), json.loads(history)
        best = min(history, key=lambda e: e["val_metric"])
        jumps = []
        for before, after in zip(history, history[1:]):
            change = abs(after.get("val_skip_fraction", 0) - before.get("val_skip_fraction", 0))
            loss, previous = after["train_loss"], before["train_loss"]
            if loss > BASELINE and loss > 1.5 * previous:
                jump_changes.append(change)
                jumps.append(
                    f"{after['step']}({loss:.3g}, {after['val_metric']:.3g}, "
                    f"{before.get('val_skip_fraction', 0):.3f}->{after.get('val_skip_fraction', 0):.3f}, "
                    f"ep{after['epoch']}, a{slope_at(config, after['epoch']):.2f})"
                )
            elif loss < BASELINE and previous < BASELINE:
                calm_changes.append(change)
        print(
            f"{name:16s} seed {config['train']['seed']}  best val {best['val_metric']:.4f} (step {best['step']})"
            f"  test {metric:.4f}  jumps: {'; '.join(jumps) or '-'}"
        )
    jumps, calm = statistics.median(jump_changes), statistics.median(calm_changes)
    print(f"skip-fraction change per interval: {len(jump_changes)} jumps, median {jumps:.4f};")
    print(f"  {len(calm_changes)} calm intervals, median {calm:.4f}")


if __name__ == "__main__":
    main()
