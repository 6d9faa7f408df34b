"""The GPT-1 decoder (Radford et al., 2018, "Improving Language Understanding by Generative Pre-Training").

The published architecture (Section 4.1 of the paper and OpenAI's `finetune-transformer-lm` code), as Hugging Face's
`modeling_openai.py` ports it -- with one difference from the original code, which we share with that port:

* token embedding + *learned* position embedding, dropout on their sum. The original code instead drops out
  elements of the embedding MATRIX (tokens, specials and positions in one matrix `we`) once per forward pass, and the
  LM head multiplies by that same dropped matrix. We follow the Hugging Face port (dropout on the summed
  embeddings), so our weights convert to and from it exactly; the paper's text does not specify either;
* 12 post-LN decoder blocks:  n = LN(x + attn(x));  h = LN(n + mlp(n));
* masked (causal) multi-head self-attention, 12 heads, 768 wide;
* position-wise FFN of width 4 * 768 = 3072 with the tanh approximation of GELU;
* NO final LayerNorm (the last block already ends in one -- unlike GPT-2's pre-LN design);
* LM head tied to the token embedding, no bias;
* N(0, 0.02) init for all Linear / Embedding weights ("a simple weight initialization of N(0, 0.02) was
  sufficient" because LayerNorm is used everywhere), zero biases, LayerNorm gain 1 / bias 0.

Module names follow Hugging Face's `modeling_openai.py` (`tokens_embed`, `positions_embed`, `h.{i}.attn.c_attn`,
...) so `gpt1.modeling.hf` converts with a trivial key map, but we use plain `nn.Linear` (weight [out, in]) instead of
HF's `Conv1D` (weight [in, out]).

Also here: `LSTMLM`, the single-layer 2048-unit LSTM the paper's ablation (Table 5) compares against, with the same
interface (`forward`, `hidden_states`, `resize_token_embeddings`, `param_groups`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

# ----------------------------------------------------------------------------------------------------------------
# Configs


def _check_positive(cfg: object, *names: str) -> None:
    for name in names:
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_prob(cfg: object, *names: str) -> None:
    for name in names:
        value = getattr(cfg, name)
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {value!r}")


@dataclass
class GPTConfig:
    vocab_size: int = 40478  # 40,000 BPE merges + base symbols (the released encoder)
    n_ctx: int = 512  # context length (number of learned positions)
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    embd_pdrop: float = 0.1
    attn_pdrop: float = 0.1
    resid_pdrop: float = 0.1
    layer_norm_eps: float = 1e-5
    init_std: float = 0.02

    def __post_init__(self) -> None:
        _check_positive(self, "vocab_size", "n_ctx", "n_embd", "n_layer", "n_head")
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        _check_prob(self, "embd_pdrop", "attn_pdrop", "resid_pdrop")
        if self.layer_norm_eps <= 0:
            raise ValueError(f"layer_norm_eps must be > 0, got {self.layer_norm_eps!r}")
        if self.init_std <= 0:
            raise ValueError(f"init_std must be > 0, got {self.init_std!r}")


@dataclass
class LSTMConfig:
    vocab_size: int = 40478
    n_ctx: int = 512  # not needed by an LSTM; kept so callers can treat both models alike
    n_embd: int = 768
    hidden_size: int = 2048  # the paper's ablation: "a single layer 2048 unit LSTM"
    n_layer: int = 1
    dropout: float = 0.1
    init_std: float = 0.02

    def __post_init__(self) -> None:
        _check_positive(self, "vocab_size", "n_ctx", "n_embd", "hidden_size", "n_layer")
        _check_prob(self, "dropout")
        if self.init_std <= 0:
            raise ValueError(f"init_std must be > 0, got {self.init_std!r}")


# ----------------------------------------------------------------------------------------------------------------
# Helpers shared by both language models


def _param_groups(module: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW groups. The paper applies its (decoupled, Loshchilov & Hutter) L2 of w = 0.01 to "all non bias or
    gain weights"; OpenAI's code decays every parameter with ndim > 1. So: every 2-D weight decays -- Linear / LSTM
    matrices AND the token and position embeddings (the tied LM head is the token embedding, counted once) -- while
    biases and LayerNorm gains/biases (all 1-D) do not."""
    decay, no_decay = [], []
    for _, p in module.named_parameters():  # named_parameters() yields a tied tensor only once
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def _decay_parameter_names(module: nn.Module) -> set[str]:
    return {name for name, p in module.named_parameters() if p.requires_grad and p.dim() >= 2}


