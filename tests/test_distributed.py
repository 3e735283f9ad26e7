"""Data-parallel training: two gloo processes on this CPU (loopback) end with the weights of one process
trained on the same global batches; sharding drops and repeats no sample; reductions are sums and counts.

The processes are started with ``torch.multiprocessing.spawn``; each sets torchrun's variables (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT=a free port) and calls ``distributed.setup``.
"""

import faulthandler
import inspect
import os
import socket

import pytest
import torch
import torch.multiprocessing as mp
from torch import nn

from ltdrnn import distributed as D
from ltdrnn.train import epoch_order

WORLD = 2


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def become_rank(rank: int, port: int) -> None:
    # a rank stuck in a collective prints every thread's stack and exits, so the test fails instead of hanging
    faulthandler.dump_traceback_later(120, exit=True)
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    torch.set_num_threads(1)


# ---- without processes ------------------------------------------------------------------------------
@pytest.mark.parametrize("batch", [1, 2, 5, 8, 13])
@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_shards_cover_a_batch_once_and_differ_by_at_most_one(batch, ranks):
    bounds = [D.shard_bounds(batch, ranks, r) for r in range(ranks)]
    assert bounds[0][0] == 0 and bounds[-1][1] == batch
    assert all(bounds[r][1] == bounds[r + 1][0] for r in range(ranks - 1))
    sizes = [stop - start for start, stop in bounds]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_a_single_process_is_untouched():
    assert not D.active() and D.is_main() and D.world_size() == 1 and D.rank() == 0
    assert D.local_part([4, 1, 3], "mean") == ([4, 1, 3], 1.0)
    model = nn.Linear(2, 2)
    assert D.wrap_model(model, torch.device("cpu")) is model
    assert D.global_loss(torch.tensor(2.5), 1.0) == 2.5
    assert D.all_gather_object({"a": 1}) == [{"a": 1}]
    assert D.own_entry([1, 2], default=0) == 0 and D.own_entry([7], default=0) == 7
    assert D.setup("cpu") is False  # WORLD_SIZE unset: nothing to join
    with D.process_group("cpu") as created:
        assert created is False and not D.active()


# ---- a plain DDP loop built from the helpers -------------------------------------------------------
def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))


def _data():
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(17, 3, generator=generator)
    return x, x.sum(1, keepdim=True).sin()


def _penalty(model: nn.Module) -> torch.Tensor:
    return 0.01 * model[0].weight.pow(2).sum()  # a parameter term outside the batch: added once


def _loop(reduction: str, steps_log: list, sharded: bool) -> nn.Module:
    """Two epochs of SGD with momentum and clipping over 17 samples in global batches of 8 (8, 8, 1)."""
    x, y = _data()
    model = _model()
    net = D.wrap_model(model, torch.device("cpu")) if sharded else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(2):
        for indices in epoch_order(len(x), 8, seed=3, epoch=epoch):
            factor = 1.0
            if sharded:
                indices, factor = D.local_part(indices, reduction)
            per_sample = (net(x[indices]) - y[indices]).pow(2).squeeze(1)
            loss = per_sample.sum() if reduction == "sum" else per_sample.mean()
            optimizer.zero_grad()
            (loss * factor + _penalty(model)).backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            steps_log.append(D.global_loss(loss.detach(), factor, reduction) if sharded else loss.item())
    return model


class _Sums:
    def __init__(self, loss_sum: float, count: int):
        self.loss_sum, self.count, self.name = loss_sum, count, "kept"


