"""GPT-1 decoder and LSTM baseline: structure, init, interface. CPU, tiny configs, no downloads."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from gpt1.modeling.model import GPT, LSTMLM, GPTConfig, LSTMConfig, padded_logits, set_dropout

SMALL = GPTConfig(vocab_size=101, n_ctx=16, n_embd=32, n_layer=3, n_head=4)
PAPER_PARAMS = 116_534_784  # GPTConfig(): embeddings 31,480,320 + 12 blocks x 7,087,872


def small_gpt(**overrides: object) -> GPT:
    torch.manual_seed(0)
    return GPT.from_config(SMALL, **overrides)


def ids(b: int = 2, t: int = 16, vocab: int = 101, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------------------ config


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"n_embd": 30, "n_head": 4}, "n_head"),
        ({"n_layer": 0}, "n_layer"),
        ({"vocab_size": -1}, "vocab_size"),
        ({"n_ctx": 0}, "n_ctx"),
        ({"attn_pdrop": 1.0}, "attn_pdrop"),
        ({"embd_pdrop": -0.1}, "embd_pdrop"),
        ({"resid_pdrop": 1.5}, "resid_pdrop"),
    ],
)
def test_config_validation_names_field(overrides: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        GPTConfig(**overrides)


def test_lstm_config_validation() -> None:
    with pytest.raises(ValueError, match="hidden_size"):
        LSTMConfig(hidden_size=0)
    with pytest.raises(ValueError, match="dropout"):
        LSTMConfig(dropout=1.0)


def test_paper_parameter_count(monkeypatch: pytest.MonkeyPatch) -> None:
    # Count on the meta device (no 116M floats allocated); init is irrelevant to counting and slow on meta.
    monkeypatch.setattr(GPT, "_init_weights", lambda self, module: None)
    with torch.device("meta"):
        model = GPT(GPTConfig())
    n = model.num_params()
    cfg = GPTConfig()
    c, v = cfg.n_embd, cfg.vocab_size
    per_block = (c * 3 * c + 3 * c) + (c * c + c) + (c * 4 * c + 4 * c) + (4 * c * c + c) + 4 * c  # attn, mlp, 2 LN
    assert n == v * c + cfg.n_ctx * c + cfg.n_layer * per_block == PAPER_PARAMS
    assert round(n / 1e6, 1) == 116.5


def test_from_config_applies_overrides_without_mutating() -> None:
    model = GPT.from_config(SMALL, n_layer=1)
    assert len(model.h) == 1 and model.config.n_layer == 1 and SMALL.n_layer == 3


# ------------------------------------------------------------------------------------------------------ structure


def test_post_ln_structure_and_no_final_layernorm() -> None:
    model = small_gpt().eval()
    # exactly two LayerNorms per block, none after the last block
    assert sum(isinstance(m, nn.LayerNorm) for m in model.modules()) == 2 * SMALL.n_layer
    assert not any(isinstance(m, nn.LayerNorm) for name, m in model.named_children())
    states = model.hidden_states(ids())
    # the embedding output is not normalised (std ~ 0.02 * sqrt(2))...
    assert states[0].std(-1).mean() < 0.1
    # ...but every block ends in LN (gain 1, bias 0 at init): zero mean, unit variance over features
    for h in states[1:]:
        assert h.mean(-1).abs().max() < 1e-5
        assert torch.allclose(h.var(-1, unbiased=False), torch.ones(()), atol=1e-3)


def test_block_is_post_ln() -> None:
    # n = LN(x + attn(x)); h = LN(n + mlp(n)) -- check against a pre-LN reading of the same weights.
    block = small_gpt().eval().h[0]
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
        x = torch.randn(2, 8, SMALL.n_embd)
        n = block.ln_1(x + block.attn(x))
        expected = block.ln_2(n + block.mlp(n))
        pre_ln = x + block.attn(block.ln_1(x))
        pre_ln = pre_ln + block.mlp(block.ln_2(pre_ln))
        out = block(x)
    assert torch.allclose(out, expected, atol=1e-6)
    assert not torch.allclose(out, pre_ln, atol=1e-2)


def test_causality() -> None:
    model = small_gpt().eval()
    a = ids()
    b = a.clone()
    b[:, 9] = (b[:, 9] + 1) % SMALL.vocab_size
    with torch.no_grad():
        la, lb = model(a)[0], model(b)[0]
    assert torch.allclose(la[:, :9], lb[:, :9], atol=1e-6)
    assert not torch.allclose(la[:, 9:], lb[:, 9:], atol=1e-4)


def test_tied_head_shares_storage() -> None:
    model = small_gpt()
    assert model.lm_head.weight is model.tokens_embed.weight
    assert model.lm_head.weight.data_ptr() == model.tokens_embed.weight.data_ptr()
    assert model.lm_head.bias is None
    assert "lm_head.weight" not in dict(model.named_parameters())  # listed once, as tokens_embed.weight


def test_init_statistics() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=500, n_ctx=64, n_embd=128, n_layer=2, n_head=4))
    for name, p in model.named_parameters():
        if p.dim() == 2:  # Linear and Embedding weights: N(0, 0.02)
            assert abs(p.std().item() - 0.02) < 0.002, name
            assert abs(p.mean().item()) < 0.002, name
        elif name.endswith("bias"):
            assert torch.all(p == 0), name
        else:  # LayerNorm gains
            assert "ln_" in name and torch.all(p == 1), name


def test_gelu_is_tanh_approximation() -> None:
    mlp = small_gpt().eval().h[0].mlp
    x = 20 * torch.randn(4, SMALL.n_embd)  # pre-activations of order 1, where the two GELUs differ most
    with torch.no_grad():
        u = mlp.c_fc(x)
        tanh = mlp.c_proj(torch.nn.functional.gelu(u, approximate="tanh"))
        erf = mlp.c_proj(torch.nn.functional.gelu(u))
        out = mlp(x)
    assert torch.equal(out, tanh)
    assert (out - erf).abs().max() > 1e-6


# ------------------------------------------------------------------------------------------------------ interface


def test_hidden_states_shapes_and_consistency() -> None:
    model = small_gpt().eval()
    idx = ids(3, 10)
    with torch.no_grad():
        states = model.hidden_states(idx)
        logits, loss = model(idx)
        last = model.transformer(idx)
    assert len(states) == SMALL.n_layer + 1
    assert all(h.shape == (3, 10, SMALL.n_embd) for h in states)
    assert torch.equal(states[-1], last)
    assert logits.shape == (3, 10, SMALL.vocab_size) and loss is None
    assert torch.allclose(logits, last @ model.tokens_embed.weight.T, atol=1e-5)


def test_loss_is_mean_ce_with_ignore_index() -> None:
    model = small_gpt().eval()
    idx = ids()
    targets = ids(seed=2)
    targets[0, :5] = -100
    with torch.no_grad():
        logits, loss = model(idx, targets)
    keep = targets != -100
    manual = -torch.log_softmax(logits, -1)[keep].gather(-1, targets[keep][:, None]).mean()
    assert torch.allclose(loss, manual, atol=1e-6)
    assert abs(loss.item() - math.log(SMALL.vocab_size)) < 0.1  # near-uniform predictions at init


def test_a_padded_lm_head_changes_neither_the_loss_nor_the_gradients_nor_the_weights() -> None:
    """logits_multiple 64 pads the 101-row vocabulary to 128 and masks the padding: the same logits, loss and
    gradients as unpadded (up to summation order), and the weights and state_dict keep their 101 rows."""
    plain, padded = small_gpt().eval(), small_gpt().eval()
    padded.logits_multiple = 64
    idx, targets = ids(), ids(seed=2)
    targets[1, 3:] = -100
    results = []
    for model in (plain, padded):
        logits, loss = model(idx, targets)
        loss.backward()
        results.append((logits.detach(), loss.detach(), model.tokens_embed.weight.grad.clone()))
    (logits_a, loss_a, grad_a), (logits_b, loss_b, grad_b) = results
    assert logits_b.shape == (2, 16, SMALL.vocab_size)
    torch.testing.assert_close(logits_b, logits_a)
    torch.testing.assert_close(loss_b, loss_a)
    torch.testing.assert_close(grad_b, grad_a)
    assert padded.state_dict()["tokens_embed.weight"].shape == (SMALL.vocab_size, SMALL.n_embd)
    assert padded.num_params() == plain.num_params()


@pytest.mark.slow
def test_the_padded_lm_head_compiles_to_the_eager_loss_and_gradients() -> None:
    """What pre-training runs on CUDA, compiled by Inductor (here for the CPU, ~50 s): the padded head's graph gives
    the unpadded model's loss and gradients."""
    plain, padded = small_gpt().eval(), small_gpt().eval()
    padded.logits_multiple = 64
    idx, targets = ids(), ids(seed=2)
    want = plain(idx, targets)[1]
    want.backward()
    loss = torch.compile(padded)(idx, targets)[1]
    loss.backward()
    torch.testing.assert_close(loss, want)
    torch.testing.assert_close(padded.tokens_embed.weight.grad, plain.tokens_embed.weight.grad)


