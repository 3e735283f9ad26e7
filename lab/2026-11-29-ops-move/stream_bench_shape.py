"""Per-step cost of streaming in ``ltdrnn bench``'s stream section's shape: the bench's own loops
(``bench.timing.stream_runs``: ``cell(x_t, state)`` and ``Recurrent.step`` without autograd, batch 1), its
subjects (``sarnn[gru]``, ``irnn[K=1,lowrank]``, ``srnn[relu]``, ``mist``), pixel_mnist's input (d = 1),
H = 128, the bench's process settings (2 threads, the malloc tuning).

Run: nice -n 5 .venv/bin/python lab/2026-11-29-ops-move/stream_bench_shape.py [label] [subject ...]
(with PYTHONPATH=<a checkout's src> to time another version). Prints microseconds of this process's CPU time
per step (time.process_time: the shared machine's load inflates wall time several-fold), best and median of
15 loops of 1000 steps, the cell's and the layer's loops alternating.
"""

import statistics
import sys
import time

import ltdrnn
from ltdrnn.bench.subjects import VARIANTS, Subject
from ltdrnn.bench.timing import prepare_process, stream_runs

D, H, STEPS, REPEATS = 1, 128, 1000, 15
SUBJECTS = {v.name: Subject(v.name, v.cell, v.options) for v in VARIANTS}
SUBJECTS["mist"] = Subject("mist", "mist")
DEFAULT = ("sarnn[gru]", "irnn[K=1,lowrank]", "srnn[relu]", "mist")


def cpu_us(loop) -> float:
    start = time.process_time()
    loop()
    return (time.process_time() - start) / STEPS * 1e6


def main(label, names):
    prepare_process(2, True)
    for name in names:
        subject = SUBJECTS[name]
        layer = subject.layer(D, H)  # as the bench builds it (training mode)
        cell_loop, layer_loop = stream_runs(subject, layer, D, H, STEPS)
        cell_loop(), layer_loop()  # warm-up: the operand caches, the layer's layout check
        cell, step = [], []
        for _ in range(REPEATS):
            cell.append(cpu_us(cell_loop))
            step.append(cpu_us(layer_loop))
        print(
            f"{label}\t{name:18}\tcell best {min(cell):5.2f} med {statistics.median(cell):5.2f} us"
            f"\tlayer.step best {min(step):5.2f} med {statistics.median(step):5.2f} us"
            f"\t({ltdrnn.__file__.split('/src/')[0]})"
        )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "", sys.argv[2:] or DEFAULT)
