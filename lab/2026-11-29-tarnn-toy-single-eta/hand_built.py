"""A hand-built 2-unit TARNN with the printed single eta (Eq. 6: eta per Euler step, shared over time) that solves
the toy task: the Eq. 6 cell can represent the solution; what it lacks is a training path to it.

    python lab/2026-11-29-tarnn-toy-single-eta/hand_built.py

Paper reading, gate inside, ReLU, A = -I, K = 5, eta = 1 at every Euler step, U = 0, B2 = I. Then
G(z) = -(z - s) + c(x, s) with c = B1 x + b_lin + relu(W1 x + W2 s + b), and K Euler steps give
s_m = s + c (1 - (1 - beta)^K): beta ~ 1 writes c in full, beta ~ 0 keeps s.

- unit 1 is a clock that also stores b1: b_lin = 1, so s1 = m after m steps while beta1 = sigmoid(-20 (s1 - 13.5))
  is open; relu(2 x + 4 (s1 - 11.5)) adds 2 + 2 x only once s1 = 12, i.e. at step 12, which moves s1 to
  15 + 2 b1 and closes beta1 for steps 13-15;
- unit 2 stores b0: c2 = 1 + x, and beta2 = sigmoid(40 (s1 - 3.5) - 600 s2) is open only when s1 = 4 (step 4)
  and s2 = 0; afterwards s2 = 1 + b0 >= 1 keeps it closed.

The head scores class c = 2 b0 + b1 by -||s - mu_c||^2 with mu_c = (15 + 2 b1, 1 + b0) (the shared ||s||^2 dropped).
Prints the test accuracy on 10,000 toy sequences (the task's test split), and the largest distance of a final
state from its class centre.
"""

import torch

from ltdrnn.models import SequenceModel
from ltdrnn.tasks import build_task


def hand_built() -> SequenceModel:
    model = SequenceModel("tarnn", 1, 2, 4, "classifier", K=5, eta=1.0)
    cell = model.rnn.cells[0]
    with torch.no_grad():
        for name, parameter in cell.named_parameters():
            if name.startswith(("weight_", "bias")):
                parameter.zero_()
        cell.weight_B2.copy_(torch.eye(2))
        cell.bias_linear.copy_(torch.tensor([1.0, 1.0]))
        cell.weight_B1[1, 0] = 1.0
        cell.weight_W1[0, 0], cell.weight_W2[0, 0], cell.bias[0] = 2.0, 4.0, -46.0
        cell.weight_Us[0, 0], cell.bias_beta[0] = -20.0, 270.0
        cell.weight_Us[1, 0], cell.weight_Us[1, 1], cell.bias_beta[1] = 40.0, -600.0, -140.0
        assert torch.allclose(cell.steps.values(), torch.ones(5)), cell.steps.values()
        centres = torch.tensor([[15.0 + 2 * (c % 2), 1.0 + c // 2] for c in range(4)])
        model.output.weight.copy_(2 * centres)
        model.output.bias.copy_(-(centres**2).sum(1))
    return model, centres


def main() -> None:
    dataset = build_task("tarnn_toy", n_train=1).dataset("test")
    xs, ys = zip(*(dataset[i] for i in range(len(dataset))))
    x, y = torch.stack(xs), torch.stack(ys)
    model, centres = hand_built()
    model.eval()
    with torch.no_grad():
        states, _ = model.rnn(x)
        logits = model(x)
    final = states[:, -1]
    accuracy = float((logits.argmax(-1) == y).float().mean())
    distance = float((final - centres[y]).norm(dim=-1).max())
    print(f"hand-built single-eta TARNN: test accuracy {accuracy:.4f} on {len(y)} sequences; "
          f"largest ||s_T - centre|| {distance:.2e}")  # fmt: skip


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
