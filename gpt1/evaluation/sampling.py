"""Text from a language model: ancestral sampling with a temperature and top-k, seeded, so the same seed gives the
same text (on the CPU, in the pinned mode: the same on every host).

A library: a model, a tokenizer, settings in, text out; no params.yaml, no MLflow, no results tree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from gpt1.data.tokenizer import GPT1Tokenizer
from gpt1.pipeline.errors import Gpt1Error, UsageError


@dataclass(frozen=True)
class SampleSettings:
    """length: new tokens; temperature 0 picks the most likely token (greedy); top_k None or 0 keeps every token."""

    length: int = 60
    temperature: float = 1.0
    top_k: int | None = 40
    seed: int = 0

    def __post_init__(self) -> None:
        if self.length < 1:
            raise UsageError(f"--length {self.length}: give at least 1 token")
        if self.temperature < 0:
            raise UsageError(f"--temperature {self.temperature}: give 0 (greedy) or more")
        if self.top_k is not None and self.top_k < 0:
            raise UsageError(f"--top-k {self.top_k}: give 0 (no cut) or more")


def check_pair(model: nn.Module, trained_with: str | None, tokenizer: GPT1Tokenizer, model_where: str,
               tokenizer_where: str) -> None:
    """Refuse, before any text is drawn, a tokenizer that is not the one the model was trained with (`trained_with`:
    its sha256, as the model's metadata records it; None: unknown) or that has more tokens than the model rows."""
    if trained_with is not None and trained_with != tokenizer.fingerprint():
        raise Gpt1Error(f"{tokenizer_where}: not the tokenizer {model_where} was trained with (sha256 "
                        f"{trained_with[:12]}..., this one {tokenizer.fingerprint()[:12]}...); pass the bpe folder of "
                        f"the same results tree")
    if model.config.vocab_size < tokenizer.base_vocab_size:
        raise Gpt1Error(f"{tokenizer_where}: {tokenizer.base_vocab_size} tokens, more than the "
                        f"{model.config.vocab_size} rows of {model_where}; pass the bpe folder the model was trained "
                        f"with")


def context_size(model: nn.Module) -> int | None:
    """Tokens the model can attend to (the GPT's n_ctx); None for a recurrent model (no limit)."""
    return getattr(model.config, "n_ctx", None)


def next_token(logits: torch.Tensor, settings: SampleSettings, generator: torch.Generator) -> int:
    """One token id from the last position's logits [vocab] (float32, on the CPU for a reproducible draw)."""
    logits = logits.float().cpu()
    if settings.temperature == 0:
        return int(torch.argmax(logits))
    logits = logits / settings.temperature
    if settings.top_k:
        kth = torch.topk(logits, min(settings.top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


@torch.no_grad()
def generate(model: nn.Module, prompt: list[int], settings: SampleSettings, vocab: int) -> list[int]:
    """`settings.length` new token ids after `prompt`, drawn from the model's next-token distribution restricted to
    the first `vocab` ids (the text tokens: never a fine-tuning special). The window slides once the GPT's context
    is full."""
    if not prompt:
        raise UsageError("the prompt encodes to no tokens: give some text (--prompt)")
    model.eval()
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(settings.seed)
    window = context_size(model)
    ids = list(prompt)
    for _ in range(settings.length):
        context = ids[-window:] if window else ids
        logits, _ = model(torch.tensor([context], device=device))
        ids.append(next_token(logits[0, -1, :vocab], settings, generator))
    return ids[len(prompt):]


def sample_text(model: nn.Module, tokenizer: GPT1Tokenizer, prompt: str, settings: SampleSettings) -> str:
    """`prompt` and its continuation, decoded together (the prompt as the tokenizer reads it: its normalisation, and
    the space between the two, come out right)."""
    ids = tokenizer.encode(prompt)
    new = generate(model, ids, settings, min(tokenizer.base_vocab_size, model.config.vocab_size))
    return tokenizer.decode(ids + new)


__all__ = ["SampleSettings", "check_pair", "context_size", "generate", "next_token", "sample_text"]
