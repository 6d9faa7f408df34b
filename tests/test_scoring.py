"""gpt1.evaluation.scoring: the one left-truncation rule (fine-tuning sequences and zero-shot windows) and token
log-probabilities, batched with right padding, under tiny GPT and LSTM models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_lm
from test_checkpoints import gpt1_imports, imports
from torch import nn

from gpt1.data.transforms import _assemble
from gpt1.evaluation.scoring import fit_context, left_truncate, score_continuations
from gpt1.modeling.model import GPT, GPTConfig

SPECIALS = {"_start_": 1000, "_delimiter_": 1001, "_classify_": 1002}


class ForwardOnly(nn.Module):
    """Hides a model's class, so the scorer takes the generic forward() path."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.config = inner, inner.config

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        return self.inner(idx, targets)


# ------------------------------------------------------------------------------------------ windows and truncation


def test_left_truncate_cuts_the_context_first_and_the_tail_only_when_it_alone_overflows():
    fitted = left_truncate([1, 2, 3, 4, 5], [20, 21], 4)
    assert (fitted.context, fitted.tail, fitted.truncated) == ([4, 5], [20, 21], True)
    assert left_truncate([1, 2], [20], 4) == left_truncate([1, 2], [20], 3)  # fits: nothing cut
    assert not left_truncate([1, 2], [20], 3).truncated
    fitted = left_truncate([1, 2], list(range(20, 30)), 4)
    assert (fitted.context, fitted.tail, fitted.truncated) == ([], [20, 21, 22, 23], True)
    fitted = left_truncate([1, 2], list(range(20, 30)), 4, reserve=1)  # one context token kept to condition the tail
    assert (fitted.context, fitted.tail) == ([2], [20, 21, 22])


def test_fine_tuning_sequences_and_zero_shot_windows_share_the_rule():
    context, tail = list(range(1, 30)), [50, 51, 52]
    for n_ctx in (4, 5, 8, 40):
        sequence, truncated = _assemble(context, tail, SPECIALS, n_ctx)
        fitted = left_truncate(context, tail, n_ctx - 3)
        assert sequence == [1000, *fitted.context, 1001, *fitted.tail, 1002] and truncated == fitted.truncated
        window = fit_context(context, tail, n_ctx)
        fitted = left_truncate(context, tail, n_ctx, reserve=1)
        assert window.ids == fitted.context + fitted.tail and window.truncated == fitted.truncated


def test_fit_context_cuts_the_prefix_from_the_left_and_keeps_the_continuation():
    prefix, cont = list(range(1, 11)), [20, 21, 22]
    w = fit_context(prefix, cont, 6)
    assert (w.ids, w.start, w.truncated) == ([8, 9, 10, 20, 21, 22], 3, True)
    w = fit_context(prefix, cont, 20)
    assert (w.ids, w.start, w.truncated) == ([*prefix, *cont], 10, False)
    # A continuation that alone overflows keeps its beginning and one prefix token to condition it.
    w = fit_context([1, 2], list(range(5, 15)), 4)
    assert (w.ids, w.start, w.truncated) == ([2, 5, 6, 7], 1, True)
    # No prefix: the first continuation token has nothing to condition on and is not scored.
    assert fit_context([], [5, 6, 7], 8).start == 1


# ---------------------------------------------------------------------------------------- token log-probabilities


def test_left_truncation_scores_the_continuation_given_the_end_of_the_prefix():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, n_ctx=8, n_embd=16, n_layer=1, n_head=2)).eval()
    prefix, cont = list(range(1, 21)), [30, 31, 32]
    cut = score_continuations(model, [prefix], [cont], n_ctx=8)
    tail = score_continuations(model, [prefix[-5:]], [cont], n_ctx=8)
    assert cut == pytest.approx(tail, abs=1e-6)
    assert not np.allclose(cut, score_continuations(model, [prefix[-4:]], [cont], n_ctx=8))


@pytest.mark.parametrize("kind", ["gpt", "lstm"])
def test_batching_with_right_padding_matches_one_at_a_time(kind):
    torch.manual_seed(0)
    model = tiny_lm(kind, vocab_size=60, n_ctx=24, n_layer=2)
    rng = np.random.default_rng(0)
    prefixes = [rng.integers(0, 60, size=n).tolist() for n in (1, 7, 3, 30, 12)]
    conts = [rng.integers(0, 60, size=n).tolist() for n in (4, 1, 9, 5, 2)]
    batched = score_continuations(model, prefixes, conts)
    single = score_continuations(model, prefixes, conts, batch_tokens=1)  # every row its own batch
    generic = score_continuations(ForwardOnly(model), prefixes, conts)  # full forward() logits
    assert batched == pytest.approx(single, abs=1e-5)
    assert batched == pytest.approx(generic, abs=1e-5)


def test_scoring_is_a_library_module() -> None:
    stages = {"stages", "pretrain", "finetune", "encode_task", "zeroshot", "layers", "report", "tracking", "config",
              "cli"}
    assert gpt1_imports("evaluation.scoring").isdisjoint(stages)
    assert not any(name.split(".")[0] == "mlflow" for name in imports("evaluation.scoring"))
