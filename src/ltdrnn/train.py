"""``train(cfg) -> dict``: one experiment from a config to a results row.

The loop, in order, for every optimiser step::

    batch (seeded permutation of the epoch) -> model -> task loss + sum_k w_k * model.losses()[k]
    -> backward -> clip global norm -> optimiser step -> [validate] -> [checkpoint]

and at the start of each epoch ``model.set_epoch(epoch)`` (SA-RNN's slope annealing) and
``task.set_epoch(epoch)`` (``fresh_train``: new training items), at its end the lr schedule (halve every
tau epochs). The best validation state is kept and used for the test metrics.

Exact resume: the batch order of an epoch is a permutation drawn from ``(seed, epoch)`` alone, and a
checkpoint holds the model, optimiser, scheduler, every RNG state, the position inside the epoch, the
best state so far, the history and the config. ``train(cfg, resume=True)`` therefore continues an
interrupted run to the same weights and metrics as a run that was never interrupted.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional

import numpy as np
import torch

from . import distributed as D
from . import metrics as M
from .cells.base import apply_constraints_
from .checkpoint import (
    BEST,
    CHECKPOINT,
    ROLLBACK_POINT,
    CheckpointError,
    atomic_save,
    build_task_and_model,
    load_checkpoint,
    load_weights,
    lock_run_dir,
    remove_stale_temp_files,
    rng_states,
    set_rng_states,
)
from .config import ConfigError, RunConfig, comparable_config, load_config, save_config
from .evaluation import batch_on, epoch_order, evaluate, validation_size
from .int8_training import Int8Matrices
from .ops.memory import tune_malloc
from .optimizers import SpikeGuard, WeightAverage, build_optimizer, build_scheduler
from .restarts import screen_restarts
from .results.record import config_record
from .results.stamps import new_run_id, version_info
from .results.store import open_store_for_writing, store_record

Callback = Callable[[Dict[str, Any]], None]


class TrainingInterrupted(RuntimeError):
    """Raised by a callback to stop a run after its latest checkpoint (used to test resuming)."""


# ---- public entry points ---------------------------------------------------------------------------
def train(
    cfg: RunConfig | Dict[str, Any] | str,
    resume: bool | str = False,
    callbacks: Iterable[Callback] = (),
    on_validation: Iterable[Callable[[Dict[str, Any]], bool]] = (),
) -> Dict[str, Any]:
    """Train, select on validation, test, store; returns the result record (also ``result.json``).

    Args:
        cfg: a RunConfig, plain data, or a preset name / config file.
        resume: True continues from ``<run_dir>/last.pt`` (``cfg.run_dir`` must be set) and raises
            ConfigError if there is none; ``"auto"`` (``ltdrnn train --resume``) continues if it exists
            and starts afresh if not.
            Resuming a finished run trains nothing: it stores the row if the store lacks it.
        callbacks: called after every optimiser step with the loop state (``step``, ``epoch``,
            ``loss``, ``model``, and ``average``: the :class:`WeightAverage` of ``train.ema_decay``, or
            None); a callback may raise to stop the run.
        on_validation: called with every history entry (``step``, ``val_metric``, ...); if one returns
            True the run stops there with status ``pruned`` (sweeps' pruners), is tested and stored.

    Under torchrun (``WORLD_SIZE`` > 1) this trains data-parallel; see :mod:`ltdrnn.distributed`.
    """
    cfg = cfg if isinstance(cfg, RunConfig) else load_config(cfg)
    # numpy computes (and caches) its float limits on first use and warns if denormals are flushed by then
    np.finfo(np.float32), np.finfo(np.float64)
    torch.set_flush_denormal(True)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    if cfg.train.malloc_tuning:
        tune_malloc()
    # held before a checkpoint is read: a second trainer in the directory must not mix its run with this one
    lock = lock_run_dir(Path(cfg.run_dir)) if cfg.run_dir and D.is_launch_main() else None
    try:
        with D.process_group(cfg.train.device):
            run = Run(cfg, resume)
            if cfg.results and D.is_main():  # a damaged store, or one holding this run, fails before training
                store = open_store_for_writing(cfg.results)
                if not resume and cfg.run_dir:  # (without a run_dir, the run gets a new directory)
                    store.refuse_a_second_row({"study": cfg.study, "config": cfg.to_dict()})
            record = run.fit(list(callbacks), list(on_validation))
            if cfg.results and D.is_main():
                store_record(record, cfg.results, resumed=bool(resume))
    finally:
        if lock is not None:
            lock.close()
    return record


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# ---- the run ---------------------------------------------------------------------------------------
class Run:
    """The state of one training run; ``fit`` runs it to the end."""

    def __init__(self, cfg: RunConfig, resume: bool) -> None:
        self.cfg = cfg
        self.device = D.usable_device(cfg.train.device)
        checkpoint = self._find_checkpoint(resume)
        self.run_id = D.broadcast_object(
            checkpoint["run_id"] if checkpoint else new_run_id(cfg.model.cell, cfg.task.name)
        )
        self.run_dir = Path(cfg.run_dir or Path("runs") / self.run_id)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if D.is_main():
            remove_stale_temp_files(self.run_dir)
            save_config(cfg, self.run_dir / "config.yaml")

        self.start(cfg.train.seed)
        self.restarts: Optional[Dict[str, Any]] = None  # the screen of train.restarts, when there was one
        self.best: Optional[Dict[str, Any]] = None
        self.history: List[Dict[str, Any]] = []
        self.train_time = 0.0
        self.running: Optional[float] = None  # moving average of the training loss
        self.loss_names_checked = False
        self.status = "finished"
        self.rollbacks: List[Dict[str, Any]] = []
        self.judges: List[Callable[[Dict[str, Any]], bool]] = []
        if checkpoint:
            self._restore(checkpoint)
        elif cfg.train.restarts > 1:
            self.restarts = screen_restarts(self)

    def start(self, seed: int) -> None:
        """A fresh model, optimiser and position, every draw from ``seed``: the start of a run."""
        cfg = self.cfg
        self.seed = seed
        seed_everything(seed)
        self.task, model = build_task_and_model(cfg)
        self.info = self.task.info
        self.model = model.to(self.device)
        self.net = D.wrap_model(self.model, self.device)
        D.seed_rank(seed)
        self.optimizer = build_optimizer(cfg, self.model)
        self.scheduler = build_scheduler(cfg, self.optimizer)
        self.spikes = SpikeGuard(cfg.optim.skip_spikes, cfg.optim.clip_norm)
        self.average = WeightAverage(self.model, cfg.train.ema_decay) if cfg.train.ema_decay else None
        self.int8 = Int8Matrices(self.model) if cfg.train.qat_steps else None
        self.train_set = self.task.dataset("train")
        self.validates = validation_size(cfg, self.task) > 0
        target = cfg.train.stop_at
        if target is not None and not (self.validates and math.isfinite(target)):
            raise ConfigError(
                f"train.stop_at: expected a finite target and a validation split, got {target!r} "
                f"and {validation_size(cfg, self.task)} validation items"
            )
        self.batches_per_epoch = math.ceil(len(self.train_set) / cfg.train.batch_size)
        self.step = 0
        self.epoch = 0
        self.batch_in_epoch = 0

    # ---- loop --------------------------------------------------------------------------------------
    def fit(self, callbacks: List[Callback], judges: List[Callable[[Dict[str, Any]], bool]] = ()) -> Dict[str, Any]:
        """Train until the step/epoch budget is used, the loss diverges or a judge prunes the run."""
        self.callbacks, self.judges = callbacks, list(judges)
        cfg = self.cfg.train
        self.progress = _progress(self.total_steps(), self.step, cfg.progress and D.is_main(), self.run_label())
        if cfg.rollbacks and self.step == 0:  # a point to go back to before the first evaluation
            self.save_checkpoint()
        try:
            while self.status == "finished" and not self.finished():
                epoch = self.epoch
                self.model.set_epoch(epoch)
                self.task.set_epoch(epoch)
                order = epoch_order(len(self.train_set), cfg.batch_size, self.seed, epoch)
                # a rollback may go back to an earlier epoch, whose batch order this one is not
                while self.running_in(epoch) and self.batch_in_epoch < len(order) and not self.finished():
                    self.one_step(order[self.batch_in_epoch])
                if self.running_in(epoch) and self.batch_in_epoch >= len(order):
                    self.end_epoch()
            if self.status == "finished" and not self.history_has(self.step):
                self.validate({})
                self.save_checkpoint()
        except KeyboardInterrupt:
            print(
                f"\ninterrupted at step {self.step}; continue from the latest checkpoint with "
                f"--run-dir {self.run_dir} --resume",
                file=sys.stderr,
            )
            raise
        finally:
            self.progress.close()
        return self.finish()

    def one_step(self, indices: List[int]) -> None:
        cfg = self.cfg.train
        started = time.perf_counter()
        loss, terms = self.train_step(indices)
        self.train_time += time.perf_counter() - started
        self.step += 1
        self.batch_in_epoch += 1
        self.running = loss if self.running is None else 0.95 * self.running + 0.05 * loss
        self.progress.update(1)
        self.progress.set_postfix(loss=f"{self.running:.4g}", epoch=self.epoch, refresh=False)
        if not math.isfinite(loss):
            if not self.roll_back():
                self.status = "diverged"
            return
        evaluated = cfg.eval_every and self.step % cfg.eval_every == 0
        if evaluated:
            self.validate(terms)
            runaway = self.runaway_loss()
            if runaway is not None:
                # "nan"/"inf" as text: the record goes to JSON
                if not self.roll_back({"val_loss": runaway if math.isfinite(runaway) else str(runaway)}):
                    self.status = "diverged"
                return
        if evaluated or (cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0):
            self.save_checkpoint()
        for callback in self.callbacks:
            callback(
                {
                    "step": self.step,
                    "epoch": self.epoch,
                    "loss": loss,
                    "model": self.model,
                    "average": self.average,
                    "run_dir": self.run_dir,
                }
            )

    def runaway_loss(self) -> Optional[float]:
        """The validation loss of this step's evaluation if it is not finite or above
        ``train.max_val_loss`` (a runaway), else None."""
        limit, latest = self.cfg.train.max_val_loss, self.history[-1] if self.history else {}
        if limit is None or latest.get("step") != self.step:
            return None
        loss = latest["val_loss"]
        return loss if not math.isfinite(loss) or loss > limit else None

    def running_in(self, epoch: int) -> bool:
        return self.status == "finished" and self.epoch == epoch

    def roll_back(self, cause: Optional[Dict[str, float]] = None) -> bool:
        """After a non-finite training loss, or a runaway validation loss (``cause``, recorded with the
        rollback): if ``train.rollbacks`` allows another, go back to the checkpoint of the best validation
        so far (the latest checkpoint when there is none) with every learning rate halved once per rollback.
        The latest checkpoint can hold the start of the runaway; the best one is what the test would use.
        The time spent since the checkpoint still counts as training time."""
        if len(self.rollbacks) >= self.cfg.train.rollbacks:
            return False
        checkpoint = D.load_on_main(load_checkpoint, self.run_dir / ROLLBACK_POINT)
        if checkpoint is None:
            checkpoint = D.load_on_main(load_checkpoint, self.run_dir / CHECKPOINT)
        if checkpoint is None or checkpoint.get("run_id") != self.run_id:  # none yet, or another run's
            return False
        failed_at, train_time, rollbacks = self.step, self.train_time, self.rollbacks
        self._restore(checkpoint)
        self.train_time = train_time
        # the checkpoint's rates already carry the rollbacks made before it was written
        factor = 0.5 ** (len(rollbacks) + 1 - len(self.rollbacks))
        for group in self.optimizer.param_groups:
            group["lr"] *= factor
        self.rollbacks = rollbacks + [
            {"failed_at": failed_at, "to_step": self.step, "lr": self.optimizer.param_groups[0]["lr"], **(cause or {})}
        ]
        self.progress.n = self.step
        self.progress.refresh()
        return True

    def train_step(self, indices: List[int]):
        reduction = self.cfg.optim.loss_reduction
        indices, factor = D.local_part(indices, reduction)
        x, y, lengths = batch_on(self.task, self.train_set, indices, self.device)
        self.model.train()
        through_int8 = self.int8 is not None and self.step >= self.total_steps() - self.cfg.train.qat_steps
        with self.int8.applied() if through_int8 else contextlib.nullcontext():
            pred = self.net(x, lengths)
            loss = M.task_loss(pred, y, self.info, lengths, reduction)
            terms = self.model.losses()
            self._check_loss_names(terms)
            total = loss * factor if factor != 1.0 else loss
            for name, weight in self.cfg.train.loss_weights.items():
                if weight:
                    total = total + weight * terms[name]
            self.optimizer.zero_grad(set_to_none=True)
            total.backward()
        if self.spikes.admits(list(self.model.parameters()), self.step + 1):
            self.optimizer.step()
        apply_constraints_(self.model)
        if self.average is not None:
            self.average.update(self.model)
        return D.global_loss(loss.detach(), factor, reduction), {k: float(v.detach()) for k, v in terms.items()}

    def end_epoch(self) -> None:
        self.epoch += 1
        self.batch_in_epoch = 0
        if self.scheduler is not None:
            self.scheduler.step()
        if not self.cfg.train.eval_every and not self.finished():
            self.validate({})
        self.save_checkpoint()

    def validate(self, terms: Dict[str, float]) -> None:
        if not self.validates:  # an empty validation split (select_on=last): nothing to record
            return
        with self.tested_weights():
            self._validate(terms)

    @contextlib.contextmanager
    def tested_weights(self):
        """The weights validated, selected and tested inside the block: the moving average with
        ``train.ema_decay``, on the int8 grid with ``train.qat_steps``."""
        with contextlib.ExitStack() as stack:
            if self.average is not None:
                stack.enter_context(self.average.applied(self.model))
            if self.int8 is not None:
                stack.enter_context(self.int8.applied())
            yield

    def _validate(self, terms: Dict[str, float]) -> None:
        cfg = self.cfg.train
        summary, skip = evaluate(
            self.model, self.task, "val", cfg.eval_batch_size or cfg.batch_size, cfg.eval_batches, self.device
        )
        entry = {
            "step": self.step,
            "epoch": self.epoch,
            "train_loss": self.running,
            "lr": self.optimizer.param_groups[0]["lr"],
            "time_s": round(self.train_time, 3),
            **{f"val_{k}": v for k, v in summary.items()},
            **{f"term_{k}": v for k, v in terms.items()},
        }
        if skip is not None:
            entry["val_skip_fraction"] = skip
        if cfg.track_gradients:
            from .analysis.gradients import state_jacobian_norm

            entry["jacobian_norm"] = state_jacobian_norm(self.model, self.examplebatch_on())
        self.history.append(entry)
        if D.is_main():
            with open(self.run_dir / "history.jsonl", "a") as f:
                f.write(json.dumps(entry) + "\n")
        # every judge sees every entry; rank 0 judges and every rank follows
        if D.broadcast_object(any([judge(entry) for judge in self.judges]) if D.is_main() else None):
            self.status = "pruned"
        if self.cfg.train.select_on == "last" or self.runaway_loss() is not None:  # a runaway is never the best
            return
        if self.step < self.cfg.train.select_after:
            return
        select = self.cfg.train.select_on
        score = (summary["metric"], summary["loss"]) if select == "metric_then_loss" else summary[select]
        if self.best is None or self.better(score, self.best["score"]):
            self.keep_best(score, summary["metric"])

    def keep_best(self, score, metric) -> None:
        """The model's current weights become the tested state, saved as ``best.pt``."""
        state = copy.deepcopy(self.model.state_dict())
        self.best = {"score": score, "metric": metric, "step": self.step, "state": state}
        if D.is_main():
            atomic_save(
                {"model": self.best["state"], "config": self.cfg.to_dict(), "step": self.step, "run_id": self.run_id},
                self.run_dir / BEST,
            )

    def better(self, new, old) -> bool:
        """Whether the validation score ``new`` beats ``old``: a number, or with ``metric_then_loss`` a
        ``(metric, loss)`` pair compared on the metric first and on the loss when the metrics tie."""
        if isinstance(new, tuple):
            if not all(math.isfinite(v) for v in new):
                return False
            if not all(math.isfinite(v) for v in old):
                return True
            if new[0] != old[0]:
                return new[0] > old[0] if self.info.higher_is_better else new[0] < old[0]
            return new[1] < old[1]
        if not math.isfinite(new):
            return False
        if not math.isfinite(old):
            return True
        higher = self.info.higher_is_better and self.cfg.train.select_on == "metric"
        return new > old if higher else new < old

    # ---- ending ------------------------------------------------------------------------------------
    def finish(self) -> Dict[str, Any]:
        cfg = self.cfg.train
        last_state = copy.deepcopy(self.model.state_dict())
        if self.best is None and (self.average is not None or self.int8 is not None):
            # nothing was selected: the tested weights at the last step are the run's model
            with self.tested_weights():
                self.keep_best(None, None)
        if self.best is not None:
            self.model.load_state_dict(self.best["state"])
        started = time.perf_counter()
        test, skip = evaluate(
            self.model, self.task, "test", cfg.eval_batch_size or cfg.batch_size, cfg.test_batches, self.device
        )
        eval_time = time.perf_counter() - started
        example = self.task.dataset("test")[0][0].to(self.device)
        steps = int(example.shape[0])
        results = {
            "metric_name": self.info.metric,
            "metric": test["metric"],
            "higher_is_better": self.info.higher_is_better,
            "baseline": self.info.baseline,
            "beats_baseline": M.beats_baseline(test["metric"], self.info),
            "test": test,
            "val_best": self.best["metric"] if self.best else None,
            "rollbacks": self.rollbacks,
            "skipped_updates": self.spikes.skipped,
            "best_step": self.best["step"] if self.best else self.step,
            "stopped_at_target": self.reached_target(),
            "checkpoint": self.checkpoint_label(),
            "restarts": self.restarts,
            "params": M.parameter_count(self.model),
            "size_kb": M.model_size_kb(self.model),
            "skip_fraction": skip,
            "flops_per_sequence": M.flops_per_sequence(self.model, steps, skip),
            "seq_len": steps,
        }
        timings = {
            "train_s": self.train_time,
            "test_eval_s": eval_time,
            "steps": self.step,
            "epochs": self.epoch + self.batch_in_epoch / max(self.batches_per_epoch, 1),
            "steps_per_s": self.step / self.train_time if self.train_time else None,
        }
        if cfg.latency:
            timings.update(M.latency(self.model, example))
        self.model.load_state_dict(last_state)
        record = config_record(
            self.cfg,
            self.run_id,
            status=self.status,
            metrics=results,
            timings=timings,
            history=self.history,
            run_dir=str(self.run_dir),
            version=version_info(),
        )
        if D.is_main():
            (self.run_dir / "result.json").write_text(json.dumps(record, indent=2, default=str))
        return record

    def checkpoint_label(self) -> str:
        """``last``: the final weights (their average with ``train.ema_decay``); else the selection rule."""
        selected = self.best is not None and self.best["score"] is not None
        return f"best validation {self.cfg.train.select_on}" if selected else "last"

    # ---- checkpoints -------------------------------------------------------------------------------
    def save_checkpoint(self) -> None:
        rng_by_rank = D.all_gather_object(rng_states())
        if not D.is_main():
            return
        checkpoint = {
            "run_id": self.run_id,
            "config": self.cfg.to_dict(),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler else None,
            "rng": rng_by_rank[0],
            "rng_by_rank": rng_by_rank,
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "best": self.best,
            "history": self.history,
            "train_time": self.train_time,
            "status": self.status,
            "running": self.running,
            "rollbacks": self.rollbacks,
            "spikes": self.spikes.state_dict(),
            "average": self.average.state_dict() if self.average is not None else None,
            "restarts": self.restarts,
        }
        atomic_save(checkpoint, self.run_dir / CHECKPOINT)
        if self.cfg.train.rollbacks and self.best is not None and self.best["step"] == self.step:
            atomic_save(checkpoint, self.run_dir / ROLLBACK_POINT)

    def _find_checkpoint(self, resume: bool | str) -> Optional[Dict[str, Any]]:
        if resume not in (False, True, "auto"):
            raise ConfigError(f"resume: expected True, False or 'auto', got {resume!r}")
        if not resume:
            return None
        if not self.cfg.run_dir:
            raise ConfigError("run_dir: resuming needs the run directory of the interrupted run, got none")
        path = Path(self.cfg.run_dir) / CHECKPOINT
        checkpoint = D.load_on_main(load_checkpoint, path)
        if checkpoint is None:
            if resume == "auto":
                return None
            raise ConfigError(
                f"run_dir: nothing to resume, {path} does not exist (is {self.cfg.run_dir} "
                "the run directory of the interrupted run?); to start a new run when "
                "there is no checkpoint, resume with 'auto' (as the command line's --resume does)"
            )
        # a run may move between devices and directories (started on a GPU, finished on a CPU elsewhere);
        # a key the schema gained since the checkpoint was written has its default, the old behaviour
        defaults, moved = comparable_config(RunConfig().to_dict()), ("train.device", "run_dir")
        saved, now = ({k: v for k, v in {**defaults, **comparable_config(c)}.items() if k not in moved}
                      for c in (checkpoint["config"], self.cfg.to_dict()))  # fmt: skip
        changed = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
        if changed:
            raise ConfigError(f"resume: the config differs from the checkpoint's in {', '.join(changed)}")
        return checkpoint

    def _restore(self, checkpoint: Dict[str, Any]) -> None:
        path = self.run_dir / CHECKPOINT
        load_weights(self.model, checkpoint["model"], path)
        load_weights(self.optimizer, checkpoint.get("optimizer"), path, "optimizer state")
        if self.scheduler is not None:
            load_weights(self.scheduler, checkpoint.get("scheduler"), path, "scheduler state")
        try:
            for key in ("step", "epoch", "batch_in_epoch", "best", "history", "train_time", "status", "running"):
                setattr(self, key, checkpoint[key])
            set_rng_states(D.own_entry(checkpoint.get("rng_by_rank"), checkpoint["rng"]))
            self.rollbacks = list(checkpoint.get("rollbacks", []))
            self.spikes.load_state_dict(checkpoint.get("spikes"))
            if self.average is not None:
                self.average.load_state_dict(checkpoint["average"])
            self.restarts = checkpoint.get("restarts")  # None in checkpoints from before train.restarts
            self.seed = self.restarts["seed"] if self.restarts else self.cfg.train.seed
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError, IndexError) as error:
            raise CheckpointError(
                f"{path}: not a checkpoint a run can resume from ({type(error).__name__}: {error})"
            ) from None
        # the log on disk may hold evaluations made after the checkpoint; the checkpoint's history rules
        if D.is_main():
            with open(self.run_dir / "history.jsonl", "w") as f:
                f.writelines(json.dumps(entry) + "\n" for entry in self.history)

    # ---- small helpers -----------------------------------------------------------------------------
    def total_steps(self) -> int:
        cfg = self.cfg.train
        by_epochs = cfg.epochs * self.batches_per_epoch if cfg.epochs else None
        return min(s for s in (by_epochs, cfg.steps) if s is not None)

    def finished(self) -> bool:
        return self.step >= self.total_steps() or self.reached_target()

    def reached_target(self) -> bool:
        """Whether the latest validation's metric met ``train.stop_at`` (the loop ends right after it, so
        the latest is the one that counts, also in a resumed run)."""
        target = self.cfg.train.stop_at
        if target is None or not self.history:
            return False
        metric = self.history[-1]["val_metric"]
        return metric >= target if self.info.higher_is_better else metric <= target

    def history_has(self, step: int) -> bool:
        return bool(self.history) and self.history[-1]["step"] == step

    def examplebatch_on(self):
        dataset = self.task.dataset("val")
        return batch_on(self.task, dataset, list(range(min(len(dataset), 32))), self.device)

    def run_label(self) -> str:
        return f"{self.cfg.model.cell}/{self.cfg.task.name}"

    def _check_loss_names(self, terms: Dict[str, Any]) -> None:
        if self.loss_names_checked:
            return
        unknown = [k for k in self.cfg.train.loss_weights if k not in terms]
        if unknown:
            raise ConfigError(
                f"train.loss_weights: unknown loss term {unknown[0]!r}; the model "
                f"{self.cfg.model.cell!r} provides: {', '.join(sorted(terms)) or 'none'}"
            )
        self.loss_names_checked = True


# ---- pieces ----------------------------------------------------------------------------------------
def _progress(total: int, initial: int, enabled: bool, label: str):
    """The progress bar of a run; a disabled tqdm when ``enabled`` is False (not the main rank, --no-progress)."""
    from tqdm.auto import tqdm  # the train extra

    return tqdm(
        total=total, initial=initial, desc=label, unit="step", dynamic_ncols=True, leave=False, disable=not enabled
    )
