"""gpt1.modeling.hf: our GPT <-> transformers' OpenAIGPTLMHeadModel compute identical logits. CPU, fp32, nothing
downloaded."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel
from transformers.models.openai import modeling_openai

from gpt1.modeling.hf import (
    HF_AFN,
    from_hf_model,
    from_hf_state_dict,
    gpt_config_from,
    hf_config_from,
    load_hf,
    save_hf_dir,
    to_hf_model,
    to_hf_state_dict,
)
from gpt1.modeling.model import GPT, GPTConfig

CFG = GPTConfig(vocab_size=300, n_ctx=32, n_embd=48, n_layer=3, n_head=4)
TOL = 1e-5


def perturb_(model: torch.nn.Module) -> None:
    """Move every parameter off its init (LN gains off 1, biases off 0) so a mis-mapped tensor cannot hide."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))


def random_hf() -> OpenAIGPTLMHeadModel:
    torch.manual_seed(0)
    hf = OpenAIGPTLMHeadModel(hf_config_from(CFG))
    perturb_(hf)
    return hf.eval()


def random_gpt() -> GPT:
    torch.manual_seed(0)
    model = GPT(CFG)
    perturb_(model)
    return model.eval()


def ids(b: int = 3, t: int = 32) -> torch.Tensor:
    return torch.randint(0, CFG.vocab_size, (b, t), generator=torch.Generator().manual_seed(1))


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def test_hf_activation_is_tanh_gelu() -> None:
    # OpenAIGPT resolves afn in its own ACT_FNS table, where "gelu" is gelu_new: the tanh approximation.
    x = torch.linspace(-6, 6, 1001)
    act = modeling_openai.ACT_FNS[HF_AFN]
    assert torch.allclose(act(x), torch.nn.functional.gelu(x, approximate="tanh"), atol=1e-6)
    assert max_diff(act(x), torch.nn.functional.gelu(x)) > 1e-4  # and not the exact erf GELU
    assert hf_config_from(CFG).afn == "gelu"


def test_config_round_trip() -> None:
    hf_cfg = hf_config_from(CFG)
    assert (hf_cfg.n_positions, hf_cfg.n_embd, hf_cfg.layer_norm_epsilon) == (32, 48, 1e-5)
    assert gpt_config_from(hf_cfg) == CFG
    with pytest.raises(ValueError, match="afn"):
        gpt_config_from(OpenAIGPTConfig(afn="relu"))


def test_paper_size_matches_hf_parameter_count() -> None:
    with torch.device("meta"):
        hf = OpenAIGPTLMHeadModel(hf_config_from(GPTConfig()))
    assert sum(p.numel() for p in hf.parameters()) == 116_534_784


def test_hf_to_ours_equal_logits_and_hidden_states() -> None:
    hf = random_hf()
    ours = from_hf_model(hf)
    assert not ours.training and ours.config == CFG
    idx = ids()
    with torch.no_grad():
        out = hf(idx, output_hidden_states=True)
        logits, _ = ours(idx)
        states = ours.hidden_states(idx)
    assert max_diff(logits, out.logits) <= TOL
    assert len(states) == len(out.hidden_states) == CFG.n_layer + 1
    assert all(max_diff(a, b) <= TOL for a, b in zip(states, out.hidden_states, strict=True))
    assert ours.lm_head.weight is ours.tokens_embed.weight


def test_ours_to_hf_equal_logits_and_loss() -> None:
    ours = random_gpt()
    hf = to_hf_model(ours)
    assert not hf.training
    assert hf.lm_head.weight is hf.transformer.tokens_embed.weight
    idx = ids()
    with torch.no_grad():
        out = hf(idx, labels=idx)  # HF shifts labels internally
        logits, _ = ours(idx)
        _, loss = ours(idx[:, :-1], idx[:, 1:])  # we take aligned targets
    assert max_diff(logits, out.logits) <= TOL
    assert abs(loss.item() - out.loss.item()) <= TOL


def test_state_dict_round_trip_is_exact() -> None:
    sd = random_gpt().state_dict()
    hf_sd = to_hf_state_dict(sd, CFG)
    assert set(hf_sd) == set(OpenAIGPTLMHeadModel(hf_config_from(CFG)).state_dict())
    assert hf_sd["transformer.h.0.attn.c_attn.weight"].shape == (48, 144)  # Conv1D layout [in, out]
    back = from_hf_state_dict(hf_sd, CFG)
    assert set(back) == set(sd) and all(torch.equal(back[k], sd[k]) for k in sd)


def test_save_hf_dir_loads_with_from_pretrained(tmp_path: Path) -> None:
    ours = random_gpt()
    out = save_hf_dir(ours, tmp_path / "hf")
    assert (out / "config.json").exists() and (out / "model.safetensors").exists()
    hf = OpenAIGPTLMHeadModel.from_pretrained(out).eval()
    reloaded = load_hf(out)
    idx = ids()
    with torch.no_grad():
        expected = ours(idx)[0]
        assert max_diff(hf(idx).logits, expected) <= TOL
        assert max_diff(reloaded(idx)[0], expected) <= TOL
    assert not reloaded.training and reloaded.config == CFG


def test_shape_mismatch_missing_and_unexpected_keys_are_named() -> None:
    hf_sd = dict(random_hf().state_dict())
    hf_sd["transformer.h.1.mlp.c_fc.weight"] = torch.zeros(48, 100)
    with pytest.raises(ValueError, match=r"'transformer\.h\.1\.mlp\.c_fc\.weight'.*\(48, 192\).*\(48, 100\)"):
        from_hf_state_dict(hf_sd, CFG)

    sd = dict(random_gpt().state_dict())
    del sd["h.2.ln_2.bias"]
    sd["h.3.ln_1.weight"] = torch.ones(48)
    with pytest.raises(ValueError, match=r"missing key 'h\.2\.ln_2\.bias'") as err:
        to_hf_state_dict(sd, CFG)
    assert "unexpected key 'h.3.ln_1.weight'" in str(err.value)


def test_untied_hf_head_is_refused() -> None:
    hf_sd = {k: v.clone() for k, v in random_hf().state_dict().items()}
    hf_sd["lm_head.weight"] += 1.0
    with pytest.raises(ValueError, match="tied"):
        from_hf_state_dict(hf_sd, CFG)


def test_legacy_buffers_and_base_model_keys_accepted() -> None:
    hf = random_hf()
    # Older checkpoints: base-model keys without "transformer." and the causal-mask buffers saved.
    base_sd = {k.removeprefix("transformer."): v for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    base_sd |= {f"h.{i}.attn.bias": torch.ones(1, 1, 32, 32) for i in range(CFG.n_layer)}
    ours = GPT(CFG).eval()
    ours.load_state_dict(from_hf_state_dict(base_sd, CFG))
    idx = ids()
    with torch.no_grad():
        assert max_diff(ours(idx)[0], hf(idx).logits) <= TOL
