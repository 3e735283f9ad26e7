"""Each source cell's default layer on long random inputs at initialisation (the long-input check): the
largest |output| and whether the output and every parameter gradient are finite, at T = 1,000, 10,000
and 100,000.

    python lab/2026-11-26-long-inputs/long_inputs.py [--cells tarnn,srnn,mist,irnn,sarnn] [--lengths 1000,10000,100000]
        [--set irnn.u_init=uniform]

The layer is ``ltdrnn.Recurrent(cell, input_size=4, hidden_size=64)`` with the cell's defaults (plus any
``--set CELL.OPTION=VALUE``), seeded with 0; the input is ``N(0, 1)`` of shape ``(4, T, 4)``; the loss is the
sum of the last step's outputs. One thread, denormals flushed. One JSON line per cell and length.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import torch
import yaml

import ltdrnn


def probe(cell: str, steps: int, options: dict) -> dict:
    torch.manual_seed(0)
    rnn = ltdrnn.Recurrent(cell, input_size=4, hidden_size=64, **options)
    x = torch.randn(4, steps, 4)
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, _ = rnn(x)
        out[:, -1].sum().backward()
    grads = [p.grad for p in rnn.parameters() if p.grad is not None]
    return {
        "cell": cell,
        "options": options,
        "T": steps,
        "max_abs_output": out.abs().max().item(),
        "max_abs_last": out[:, -1].abs().max().item(),
        "output_finite": bool(torch.isfinite(out).all()),
        "gradients_finite": all(bool(torch.isfinite(g).all()) for g in grads),
        "max_abs_gradient": max(g.abs().max().item() for g in grads),
        "warnings": sorted({type(w.message).__name__ for w in caught}),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default="tarnn,srnn,mist,irnn,sarnn")
    parser.add_argument("--lengths", default="1000,10000,100000")
    parser.add_argument("--set", action="append", default=[], metavar="CELL.OPTION=VALUE")
    args = parser.parse_args()
    options: dict = {}
    for item in args.set:
        key, value = item.split("=", 1)
        cell, name = key.split(".", 1)
        options.setdefault(cell, {})[name] = yaml.safe_load(value)
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    for cell in args.cells.split(","):
        for steps in (int(t) for t in args.lengths.split(",")):
            print(json.dumps(probe(cell, steps, options.get(cell, {}))), flush=True)


if __name__ == "__main__":
    main()
