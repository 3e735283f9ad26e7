"""Data-parallel training on ``torch.distributed``: the few pieces the trainer calls.

Launch with torchrun, which sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT`` for every process::

    torchrun --nproc_per_node 2 -m ltdrnn.cli train quick/adding-lstm

Without those variables (``WORLD_SIZE`` unset or 1) every function here is a no-op that returns its
input, so the single-process trainer pays nothing and computes exactly what it computed before.

What each rank does with a global batch of ``B`` sample indices (``epoch_order`` cuts the epoch into
the same global batches on every rank, from ``(seed, epoch)`` alone)::

    W ranks, B = q * W + s (0 <= s < W)
    rank r takes the contiguous slice of size q + 1 if r < s else q       (no sample twice, none dropped)
    a rank whose slice is empty (B < W, only in an epoch's last batch) recomputes sample 0 with weight 0

The gradient must equal the single-process gradient of the whole batch. DDP averages gradients over
ranks, so rank r multiplies its task loss by the factor ``local_part`` returns::

    mean reduction:  W * b_r / B      (W/B * sum over the slice; averaged over W: 1/B * sum over B)
    sum reduction:   W                 (sum over the slice; averaged over W: sum over B)

Extra loss terms of the model (``model.losses()``, regularisers of the parameters) are not scaled: each
rank adds the same term, and the average over ranks is that term once. Terms that average over the
batch (SA-RNN's budget) are averaged over each rank's slice, which equals the batch average only when
the slices are equal; that is the one approximation.

Logged losses and metrics are reduced as sums and counts (``global_loss``, ``reduce_sums``), never as a
mean of per-rank means, so every rank sees the same number and takes the same decision (divergence,
best checkpoint, early stop). Only rank 0 writes files and result rows (``is_main``).

The trainer uses, in order: ``process_group`` around a run, ``local_device``, ``broadcast_object`` (run
id), ``wrap_model`` and ``seed_rank`` after building the model, ``local_part`` and ``global_loss`` in a
step, ``owns`` / ``reduce_sums`` / ``all_reduce_sum`` in evaluation, ``all_gather_object`` (RNG states)
when saving and ``load_on_main`` / ``own_entry`` when resuming.
"""

from __future__ import annotations

import gc
import os
import random
import weakref
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from .errors import ConfigError

# different ranks must draw different dropout masks; the offset keeps rank seeds apart from run seeds
RANK_SEED_STRIDE = 1_000_003

# every DistributedDataParallel wrapper made by ``wrap_model``, so ``teardown`` can release their reducers
_WRAPPERS: "weakref.WeakSet[nn.Module]" = weakref.WeakSet()


# ---- the process group ------------------------------------------------------------------------------
def launched() -> bool:
    """Whether this process was started as one of several ranks (torchrun's ``WORLD_SIZE`` > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def active() -> bool:
    """Whether a process group with more than one rank is running."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def setup(device: str = "cpu") -> bool:
    """Join the process group described by torchrun's environment; returns whether this call created it.

    Backend: ``nccl`` when ``device`` is CUDA (each rank on ``cuda:LOCAL_RANK``), ``gloo`` otherwise.
    Does nothing when the process was not launched as one of several ranks, or the group exists already
    (then the caller owns it and must also end it).
    """
    if not launched() or dist.is_initialized():
        return False
    for name in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        if name not in os.environ:
            raise RuntimeError(
                f"distributed setup: WORLD_SIZE={os.environ['WORLD_SIZE']} but {name} is not "
                "set; launch with torchrun, which sets RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT"
            )
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.set_device(local_rank())
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    return True


def teardown(created: bool, wait: bool = True) -> None:
    """End the process group if ``setup`` created it; with ``wait``, after every rank has arrived.

    The DDP wrappers' reducers are released first (``release_wrappers``), whatever still refers to the
    wrappers (a failed run's traceback does).
    """
    if created and dist.is_initialized():
        if wait:
            dist.barrier()
        release_wrappers()
        dist.destroy_process_group()