def _loop_worker(rank: int, port: int, out_dir: str) -> None:
    become_rank(rank, port)
    assert D.setup("cpu") is True
    try:
        result = {}
        for reduction in ("mean", "sum"):
            losses = []
            model = _loop(reduction, losses, sharded=True)
            result[reduction] = {"state": model.state_dict(), "losses": losses}
        sums = D.reduce_sums(_Sums(loss_sum=1.5 * (rank + 1), count=rank + 2))
        result["sums"] = (sums.loss_sum, sums.count, sums.name)
        result["run_id"] = D.broadcast_object(f"id-of-rank-{rank}")
        result["gathered"] = D.all_gather_object(rank * 10)
        result["is_main"] = D.is_main()
        result["parts"] = {b: D.local_part(list(range(100, 100 + b)), "mean") for b in (1, 2, 5)}
        result["parts"]["sum"] = D.local_part([7, 8, 9], "sum")
        result["parts"]["owned"] = [i for i in range(5) if D.owns(i)]
        kept = D.wrap_model(_model(), torch.device("cpu"))  # still referenced when the group ends
    finally:
        D.teardown(True)
    result["reducer_after_teardown"] = hasattr(kept, "reducer")
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """Both ranks' outputs of ``_loop_worker`` (one spawn shared by the tests below)."""
    out = tmp_path_factory.mktemp("two_ranks")
    mp.spawn(_loop_worker, args=(free_port(), str(out)), nprocs=WORLD, join=True)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


@pytest.mark.slow
def test_two_gloo_ranks_match_one_process_on_the_same_global_batches(two_ranks):
    ranks = two_ranks
    for reduction in ("mean", "sum"):
        reference_losses = []
        reference = _loop(reduction, reference_losses, sharded=False).state_dict()
        for result in ranks:
            for key, value in reference.items():
                torch.testing.assert_close(result[reduction]["state"][key], value, rtol=1e-5, atol=1e-6)
            # the logged loss is the whole batch's, the same on both ranks
            assert result[reduction]["losses"] == pytest.approx(reference_losses, rel=1e-5)
    assert ranks[0]["sums"] == (1.5 + 3.0, 2 + 3, "kept") == ranks[1]["sums"]
    assert ranks[0]["run_id"] == ranks[1]["run_id"] == "id-of-rank-0"
    assert ranks[0]["gathered"] == ranks[1]["gathered"] == [0, 10]
    assert [r["is_main"] for r in ranks] == [True, False]
    # a wrapper that outlives its group loses its reducer first (distributed.release_wrappers)
    assert [r["reducer_after_teardown"] for r in ranks] == [False, False]


def test_local_parts_split_without_loss_and_an_empty_rank_gets_weight_zero(two_ranks):
    r0, r1 = (result["parts"] for result in two_ranks)
    for batch in (1, 2, 5):
        counted = [i for part in (r0[batch], r1[batch]) if part[1] for i in part[0]]
        assert sorted(counted) == list(range(100, 100 + batch))
        # factors W * b_r / B average to 1 over the ranks, so DDP's mean of gradients is the batch mean
        assert (r0[batch][1] + r1[batch][1]) / WORLD == pytest.approx(1.0)
    assert r0[1] == ([100], 2.0) and r1[1] == ([100], 0.0)  # one sample: rank 1 recomputes it, weight 0
    assert r0[5] == ([100, 101, 102], 1.2) and r1[5] == ([103, 104], 0.8)
    assert r0["sum"] == ([7, 8], 2.0) and r1["sum"] == ([9], 2.0)
    assert r0["owned"] == [0, 2, 4] and r1["owned"] == [1, 3]


# ---- the trainer under DDP (active once train.py calls ltdrnn.distributed) --------------------------
def _trainer_integrated() -> bool:
    from ltdrnn import train as train_module

    return "D.wrap_model" in inspect.getsource(train_module)


integrated = pytest.mark.skipif(
    not _trainer_integrated(), reason="train.py does not call ltdrnn.distributed yet (/tmp/ddp_train.patch)"
)

SETTINGS = {
    # 21 samples in batches of 8: 8, 8, 5 -> shards 4/4, 4/4, 3/2; mean loss, Adam, penalty term
    "mean": [
        "train.steps=6",
        "train.eval_every=3",
        "task.options.n_train=21",
        "train.loss_weights.penalty=0.01",
        "optim.clip_norm=1.0",
    ],
    # 17 samples: 8, 8, 1 -> rank 1's last shard is empty (weight 0); summed loss, SGD with momentum
    "sum": [
        "train.steps=6",
        "train.eval_every=2",
        "task.options.n_train=17",
        "optim.name=sgd",
        "optim.lr=0.05",
        "optim.momentum=0.9",
        "optim.loss_reduction=sum",
    ],
}


