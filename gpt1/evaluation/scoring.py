"""Scoring token sequences under a language model, a library: no params.yaml, MLflow or results paths.

* Windows and truncation: `left_truncate` is the one rule that fits a context and a tail into a budget of tokens,
  the context losing its beginning first; fine-tuning's input transformations (`transforms.transform_batch`) and the
  zero-shot windows (`fit_context`) both use it.
* Token log-probabilities: `score_continuations` gives, per example, the mean (or sum) log-probability of
  continuation tokens given prefix tokens, batched with right padding (causal models: padding after a sequence
  cannot change what the model computes for it). Works for both model kinds (GPT and LSTM share
  `forward(idx) -> (logits, loss)` and `config.n_ctx`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpt1.pipeline.errors import ScoringError

if TYPE_CHECKING:  # torch is imported where a model is run: `transforms` uses the truncation rule without it
    import torch
    from torch import nn

BATCH_TOKENS = 8192  # padded tokens per forward pass: bounds the [batch, time, vocab] logits


# ----------------------------------------------------------------------------------------------------------------
# Windows and truncation


@dataclass(frozen=True)
class Fitted:
    """A context and a tail cut to fit a budget of tokens together."""

    context: list[int]  # the context's last tokens
    tail: list[int]  # the tail's first tokens
    truncated: bool  # either lost tokens


def left_truncate(context: Sequence[int], tail: Sequence[int], budget: int, reserve: int = 0) -> Fitted:
    """The one truncation rule of the project: context + tail within `budget` tokens, cutting the context from the
    LEFT (the end next to the tail is what conditions it most). The tail is cut, from the right, only when it alone
    overflows `budget - reserve`; `reserve` tokens of context are then kept, if the context has them.

    Fine-tuning sequences (`transforms.transform_batch`: the budget is n_ctx less the special tokens, reserve 0: RACE's
    question outlives its article) and zero-shot windows (`fit_context`: reserve 1, so that the continuation's first
    token is conditioned on something) are both cut by it."""
    tail_kept = list(tail[: budget - reserve])
    room = budget - len(tail_kept)
    context_kept = list(context[max(0, len(context) - room) :]) if room > 0 else []
    return Fitted(context_kept, tail_kept, len(context_kept) < len(context) or len(tail_kept) < len(tail))


@dataclass(frozen=True)
class Window:
    """One sequence to score: ids[start:] are the scored continuation tokens, each given everything before it."""

    ids: list[int]
    start: int
    truncated: bool  # the prefix lost its beginning, or the continuation alone overflowed n_ctx and lost its end


def fit_context(prefix: Sequence[int], continuation: Sequence[int], n_ctx: int) -> Window:
    """prefix + continuation within n_ctx, cutting the prefix from the LEFT (the end next to the continuation is
    what conditions it most). The continuation is never cut unless it alone overflows n_ctx; then one prefix token
    (if any) is kept to condition its first token, and its end is cut. With no prefix at all the first continuation
    token has nothing to condition on and is not scored."""
    if n_ctx < 1:
        raise ScoringError(f"n_ctx must be at least 1, got {n_ctx}")
    fitted = left_truncate(prefix, continuation, n_ctx, reserve=1 if prefix else 0)
    return Window(fitted.context + fitted.tail, max(len(fitted.context), 1), fitted.truncated)


# ----------------------------------------------------------------------------------------------------------------
# Token log-probabilities


def _batches(lengths: Sequence[int], batch_tokens: int) -> list[list[int]]:
    """Row indices grouped longest first, each group's padded size (rows x longest) within batch_tokens: sorting
    by length keeps padding, and so wasted compute, small."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    for i in order:
        if groups and (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= batch_tokens:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _logits_at(model: nn.Module, ids: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """forward(ids)'s logits at positions where[:, t] (t < T - 1), as [N, vocab]. For our two models the LM head
    runs on those positions only (GPT: lm_head(transformer); LSTM: the same, its dropout being off in eval mode):
    RACE scores a few answer tokens after a long context, so this skips most of the [B, T, vocab] projection."""
    from gpt1.modeling.model import GPT, LSTMLM

    if isinstance(model, GPT | LSTMLM) and not model.training:
        return model.lm_head(model.transformer(ids)[:, :-1][where])
    logits, _ = model(ids)
    return logits[:, :-1][where]


def _group_logprobs(model: nn.Module, group: Sequence[Window]) -> tuple[np.ndarray, list[int]]:
    """One padded forward pass over `group`: (log p of its scored tokens, window after window; how many each has)."""
    import torch

    width = max(len(w.ids) for w in group)
    ids = torch.zeros((len(group), width), dtype=torch.long)  # right padding: 0 is as good as any token
    scored = torch.zeros((len(group), width), dtype=torch.bool)
    for row, w in enumerate(group):
        ids[row, : len(w.ids)] = torch.tensor(w.ids)
        scored[row, w.start : len(w.ids)] = True
    device = next(model.parameters()).device
    ids, scored = ids.to(device), scored.to(device)
    # logits[:, t] predicts ids[:, t + 1]: only the positions before a scored token are needed.
    chosen = _logits_at(model, ids, scored[:, 1:]).float().log_softmax(-1)
    values = chosen.gather(1, ids[:, 1:][scored[:, 1:]].unsqueeze(1)).squeeze(1).double().cpu().numpy()
    return values, scored.sum(1).tolist()


def token_logprobs(model: nn.Module, windows: Sequence[Window], batch_tokens: int) -> list[np.ndarray]:
    """log p of every scored token of every window (an empty array where nothing is scored)."""
    import torch

    out: list[np.ndarray] = [np.zeros(0)] * len(windows)
    live = [i for i, w in enumerate(windows) if len(w.ids) > w.start]  # windows with at least one scored token
    with torch.inference_mode():
        for batch in _batches([len(windows[i].ids) for i in live], batch_tokens):
            group = [live[b] for b in batch]
            values, counts = _group_logprobs(model, [windows[i] for i in group])
            for i, part in zip(group, np.split(values, np.cumsum(counts)[:-1]), strict=True):
                out[i] = part
    return out


def score_continuations(
    model: nn.Module,
    prefixes: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[int]],
    *,
    n_ctx: int | None = None,
    reduction: str = "mean",
    batch_tokens: int = BATCH_TOKENS,
) -> np.ndarray:
    """Per example, the mean (or sum) log-probability of the continuation's tokens given the prefix, under `model`
    in eval mode; n_ctx defaults to model.config.n_ctx. An example with no scored token scores 0 (log 1)."""
    if reduction not in ("mean", "sum"):
        raise ScoringError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if len(prefixes) != len(continuations):
        raise ScoringError(f"{len(prefixes)} prefixes but {len(continuations)} continuations")
    n_ctx = n_ctx or model.config.n_ctx
    model.eval()  # dropout off: a score is a property of the weights
    windows = [fit_context(p, c, n_ctx) for p, c in zip(prefixes, continuations, strict=True)]
    per_token = token_logprobs(model, windows, batch_tokens)
    reduce = np.mean if reduction == "mean" else np.sum
    return np.array([float(reduce(v)) if v.size else 0.0 for v in per_token])


__all__ = [
    "BATCH_TOKENS",
    "Fitted",
    "Window",
    "fit_context",
    "left_truncate",
    "score_continuations",
    "token_logprobs",
]