def _grown(weight: torch.Tensor, new_rows: int, std: float) -> nn.Parameter:
    """`weight` with its rows kept and `new_rows - len(weight)` rows appended, drawn N(0, std) (zeros for 1-D)."""
    old_rows = weight.shape[0]
    if new_rows < old_rows:
        raise ValueError(f"new_vocab_size ({new_rows}) must be >= the current vocab_size ({old_rows})")
    out = weight.new_empty((new_rows, *weight.shape[1:]))
    with torch.no_grad():
        out[:old_rows] = weight
        if weight.dim() == 1:
            out[old_rows:].zero_()
        else:
            out[old_rows:].normal_(0.0, std)
    return nn.Parameter(out, requires_grad=weight.requires_grad)


def mask_padding(logits: torch.Tensor, vocab: int) -> torch.Tensor:
    """`logits` with the columns past `vocab` (a padded vocabulary's unused rows) at -inf: softmax gives them 0, so
    the cross-entropy and its gradient are the unpadded vocabulary's."""
    if logits.size(-1) == vocab:
        return logits
    padding = torch.arange(logits.size(-1), device=logits.device) >= vocab
    return logits.masked_fill(padding, float("-inf"))


def pad_rows(weight: torch.Tensor, multiple: int) -> torch.Tensor:
    """`weight` with zero rows appended up to a multiple of `multiple` (itself when it is one already)."""
    extra = -weight.size(0) % multiple
    return F.pad(weight, (0, 0, 0, extra)) if extra else weight


def padded_logits(hidden: torch.Tensor, weight: torch.Tensor, multiple: int) -> torch.Tensor:
    """hidden @ weight.T with `weight`'s rows zero-padded to a multiple of `multiple` and the padding's logits at
    -inf: [..., padded vocabulary]. The weight itself keeps its rows (checkpoints, exports and the optimizer see the
    real vocabulary); on a GPU an aligned vocabulary fills the matrix units' tiles (40,478 -> 40,512 for 64).
    Under torch.compile the pad should fuse into the bf16 cast the product needs anyway (not yet checked on a GPU)."""
    return mask_padding(F.linear(hidden, pad_rows(weight, multiple)), weight.size(0))


def _lm_loss(logits: torch.Tensor, targets: torch.Tensor | None) -> torch.Tensor | None:
    # targets are already aligned with logits (targets[:, t] is the token after idx[:, t]); -100 is ignored.
    if targets is None:
        return None
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100)


def _check_len(idx: torch.Tensor, n_ctx: int) -> None:
    if idx.dim() != 2:
        raise ValueError(f"idx must be [batch, time], got shape {tuple(idx.shape)}")
    if idx.size(1) > n_ctx:
        raise ValueError(f"sequence length {idx.size(1)} exceeds n_ctx={n_ctx}")


