"""Why the paper's iRNN (K = 1, residual reading, clipped) stays at chance on full noise-padded MNIST.

Reads a stored run directory of `ltdrnn reproduce run noisy-mnist` (full data), and for its weights at init
(the seed's fresh model), at the selected checkpoint (best.pt) and at the end (last.pt) measures on 64
validation sequences: the state's size over time, how much of the final state depends on the image (std
across the batch over the mean size), the logits' spread, the gradient of the loss with respect to the
state at a few time steps, and eta.

    OMP_NUM_THREADS=1 .venv/bin/python lab/2026-11-30-irnn-noisy/diagnose.py RUN_DIR [RUN_DIR ...] [KEY=VALUE ...]

With KEY=VALUE overrides only the fresh model is measured (the stored weights belong to the stored config).
"""

import json
import sys
from pathlib import Path

import torch

from ltdrnn.checkpoint import build_task_and_model
from ltdrnn.config import load_config
from ltdrnn.train import seed_everything

PROBE_STEPS = (0, 27, 28, 500, 999)  # first and last image row, first, middle and last noise row


def sizes(model, x, y):
    """The measurements of one set of weights on ``x (B, T, d)``."""
    x = x.clone().requires_grad_(True)
    states = []
    hook = model.rnn.register_forward_hook(lambda m, i, o: states.append(o[0]))
    logits = model(x)
    hook.remove()
    out = states[0]  # (B, T, H), batch first as the model feeds it
    out.retain_grad()
    loss = torch.nn.functional.cross_entropy(logits, y)
    loss.backward()
    by_step = x.grad.norm(dim=-1).mean(0)  # (T,): how much the loss moves with each input row
    norms = out.detach().norm(dim=-1)  # (B, T)
    final = out.detach()[:, -1]
    return {
        "loss": round(float(loss.detach()), 4),
        "state_norm_at": {t: round(float(norms[:, t].mean()), 3) for t in PROBE_STEPS},
        "final_batch_std_over_norm": round(float(final.std(0).norm() / final.norm(dim=-1).mean()), 4),
        "final_active_units": int((final > 0).any(0).sum()),
        "logit_std_across_batch": round(float(logits.detach().std(0).mean()), 4),
        "predicted_classes": sorted(set(logits.argmax(-1).tolist())),
        "dloss_dinput_at": {t: float(f"{float(by_step[t]):.3g}") for t in PROBE_STEPS},
        "image_share_of_input_gradient": round(float(by_step[:28].sum() / by_step.sum()), 4),
        "eta": [round(float(v), 5) for v in dict(model.named_parameters())["rnn.cells.0.steps.log_eta"].exp()],
    }


OVERRIDES = [arg for arg in sys.argv[1:] if "=" in arg]  # e.g. model.options.u_init=identity: init only


def main(run_dirs):
    torch.set_flush_denormal(True)
    for run_dir in map(Path, run_dirs):
        cfg = load_config(str(run_dir / "config.yaml"), OVERRIDES)
        seed_everything(cfg.train.seed)
        task, model = build_task_and_model(cfg)
        data = task.dataset("val")
        x = torch.stack([data[i][0] for i in range(64)])
        y = torch.stack([torch.as_tensor(data[i][1]) for i in range(64)])
        report = {"run": str(run_dir), "init": sizes(model, x, y)}
        for name in ("best.pt", "last.pt") if not OVERRIDES else ():
            state = torch.load(run_dir / name, weights_only=True, map_location="cpu")["model"]
            model.load_state_dict(state)
            model.zero_grad()
            report[name] = sizes(model, x, y)
        print(json.dumps(report))


if __name__ == "__main__":
    main([arg for arg in sys.argv[1:] if "=" not in arg])
