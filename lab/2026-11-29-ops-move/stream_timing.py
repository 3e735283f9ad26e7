"""Per-step cost of streaming SRNN and MIST: ``cell(x_t, h)`` and ``Recurrent.step`` without autograd, at
batch 1 and 16, one thread, CPU float32 (the cell's defaults: backend "auto", which resolves to "cpp").

Run: nice -n 5 .venv/bin/python lab/2026-11-29-ops-move/stream_timing.py [label]
(with PYTHONPATH=<a checkout's src> to time another version). Prints microseconds of this thread's CPU time
per step (time.thread_time: the shared machine's load inflates wall time several-fold), best of 5 repeats of
2000 steps.
"""

import sys
import time
import timeit

import torch

import ltdrnn

D, H = 8, 64
CELLS = {"srnn": {}, "mist": {}}


def best_us(call, number):
    return min(timeit.repeat(call, timer=time.thread_time, number=number, repeat=5)) / number * 1e6


def main(label):
    torch.set_num_threads(1)
    for name, options in CELLS.items():
        for batch in (1, 16):
            torch.manual_seed(0)
            layer = ltdrnn.Recurrent(name, D, H, **options).eval()
            cell = layer.cells[0]
            x = torch.randn(batch, D)
            with torch.no_grad():
                h = cell.init_state(batch)
                state = layer.init_state(batch)
                layer.step(x, state)  # the layer checks the state's layout once
                cell_us = best_us(lambda: cell(x, h), 2000)
                layer_us = best_us(lambda: layer.step(x, state), 2000)
            print(f"{label}\t{name}\tbatch {batch}\tcell(x_t, h) {cell_us:6.1f} us\tRecurrent.step {layer_us:6.1f} us")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
