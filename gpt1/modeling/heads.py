"""Task heads and the fine-tuning objective (paper §3.2-3.3), a library: no params.yaml, MLflow or results paths.

* The model: a pre-trained language model (GPT or LSTM) plus one `TaskHead` reading the last layer's state at the
  extract token (`FinetuneModel`); `add_specials` appends the start/delimiter/extract rows, N(0, 0.02).
  classification/entailment: dropout + Linear(C, labels); similarity: the two orders' states summed, then
  dropout + Linear (2 classes, or 1 output with MSE for STS-B); multiple choice: one score per (context, answer)
  sequence, softmax over the answers.
* Batches: `collate` right-pads a list of transformed examples (`Batch`).
* The objective: L3 = L2 + λ·L1 (`compute_losses`), L1 the next-token loss over the real tokens of every task
  sequence (padding ignored, `lm_targets`), L2 the task loss (`task_loss`); `static_losses` is the same arithmetic
  at shapes that do not depend on the data, for the CUDA graphs of the fine-tuning loop's fast path.
* Layer transfer (Figure 2, left): `transfer_init` keeps the embeddings and the first k blocks and re-initialises
  the rest as a fresh GPT would.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gpt1.data.tasks import TaskSpec
from gpt1.data.transforms import Transformed
from gpt1.modeling.model import GPT, LSTMLM
from gpt1.pipeline.errors import FinetuneError

if TYPE_CHECKING:
    from gpt1.data.tokenizer import GPT1Tokenizer

INIT_STD = 0.02  # heads, new token rows and re-initialised blocks: the paper's N(0, 0.02)
IGNORE = -100  # cross-entropy's ignore_index


# ----------------------------------------------------------------------------------------------------------------
# Special tokens and layer transfer


def add_specials(model: nn.Module, tokenizer: GPT1Tokenizer) -> None:
    """Append rows for start/delimiter/extract, N(0, 0.02); the old rows (and GPT's LM-head tie) stay."""
    model.resize_token_embeddings(tokenizer.vocab_size, std=INIT_STD)


@dataclass(frozen=True)
class Transfer:
    kept: list[str]  # parameter names taken from the checkpoint
    reinitialised: list[str]  # parameter names drawn afresh


def transfer_init(model: GPT, k: int) -> Transfer:
    """Keep the embeddings (and so the tied LM head) and blocks 0..k-1; re-initialise blocks k.. as a fresh GPT
    would: Linear N(0, 0.02) and bias 0, LayerNorm gain 1 and bias 0 (paper Figure 2, left: k = 0 keeps only the
    embeddings). Uses the global torch RNG: seed it first."""
    if not isinstance(model, GPT):
        raise FinetuneError("transfer_layers needs a GPT checkpoint (variants pretrained, no_aux, released)")
    if not 0 <= k <= model.config.n_layer:
        raise FinetuneError(f"transfer_layers={k}: valid values are 0..{model.config.n_layer} (the model's n_layer)")
    reset = {f"h.{i}." for i in range(k, model.config.n_layer)}
    with torch.no_grad():
        for block in model.h[k:]:
            for module in block.modules():
                if isinstance(module, nn.Linear):
                    nn.init.normal_(module.weight, 0.0, INIT_STD)
                    if module.bias is not None:
                        nn.init.zeros_(module.bias)
                elif isinstance(module, nn.LayerNorm):
                    nn.init.ones_(module.weight)
                    nn.init.zeros_(module.bias)
    names = [name for name, _ in model.named_parameters()]
    fresh = [n for n in names if any(n.startswith(prefix) for prefix in reset)]
    return Transfer([n for n in names if n not in fresh], fresh)


# ----------------------------------------------------------------------------------------------------------------
# Heads and the objective


def _state_width(lm: nn.Module) -> int:
    """Width of the last hidden state: n_embd for GPT, the LSTM's hidden size for LSTMLM."""
    return lm.config.hidden_size if isinstance(lm, LSTMLM) else lm.config.n_embd


def is_regression(spec: TaskSpec) -> bool:
    return spec.encoding == "float"


class TaskHead(nn.Module):
    """The task's output layer over the extract-token states [B, S, C] of each example's S sequences.

    classification / entailment (S = 1): dropout + Linear(C, num_labels) -> [B, num_labels]
    similarity (S = 2, both orders): sum over the orders (the paper: "added element-wise") then dropout + Linear
        -> [B, 2] (MRPC, QQP) or [B, 1] (STS-B regression)
    multiple choice (S = k answers): dropout + Linear(C, 1) per sequence -> [B, k] scores, softmaxed over answers
    """

    def __init__(self, kind: str, width: int, outputs: int, dropout: float) -> None:
        super().__init__()
        self.kind = kind
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(width, outputs)
        nn.init.normal_(self.linear.weight, 0.0, INIT_STD)
        nn.init.zeros_(self.linear.bias)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        if self.kind == "multiple_choice":
            return self.linear(self.dropout(states)).squeeze(-1)
        pooled = states.sum(dim=1) if self.kind == "similarity" else states[:, 0]
        return self.linear(self.dropout(pooled))


def head_outputs(spec: TaskSpec) -> int:
    if spec.kind == "multiple_choice":
        return 1  # one score per answer sequence
    return 1 if is_regression(spec) else spec.num_labels


@dataclass
class Batch:
    tokens: torch.Tensor  # [B * S, T] right-padded
    lengths: torch.Tensor  # [B * S] real tokens per sequence (the extract token is at lengths - 1)
    labels: torch.Tensor  # [B] class / answer ids (long) or scores (float)
    per_example: int  # S: sequences per example

    @property
    def real_tokens(self) -> int:
        return int(self.lengths.sum())

    def to(self, device: torch.device) -> Batch:
        return Batch(self.tokens.to(device), self.lengths.to(device), self.labels.to(device), self.per_example)


def collate(transformed: Sequence[Transformed], labels: Sequence[int | float], regression: bool,
            pad_id: int = 0, width: int | None = None) -> Batch:
    """Right-pad every sequence to the longest (or to `width`, when wider: a bucket's fixed length, so that a
    CUDA graph sees few shapes): attention is causal, so no real position ever sees padding, and the extract token
    sits at each sequence's own last real position."""
    sequences = [s for t in transformed for s in t.sequences]
    per_example = len(transformed[0].sequences)
    longest = max(max(len(s) for s in sequences), width or 0)
    tokens = torch.full((len(sequences), longest), pad_id, dtype=torch.long)
    for row, seq in enumerate(sequences):
        tokens[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.long)
    dtype = torch.float32 if regression else torch.long
    return Batch(tokens, lengths, torch.tensor(list(labels), dtype=dtype), per_example)


def lm_targets(tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """targets[:, t] = tokens[:, t + 1] where t + 1 is a real token, else IGNORE (padding and the last token):
    L1 predicts every real token after the start token, specials included, as OpenAI's fine-tuning code did."""
    targets = torch.full_like(tokens, IGNORE)
    targets[:, :-1] = tokens[:, 1:]
    positions = torch.arange(tokens.size(1), device=tokens.device).unsqueeze(0)
    return targets.masked_fill(positions + 1 >= lengths.unsqueeze(1), IGNORE)


def _lm_logits(lm: nn.Module, states: torch.Tensor) -> torch.Tensor:
    # LSTMLM.forward applies its dropout between the LSTM and the output layer; GPT's tied head reads h directly.
    if isinstance(lm, LSTMLM):
        states = lm.drop(states)
    return lm.lm_head(states)


@dataclass
class Losses:
    total: torch.Tensor  # L3 = L2 + λ·L1
    clf: torch.Tensor  # L2
    lm: torch.Tensor  # L1

    def parts(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """L3, L2, L1 as a tuple: what a compiled or recorded loss returns (tensors, not a dataclass)."""
        return self.total, self.clf, self.lm


class FinetuneModel(nn.Module):
    """A pre-trained language model (GPT or LSTM) plus one task head; one pass gives both the task outputs and
    the states the auxiliary LM loss reads."""

    def __init__(self, lm: nn.Module, spec: TaskSpec, clf_dropout: float) -> None:
        super().__init__()
        self.lm = lm
        self.kind = spec.kind
        self.regression = is_regression(spec)
        self.head = TaskHead(spec.kind, _state_width(lm), head_outputs(spec), clf_dropout)

    def states(self, batch: Batch) -> torch.Tensor:
        return self.lm.transformer(batch.tokens)  # last layer, [B * S, T, C]

    def task_outputs(self, states: torch.Tensor, batch: Batch) -> torch.Tensor:
        rows = torch.arange(states.size(0), device=states.device)
        extract = states[rows, batch.lengths - 1]  # [B * S, C]
        return self.head(extract.view(-1, batch.per_example, extract.size(-1)))

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.task_outputs(self.states(batch), batch)

    def lm_loss(self, states: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Mean next-token cross-entropy over the real tokens; logits only at those positions (no padding)."""
        targets = lm_targets(batch.tokens, batch.lengths)
        keep = targets != IGNORE
        return F.cross_entropy(_lm_logits(self.lm, states[keep]), targets[keep])

    def param_groups(self, weight_decay: float) -> list[dict]:
        """The LM's groups (decay on matrices, not on biases and LayerNorm gains) plus the head's, by the same rule."""
        groups = self.lm.param_groups(weight_decay)
        groups[0]["params"] = [*groups[0]["params"], self.head.linear.weight]
        groups[1]["params"] = [*groups[1]["params"], self.head.linear.bias]
        return groups


def task_loss(model: FinetuneModel, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """L2: MSE on the score for regression (STS-B), else cross-entropy over classes or over the k answers."""
    if model.regression:
        return F.mse_loss(outputs.squeeze(-1), labels)
    return F.cross_entropy(outputs, labels)


def compute_losses(model: FinetuneModel, batch: Batch, lm_weight: float) -> tuple[Losses, torch.Tensor]:
    """(L3 = L2 + λ·L1 with its parts, task outputs). With λ = 0, L1 is still measured for the curves, without
    a graph."""
    states = model.states(batch)
    outputs = model.task_outputs(states, batch)
    clf = task_loss(model, outputs, batch.labels)
    if lm_weight:
        lm = model.lm_loss(states, batch)
        return Losses(clf + lm_weight * lm, clf, lm), outputs
    with torch.no_grad():
        lm = model.lm_loss(states.detach(), batch)
    return Losses(clf, clf, lm), outputs


def static_losses(model: FinetuneModel, batch: Batch, lm_weight: float) -> Losses:
    """`compute_losses` without a shape that depends on the data, so that a CUDA graph can replay it: L1 over every
    position, padding ignored through its targets (the mean over the same real tokens as `FinetuneModel.lm_loss`,
    whose boolean indexing would give each batch a shape of its own, and cost a host sync)."""
    states = model.states(batch)
    clf = task_loss(model, model.task_outputs(states, batch), batch.labels)
    targets = lm_targets(batch.tokens, batch.lengths).flatten()
    # The LM's logits as heads' L1 reads them (the LSTM's own dropout first), at every position
    if lm_weight:
        lm = F.cross_entropy(_lm_logits(model.lm, states).flatten(0, 1), targets, ignore_index=IGNORE)
        return Losses(clf + lm_weight * lm, clf, lm)
    with torch.no_grad():  # λ = 0: L1 measured for the curves, without a graph
        lm = F.cross_entropy(_lm_logits(model.lm, states.detach()).flatten(0, 1), targets, ignore_index=IGNORE)
    return Losses(clf, clf, lm)


# ---------------------------------------------------------------------------------------------- head outputs


@dataclass
class Decoded:
    predictions: np.ndarray  # class / answer ids, or clipped scores
    probabilities: np.ndarray | None  # softmax over classes or answers; None for regression
    outputs: np.ndarray  # raw head outputs (logits, answer scores, unclipped score)


def decode(spec: TaskSpec, outputs: np.ndarray) -> Decoded:
    if is_regression(spec):
        low, high = spec.label_range or (-math.inf, math.inf)
        return Decoded(np.clip(outputs[:, 0], low, high), None, outputs)
    shifted = outputs - outputs.max(axis=1, keepdims=True)
    probabilities = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    return Decoded(outputs.argmax(axis=1), probabilities, outputs)


__all__ = [
    "IGNORE",
    "INIT_STD",
    "Batch",
    "Decoded",
    "FinetuneModel",
    "Losses",
    "TaskHead",
    "Transfer",
    "add_specials",
    "collate",
    "compute_losses",
    "decode",
    "head_outputs",
    "is_regression",
    "lm_targets",
    "static_losses",
    "task_loss",
    "transfer_init",
]