def test_padded_logits_pads_to_the_multiple_and_masks_only_the_padding() -> None:
    hidden, weight = torch.randn(3, 8), torch.randn(101, 8)
    out = padded_logits(hidden, weight, 64)
    assert out.shape == (3, 128) and torch.isneginf(out[:, 101:]).all() and torch.isfinite(out[:, :101]).all()
    torch.testing.assert_close(padded_logits(hidden, weight[:64], 64), hidden @ weight[:64].T)  # aligned: no padding


def test_too_long_sequence_raises() -> None:
    model = small_gpt()
    with pytest.raises(ValueError, match="n_ctx"):
        model(ids(1, SMALL.n_ctx + 1))


def test_dropout_only_in_training() -> None:
    model = small_gpt(attn_pdrop=0.5, embd_pdrop=0.0, resid_pdrop=0.0)  # attention dropout alone
    idx = ids()
    with torch.no_grad():
        model.train()
        assert not torch.allclose(model(idx)[0], model(idx)[0])
        model.eval()
        assert torch.equal(model(idx)[0], model(idx)[0])


def test_param_groups() -> None:
    model = small_gpt()
    decay, no_decay = model.param_groups(0.01)
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    decay_names = {names[id(p)] for p in decay["params"]}
    no_decay_names = {names[id(p)] for p in no_decay["params"]}
    assert decay_names | no_decay_names == set(names.values()) and not decay_names & no_decay_names
    assert decay_names == model.decay_parameter_names()
    assert all(model.get_parameter(n).dim() == 2 for n in decay_names)
    assert {"tokens_embed.weight", "positions_embed.weight", "h.0.attn.c_attn.weight"} <= decay_names
    assert all(n.endswith("bias") or ".ln_" in n for n in no_decay_names)
    assert {"h.0.ln_1.weight", "h.2.ln_2.weight", "h.1.mlp.c_fc.bias"} <= no_decay_names
    torch.optim.AdamW(model.param_groups(0.01), lr=1e-3)  # accepted as-is (no duplicated tied tensor)


