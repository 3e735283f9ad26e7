"""``train.restarts``: several starts screened on their training loss, the best one trained to the end.

A run with ``train.restarts = N > 1`` first trains N candidates for ``train.restart_steps`` steps each,
then trains the one whose training loss is lowest, averaged over its last tenth of those steps, from the
start: as the plain run of its seed, which it then is, weight for weight. Candidate 0 is the run's own
seed, candidate k ``seed + 1_000_003 * k`` (:func:`restart_seed`); a candidate's seed draws everything a
run's seed draws (initialisation, batch order, dropout).

Why the training loss: deploy/tiny-mist and -srnn train on every training series, so nothing else is
there to judge by, and a small model that goes wrong there does so in its first steps, which no later
step, selection or average repairs; its training loss says so (lab/2026-11-29-tiny-recipes-5: on GunPoint
every deploy/tiny-srnn seed that tested below 85% still had a training loss above 0.02 at the end, the
others below 0.001). It judges only a failure to fit, and only once the loss is smooth: where no
candidate has fitted by the screen's end (SA-RNN at step 300) or the loss spikes (iRNN), it picked worse
runs there. A mean over a window rather than the last batch's loss, so that one lucky batch does not
decide. Non-finite candidates lose; ties go to the first.
"""

from __future__ import annotations

import math
import time
from typing import Any, Dict, List

from .config import ConfigError
from .evaluation import epoch_order


def restart_seed(seed: int, k: int) -> int:
    """The seed of candidate ``k`` (0: the run's own), far from the small seeds runs use, so that a
    candidate is not another seed's run."""
    return seed + 1_000_003 * k


def screen_restarts(run) -> Dict[str, Any]:
    """Screen the candidates of ``run`` (a fresh :class:`ltdrnn.train.Run`) and leave it at the start of the
    chosen one; returns the screen's record: each candidate's seed and windowed training loss, the chosen
    seed and the time it took."""
    cfg, started = run.cfg.train, time.perf_counter()
    steps = cfg.restart_steps
    if steps >= run.total_steps():
        raise ConfigError(
            f"train.restart_steps: expected fewer steps than the run's ({run.total_steps()}), got {steps}"
        )
    seeds = [restart_seed(cfg.seed, k) for k in range(cfg.restarts)]
    losses = []
    for seed in seeds:
        run.start(seed)
        tail = screen_losses(run, steps)[-max(1, steps // 10) :]
        losses.append(sum(tail) / len(tail) if all(math.isfinite(v) for v in tail) else math.inf)
    chosen = seeds[min(range(len(seeds)), key=losses.__getitem__)]
    run.start(chosen)
    return {
        "seeds": seeds,
        "losses": [v if math.isfinite(v) else str(v) for v in losses],  # "inf" as text: the record is JSON
        "seed": chosen,
        "time_s": round(time.perf_counter() - started, 3),
    }


def screen_losses(run, steps: int) -> List[float]:
    """The training loss of ``run``'s first ``steps`` steps, trained as ``Run.fit`` trains them but with no
    validation, checkpoint or callback; it stops at a non-finite loss."""
    losses: List[float] = []
    while len(losses) < steps:
        run.model.set_epoch(run.epoch)
        run.task.set_epoch(run.epoch)
        order = epoch_order(len(run.train_set), run.cfg.train.batch_size, run.seed, run.epoch)
        for indices in order[: steps - len(losses)]:
            losses.append(run.train_step(indices)[0])
            run.step += 1
            if not math.isfinite(losses[-1]):
                return losses
        run.epoch += 1
        if run.scheduler is not None:
            run.scheduler.step()
    return losses
