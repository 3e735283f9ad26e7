"""Times SRNN's compiled scan alone (KernelScan: forward, then backward of out.sum()-like random gradient)
at one thread. Usage (from the repository root):

    nice -n 5 .venv/bin/python lab/2026-11-29-srnn-speed/time_kernels.py [--repeats 15]

Prints median ms of srnn_forward and srnn_backward (through KernelScan) per shape.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ltdrnn.ops import kernels
from ltdrnn.ops.srnn_torch import KernelScan

# (name, T, B, d, k): adding (d=2, k=8) and pixel MNIST with three f_r layers of 32 (d=1, k=32)
SHAPES = [
    ("adding T=200 B=50", 200, 50, 2, 8),
    ("adding T=750 B=50", 750, 50, 2, 8),
    ("pixel T=784 B=128 k=32", 784, 128, 1, 32),
]


def time_shape(repeats, T, B, d, k, gate=True):
    torch.manual_seed(0)
    H = 128
    features = torch.relu(torch.randn(T, B, k)).requires_grad_()
    x = torch.rand(T, B, d).requires_grad_()
    w_f = (torch.randn(H, k) / k**0.5).requires_grad_()
    b_f = torch.zeros(H).requires_grad_()
    w_g = torch.randn(H, d) if gate else None
    b_g = torch.zeros(H) if gate else None
    if gate:
        w_g.requires_grad_(), b_g.requires_grad_()
    h0 = torch.zeros(B, H)
    dh = torch.randn(T, B, H) * 1e-2
    fw, bw = [], []
    for r in range(repeats + 2):
        start = time.perf_counter()
        h = KernelScan.apply(features, w_f, b_f, x, w_g, b_g, h0, True)
        mid = time.perf_counter()
        h.backward(dh)
        end = time.perf_counter()
        if r >= 2:
            fw.append((mid - start) * 1e3)
            bw.append((end - mid) * 1e3)
    return statistics.median(fw), statistics.median(bw)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", default="")
    parser.add_argument("--no-gate", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    assert kernels.load_torch_ops("srnn"), "the SRNN kernels did not build"
    for name, *shape in SHAPES:
        if args.only in name:
            fw, bw = time_shape(args.repeats, *shape, gate=not args.no_gate)
            print(f"{name}{' no gate' if args.no_gate else ''}: forward {fw:.2f} ms, backward {bw:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
