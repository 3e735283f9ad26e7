"""The iRNN paper's copy model as a hand-written loop, compared with the library's model (step 1 of the screen).

    nice -n 19 .venv/bin/python lab/2026-11-29-irnn-copy/equations.py

For each setting: the copy task's items (one-hot, T = 20), the model the preset builds
(``reproduce/copy200-irnn`` with ``gate=none`` and the named options), and a loop written from the paper:
Eq. 5 with Eq. 8's argument ``phi(P[U(g + h) + W x + b])``, ``U = P = alpha I + V H`` (Sec. 3.2), ``g_0 = 0``,
``h_k = g_K`` (reading "paper"; "residual" adds ``h_{k-1}``), ``eta_k^i`` per time step when asked, a linear
soft-max head at every step and the cross entropy averaged over all T + 20 steps (A.3). Float64; prints the
largest difference of the loss, the logits and every gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ltdrnn.config import load_config
from ltdrnn.models import build_model
from ltdrnn.tasks.base import build_task


def paper_loop(cell, head, x, reading):
    """x (B, T, 10) one-hot -> logits (B, T, 9), every operator written out."""
    B, T, _ = x.shape
    Hd = cell.hidden_size
    eye = torch.eye(Hd, dtype=x.dtype)
    alpha = cell.alpha_init
    if cell.rank is None:
        U = cell.weight_u
    else:  # Sec. 3.2: U = alpha I + V H (alpha = 1 here, as Eq. 8 writes I + V H)
        U = alpha * eye + cell.weight_v @ cell.weight_h
    P = U if cell.projection else eye
    eta = cell.steps.values()  # (K,) or (max_length, K)
    h = torch.zeros(B, Hd, dtype=x.dtype)
    logits = []
    for k in range(T):
        g = torch.zeros_like(h)
        for i in range(cell.K):
            e = eta[i] if eta.dim() == 1 else eta[k, i]
            arg = (g + h) @ U.T + x[:, k] @ cell.weight_x.T + cell.bias
            g = g + e * (torch.relu(arg @ P.T) - alpha * (g + h))
        h = g if reading == "paper" else h + g
        logits.append(h @ head.weight.T + head.bias)
    return torch.stack(logits, 1)


def compare(overrides):
    cfg = load_config(
        "reproduce/copy200-irnn",
        ["task.options.T=20", "model.options.gate=none", "model.options.u_init=uniform", *overrides],
    )
    task = build_task(cfg.task.name, **cfg.task.options)
    torch.manual_seed(1)
    model = build_model(cfg.model, task.info).double()
    items = [task.dataset("train")[i] for i in range(8)]
    x = torch.stack([a for a, _ in items]).double()
    y = torch.stack([b for _, b in items])
    with torch.no_grad():  # a non-zero eta per time step, so a wrong row would show
        model.rnn.cells[0].steps.assign_(0.01 + 0.5 * torch.rand_like(model.rnn.cells[0].steps.values()))
    cell = model.rnn.cells[0]
    results = {}
    for name, fn in (("library", lambda: model(x)), ("paper", lambda: paper_loop(cell, model.output, x, cell.reading))):
        model.zero_grad()
        logits = fn()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        results[name] = (loss.detach(), logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    (la, za, ga), (lb, zb, gb) = results["library"], results["paper"]
    grad_diff = max(float((ga[n] - gb[n]).abs().max() / (gb[n].abs().max() + 1e-300)) for n in ga)
    print(
        f"{' '.join(overrides) or 'defaults':78s} loss {float(la):.6f} vs {float(lb):.6f}  "
        f"logits {float((za - zb).abs().max()):.1e}  grads (rel) {grad_diff:.1e}  "
        f"input {tuple(x.shape)} targets 0..{int(y.max())}, head {tuple(model.output.weight.shape)}"
    )


if __name__ == "__main__":
    torch.set_num_threads(1)
    for extra in (
        ["model.options.reading=paper"],
        ["model.options.reading=paper", "model.options.K=2"],
        ["model.options.reading=paper", "model.options.K=3", "model.options.rank=16"],
        [
            "model.options.reading=paper",
            "model.options.rank=16",
            "model.options.eta_per_time_step=false",
            "model.options.max_length=null",
            "model.options.eta_param=raw",
        ],
        ["model.options.reading=paper", "model.options.rank=4", "model.options.projection=false"],
        ["model.options.reading=residual", "model.options.K=2", "model.options.rank=16"],
    ):
        compare(extra)
