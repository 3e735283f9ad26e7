"""MIST's backends over a whole sequence: :class:`MISTScan`, a hand-written forward and backward, as PyTorch
loops (``"torch"``) or compiled time loops (``"cpp"``, ``csrc/mist.cpp``).

The front that picks among them is :mod:`ltdrnn.ops.mist`; the tests that compare these paths with the
cell's reference loop are in tests/cells/test_mist.py.
"""

from __future__ import annotations

import torch

from .memory import empty_buffer, release, scratch_buffer


class MISTScan(torch.autograd.Function):
    """The MIST recurrence over a whole sequence with a hand-written backward pass.

    ``forward(x (T, B, d), history0 (B, N, H), W_ih (n_d + 2H, d), bias (n_d + 2H), W_hh (n_d + H, H),
    W_mix (H, H), delays, compiled) -> (outputs (T, B, H), final history (B, N, H), states (N + T, B, H))``:
    rows ``0..N-1`` of ``states`` are the initial history, row ``N + t`` is ``h_t``; the first two
    outputs are views of it (the last ``T`` rows; the last ``N`` rows, batch first).

    Forward runs without recording a graph, completing the gate logits in ``activated`` and the tanh
    argument in the state rows in place. Backward walks time in reverse and adds each step's gradient
    into the rows of the delayed states it read. With ``compiled=True`` each time loop, forward and
    backward, is one call of the compiled ``torch.ops.ltdrnn.mist_forward`` / ``mist_backward``
    (csrc/mist.cpp: the batch split into one block of rows per thread, each running all T steps), and
    everything that is one pass over ``(T, B, .)`` buffers in the PyTorch version happens per step
    inside those loops while the step's rows are hot: the forward forms each step's input projection
    and reads the initial history in whatever strides it has; the backward forms every parameter and
    input gradient from each step's gradients (the parameters' as one sum per thread block, added in
    block order) and reads the outputs' gradient where it lies instead of copying it into a
    ``(N + T, B, H)`` buffer. Otherwise (``_pytorch_forward`` / ``_pytorch_backward``, the reference
    the compiled loops are tested against) the input projections are one product each before the loop
    and the weight gradients one product each after it.
    """

    @staticmethod
    def forward(ctx, x, history0, w_ih, bias, w_hh, w_mix, delays, compiled):
        steps, batch = x.shape[:2]
        past, hidden, split = history0.shape[1], w_mix.shape[0], w_hh.shape[0]
        states = empty_buffer((past + steps, batch, hidden), w_mix)
        activated = empty_buffer((steps, batch, split), w_hh)  # logits, then [softmax(a) | sigmoid(r)]
        reset_mixed = empty_buffer((steps, batch, hidden), w_mix)  # r_t * sum_i a_i h_{t-2^i}
        rows = past - torch.tensor(delays, device=states.device)  # rows of h_{t-2^i} at t = 0
        if compiled:
            x = x.contiguous()  # the backward reads it too
            weights = (w_hh.contiguous(), w_mix.contiguous(), x, w_ih.contiguous(), bias.contiguous())
            torch.ops.ltdrnn.mist_forward(activated, states, reset_mixed, *weights, history0)
        else:
            _pytorch_forward(x, history0, w_ih, bias, w_hh, w_mix, states, activated, reset_mixed, rows)
        ctx.compiled = compiled
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, states, activated, reset_mixed, w_ih, w_hh, w_mix, rows)
        return states[past:], states[steps:].transpose(0, 1), states

    @staticmethod
    def backward(ctx, d_outputs, d_final, d_states):
        x, states, activated, reset_mixed, w_ih, w_hh, w_mix, rows = ctx.saved_tensors
        outside = _outside_gradient(states, d_outputs, d_final, d_states)
        backward = _compiled_backward if ctx.compiled else _pytorch_backward
        d_x, d_history0, *d_weights = backward(
            x, states, activated, reset_mixed, w_ih, w_hh, w_mix, rows, outside, ctx.needs_input_grad[0]
        )
        d_w_ih, d_bias, d_w_hh, d_w_mix = (g if ctx.needs_input_grad[2 + i] else None for i, g in enumerate(d_weights))
        return d_x, d_history0, d_w_ih, d_bias, d_w_hh, d_w_mix, None, None


