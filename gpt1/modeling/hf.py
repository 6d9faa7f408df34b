"""Convert between `gpt1.modeling.model.GPT` and Hugging Face transformers' `OpenAIGPTLMHeadModel`, both ways.

The two models compute the same function; only the parameter layout differs:

* HF nests everything but the head under `transformer.`; our module names are HF's without that prefix.
* HF's `Conv1D` stores weights as [in, out]; our `nn.Linear` stores [out, in] -> transpose `c_attn`, `c_proj`, `c_fc`.
* Both tie `lm_head.weight` to the token embedding. HF's safetensors files drop the tied copy, so it is optional here.
* HF's causal mask `h.{i}.attn.bias` and `position_ids` are non-persistent buffers in transformers 5; older
  checkpoints saved them, so they are ignored when present.

Activation: GPT-1 used the tanh approximation of GELU. `OpenAIGPTConfig.afn` is looked up in modeling_openai's own
`ACT_FNS` table (NOT the global `ACT2FN`), where "gelu" is `gelu_new`, i.e. exactly the tanh approximation (HF's
default for this model, and what the released checkpoint uses). "gelu_new" / "gelu_pytorch_tanh" are not keys of
that table and would raise. So afn="gelu" is the right value, and `gpt_config_from` refuses any other.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel

from gpt1.modeling.model import GPT, GPTConfig
from gpt1.pipeline import layout
from gpt1.pipeline.errors import Gpt1Error

HF_AFN = "gelu"  # -> modeling_openai.ACT_FNS["gelu"] = gelu_new = tanh-approximate GELU (see module docstring)
_TRANSPOSED = re.compile(r"\.(c_attn|c_proj|c_fc)\.weight$")  # Conv1D [in, out] <-> Linear [out, in]
_HF_BUFFERS = re.compile(r"^(transformer\.)?(h\.\d+\.attn\.(bias|masked_bias)|position_ids)$")
_HEAD = "lm_head.weight"


# ----------------------------------------------------------------------------------------------------------------
# Configs


# Our GPTConfig field -> OpenAIGPTConfig field
_CONFIG_FIELDS = {"vocab_size": "vocab_size", "n_ctx": "n_positions", "n_embd": "n_embd", "n_layer": "n_layer",
                  "n_head": "n_head", "embd_pdrop": "embd_pdrop", "attn_pdrop": "attn_pdrop",
                  "resid_pdrop": "resid_pdrop", "layer_norm_eps": "layer_norm_epsilon", "init_std": "initializer_range"}
_INT_FIELDS = {"vocab_size", "n_ctx", "n_embd", "n_layer", "n_head"}


def hf_config_from(cfg: GPTConfig) -> OpenAIGPTConfig:
    fields = {hf: getattr(cfg, ours) for ours, hf in _CONFIG_FIELDS.items()}
    return OpenAIGPTConfig(afn=HF_AFN, tie_word_embeddings=True, **fields)


def gpt_config_from(hf_cfg: OpenAIGPTConfig) -> GPTConfig:
    if hf_cfg.afn != HF_AFN:
        raise ValueError(f"afn={hf_cfg.afn!r} is not supported: GPT uses the tanh GELU, HF afn={HF_AFN!r}")
    if getattr(hf_cfg, "tie_word_embeddings", True) is False:
        raise ValueError("tie_word_embeddings=False is not supported: GPT-1's LM head is the token embedding")
    return GPTConfig(**{ours: (int if ours in _INT_FIELDS else float)(getattr(hf_cfg, hf))
                        for ours, hf in _CONFIG_FIELDS.items()})


# ----------------------------------------------------------------------------------------------------------------
# State dicts


def _to_hf_key(key: str) -> str:
    return key if key == _HEAD else "transformer." + key


def _from_hf_key(key: str) -> str:
    return key if key == _HEAD else key.removeprefix("transformer.")


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def _our_shapes(cfg: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Every key of `GPT(cfg).state_dict()` with its shape (the round-trip tests fail if the two drift apart)."""
    c, c3, c4 = cfg.n_embd, 3 * cfg.n_embd, 4 * cfg.n_embd
    block = {
        "attn.c_attn.weight": (c3, c), "attn.c_attn.bias": (c3,),
        "attn.c_proj.weight": (c, c), "attn.c_proj.bias": (c,),
        "ln_1.weight": (c,), "ln_1.bias": (c,),
        "mlp.c_fc.weight": (c4, c), "mlp.c_fc.bias": (c4,),
        "mlp.c_proj.weight": (c, c4), "mlp.c_proj.bias": (c,),
        "ln_2.weight": (c,), "ln_2.bias": (c,),
    }  # fmt: skip
    shapes = {"tokens_embed.weight": (cfg.vocab_size, c), "positions_embed.weight": (cfg.n_ctx, c)}
    shapes |= {f"h.{i}.{k}": s for i in range(cfg.n_layer) for k, s in block.items()}
    shapes[_HEAD] = (cfg.vocab_size, c)
    return shapes


def _hf_shapes(cfg: GPTConfig) -> dict[str, tuple[int, ...]]:
    return {_to_hf_key(k): s[::-1] if _TRANSPOSED.search(k) else s for k, s in _our_shapes(cfg).items()}


def _check(sd: dict[str, torch.Tensor], expected: dict[str, tuple[int, ...]], optional: set[str]) -> None:
    """Raise one ValueError listing every missing / unexpected / mis-shaped key."""
    missing = [k for k in expected if k not in sd and k not in optional]
    problems = [f"missing key {k!r} (expected shape {expected[k]})" for k in missing]
    problems += [f"unexpected key {k!r} with shape {_shape(v)}" for k, v in sd.items() if k not in expected]
    problems += [
        f"shape mismatch for {k!r}: expected {expected[k]}, got {_shape(v)}"
        for k, v in sd.items()
        if k in expected and _shape(v) != expected[k]
    ]
    if problems:
        raise ValueError("state dict does not match the config:\n  " + "\n  ".join(problems))