def test_resize_token_embeddings_keeps_rows_and_tie() -> None:
    model = small_gpt()
    old = model.tokens_embed.weight.detach().clone()
    model.resize_token_embeddings(SMALL.vocab_size + 3000, std=0.05)
    w = model.tokens_embed.weight
    assert w.shape == (SMALL.vocab_size + 3000, SMALL.n_embd)
    assert torch.equal(w[: SMALL.vocab_size], old)
    assert abs(w[SMALL.vocab_size :].std().item() - 0.05) < 0.003
    assert model.lm_head.weight is w and model.config.vocab_size == SMALL.vocab_size + 3000
    assert SMALL.vocab_size == 101  # the shared config object is untouched
    logits, _ = model(torch.tensor([[SMALL.vocab_size + 2999, 0]]))
    assert logits.shape[-1] == SMALL.vocab_size + 3000
    with pytest.raises(ValueError, match="new_vocab_size"):
        model.resize_token_embeddings(10)


def test_overfits_one_batch() -> None:
    model = small_gpt(embd_pdrop=0.0, attn_pdrop=0.0, resid_pdrop=0.0)
    opt = torch.optim.AdamW(model.param_groups(0.0), lr=1e-2)
    idx = ids(2, 16)
    first = None
    for _ in range(20):
        _, loss = model(idx[:, :-1], idx[:, 1:])
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.3 * first