def release_wrappers() -> None:
    """Free the reducer (and its logger) of every DDP wrapper ``wrap_model`` made; the wrappers become
    unusable for training.

    Why: a reducer holds the process group through a C++ pointer whose destructor keeps the GIL. If the
    reducer is freed after ``destroy_process_group`` it is the group's last owner, and destroying a gloo
    group joins its worker threads, one of which may still need the GIL to free its last finished work:
    a deadlock. It was seen (gdb) when a rank's run failed and the traceback kept the wrapper alive past
    the teardown. Freed here, while the group is still registered, the reducer drops one reference only,
    and ``destroy_process_group`` frees the group with the GIL released.
    """
    gc.collect()  # wrappers that are garbage in reference cycles go now, while the group is alive
    for wrapper in list(_WRAPPERS):
        for name in ("logger", "reducer"):
            wrapper.__dict__.pop(name, None)
    _WRAPPERS.clear()


@contextmanager
def process_group(device: str = "cpu") -> Iterator[bool]:
    """``setup`` on entry, ``teardown`` on exit; yields whether this block created the group.

    After an exception the group ends without the final barrier: the other ranks may never get there.
    """
    created = setup(device)
    try:
        yield created
    except BaseException:
        teardown(created, wait=False)
        raise
    teardown(created)


def rank() -> int:
    return dist.get_rank() if active() else 0


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main() -> bool:
    """True on rank 0 (and in a single process): the one rank that writes checkpoints and result rows."""
    return rank() == 0


def is_launch_main() -> bool:
    """:func:`is_main`, also before the process group exists: rank 0 of the launch (torchrun's ``RANK``)."""
    return is_main() if active() else int(os.environ.get("RANK", "0")) == 0


def barrier() -> None:
    if active():
        dist.barrier()


def local_device(device: str) -> torch.device:
    """The device of this rank: ``cuda`` becomes ``cuda:LOCAL_RANK`` under torchrun; others unchanged."""
    chosen = torch.device(device)
    if chosen.type == "cuda" and chosen.index is None and launched():
        return torch.device("cuda", local_rank())
    return chosen


def usable_device(name: str) -> torch.device:
    """The torch device called ``name`` (``cuda`` -> this rank's GPU under torchrun), checked usable; a
    device this machine lacks is a ConfigError naming ``train.device``."""
    try:
        device = local_device(name)
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as error:
        raise ConfigError(
            f"train.device: expected a torch device available here (such as cpu), got "
            f"{name!r} ({str(error).splitlines()[0]})"
        ) from None
    return device


# ---- seeds and the model ----------------------------------------------------------------------------
def rank_seed(seed: int) -> int:
    """The seed of this rank's random streams (dropout, noise) after the model is built."""
    return seed + RANK_SEED_STRIDE * rank()


