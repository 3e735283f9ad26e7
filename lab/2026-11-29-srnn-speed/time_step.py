"""Times SRNN's training step (forward, backward, RMSprop) at one thread, "cpp" backend, at the
reproduction's shapes. Usage (from the repository root):

    nice -n 5 .venv/bin/python lab/2026-11-29-srnn-speed/time_step.py [--steps 20] [--profile]

Prints one line per shape: median and min ms per step over --steps steps after 3 warm-up steps. Which
code it times is whatever `ltdrnn` imports: put an exported old tree first on PYTHONPATH for the "before"
(README.md here).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ltdrnn.models import SequenceModel

# (name, T, B, d, output size, head, cell options): adding as reproduce/adding200-srnn and adding750-srnn,
# pixel MNIST as reproduce/pixel-srnn (f_r one layer of 32: the table-of-pieces path) and
# srnn/pmnist (three layers of 32: the kernel's readout path) at the batch of the brief
SHAPES = [
    ("adding T=200 B=50", 200, 50, 2, 1, "regressor", {"hyper_size": 8, "fr_layers": 1}),
    ("adding T=750 B=50", 750, 50, 2, 1, "regressor", {"hyper_size": 8, "fr_layers": 1}),
    ("pixel T=784 B=128 k=32 L=1", 784, 128, 1, 10, "classifier", {"hyper_size": 32, "fr_layers": 1}),
    ("pixel T=784 B=128 k=32 L=3", 784, 128, 1, 10, "classifier", {"hyper_size": 32, "fr_layers": 3}),
]


def step_times(steps: int, T: int, B: int, d: int, out: int, head: str, options: dict, profile: bool):
    torch.manual_seed(0)
    model = SequenceModel("srnn", d, 128, out, head, activation="relu", backend="cpp", **options)
    optim = torch.optim.RMSprop(model.parameters(), lr=1e-3, alpha=0.9)
    x = torch.rand(B, T, d)
    y = torch.randn(B, 1) if head == "regressor" else torch.randint(0, 10, (B,))
    loss_fn = torch.nn.functional.mse_loss if head == "regressor" else torch.nn.functional.cross_entropy

    def one():
        optim.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optim.step()

    for _ in range(3):
        one()
    if profile:
        from torch.profiler import profile as prof

        with prof() as p:
            for _ in range(5):
                one()
        print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        one()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", default="", help="a substring of the shapes' names")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name, *shape in SHAPES:
        if args.only in name:
            median, best = step_times(args.steps, *shape, args.profile)
            print(f"{name}: median {median:.1f} ms, min {best:.1f} ms", flush=True)


if __name__ == "__main__":
    main()
