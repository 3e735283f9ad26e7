"""Heads around a :class:`~ltdrnn.layers.Recurrent` stack: classifier, regressor, tagger, language model.

Shapes use the legend of :mod:`ltdrnn.cells.base`; all models are batch-first.

    classifier / regressor (terminal):  x (B, T, d) -> y (B, o), read at each sequence's last true step,
                                        or pooled over its true steps (mean or max)
    tagger (per step):                  x (B, T, d) -> y (B, T, o)
    lm (per step, tokens):              ids (B, T) -> logits (B, T, V), optionally tied to the embedding

``SequenceModel(x, lengths)`` is all four; the head decides whether the output is read at the last true
step (terminal) or at every step. Extra losses, per-step extras and epoch hooks of the cells are
forwarded from the recurrent stack (``losses()``, ``aux``, ``set_epoch``).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from .layers import Recurrent
from .ops.common import final_state_at_lengths, step_mask
from .tasks.base import TaskInfo

TERMINAL_HEADS = ("classifier", "regressor")
POOLINGS = ("last", "mean", "max")


def choose_head(model, info: TaskInfo) -> str:
    """The head named in the config, or for ``auto`` the one the task calls for."""
    if model.head != "auto":
        return model.head
    if info.target == "terminal":
        return "classifier" if info.loss == "cross_entropy" else "regressor"
    if info.input_kind == "tokens" and info.metric == "perplexity":
        return "lm"
    return "tagger"


class SequenceModel(nn.Module):
    """Optional input embedding -> Recurrent -> linear output, read at the last step or at every step.

    Args:
        cell: registry name of the cell.
        input_size: d, or the vocabulary size for token input.
        hidden_size, num_layers, dropout, bidirectional: of the Recurrent stack.
        output_size: o, classes or regression outputs.
        head: ``classifier``, ``regressor``, ``tagger`` or ``lm``.
        tokens: the input is int64 ids ``(B, T)`` (an ``nn.Embedding`` is used).
        embedding: width of the input embedding (0: none for float input; ``hidden_size`` for tokens).
        tie_weights: share the embedding matrix with the output layer (lm).
        pooling: what a terminal head reads from the outputs ``o_t (B, T, D*H)`` of a sequence of
            length n: ``last`` (see :meth:`last_step`), ``mean`` = (1/n) sum_{t<n} o_t, or
            ``max`` = max_{t<n} o_t elementwise.
        cell_options: keywords for the cell constructor.
    """

    def __init__(
        self,
        cell: str,
        input_size: int,
        hidden_size: int,
        output_size: int,
        head: str,
        num_layers: int = 1,
        dropout: float = 0.0,
        bidirectional: bool = False,
        tokens: bool = False,
        embedding: int = 0,
        tie_weights: bool = False,
        pooling: str = "last",
        **cell_options,
    ) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"model.pooling: expected one of {', '.join(POOLINGS)}, got {pooling!r}")
        if pooling != "last" and head not in TERMINAL_HEADS:
            raise ValueError(
                f"model.pooling: {pooling!r} pools a sequence into one output, but head {head!r} "
                "outputs every step; use pooling last"
            )
        self.head = head
        self.pooling = pooling
        self.terminal = head in TERMINAL_HEADS
        self.tokens = tokens
        width = embedding or (hidden_size if tokens else 0)
        if tokens:
            self.embed = nn.Embedding(input_size, width)
        elif width:
            # a bias-free linear map of float input: for one-hot input it is exactly an embedding
            self.embed = nn.Linear(input_size, width, bias=False)
        else:
            self.embed = None
        self.rnn = Recurrent(
            cell,
            width or input_size,
            hidden_size,
            num_layers=num_layers,
            dropout=dropout,
            bidirectional=bidirectional,
            batch_first=True,
            **cell_options,
        )
        self.output = nn.Linear(hidden_size * self.rnn.num_directions, output_size)
        if tie_weights:
            if head != "lm" or not tokens:
                raise ValueError(
                    "model.tie_weights: only a language model (head lm, token input) can tie "
                    f"weights, got head {head!r}"
                )
            if width != hidden_size or bidirectional:
                raise ValueError(
                    f"model.tie_weights: needs embedding == hidden_size and one direction, got "
                    f"embedding {width}, hidden_size {hidden_size}"
                )
            self.output.weight = self.embed.weight

    def forward(self, x: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
        """``x (B, T, d)`` or ids ``(B, T)``; ``lengths (B,)`` -> ``(B, o)`` terminal or ``(B, T, o)``."""
        if self.embed is not None:
            x = self.embed(x)
        out, _ = self.rnn(x, lengths=lengths)
        if self.terminal:
            out = self.last_step(out, lengths) if self.pooling == "last" else self.pool(out, lengths)
        return self.output(out)

    def pool(self, out: Tensor, lengths: Optional[Tensor]) -> Tensor:
        """``(B, T, D*H) -> (B, D*H)``: mean or max of the outputs over each sequence's true steps."""
        if lengths is None:
            return out.mean(dim=1) if self.pooling == "mean" else out.amax(dim=1)
        lengths = lengths.to(out.device)
        valid = step_mask(out.shape[1], lengths, out.device).T.unsqueeze(-1)
        if self.pooling == "mean":
            return (out * valid).sum(dim=1) / lengths[:, None].to(out.dtype)
        return out.masked_fill(~valid, float("-inf")).amax(dim=1)

    def last_step(self, out: Tensor, lengths: Optional[Tensor]) -> Tensor:
        """``(B, T, D*H) -> (B, D*H)``: the forward direction at each sequence's last true step; a
        backward direction is read at step 0, where it has seen the whole sequence."""
        last = final_state_at_lengths(out.transpose(0, 1), lengths)
        if self.rnn.num_directions == 1:
            return last
        hidden = self.rnn.hidden_size
        return torch.cat([last[:, :hidden], out[:, 0, hidden:]], dim=-1)

    # ---- the cells' extras ------------------------------------------------------------------------
    def losses(self) -> dict:
        return self.rnn.losses()

    @property
    def aux(self):
        return self.rnn.aux

    def set_epoch(self, epoch: int) -> None:
        self.rnn.set_epoch(epoch)


