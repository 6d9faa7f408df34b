"""Held-out perplexity of a language model on whole documents (WikiText-2's articles: `gpt1.data.wikitext`).

Each article's paragraphs are encoded as the corpus is (a paragraph separator between them) and cut into windows of
n_ctx tokens that overlap by one: every token but the article's first is scored once, given the tokens before it in
its window (1 to n_ctx - 1 of them; the pre-training's validation windows, n_ctx + 1 tokens, give theirs 1 to
n_ctx). The scorer is the zero-shot heuristics' (`gpt1.evaluation.scoring.token_logprobs`).

The loss is nats per scored token; its standard error is a bootstrap over ARTICLES, not tokens (a document's tokens
share its topic and style: resampling tokens would understate the noise), and so is the paired test of two models
on the same articles. The numbers per article travel with the result, so that a later step can pair two models.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gpt1.evaluation.metrics import BootstrapResult, bootstrap_se, paired_bootstrap
from gpt1.evaluation.scoring import BATCH_TOKENS, Window, token_logprobs
from gpt1.evaluation.significance import BOOTSTRAP_SEED, RESAMPLES
from gpt1.pipeline.errors import ScoringError

if TYPE_CHECKING:
    from torch import nn

    from gpt1.data.tokenizer import GPT1Tokenizer
    from gpt1.data.wikitext import Article


@dataclass(frozen=True)
class DocumentProbe:
    """Every article as token ids, and its size in the dataset's word count."""

    titles: tuple[str, ...]
    ids: tuple[tuple[int, ...], ...]
    words: tuple[int, ...]

    @property
    def scored_tokens(self) -> np.ndarray:
        """Tokens scored per article: all but its first."""
        return np.array([max(len(ids) - 1, 0) for ids in self.ids], dtype=np.int64)


def document_probe(tokenizer: GPT1Tokenizer, articles: Sequence[Article]) -> DocumentProbe:
    separator = tokenizer.paragraph_separator()
    ids = []
    for article in articles:
        joined: list[int] = []
        for index, paragraph in enumerate(tokenizer.encode_batch(list(article.paragraphs))):
            joined += (separator if index else []) + paragraph
        ids.append(tuple(joined))
    return DocumentProbe(tuple(a.title for a in articles), tuple(ids), tuple(a.words for a in articles))


def document_windows(ids: Sequence[int], n_ctx: int) -> list[Window]:
    """Windows of at most n_ctx tokens, each starting on the previous one's last token: token i > 0 is scored once."""
    if n_ctx < 2:
        raise ScoringError(f"n_ctx must be at least 2 to score a document, got {n_ctx}")
    return [Window(list(ids[start : start + n_ctx]), 1, False) for start in range(0, max(len(ids) - 1, 0), n_ctx - 1)]


def document_losses(model: nn.Module, probe: DocumentProbe, n_ctx: int | None = None,
                    batch_tokens: int = BATCH_TOKENS) -> np.ndarray:
    """Summed negative log-likelihood (nats) of each article's scored tokens under `model` (eval mode)."""
    n_ctx = n_ctx or model.config.n_ctx
    model.eval()
    windows = [document_windows(ids, n_ctx) for ids in probe.ids]
    flat = token_logprobs(model, [w for article in windows for w in article], batch_tokens)
    bounds = np.cumsum([0] + [len(article) for article in windows])
    return np.array([-sum(float(v.sum()) for v in flat[a:b]) for a, b in itertools.pairwise(bounds)])


def token_loss(tokens: np.ndarray, nll: np.ndarray) -> float:
    """Nats per token over a set of articles (a `metrics` metric: y_true the tokens, y_pred the summed losses)."""
    return float(np.sum(nll) / np.sum(tokens))


def perplexity_result(tokens: np.ndarray, words: np.ndarray, nll: np.ndarray, resamples: int = RESAMPLES,
                      seed: int = BOOTSTRAP_SEED) -> dict[str, Any]:
    """Per-article scored tokens, words and summed losses -> loss, its standard error by article, perplexity (with
    its 1-SE interval) per token and per word."""
    tokens, words, nll = np.asarray(tokens), np.asarray(words), np.asarray(nll, dtype=np.float64)
    if not tokens.size == words.size == nll.size or tokens.sum() == 0:
        raise ScoringError(f"held-out perplexity: {tokens.size} articles' tokens, {words.size} word counts and "
                           f"{nll.size} losses, {int(tokens.sum())} tokens scored: nothing to score, or lists that "
                           "do not match")
    loss = token_loss(tokens, nll)
    se = bootstrap_se(token_loss, tokens, nll, n=resamples, seed=seed)
    return {
        "loss": loss, "loss_se": se, "perplexity": math.exp(loss),
        "perplexity_1se": [math.exp(loss - se), math.exp(loss + se)],
        "word_perplexity": math.exp(float(nll.sum()) / float(words.sum())),
        "articles": int(tokens.size), "scored_tokens": int(tokens.sum()), "words": int(words.sum()),
    }


def paired_loss_test(tokens: np.ndarray, nll_a: np.ndarray, nll_b: np.ndarray, resamples: int = RESAMPLES,
                     seed: int = BOOTSTRAP_SEED) -> tuple[BootstrapResult, float]:
    """A's loss minus B's on the same articles: the paired bootstrap over articles, and the difference's SE."""
    nll_a, nll_b = np.asarray(nll_a, dtype=np.float64), np.asarray(nll_b, dtype=np.float64)
    test = paired_bootstrap(token_loss, tokens, nll_a, nll_b, n=resamples, seed=seed)
    return test, bootstrap_se(token_loss, tokens, nll_a - nll_b, n=resamples, seed=seed)


__all__ = ["DocumentProbe", "document_losses", "document_probe", "document_windows", "paired_loss_test",
           "perplexity_result", "token_loss"]
