"""Where a fine-tuning job's weights and tokenizer come from (its variant, `VARIANTS`): our pre-trained GPT
(`pretrained`), the same architecture randomly initialised (`scratch`), our GPT without the auxiliary LM loss
(`no_aux`), our LSTM (`lstm`), or the released GPT-1 (`released`, from the hub or a local copy of its files, with its
released BPE); and the check that a model and a tokenizer belong together. A library of `gpt1.training.finetuning`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from torch import nn

from gpt1.data.tokenizer import FINETUNE_SPECIALS, GPT1Tokenizer
from gpt1.modeling.checkpoints import build_model, config_from_dict, is_local, load_pretrained
from gpt1.pipeline import layout
from gpt1.pipeline.errors import FinetuneError, UsageError
from gpt1.pipeline.files import read_json

RELEASED_HUB_ID = "openai-community/openai-gpt"
# A local copy of the released BPE (the hub's files): GPT1_RELEASED_BPE, else ../shared/reference/ beside a checkout.
RELEASED_BPE_ENV = "GPT1_RELEASED_BPE"
CHECKOUT_REFERENCE_BPE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "openai-gpt1-bpe"
RELEASED_VOCAB_FILES = (("encoder_bpe_40000.json", "vocab_40000.bpe"), ("vocab.json", "merges.txt"))



@dataclass(frozen=True)
class Variant:
    name: str
    init: Literal["checkpoint", "random", "released"]  # weights: our pretrain folder, its config only, or GPT-1's
    model_kind: Literal["gpt", "lstm"]  # what the pretrain folder must hold
    lm_weight: float | None  # None: finetune.lm_weight; a number overrides it (no_aux: 0)
    description: str


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("pretrained", "checkpoint", "gpt", None, "our pre-trained GPT"),
    Variant("scratch", "random", "gpt", None, "the same architecture, randomly initialised (no pre-training)"),
    Variant("no_aux", "checkpoint", "gpt", 0.0, "our pre-trained GPT without the auxiliary LM loss (λ = 0)"),
    Variant("lstm", "checkpoint", "lstm", None, "our pre-trained LSTM language model"),
    Variant("released", "released", "gpt", None, f"the released GPT-1 ({RELEASED_HUB_ID})"),
)}  # fmt: skip


def get_variant(name: str) -> Variant:
    if name not in VARIANTS:
        raise UsageError(f"--variant {name!r} is unknown; valid: {', '.join(VARIANTS)}")
    return VARIANTS[name]


# ----------------------------------------------------------------------------------------------------------------
# Model and tokenizer


def _require_pretrain_files(folder: Path, variant: Variant) -> None:
    stage = "gpt1 pretrain --model lstm" if variant.model_kind == "lstm" else "gpt1 pretrain"
    if folder.is_file():
        guess = folder.parent.parent if folder.parent.name == layout.SNAPSHOTS else folder.parent
        raise FinetuneError(f"--pretrained {folder}: a file; fine-tuning starts from the folder {stage} wrote (here "
                            f"perhaps {guess})")
    needed = (layout.MODEL_JSON,) if variant.init == "random" else (layout.MODEL_JSON, layout.MODEL_WEIGHTS)
    for name in needed:
        if not (folder / name).is_file():
            raise FinetuneError(f"{folder / name}: missing; run the pretrain stage ({stage} --out {folder}) first")


def reference_bpe() -> Path:
    return Path(os.environ.get(RELEASED_BPE_ENV) or CHECKOUT_REFERENCE_BPE)


def _has_released_vocab(folder: Path) -> bool:
    return folder.is_dir() and any((folder / v).is_file() and (folder / m).is_file() for v, m in RELEASED_VOCAB_FILES)


def released_tokenizer(source: str, tokenizer_dir: Path | None) -> tuple[GPT1Tokenizer, str]:
    """The released BPE: beside the weights, else in tokenizer_dir, else the shared reference copy (the same
    files the hub publishes), else from the hub id. Returns (tokenizer, where it came from)."""
    from gpt1.data.tokenizer import load_released

    reference = reference_bpe()
    candidates = [Path(source), tokenizer_dir, reference]
    for folder in candidates:
        if folder is not None and _has_released_vocab(Path(folder)):
            return load_released(folder), str(folder)
    if not is_local(source):
        return load_released(source), source
    raise FinetuneError(f"{source}: no released vocabulary ({' or '.join(' + '.join(p) for p in RELEASED_VOCAB_FILES)})"
                        f" there, in {tokenizer_dir} or in {reference} (set {RELEASED_BPE_ENV} to a copy)")


def load_tokenizer(variant: Variant, pretrained: str, tokenizer_dir: Path | None) -> tuple[GPT1Tokenizer, str]:
    if variant.init == "released":
        return released_tokenizer(pretrained, tokenizer_dir)
    if tokenizer_dir is None:
        raise FinetuneError(f"--tokenizer is required for variant {variant.name} (the folder of gpt1 bpe)")
    return GPT1Tokenizer.load(tokenizer_dir), str(tokenizer_dir)


def load_backbone(variant: Variant, pretrained: str) -> tuple[nn.Module, dict[str, Any]]:
    """(language model, meta) for a variant; meta as gpt1.modeling.checkpoints.load_pretrained returns it."""
    if variant.init == "released":
        if is_local(pretrained) and not (Path(pretrained) / "config.json").is_file():
            raise FinetuneError(f"{Path(pretrained) / 'config.json'}: missing; give a Hugging Face OpenAIGPT folder "
                                f"(gpt1 export --format hf) or a hub id such as {RELEASED_HUB_ID}")
        return load_pretrained(pretrained)
    folder = Path(pretrained)
    _require_pretrain_files(folder, variant)
    meta = read_json(folder / layout.MODEL_JSON)
    if meta.get("kind") != variant.model_kind:
        raise FinetuneError(f"{folder / layout.MODEL_JSON}: holds a {meta.get('kind')!r} model; variant {variant.name} "
                            f"needs {variant.model_kind!r} (gpt1 pretrain --model {variant.model_kind})")
    if variant.init == "random":
        # The "no pre-training" ablation: the pre-trained model's architecture, nothing of its weights.
        config = config_from_dict(meta["kind"], meta["config"], str(folder / layout.MODEL_JSON))
        source = str(folder / layout.MODEL_JSON)
        return build_model(meta["kind"], config), {**meta, "source": source, "step": 0, "tokens": 0}
    return load_pretrained(folder)


def check_pair(model: nn.Module, meta: dict[str, Any], tokenizer: GPT1Tokenizer, where: str, tok_where: str) -> None:
    """Refuse, before training, a checkpoint and tokenizer that do not belong together, or that leave the
    specials nowhere to go: the specials take ids base_vocab..base_vocab+2, right after the checkpoint's rows."""
    base = tokenizer.base_vocab_size
    expected = {name: base + i for i, name in enumerate(FINETUNE_SPECIALS)}
    if tokenizer.specials != expected:
        raise FinetuneError(f"{tok_where}: the tokenizer's specials are {tokenizer.specials}, expected {expected} "
                            f"(the start/delimiter/extract tokens right after its {base} BPE tokens)")
    vocab = model.config.vocab_size
    if vocab > base:
        raise FinetuneError(f"{where}: the checkpoint has {vocab} token rows, more than the tokenizer's {base} "
                            f"({tok_where}): no room for the specials at ids {base}..{base + 2} (already resized, "
                            f"or another tokenizer)")
    if vocab < base:
        raise FinetuneError(f"{where}: the checkpoint has {vocab} token rows, the tokenizer {tok_where} has {base}; "
                            f"use the tokenizer the model was pre-trained with")
    sha = meta.get("tokenizer_sha256")
    if sha and sha != tokenizer.fingerprint():
        raise FinetuneError(f"{where}: pre-trained with tokenizer sha256 {sha[:12]}..., but {tok_where} is "
                            f"{tokenizer.fingerprint()[:12]}...; use the tokenizer folder of the same pipeline run")
    if model.config.n_ctx < len(FINETUNE_SPECIALS) + 1:
        raise FinetuneError(f"{where}: n_ctx={model.config.n_ctx} leaves no room for text beside the 3 specials")



__all__ = [
    "RELEASED_BPE_ENV",
    "RELEASED_HUB_ID",
    "VARIANTS",
    "Variant",
    "check_pair",
    "get_variant",
    "load_backbone",
    "load_tokenizer",
    "reference_bpe",
    "released_tokenizer",
]