def _rekey(sd: dict[str, torch.Tensor], key: Callable[[str], str]) -> dict[str, torch.Tensor]:
    """Rename every key and transpose the Conv1D <-> Linear weights (the layout change is its own inverse)."""
    return {key(k): v.t().contiguous() if _TRANSPOSED.search(k) else v for k, v in sd.items()}


def to_hf_state_dict(sd: dict[str, torch.Tensor], cfg: GPTConfig) -> dict[str, torch.Tensor]:
    """Our `GPT.state_dict()` -> `OpenAIGPTLMHeadModel` keys and layouts (untransposed tensors may share storage)."""
    _check(sd, _our_shapes(cfg), optional={_HEAD})
    out = _rekey(sd, _to_hf_key)
    out[_HEAD] = out["transformer.tokens_embed.weight"]  # tied
    return out


def from_hf_state_dict(hf_sd: dict[str, torch.Tensor], cfg: GPTConfig) -> dict[str, torch.Tensor]:
    """An `OpenAIGPTLMHeadModel` (or base `OpenAIGPTModel`, unprefixed) state dict -> our `GPT` keys and layouts."""
    hf_sd = {k: v for k, v in hf_sd.items() if not _HF_BUFFERS.match(k)}
    if not any(k.startswith("transformer.") for k in hf_sd):  # a base OpenAIGPTModel's keys (e.g. the hub's file)
        hf_sd = {_to_hf_key(k): v for k, v in hf_sd.items()}
    _check(hf_sd, _hf_shapes(cfg), optional={_HEAD})
    emb = hf_sd["transformer.tokens_embed.weight"]
    if _HEAD in hf_sd and hf_sd[_HEAD] is not emb and not torch.equal(hf_sd[_HEAD], emb):
        raise ValueError(f"{_HEAD!r} differs from 'transformer.tokens_embed.weight': GPT-1's LM head must be tied")
    out = _rekey(hf_sd, _from_hf_key)
    out[_HEAD] = out["tokens_embed.weight"]
    return out


# ----------------------------------------------------------------------------------------------------------------
# Models and directories


def to_hf_model(model: GPT) -> OpenAIGPTLMHeadModel:
    """An `OpenAIGPTLMHeadModel` with `model`'s weights, dtype, device and train/eval mode."""
    p = next(model.parameters())
    hf = OpenAIGPTLMHeadModel(hf_config_from(model.config))
    hf.load_state_dict(to_hf_state_dict(model.state_dict(), model.config))  # copies in place: the tie survives
    return hf.to(device=p.device, dtype=p.dtype).train(model.training)


def from_hf_model(hf_model: OpenAIGPTLMHeadModel) -> GPT:
    """A `GPT` with `hf_model`'s weights, dtype, device and train/eval mode."""
    cfg = gpt_config_from(hf_model.config)
    p = next(hf_model.parameters())
    model = GPT(cfg)
    model.load_state_dict(from_hf_state_dict(hf_model.state_dict(), cfg))
    return model.to(device=p.device, dtype=p.dtype).train(hf_model.training)


def save_hf_dir(model: GPT, out_dir: str | Path) -> Path:
    """Write config.json + model.safetensors that `OpenAIGPTLMHeadModel.from_pretrained(out_dir)` loads."""
    out_dir = Path(out_dir)
    to_hf_model(model).save_pretrained(out_dir)  # safetensors is the default (and only) format in transformers 5
    return out_dir


PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def require_safetensors(folder: Path) -> None:
    """Weights only as pickles (pytorch_model.bin): refused by name before transformers would try to unpickle them."""
    if any(folder.glob("*.safetensors")):
        return
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    found = f"only {', '.join(pickles)} (pickled weights)" if pickles else "no weights"
    raise Gpt1Error(f"{folder}: {found}, no model.safetensors; gpt1 never unpickles weights, a pickle can run code: "
                    f"save them with save_pretrained(..., safe_serialization=True)")


def load_hf(dir_or_hub_id: str | Path, **from_pretrained_kwargs: object) -> GPT:
    """A `GPT` from a local HF directory or a hub id (e.g. "openai-community/openai-gpt", needs internet), eval mode.
    Safetensors only: a pickle is never loaded, from a folder or the hub."""
    if Path(dir_or_hub_id).is_dir():
        require_safetensors(Path(dir_or_hub_id))
    kwargs = {"use_safetensors": True, **from_pretrained_kwargs}
    hf = OpenAIGPTLMHeadModel.from_pretrained(str(dir_or_hub_id), **kwargs)
    return from_hf_model(hf).eval()


# ----------------------------------------------------------------------------------------------------------------
# The export folder

# What the export stage (`gpt1.stages.export`) always leaves in its folder (transformers may add
# generation_config.json). config.json is renamed into place last, so a killed export never looks loadable. No
# tokenizer: transformers 5's OpenAIGPTTokenizer wants vocab.json + merges.txt for a BERT-style pipeline, and our
# tokenizer folder (tokenizer.json, possibly the spaCy pre-tokeniser) does not map onto it faithfully; load ours with
# gpt1.data.tokenizer.GPT1Tokenizer.load instead.
HF_EXPORT_FILES = ("model.safetensors", layout.HF_EXPORT_RECORD, "config.json")


__all__ = [
    "HF_AFN",
    "HF_EXPORT_FILES",
    "from_hf_model",
    "from_hf_state_dict",
    "gpt_config_from",
    "hf_config_from",
    "load_hf",
    "save_hf_dir",
    "to_hf_model",
    "to_hf_state_dict",
]