def set_dropout(model: nn.Module, p: float) -> None:
    """Every dropout of a language model -- the GPT's embedding, attention and residual dropouts, the LSTM's -- set
    to p, in its modules and its config (so what is saved with it says what it trained with). Fine-tuning uses it
    when its dropout differs from pre-training's (finetune.dropout)."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {p!r}")
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = p
        if isinstance(module, CausalSelfAttention):
            module.attn_pdrop = p
        if isinstance(module, nn.LSTM) and module.num_layers > 1:  # between layers only, as LSTMLM builds it
            module.dropout = p
    fields = {"embd_pdrop", "attn_pdrop", "resid_pdrop", "dropout"} & {f.name for f in dataclasses.fields(model.config)}
    model.config = dataclasses.replace(model.config, **dict.fromkeys(fields, p))


# ----------------------------------------------------------------------------------------------------------------
# GPT-1


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.attn_pdrop = cfg.attn_pdrop
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)  # q, k, v in that order (as HF / OpenAI split them)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.resid_dropout = nn.Dropout(cfg.resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # [B, nh, T, hs]
        # softmax(q k^T / sqrt(hs)) v with the causal mask; dropout on the attention probabilities when training.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.attn_pdrop if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        self.dropout = nn.Dropout(cfg.resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # GPT-1's code used the tanh approximation of GELU, not the exact erf form.
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.attn = CausalSelfAttention(cfg)
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)
        self.mlp = MLP(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Post-LN (the original Transformer's placement): normalise AFTER each residual sum.
        n = self.ln_1(x + self.attn(x))
        return self.ln_2(n + self.mlp(n))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.tokens_embed = nn.Embedding(config.vocab_size, config.n_embd)
        self.positions_embed = nn.Embedding(config.n_ctx, config.n_embd)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.tokens_embed.weight  # tied: one tensor, listed once by parameters()
        # forward's LM head pads the vocabulary to a multiple of this (`padded_logits`); a runtime choice, not a
        # hyperparameter: the loss is the same (pre-training sets it on CUDA: gpt1.training.runtime.logits_multiple)
        self.logits_multiple = 1
        self.apply(self._init_weights)

    @classmethod
    def from_config(cls, config: GPTConfig | None = None, **overrides: object) -> GPT:
        """A freshly initialised model; `overrides` replace config fields. Nothing is downloaded."""
        config = config if config is not None else GPTConfig()
        return cls(dataclasses.replace(config, **overrides) if overrides else config)

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.init_std
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def hidden_states(self, idx: torch.Tensor) -> list[torch.Tensor]:
        """[embedding output, block 1 output, ..., block n_layer output], each [B, T, n_embd] (same convention as
        HF's `output_hidden_states`). Fine-tuning heads read the last one; analyses (paper Fig. 2) read them all."""
        _check_len(idx, self.config.n_ctx)
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.drop(self.tokens_embed(idx) + self.positions_embed(pos))
        states = [x]
        for block in self.h:
            x = block(x)
            states.append(x)
        return states

    def transformer(self, idx: torch.Tensor) -> torch.Tensor:
        """The last hidden state h_n, [B, T, n_embd] (already layer-normalised by the last block)."""
        return self.hidden_states(idx)[-1]

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """logits [B, T, vocab]; loss = mean cross-entropy against `targets` (aligned: the next token of each
        position, -100 = ignore), or None. With `logits_multiple` > 1 the loss comes from the padded, masked logits and
        the logits returned are their real vocabulary's columns."""
        padded = padded_logits(self.transformer(idx), self.lm_head.weight, self.logits_multiple)
        return padded[..., : self.config.vocab_size], _lm_loss(padded, targets)

    def num_params(self) -> int:
        """Unique parameters (the tied LM head is not counted twice). 116,534,784 for GPTConfig()."""
        return sum(p.numel() for p in self.parameters())

    def resize_token_embeddings(self, new_vocab_size: int, std: float | None = None) -> None:
        """Append rows for new tokens (e.g. the fine-tuning start/delimiter/extract tokens), initialised
        N(0, std) (default init_std), keeping the old rows and the LM-head tie.
        Call it before building the optimizer (the embedding is a new Parameter)."""
        std = self.config.init_std if std is None else std
        self.tokens_embed.weight = _grown(self.tokens_embed.weight, new_vocab_size, std)
        self.tokens_embed.num_embeddings = new_vocab_size
        self.lm_head.weight = self.tokens_embed.weight
        self.lm_head.out_features = new_vocab_size
        self.config = dataclasses.replace(self.config, vocab_size=new_vocab_size)  # don't mutate a shared config

    def param_groups(self, weight_decay: float) -> list[dict]:
        return _param_groups(self, weight_decay)

    def decay_parameter_names(self) -> set[str]:
        return _decay_parameter_names(self)


# ----------------------------------------------------------------------------------------------------------------
# LSTM baseline (paper Table 5: "a single layer 2048 unit LSTM")


class LSTMLM(nn.Module):
    """embedding -> dropout -> LSTM -> dropout -> Linear(hidden, vocab) (untied: the sizes differ)."""

    def __init__(self, config: LSTMConfig) -> None:
        super().__init__()
        self.config = config
        self.tokens_embed = nn.Embedding(config.vocab_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        inter_layer_dropout = config.dropout if config.n_layer > 1 else 0.0  # nn.LSTM warns if set for 1 layer
        self.lstm = nn.LSTM(
            config.n_embd, config.hidden_size, config.n_layer, batch_first=True, dropout=inter_layer_dropout
        )
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size)
        # Embedding / head as for GPT; the LSTM keeps PyTorch's uniform(+-1/sqrt(hidden)) init.
        nn.init.normal_(self.tokens_embed.weight, std=config.init_std)
        nn.init.normal_(self.lm_head.weight, std=config.init_std)
        nn.init.zeros_(self.lm_head.bias)

    @classmethod
    def from_config(cls, config: LSTMConfig | None = None, **overrides: object) -> LSTMLM:
        config = config if config is not None else LSTMConfig()
        return cls(dataclasses.replace(config, **overrides) if overrides else config)

    def hidden_states(self, idx: torch.Tensor) -> list[torch.Tensor]:
        """[embedding output [B, T, n_embd], LSTM output [B, T, hidden_size]]."""
        _check_len(idx, self.config.n_ctx)
        x = self.drop(self.tokens_embed(idx))
        out, _ = self.lstm(x)
        return [x, out]

    def transformer(self, idx: torch.Tensor) -> torch.Tensor:
        """Last hidden state (named like GPT's so fine-tuning code can use either model)."""
        return self.hidden_states(idx)[-1]

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        logits = self.lm_head(self.drop(self.transformer(idx)))
        return logits, _lm_loss(logits, targets)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def resize_token_embeddings(self, new_vocab_size: int, std: float | None = None) -> None:
        """Grow the input embedding and the (untied) output layer; new rows N(0, std), new output biases 0."""
        std = self.config.init_std if std is None else std
        self.tokens_embed.weight = _grown(self.tokens_embed.weight, new_vocab_size, std)
        self.tokens_embed.num_embeddings = new_vocab_size
        self.lm_head.weight = _grown(self.lm_head.weight, new_vocab_size, std)
        self.lm_head.bias = _grown(self.lm_head.bias, new_vocab_size, std)
        self.lm_head.out_features = new_vocab_size
        self.config = dataclasses.replace(self.config, vocab_size=new_vocab_size)

    def param_groups(self, weight_decay: float) -> list[dict]:
        return _param_groups(self, weight_decay)

    def decay_parameter_names(self) -> set[str]:
        return _decay_parameter_names(self)


def flops_per_token(model: nn.Module) -> int:
    """Training FLOPs per token: 6*N + 6*n_layer*n_ctx*n_embd.

    6*N: every weight of a matrix multiply costs 2 FLOPs per token forward and 4 backward (Kaplan et al. 2020).
    N counts the token embedding once, as the tied LM head's matrix multiply, but not the position embedding
    (a lookup). Attention scores and the weighted sum (q k^T, then p v) cost 2*2*n_ctx*n_embd per layer and token
    forward over a full context; the causal mask halves that on average, and backward doubles it again:
    3 * 2*n_ctx*n_embd = 6*n_ctx*n_embd per layer. The LSTM has no attention; its embedding is a lookup."""
    n = sum(p.numel() for p in model.parameters())
    if isinstance(model, GPT):
        c = model.config
        return 6 * (n - model.positions_embed.weight.numel()) + 6 * c.n_layer * c.n_ctx * c.n_embd
    if isinstance(model, LSTMLM):
        return 6 * (n - model.tokens_embed.weight.numel())
    return 6 * n


__all__ = ["GPT", "LSTMLM", "MLP", "Block", "CausalSelfAttention", "GPTConfig", "LSTMConfig", "flops_per_token",
           "mask_padding", "pad_rows", "padded_logits"]