def _register_tiny() -> None:
    """The tests' tiny cell and task in a spawned process (no monkeypatch there)."""
    from harness_helpers import TinyCell, TinyTask
    from ltdrnn.cells import registry
    from ltdrnn.tasks import base as task_base

    registry._load_all()
    task_base._load_all()
    registry._REGISTRY["tiny"] = registry.Entry("tiny", TinyCell, "baseline", "test cell")
    task_base._TASKS["tiny"] = TinyTask


def _stop_at_step_5(state) -> None:
    from ltdrnn.train import TrainingInterrupted

    if state["step"] == 5:
        raise TrainingInterrupted("simulated interruption on every rank")


def _train_worker(rank: int, ports: dict, root: str) -> None:
    from pathlib import Path

    from harness_helpers import tiny_config
    from ltdrnn.config import load_config
    from ltdrnn.train import TrainingInterrupted, train

    _register_tiny()
    for name, overrides in SETTINGS.items():
        become_rank(rank, ports[name])
        train(load_config(tiny_config(Path(root) / f"ddp-{name}"), overrides))
    # interrupted after the step-3 checkpoint, resumed: every rank loads rank 0's checkpoint. Leaving the
    # raises block frees the failed run's traceback, the DDP wrapper with it, after its group was torn
    # down; before distributed.release_wrappers that deadlocked a rank about once in ten under load.
    cfg = load_config(tiny_config(Path(root) / "ddp-resume"), SETTINGS["mean"] + ["train.checkpoint_every=3"])
    become_rank(rank, ports["interrupted"])
    with pytest.raises(TrainingInterrupted):
        train(cfg, callbacks=[_stop_at_step_5])
    become_rank(rank, ports["resumed"])
    train(cfg, resume=True)


@pytest.mark.slow
@integrated
def test_train_on_two_ranks_equals_one_process_and_writes_one_row(tmp_path, monkeypatch):
    from harness_helpers import install, tiny_config
    from ltdrnn.config import load_config
    from ltdrnn.results import ResultStore
    from ltdrnn.train import train

    ports = {n: free_port() for n in [*SETTINGS, "interrupted", "resumed"]}
    mp.spawn(_train_worker, args=(ports, str(tmp_path)), nprocs=WORLD, join=True)
    install(monkeypatch)
    torch.set_num_threads(1)
    for name, overrides in SETTINGS.items():
        single = train(load_config(tiny_config(tmp_path / f"one-{name}"), overrides))
        rows = ResultStore(str(tmp_path / f"ddp-{name}" / "results.db")).rows()
        assert len(rows) == 1, name
        ddp_state = torch.load(tmp_path / f"ddp-{name}" / "run" / "last.pt", weights_only=False)
        one_state = torch.load(single["run_dir"] + "/last.pt", weights_only=False)
        assert len(ddp_state["rng_by_rank"]) == WORLD
        for key, value in one_state["model"].items():
            torch.testing.assert_close(ddp_state["model"][key], value, rtol=1e-4, atol=1e-5, msg=key)
        ddp_history, one_history = rows[0]["history"], single["history"]
        assert [h["step"] for h in ddp_history] == [h["step"] for h in one_history]
        for a, b in zip(ddp_history, one_history):  # reduced over ranks: the whole batch's loss
            assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
            assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-4)
        assert rows[0]["metrics"]["test"]["loss"] == pytest.approx(single["metrics"]["test"]["loss"], rel=1e-4)
        if name == "mean":
            resumed_rows = ResultStore(str(tmp_path / "ddp-resume" / "results.db")).rows()
            assert len(resumed_rows) == 1  # the interrupted attempt wrote no row
            resumed = torch.load(tmp_path / "ddp-resume" / "run" / "last.pt", weights_only=False)["model"]
            for key, value in one_state["model"].items():
                torch.testing.assert_close(resumed[key], value, rtol=1e-4, atol=1e-5, msg=key)