# ------------------------------------------------------------------------------------------------------ LSTM


LSTM_SMALL = LSTMConfig(vocab_size=101, n_ctx=16, n_embd=24, hidden_size=40)


def test_lstm_shapes_and_hidden_states() -> None:
    torch.manual_seed(0)
    model = LSTMLM.from_config(LSTM_SMALL).eval()
    idx = ids(3, 12)
    logits, loss = model(idx, ids(3, 12, seed=5))
    states = model.hidden_states(idx)
    assert logits.shape == (3, 12, 101)
    assert loss is not None and abs(loss.item() - math.log(101)) < 0.1
    assert [tuple(h.shape) for h in states] == [(3, 12, 24), (3, 12, 40)]
    assert torch.equal(model.transformer(idx), states[-1])
    assert model.lm_head.weight.data_ptr() != model.tokens_embed.weight.data_ptr()  # untied
    with pytest.raises(ValueError, match="n_ctx"):
        model(ids(1, 17))


def test_lstm_is_causal() -> None:
    model = LSTMLM(LSTM_SMALL).eval()
    a = ids()
    b = a.clone()
    b[:, 7] = (b[:, 7] + 1) % 101
    with torch.no_grad():
        la, lb = model(a)[0], model(b)[0]
    assert torch.allclose(la[:, :7], lb[:, :7]) and not torch.allclose(la[:, 7:], lb[:, 7:])


def test_lstm_resize_and_param_groups() -> None:
    model = LSTMLM(LSTM_SMALL)
    old_emb, old_head = model.tokens_embed.weight.detach().clone(), model.lm_head.weight.detach().clone()
    model.resize_token_embeddings(104)
    assert torch.equal(model.tokens_embed.weight[:101], old_emb)
    assert torch.equal(model.lm_head.weight[:101], old_head)
    assert torch.all(model.lm_head.bias[101:] == 0)
    assert model(torch.tensor([[103]]))[0].shape == (1, 1, 104)
    decay = model.decay_parameter_names()
    assert decay == {"tokens_embed.weight", "lstm.weight_ih_l0", "lstm.weight_hh_l0", "lm_head.weight"}
    groups = model.param_groups(0.01)
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))


def test_set_dropout_reaches_every_dropout_and_the_config() -> None:
    gpt = GPT(GPTConfig(vocab_size=50, n_ctx=8, n_embd=16, n_layer=2, n_head=2, embd_pdrop=0.0, attn_pdrop=0.0,
                        resid_pdrop=0.0))
    lstm = LSTMLM(LSTMConfig(vocab_size=50, n_ctx=8, n_embd=16, hidden_size=16, n_layer=2, dropout=0.0))
    for model in (gpt, lstm):
        set_dropout(model, 0.25)
        assert all(m.p == 0.25 for m in model.modules() if isinstance(m, nn.Dropout))
    assert all(block.attn.attn_pdrop == 0.25 for block in gpt.h)
    assert (gpt.config.embd_pdrop, gpt.config.attn_pdrop, gpt.config.resid_pdrop) == (0.25, 0.25, 0.25)
    assert lstm.lstm.dropout == 0.25 and lstm.config.dropout == 0.25
    with pytest.raises(ValueError, match="dropout must be in"):
        set_dropout(gpt, 1.0)


def test_the_lstm_drops_out_its_input_embeddings_and_its_output_states():
    """Two dropouts a forward pass (the embeddings, then the states the head reads): pre-training regularises both."""
    model = LSTMLM.from_config(LSTMConfig(vocab_size=20, n_ctx=8, n_embd=8, hidden_size=12, n_layer=1, dropout=0.5))
    shapes = []
    model.drop.register_forward_hook(lambda _module, _inputs, output: shapes.append(tuple(output.shape)))
    idx = torch.randint(0, 20, (2, 5))
    model.train()(idx)
    assert shapes == [(2, 5, 8), (2, 5, 12)]  # the embeddings (n_embd), then the states (hidden_size)
