"""gpt1.modeling.heads: task heads on the extract token, batches, L3 = L2 + λ·L1, special tokens, layer transfer.

CPU only: the session's 200-merge tokenizer (conftest's tiny_data) and a 2-layer, 32-wide GPT (and a 32-unit LSTM)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from test_checkpoints import gpt1_imports, imports

from gpt1.data.rows import Example
from gpt1.data.tasks import get_task
from gpt1.data.tokenizer import GPT1Tokenizer
from gpt1.data.transforms import transform_batch
from gpt1.modeling.heads import FinetuneModel, add_specials, collate, compute_losses, lm_targets, transfer_init
from gpt1.modeling.model import GPT, LSTMLM, GPTConfig, LSTMConfig
from gpt1.pipeline.errors import Gpt1Error


@pytest.fixture(scope="module")
def tok(tiny_data) -> GPT1Tokenizer:
    return GPT1Tokenizer.load(tiny_data.tokenizer)


def tiny_model(tok: GPT1Tokenizer, task: str, kind: str = "gpt") -> FinetuneModel:
    torch.manual_seed(0)
    if kind == "gpt":
        lm = GPT(GPTConfig(vocab_size=tok.base_vocab_size, n_ctx=64, n_embd=32, n_layer=2, n_head=2))
    else:  # hidden size unlike n_embd, as in the paper's LSTM (and ours): the head must read the hidden state
        lm = LSTMLM(LSTMConfig(vocab_size=tok.base_vocab_size, n_ctx=64, n_embd=24, hidden_size=40))
    add_specials(lm, tok)
    return FinetuneModel(lm, get_task(task), clf_dropout=0.1).eval()


def batch_of(task: str, examples: list[Example], tok: GPT1Tokenizer):
    spec = get_task(task)
    return collate(transform_batch(spec, examples, tok, 64), [e.label for e in examples], spec.encoding == "float")


def test_similarity_head_sums_the_two_orders(tok: GPT1Tokenizer) -> None:
    a, b = "the old map was found near the river .", "ben crossed the narrow bridge again ."
    for task in ("stsb", "mrpc"):
        model = tiny_model(tok, task)
        ab = batch_of(task, [Example((a, b), 1, None, 0)], tok)
        ba = batch_of(task, [Example((b, a), 1, None, 0)], tok)
        with torch.no_grad():
            torch.testing.assert_close(model(ab), model(ba))  # the sum makes the order of A and B irrelevant
            states = model.states(ab)
            extract = states[torch.arange(2), ab.lengths - 1]
            torch.testing.assert_close(model(ab), model.head.linear(extract[0] + extract[1]).unsqueeze(0))
        assert model(ab).shape == (1, 1 if task == "stsb" else 2)


def test_multiple_choice_scores_each_answer_on_its_own_sequence(tok: GPT1Tokenizer) -> None:
    model = tiny_model(tok, "race")
    choices = ("a lantern", "the river", "a violin", "the market")
    examples = [Example(("ada found the map .", "what did ada find ?"), k, choices, k) for k in range(3)]
    batch = batch_of("race", examples, tok)
    assert batch.tokens.shape[0] == 3 * 4 and batch.per_example == 4
    with torch.no_grad():
        scores = model(batch)
    assert scores.shape == (3, 4)  # one score per (context, answer) sequence
    losses, _ = compute_losses(model, batch, 0.0)
    torch.testing.assert_close(losses.clf, F.cross_entropy(scores, batch.labels))
    # Reversing the answers reverses the scores: each answer is scored on its own sequence.
    reverse = batch_of("race", [dataclasses.replace(examples[0], choices=choices[::-1])], tok)
    with torch.no_grad():
        torch.testing.assert_close(model(reverse)[0], scores[0].flip(0))


def test_l3_is_l2_plus_lambda_l1(tok: GPT1Tokenizer) -> None:
    model = tiny_model(tok, "rte")
    examples = [Example(("ada found the map .", "ada found it ."), 0, None, 0),
                Example(("the cold storm came before dawn and lasted long .", "it rained ."), 1, None, 1)]
    batch = batch_of("rte", examples, tok)
    with torch.no_grad():
        losses, outputs = compute_losses(model, batch, 0.5)
        torch.testing.assert_close(losses.total, losses.clf + 0.5 * losses.lm)
        torch.testing.assert_close(losses.clf, F.cross_entropy(outputs, batch.labels))
        # L1 as the language model itself computes it, on targets that ignore padding and the last real token.
        _, reference = model.lm(batch.tokens, lm_targets(batch.tokens, batch.lengths))
        torch.testing.assert_close(losses.lm, reference)
        no_aux, _ = compute_losses(model, batch, 0.0)
        torch.testing.assert_close(no_aux.total, no_aux.clf)
        torch.testing.assert_close(no_aux.clf, losses.clf)


def test_right_padding_changes_nothing_and_targets_skip_it(tok: GPT1Tokenizer) -> None:
    model = tiny_model(tok, "sst2")
    short, long = Example(("warm .",), 1, None, 0), Example(("the film is dull and tedious and bleak .",), 0, None, 1)
    together = batch_of("sst2", [short, long], tok)
    alone = batch_of("sst2", [short], tok)
    assert together.tokens.shape[1] > alone.tokens.shape[1]
    with torch.no_grad():
        torch.testing.assert_close(model(together)[0], model(alone)[0])
    targets = lm_targets(together.tokens, together.lengths)
    n = int(together.lengths[0])
    assert targets[0, : n - 1].tolist() == together.tokens[0, 1:n].tolist()
    assert (targets[0, n - 1 :] == -100).all()
    assert together.tokens[0, n - 1].item() == tok.specials["_classify_"]


def test_lstm_head_reads_its_hidden_state(tok: GPT1Tokenizer) -> None:
    model = tiny_model(tok, "sst2", kind="lstm")
    assert model.head.linear.in_features == 40  # the LSTM's hidden size, not its n_embd (24)
    batch = batch_of("sst2", [Example(("warm and funny .",), 1, None, 0)], tok)
    losses, outputs = compute_losses(model, batch, 0.5)
    assert outputs.shape == (1, 2) and torch.isfinite(losses.total)
    with torch.no_grad():
        states = model.states(batch)  # [sequences, positions, hidden]
        extract = states[0, batch.lengths[0] - 1]  # the state at the extract token
        torch.testing.assert_close(model(batch), model.head.linear(extract).unsqueeze(0))


def test_special_tokens_get_new_rows_and_old_rows_stay(tok: GPT1Tokenizer) -> None:
    torch.manual_seed(1)
    lm = GPT(GPTConfig(vocab_size=tok.base_vocab_size, n_ctx=64, n_embd=32, n_layer=1, n_head=2))
    old = lm.tokens_embed.weight.detach().clone()
    add_specials(lm, tok)
    weight = lm.tokens_embed.weight.detach()
    assert weight.shape == (tok.base_vocab_size + 3, 32) and lm.config.vocab_size == tok.vocab_size
    torch.testing.assert_close(weight[: tok.base_vocab_size], old)
    new = weight[tok.base_vocab_size :]
    assert 0.012 < new.std().item() < 0.03 and abs(new.mean().item()) < 0.01  # N(0, 0.02)
    assert lm.lm_head.weight is lm.tokens_embed.weight  # still tied


def test_transfer_keeps_embeddings_and_the_first_k_blocks() -> None:
    torch.manual_seed(0)
    base = GPT(GPTConfig(vocab_size=50, n_ctx=16, n_embd=16, n_layer=3, n_head=2))
    with torch.no_grad():  # make every parameter recognisable: no re-initialisation could reproduce it
        for p in base.parameters():
            p.add_(1.0)
    original = {k: v.clone() for k, v in base.state_dict().items()}
    for k in (0, 1, 3):
        model = GPT(base.config)
        model.load_state_dict(original)
        transfer = transfer_init(model, k)
        kept_blocks = {f"h.{i}." for i in range(k)}
        expected = {n for n, _ in model.named_parameters()
                    if n.startswith(("tokens_embed", "positions_embed")) or n.startswith(tuple(kept_blocks))}
        assert set(transfer.kept) == expected
        assert set(transfer.reinitialised) == {n for n, _ in model.named_parameters()} - expected
        state = model.state_dict()
        for name in transfer.kept:
            torch.testing.assert_close(state[name], original[name])
        for name in transfer.reinitialised:
            value = state[name]
            if name.endswith(("ln_1.weight", "ln_2.weight")):
                assert (value == 1).all()
            elif name.endswith("bias"):
                assert (value == 0).all()
            else:
                assert abs(value.std().item() - 0.02) < 0.006 and abs(value.mean().item()) < 0.01
    assert transfer_init(GPT(base.config), 0).kept == ["tokens_embed.weight", "positions_embed.weight"]
    with pytest.raises(Gpt1Error, match=r"0\.\.3"):
        transfer_init(GPT(base.config), 4)


def test_heads_is_a_library_module() -> None:
    stages = {"stages", "pretrain", "finetune", "encode_task", "zeroshot", "layers", "report", "tracking", "config",
              "cli"}
    assert gpt1_imports("modeling.heads").isdisjoint(stages)
    assert not any(name.split(".")[0] == "mlflow" for name in imports("modeling.heads"))