def _pytorch_forward(x, history0, w_ih, bias, w_hh, w_mix, states, activated, reset_mixed, rows):
    """Fills ``states``, ``activated`` and ``reset_mixed`` as ``torch.ops.ltdrnn.mist_forward`` does, with
    a Python loop over PyTorch ops: the input projections are written straight into the buffers the steps
    then complete in place."""
    steps, past, hidden, split = x.shape[0], history0.shape[1], w_mix.shape[0], w_hh.shape[0]
    flat_x = x.reshape(-1, x.shape[-1])
    states[:past] = history0.transpose(0, 1)
    torch.addmm(bias[split:], flat_x, w_ih[split:].t(), out=states[past:].view(-1, hidden))
    torch.addmm(bias[:split], flat_x, w_ih[:split].t(), out=activated.view(-1, split))
    step = _torch_forward_step(states, activated, reset_mixed, rows)
    w_hh_t, w_mix_t = w_hh.t(), w_mix.t()
    h_rows, gate_rows, rm_rows = states.unbind(0), activated.unbind(0), reset_mixed.unbind(0)
    for t in range(steps):
        gate_rows[t].addmm_(h_rows[past + t - 1], w_hh_t)
        step(t)
        h_rows[past + t].addmm_(rm_rows[t], w_mix_t).tanh_()


def _outside_gradient(states, d_outputs, d_final, d_states):
    """dL/dh from outside the recurrence, the sum of the three outputs' gradients (None = zero), for the
    last R rows of ``states (N + T, B, H)`` (the earlier rows get none) as one contiguous ``(R, B, H)``
    tensor. The usual case, ``d_outputs`` alone, is passed on as it is (R = T), not copied."""
    if d_final is None and d_states is None:
        return states.new_zeros((0, *states.shape[1:])) if d_outputs is None else d_outputs.contiguous()
    extents = [g.shape[0] for g in (d_outputs, d_states) if g is not None]
    rows = max(extents + [d_final.shape[1] if d_final is not None else 0])
    total = states.new_zeros((rows, *states.shape[1:]))
    for part in (d_states, d_outputs, None if d_final is None else d_final.transpose(0, 1)):
        if part is not None:
            total[rows - part.shape[0] :] += part
    return total


def _compiled_backward(x, states, activated, reset_mixed, w_ih, w_hh, w_mix, rows, outside, needs_x_grad):
    """``(d_x or None, d_history0, d_w_ih, d_bias, d_w_hh, d_w_mix)`` from one call of
    ``torch.ops.ltdrnn.mist_backward``, which forms them all inside its time loop."""
    past, batch, hidden = states.shape[0] - reset_mixed.shape[0], states.shape[1], states.shape[2]
    grad = scratch_buffer(states.shape, states)  # a work buffer: the kernel writes each row before reading it
    d_x = torch.empty_like(x) if needs_x_grad else None
    d_history0 = states.new_empty(batch, past, hidden)
    d_w_ih, d_bias = w_ih.new_empty(w_ih.shape), w_ih.new_empty(w_ih.shape[0])  # contiguous, as the kernel writes
    d_w_hh, d_w_mix = w_hh.new_empty(w_hh.shape), w_mix.new_empty(w_mix.shape)
    operands = (activated, states, reset_mixed, w_hh.contiguous(), w_mix.contiguous(), x, w_ih.contiguous())
    torch.ops.ltdrnn.mist_backward(*operands, outside, grad, d_x, d_history0, d_w_ih, d_bias, d_w_hh, d_w_mix)
    release(grad)
    return d_x, d_history0, d_w_ih, d_bias, d_w_hh, d_w_mix