def build_model(model, info: TaskInfo) -> SequenceModel:
    """The model a config's ``model`` section describes (a :class:`ltdrnn.config.ModelConfig` or
    anything with its attributes), sized for the task. Bad values raise ValueError naming the key; the
    harness reports them as ConfigError (:func:`ltdrnn.checkpoint.build_task_and_model`)."""
    head = choose_head(model, info)
    if head in TERMINAL_HEADS and info.target != "terminal":
        raise ValueError(
            f"model.head: {head!r} reads one output per sequence, but task {info.name!r} has "
            f"per-step targets; use tagger or lm"
        )
    if head in ("tagger", "lm") and info.target != "per_step":
        raise ValueError(
            f"model.head: {head!r} outputs every step, but task {info.name!r} has one target "
            f"per sequence; use classifier or regressor"
        )
    return SequenceModel(
        model.cell,
        info.input_size,
        model.hidden_size,
        info.output_size,
        head,
        num_layers=model.num_layers,
        dropout=model.dropout,
        bidirectional=model.bidirectional,
        tokens=info.input_kind == "tokens",
        embedding=model.embedding,
        tie_weights=model.tie_weights,
        pooling=model.pooling,
        **resolve_task_options(model.options, info),
    )


def resolve_task_options(options: dict, info: TaskInfo) -> dict:
    """The cell options with ``max_length: task`` replaced by the task's sequence length (so that one
    preset with per-time-step step sizes serves every T of its task)."""
    if options.get("max_length") != "task":
        return dict(options)
    if info.seq_len is None:
        raise ValueError(
            f"model.options.max_length: 'task' takes the task's sequence length, but task {info.name!r} "
            f"has sequences of varying length; give a number"
        )
    return {**options, "max_length": info.seq_len}
