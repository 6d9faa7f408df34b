"""Held-out perplexity on whole documents: every token but the first scored once, the loss per token, its standard
error and the paired test over articles, the word-level unit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import tiny_lm

from gpt1.data.tokenizer import GPT1Tokenizer
from gpt1.data.wikitext import Article
from gpt1.evaluation.metrics import bootstrap_se, paired_bootstrap
from gpt1.evaluation.perplexity import (
    DocumentProbe,
    document_losses,
    document_probe,
    document_windows,
    paired_loss_test,
    perplexity_result,
    token_loss,
)
from gpt1.pipeline.errors import ScoringError


@pytest.mark.parametrize("length", [0, 1, 2, 7, 8, 9, 15, 30])
def test_windows_score_every_token_but_the_first_once_within_n_ctx(length):
    ids = list(range(100, 100 + length))
    windows = document_windows(ids, n_ctx=8)
    assert all(len(w.ids) <= 8 and w.start == 1 for w in windows)
    scored = [token for w in windows for token in w.ids[1:]]
    assert scored == ids[1:]
    assert all(w.ids[0] == ids[ids.index(w.ids[1]) - 1] for w in windows)  # each conditioned on what precedes it
    with pytest.raises(ScoringError, match="n_ctx must be at least 2"):
        document_windows(ids, n_ctx=1)


@pytest.mark.parametrize("kind", ["gpt", "lstm"])
def test_an_articles_loss_is_the_sum_over_its_windows_of_a_plain_forward_pass(kind):
    torch.manual_seed(0)
    model = tiny_lm(kind, vocab_size=40, n_ctx=8)
    rng = np.random.default_rng(0)
    articles = [tuple(rng.integers(0, 40, size=n).tolist()) for n in (20, 1, 9, 33)]
    probe = DocumentProbe(("a", "b", "c", "d"), tuple(articles), (5, 1, 3, 9))
    model.eval()
    expected = []
    for ids in articles:
        total = 0.0
        for window in document_windows(ids, 8):
            x = torch.tensor([window.ids])
            with torch.no_grad():
                logits, _ = model(x)
            logp = logits[0, :-1].float().log_softmax(-1)
            total -= float(logp.gather(1, x[0, 1:].unsqueeze(1)).sum())
        expected.append(total)
    losses = document_losses(model, probe)
    assert losses == pytest.approx(expected, abs=1e-4)
    assert losses[1] == 0.0  # one token: nothing to score
    assert list(probe.scored_tokens) == [19, 0, 8, 32]
    assert document_losses(model, probe, batch_tokens=8) == pytest.approx(losses, abs=1e-5)  # one window a batch


def test_articles_are_encoded_as_the_corpus_is_a_paragraph_separator_between_paragraphs(tiny_data):
    tokenizer = GPT1Tokenizer.load(tiny_data.tokenizer)
    article = Article("T", ("The old map.", "Ada found it again."), 9)
    (ids,) = document_probe(tokenizer, [article]).ids
    first, second = tokenizer.encode("The old map."), tokenizer.encode("Ada found it again.")
    assert list(ids) == first + tokenizer.paragraph_separator() + second


def test_the_loss_is_per_token_over_all_articles_and_its_error_resamples_articles():
    tokens, words, nll = np.array([10, 30, 60]), np.array([8, 20, 40]), np.array([20.0, 90.0, 150.0])
    result = perplexity_result(tokens, words, nll)
    assert result["loss"] == pytest.approx(260 / 100)  # not the mean of the articles' means (2, 3, 2.5)
    assert result["perplexity"] == pytest.approx(math.exp(2.6))
    assert result["word_perplexity"] == pytest.approx(math.exp(260 / 68))
    assert result["loss_se"] == pytest.approx(bootstrap_se(token_loss, tokens, nll, n=1000, seed=0))
    low, high = result["perplexity_1se"]
    assert low == pytest.approx(math.exp(2.6 - result["loss_se"])) and high == pytest.approx(
        math.exp(2.6 + result["loss_se"]))
    assert (result["articles"], result["scored_tokens"], result["words"]) == (3, 100, 68)
    with pytest.raises(ScoringError, match="nothing to score"):
        perplexity_result(np.array([0, 0]), np.array([1, 1]), np.array([0.0, 0.0]))


def test_the_error_is_the_spread_of_the_articles_not_of_their_tokens():
    rng = np.random.default_rng(0)
    tokens = np.full(40, 500)
    means = rng.normal(4.0, 0.5, size=40)  # each article its own difficulty: the tokens of one are not independent
    nll = means * tokens
    by_article = perplexity_result(tokens, tokens, nll)["loss_se"]
    assert by_article == pytest.approx(0.5 / math.sqrt(40), rel=0.3)


def test_the_paired_test_pairs_the_two_models_on_the_same_articles():
    rng = np.random.default_rng(1)
    tokens = rng.integers(50, 200, size=30)
    difficulty = rng.normal(4.0, 0.8, size=30) * tokens  # shared by both models: pairing removes it
    better, worse = difficulty, difficulty + 0.05 * tokens + rng.normal(0, 1, size=30)
    test, se = paired_loss_test(tokens, worse, better)
    assert test.difference == pytest.approx(token_loss(tokens, worse) - token_loss(tokens, better))
    assert test.p_value < 0.01 and se < 0.01
    assert test == paired_bootstrap(token_loss, tokens, worse, better, n=1000, seed=0)
    unpaired = math.hypot(perplexity_result(tokens, tokens, worse)["loss_se"],
                          perplexity_result(tokens, tokens, better)["loss_se"])
    assert se < unpaired / 10
