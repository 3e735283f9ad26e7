"""Where a copy model's recall fails: cross entropy and accuracy at each of the ten recall steps.

    python lab/2026-11-26-seed-screens/copy_recall.py CHECKPOINT_OR_RUN_DIR [N]

Runs the model on the first N (default 512) sequences of its test split and prints one JSON line: the mean
cross entropy, the cross entropy and accuracy at each recall step (the last ten), and the cross entropy on the
other steps (the blanks it must hold). Chance accuracy on a recall step is 1/8.
"""

import json
import sys

import torch
import torch.nn.functional as F

from ltdrnn.checkpoint import restore_model


def main(path: str, n: int) -> None:
    torch.set_num_threads(1)
    _, task, model = restore_model(path, [f"task.options.n_test={n}"])
    model.eval()
    test = task.dataset("test")
    x = torch.stack([test[i][0] for i in range(n)])
    y = torch.stack([test[i][1] for i in range(n)])
    with torch.no_grad():
        logits = model(x, None)
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none").reshape(y.shape)
    right = (logits.argmax(-1) == y).float()
    print(json.dumps({
        "checkpoint": path,
        "cross_entropy": float(ce.mean()),
        "recall_cross_entropy": [round(float(v), 4) for v in ce[:, -10:].mean(0)],
        "recall_accuracy": [round(float(v), 4) for v in right[:, -10:].mean(0)],
        "other_cross_entropy": float(ce[:, :-10].mean()),
    }))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 512)