def _pytorch_backward(x, states, activated, reset_mixed, w_ih, w_hh, w_mix, rows, outside, needs_x_grad):
    """The same results as :func:`_compiled_backward` from a Python loop over PyTorch ops (the reference
    the compiled loop is tested against), the weight gradients as one matrix product each at the end."""
    steps, hidden, split = reset_mixed.shape[0], states.shape[-1], activated.shape[-1]
    past = states.shape[0] - steps
    # the three (T, B, .) gradient buffers never leave this call: reuse them across calls
    grad = scratch_buffer(states.shape, states)  # dL/dh for every row
    grad[: grad.shape[0] - outside.shape[0]].zero_()
    grad[grad.shape[0] - outside.shape[0] :].copy_(outside)
    d_gates = scratch_buffer(activated.shape, activated)
    d_pre = scratch_buffer(reset_mixed.shape, reset_mixed)  # dL/d(tanh argument)
    step = _torch_backward_step(states, activated, reset_mixed, grad, d_gates, rows)
    tanh_backward = torch.ops.aten.tanh_backward.grad_input
    grad_rows, state_rows, d_pre_rows = grad.unbind(0), states.unbind(0), d_pre.unbind(0)
    for t in range(steps - 1, -1, -1):
        tanh_backward(grad_rows[past + t], state_rows[past + t], grad_input=d_pre_rows[t])
        step(t, d_pre_rows[t] @ w_mix)
        grad_rows[past + t - 1].addmm_(d_gates[t], w_hh)
    flat_gates, flat_pre = d_gates.view(-1, split), d_pre.view(-1, hidden)
    flat_x = x.reshape(-1, x.shape[-1])
    d_x = (flat_gates @ w_ih[:split]).addmm_(flat_pre, w_ih[split:]).view_as(x) if needs_x_grad else None
    d_w_ih = torch.cat([flat_gates.t() @ flat_x, flat_pre.t() @ flat_x])
    d_bias = torch.cat([flat_gates.sum(0), flat_pre.sum(0)])
    d_w_hh = flat_gates.t() @ states[past - 1 : -1].reshape(-1, hidden)
    d_w_mix = flat_pre.t() @ reset_mixed.view(-1, hidden)
    d_history0 = grad[:past].transpose(0, 1).clone(memory_format=torch.contiguous_format)
    release(grad, d_gates, d_pre)
    return d_x, d_history0, d_w_ih, d_bias, d_w_hh, d_w_mix


def _torch_forward_step(states, activated, reset_mixed, rows):
    nd = rows.shape[0]

    def step(t):
        gates = activated[t]
        gates[:, :nd] = torch.softmax(gates[:, :nd], dim=-1)
        gates[:, nd:].sigmoid_()
        delayed = states.index_select(0, rows + t).transpose(0, 1)  # (B, n_d, H)
        mixed = torch.bmm(gates[:, :nd].unsqueeze(1), delayed).squeeze(1)
        torch.mul(gates[:, nd:], mixed, out=reset_mixed[t])

    return step


def _torch_backward_step(states, activated, reset_mixed, grad, d_gates, rows):
    nd = rows.shape[0]

    def step(t, d_reset_mixed):
        mix, reset = activated[t, :, :nd], activated[t, :, nd:]
        d_mixed = d_reset_mixed * reset
        # dL/d(r-logits) = d_rm * m * r (1 - r) = d_rm * rm * (1 - r): the mix m itself is not kept
        torch.mul(d_reset_mixed * reset_mixed[t], 1 - reset, out=d_gates[t, :, nd:])
        delayed = states.index_select(0, rows + t).transpose(0, 1)  # (B, n_d, H)
        d_mix = torch.bmm(delayed, d_mixed.unsqueeze(-1)).squeeze(-1)
        d_gates[t, :, :nd] = torch._softmax_backward_data(d_mix, mix, -1, mix.dtype)
        grad.index_add_(0, rows + t, mix.t().unsqueeze(-1) * d_mixed.unsqueeze(0))

    return step