def seed_rank(seed: int) -> None:
    """Give every rank its own random streams; a single process keeps its streams untouched.

    Call after the model is built: initialisation uses the run seed on every rank (and DDP broadcasts
    rank 0's weights anyway); what follows must not repeat the same dropout mask on every rank.
    """
    if not active():
        return
    seed = rank_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def wrap_model(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` inside DistributedDataParallel when several ranks run, else ``model`` itself.

    Use the wrapper for the training forward pass only; keep the bare model for ``state_dict``,
    ``losses()``, ``aux``, ``set_epoch`` and evaluation. ``find_unused_parameters`` stays off: extra loss
    terms use parameters outside the forward pass, and DDP would reduce those too early if it searched
    the graph for unused ones. A cell must therefore use all its parameters in every forward pass.
    """
    if not active():
        return model
    device_ids = [device.index] if device.type == "cuda" else None
    wrapper = nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    _WRAPPERS.add(wrapper)
    return wrapper


# ---- data -------------------------------------------------------------------------------------------
def shard_bounds(batch: int, ranks: int, which: int) -> Tuple[int, int]:
    """``[start, stop)`` of rank ``which``'s slice of a batch of ``batch`` items over ``ranks`` ranks."""
    base, extra = divmod(batch, ranks)
    start = which * base + min(which, extra)
    return start, start + base + (1 if which < extra else 0)


def local_part(indices: Sequence[int], reduction: str = "mean") -> Tuple[List[int], float]:
    """This rank's slice of a global batch and the factor for its task loss (see the module notes).

    Returns ``(indices, 1.0)`` in a single process. A rank with an empty slice gets the batch's first
    index and factor 0, so it still runs forward and backward (DDP needs every rank in every step)
    without counting that sample.
    """
    indices = list(indices)
    if not active():
        return indices, 1.0
    ranks = world_size()
    start, stop = shard_bounds(len(indices), ranks, rank())
    if start == stop:
        return indices[:1], 0.0
    if reduction == "sum":
        return indices[start:stop], float(ranks)
    if reduction != "mean":
        raise ValueError(f"reduction: expected 'mean' or 'sum', got {reduction!r}")
    return indices[start:stop], ranks * (stop - start) / len(indices)


def owns(batch_index: int) -> bool:
    """Whether this rank evaluates evaluation batch ``batch_index`` (batches dealt round-robin)."""
    return batch_index % world_size() == rank()


# ---- reductions -------------------------------------------------------------------------------------
def all_reduce_sum(values: Sequence[float]) -> List[float]:
    """Element-wise sums over ranks (float64, so counts stay exact)."""
    if not active():
        return [float(v) for v in values]
    tensor = torch.tensor([float(v) for v in values], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        tensor = tensor.cuda()
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.cpu().tolist()


def global_loss(loss: torch.Tensor | float, factor: float, reduction: str = "mean") -> float:
    """The batch loss a single process would log, from this rank's ``loss`` and its ``local_part`` factor.

    Sums over ranks ``loss * factor`` (the rank's share of the whole batch's loss, already divided by
    ``B`` for the mean) and divides by ``W``, which undoes the factor's ``W``: a sum of sums, not a mean
    of per-rank means.
    """
    value = float(loss)
    if not active():
        return value
    (total,) = all_reduce_sum([value * factor if factor else 0.0])
    return total / world_size()


def reduce_sums(accumulator: Any, names: Optional[Iterable[str]] = None) -> Any:
    """Sum numeric attributes of ``accumulator`` over ranks, in place (e.g. an Evaluator's sums and
    counts); ``names`` picks them (default: every int/float attribute). Returns the accumulator."""
    if not active():
        return accumulator
    if names is None:
        names = [k for k, v in vars(accumulator).items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    names = sorted(names)  # the same order on every rank
    totals = all_reduce_sum([getattr(accumulator, k) for k in names])
    for name, total in zip(names, totals):
        setattr(accumulator, name, int(round(total)) if isinstance(getattr(accumulator, name), int) else total)
    return accumulator


# ---- objects: run ids, checkpoints, RNG states ------------------------------------------------------
def broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (a run id, a loaded checkpoint, an early-stop decision)."""
    if not active():
        return obj
    holder = [obj if is_main() else None]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def all_gather_object(obj: Any) -> List[Any]:
    """``[obj of rank 0, obj of rank 1, ...]`` on every rank; ``[obj]`` in a single process."""
    if not active():
        return [obj]
    gathered: List[Any] = [None] * world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def own_entry(per_rank: Optional[List[Any]], default: Any) -> Any:
    """This rank's item of a list saved by ``all_gather_object``; ``default`` when the list is missing or
    was saved by a different number of ranks (then every rank resumes from rank 0's state)."""
    if per_rank is None or len(per_rank) != world_size():
        return default
    return per_rank[rank()]


def load_on_main(load, path) -> Any:
    """``load(path)`` on rank 0 (None if the file is missing), handed to every rank.

    All ranks first wait at a barrier, so none reads while another is still writing, and all resume
    from the same file, even when only rank 0's machine has the run directory.
    """
    barrier()
    obj = load(path) if is_main() and Path(path).exists() else None
    return broadcast_object(obj)
