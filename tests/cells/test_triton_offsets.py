"""Every Triton kernel's index arithmetic at batch sizes whose offsets pass 2^31, without the memory.

Each cell's ``"triton"`` scan and its backward run at a small batch in Triton's interpreter, and each kernel
launch is recorded. The launch is then run again in the interpreter as its last program at a batch size where
``T * B * H``, ``B * 3H`` or ``B * H`` passes 2^31, with every pointer argument given a base address of its own
and every load and store recorded instead of made (no memory behind them). A 32-bit offset wraps there, and the
address it gives falls outside its buffer: every address must lie inside the buffer it was formed from, at the
buffer's size for that batch, and the last program must reach the last element of one of them.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from triton_helpers import DEVICE, build, requires_triton, sequence  # sets TRITON_INTERPRET=1 first

pytestmark = [
    requires_triton,
    pytest.mark.skipif(DEVICE != "cpu", reason="replays the launches in Triton's interpreter"),
]

STEPS, BATCH, HIDDEN = 4, 37, 20  # distinct sizes (and 3 programs of 16 rows), so that a buffer's batch axis shows
#: batch sizes where the offsets pass 2^31 (H = 20): T B H only (every step's offsets fit); B 3H; B H itself
LARGE_BATCHES = {"time": (1 << 25) + 37, "step": (1 << 26) + 37, "state": (1 << 27) + 37}
CELLS = {
    "tarnn": {"K": 2, "A": "coupled"},
    "tarnn_outside": {"K": 2, "gate": "outside", "eta_per_time_step": True, "max_length": STEPS},
    "irnn": {"K": 2, "gate": "outside", "eta_per_time_step": True, "max_length": STEPS},
    "irnn_shared": {"learn_alpha": True},
    "srnn": {},
    "mist": {"num_delays": 2},
    "sarnn": {},
}


@functools.cache
def _recorded_launches(name: str) -> list:
    """``(executor, args, kwargs)`` of every kernel launch of one scan and its backward at the small sizes."""
    from triton.runtime import interpreter

    cell = build(name.split("_")[0], input_size=2, hidden_size=HIDDEN, **CELLS[name]).float()
    x, state, lengths = sequence(cell, STEPS, BATCH)
    x, state = x.float().requires_grad_(), state.float().requires_grad_()
    if getattr(cell, "per_time_step", False):
        state = (state, torch.zeros(BATCH, dtype=torch.int64))
    launches, real = [], interpreter.GridExecutor.__call__

    def record(executor, *args, **kwargs):
        launches.append((executor, args, kwargs))
        return real(executor, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(interpreter.GridExecutor, "__call__", record)
        out, final = cell.scan(x, state, lengths, backend="triton")
        final = final[0] if isinstance(final, tuple) else final
        (out.sum() + final.sum()).backward()
    return launches


def _programs(executor, batch: int) -> int:
    """The launch's programs at ``batch``: one per 16 rows, or (SRNN) one per 256 elements of the state."""
    if "LANES" in executor.arg_names:
        return -(-batch * HIDDEN // 256)
    return -(-batch // 16)


class _Buffers:
    """The pointer arguments at their sizes for the large batch, each at a base address of its own."""

    def __init__(self, tensors: list, batch: int, programs: int, small_programs: int) -> None:
        self.ranges = []
        for i, t in enumerate(tensors):
            sizes = [batch if n == BATCH else programs if n == small_programs else n for n in t.shape]
            count = int(np.prod(sizes, dtype=object)) if sizes else 1
            self.ranges.append(((i + 1) << 44, count, t.element_size(), tuple(sizes)))
        # by address: the interpreter hands the kernel new tensor objects on the same memory
        self.bases = {}
        for t, (base, *_) in zip(tensors, self.ranges):
            self.bases.setdefault(t.data_ptr(), base)
        self.reached_end = False
        self.outside = []

    def check(self, kernel: str, addresses: np.ndarray) -> None:
        for address in np.unique(addresses.astype(np.uint64)).tolist():
            for base, count, size, sizes in self.ranges:
                if base <= address < base + (1 << 44):
                    element, rest = divmod(address - base, size)
                    if rest or element >= count:
                        self.outside.append(f"{kernel}: element {element} of a {sizes} buffer")
                    self.reached_end |= element == count - 1 and len(sizes) > 1
                    break
            else:
                self.outside.append(f"{kernel}: address {address:#x} before every buffer (a negative offset)")


def _replay_as_last_program(executor, args: tuple, kwargs: dict, batch: int) -> _Buffers:
    """The recorded launch again at ``batch``, as its last program, the memory accesses only recorded."""
    from triton.runtime import interpreter

    small_programs, programs = _programs(executor, BATCH), _programs(executor, batch)
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    buffers = _Buffers(tensors, batch, programs, small_programs)
    kernel = executor.fn.__name__
    args = tuple(batch if name == "B" else a for name, a in zip(executor.arg_names, args))
    builder, real_cvt = interpreter.interpreter_builder, interpreter._implicit_cvt

    def pointer(arg):  # a tensor argument becomes its own base address
        converted = real_cvt(arg)
        if isinstance(arg, torch.Tensor):
            converted.handle.data = np.array([buffers.bases[arg.data_ptr()]], dtype=np.uint64)
        return converted

    def load(ptrs, mask, other, cache_policy, is_volatile):
        buffers.check(kernel, ptrs.data[mask.data])
        dtype = ptrs.get_element_ty()
        return interpreter.TensorHandle(np.zeros(ptrs.data.shape, interpreter._get_np_dtype(dtype)), dtype)

    def store(ptrs, value, mask, cache_policy):
        buffers.check(kernel, ptrs.data[mask.data])

    def program_id(axis):
        return interpreter.TensorHandle(
            np.array([programs - 1 if axis == 0 else 0], dtype=np.int32), interpreter.tl.int32
        )

    def num_programs(axis):
        return interpreter.TensorHandle(np.array([programs if axis == 0 else 1], dtype=np.int32), interpreter.tl.int32)

    replay = interpreter.GridExecutor(executor.fn, executor.arg_names, (1,))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(interpreter, "_implicit_cvt", pointer)
        patch.setattr(builder, "create_masked_load", load)
        patch.setattr(builder, "create_masked_store", store)
        patch.setattr(builder, "create_get_program_id", program_id)
        patch.setattr(builder, "create_get_num_programs", num_programs)
        with np.errstate(over="ignore"):
            replay(*args, **kwargs)
    return buffers


@pytest.mark.parametrize("cell", sorted(CELLS))
@pytest.mark.parametrize("bound", sorted(LARGE_BATCHES))
def test_every_offset_stays_inside_its_buffer_past_2_to_the_31(cell, bound):
    launches = _recorded_launches(cell)
    assert len(launches) == 2, f"expected one forward and one backward launch, got {len(launches)}"
    for executor, args, kwargs in launches:
        buffers = _replay_as_last_program(executor, args, kwargs, LARGE_BATCHES[bound])
        assert not buffers.outside, "\n".join(sorted(set(buffers.outside))[:8])
        assert buffers.reached_end, f"{executor.fn.__name__}: the last program never reached its last rows"


def test_the_large_batches_pass_2_to_the_31_where_named():
    time, step, state = (LARGE_BATCHES[k] for k in ("time", "step", "state"))
    assert time * 3 * HIDDEN < 2**31 < time * HIDDEN * STEPS
    assert step * HIDDEN < 2**31 < step * 3 * HIDDEN
    assert 2**31 < state * HIDDEN and state < 2**31  # B itself still a 32-bit argument, as Triton passes it


def test_the_replay_sees_a_wrapped_offset():
    """The check itself: a kernel whose offset is formed in 32 bits is caught at the large batch."""
    import triton
    import triton.language as tl

    @triton.jit
    def copy_rows(src_ptr, dst_ptr, B, H, BB: tl.constexpr, HP: tl.constexpr):
        rows = tl.program_id(0) * BB + tl.arange(0, BB)
        cols = tl.arange(0, HP)
        mask = (rows < B)[:, None] & (cols < H)[None, :]
        block = rows[:, None] * H + cols[None, :]
        tl.store(dst_ptr + block, tl.load(src_ptr + block, mask=mask), mask=mask)

    src = torch.zeros(BATCH, HIDDEN)
    dst = torch.empty_like(src)
    from triton.runtime import interpreter

    launches, real = [], interpreter.GridExecutor.__call__
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            interpreter.GridExecutor, "__call__", lambda e, *a, **k: launches.append((e, a, k)) or real(e, *a, **k)
        )
        copy_rows[(3,)](src, dst, BATCH, HIDDEN, BB=16, HP=32)
    buffers = _replay_as_last_program(*launches[0], LARGE_BATCHES["state"])
    assert buffers.outside


def _kernels() -> dict:
    """Every kernel of the ``ltdrnn.ops.*_triton`` modules (jitted, interpreted or autotuned), by ``module.name``:
    the objects named ``*_kernel`` whose innermost ``fn`` is a function of that module (the jitted helpers they
    call have other names)."""
    import importlib
    import pkgutil

    import ltdrnn.ops

    found = {}
    for info in pkgutil.iter_modules(ltdrnn.ops.__path__):
        if info.name.endswith("_triton"):
            module = importlib.import_module(f"ltdrnn.ops.{info.name}")
            for name, value in vars(module).items():
                inner = value
                while hasattr(inner, "fn") and hasattr(inner, "arg_names"):
                    inner = inner.fn
                ours = getattr(inner, "__module__", None) == module.__name__
                if inner is not value and ours and name.endswith("_kernel"):
                    found[f"{info.name}.{name}"] = value
    return found


def test_every_kernel_is_replayed_here():
    """A new kernel joins CELLS, so that its offsets are checked too."""
    launched = set()
    for name in CELLS:
        launched |= {f"{e.fn.__module__.rsplit('.', 1)[-1]}.{e.fn.__name__}" for e, *_ in _recorded_launches(name)}
    assert launched == set(_kernels())


def test_no_kernel_autotunes_on_the_batch_size():
    """An autotune key on B would tune again for every batch size a model meets (the last batch of an epoch,
    evaluation, streaming): each a pause of seconds on a GPU."""
    from triton.runtime.autotuner import Autotuner

    kernels = _kernels()
    assert kernels, "no kernels found"
    for name, kernel in kernels.items():
        keys = set(getattr(kernel, "keys", ())) if isinstance(kernel, Autotuner) else set()
        assert not keys & {"B", "batch", "batch_size"}, f"{name} autotunes on the batch size: key {sorted(keys)}"
