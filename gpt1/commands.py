"""The commands a user runs by hand, beside the pipeline's stages: `gpt1 sample` (text from a pre-trained model).

They are no stage of either engine, so no stage's code input: cli.py registers them from a function that
gpt1.codedeps leaves out of every stage's closure, and adding or changing one here reruns nothing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gpt1.errors import Gpt1Error

HF_EXPORT_RECORD = "gpt1_export.json"  # written by gpt1.export beside an exported model


def _int_or_none(text: str) -> int | None:
    return None if text.lower() in ("none", "0") else int(text)


def register(sub: Any, common: Any) -> None:
    """Add the commands to cli.py's subparsers; `common` adds --params/--profile/--set."""
    sample = sub.add_parser(
        "sample", help="Write text with a pre-trained model: a prompt continued (seeded: the same text every time).",
        description="Continue --prompt with a pre-trained model: a pretrain folder (results/<profile>/pretrain/gpt), "
                    "one of its snapshots (.../snapshots/03.safetensors), a folder of gpt1 export or a Hugging Face "
                    "OpenAIGPT folder or hub id (openai-community/openai-gpt). The same --seed gives the same text; "
                    "on the CPU under a pinned profile, on every host.")
    common(sample)
    sample.add_argument("--model", required=True, help="pretrain folder, snapshot file, HF folder or hub id")
    sample.add_argument("--tokenizer", type=Path, default=None,
                        help="folder of the bpe stage (required for our checkpoints and exports; an HF folder of the "
                             "released model brings its own vocabulary)")
    sample.add_argument("--prompt", default="The", help="text to continue (default: %(default)r)")
    sample.add_argument("--length", type=int, default=60, help="new tokens per sample (default: %(default)s)")
    sample.add_argument("--temperature", type=float, default=1.0, help="0: greedy (default: %(default)s)")
    sample.add_argument("--top-k", type=_int_or_none, default=40,
                        help="keep the k most likely tokens; 0 or none: all (default: %(default)s)")
    sample.add_argument("--seed", type=int, default=0, help="sample i uses seed + i (default: %(default)s)")
    sample.add_argument("--samples", type=int, default=1, help="how many continuations (default: %(default)s)")
    sample.add_argument("--device", default="cpu", help="torch device (default: cpu, the reproducible one)")
    sample.add_argument("--workers", type=int, default=None, help="torch threads when the profile is not pinned")
    sample.set_defaults(call=_sample, tool=True)


def _tokenizer_for(model_arg: str, tokenizer_dir: Path | None, meta: dict[str, Any]) -> tuple[Any, str]:
    from gpt1.backbones import released_tokenizer
    from gpt1.tokenizer import GPT1Tokenizer

    if tokenizer_dir is not None:
        return GPT1Tokenizer.load(tokenizer_dir), str(tokenizer_dir)
    if meta.get("step") is None and not (Path(model_arg) / HF_EXPORT_RECORD).is_file():
        return released_tokenizer(model_arg, None)  # a Hugging Face model: the released vocabulary
    raise Gpt1Error(f"{model_arg}: --tokenizer is required for a gpt1 model: the folder of the bpe stage that made "
                    f"it (e.g. results/default/tokenizer)")


def _trained_with(model_arg: str, meta: dict[str, Any]) -> str | None:
    """The sha256 of the tokenizer the model was trained with: its metadata, or gpt1_export.json beside an export."""
    record = Path(model_arg) / HF_EXPORT_RECORD
    if meta.get("tokenizer_sha256") is None and record.is_file():
        return json.loads(record.read_text()).get("tokenizer_sha256")
    return meta.get("tokenizer_sha256")


def load_sampler(model_arg: str, tokenizer_dir: Path | None, device: str) -> tuple[Any, Any]:
    """(model, tokenizer) checked to belong together, before any text is drawn."""
    from gpt1.checkpoints import load_pretrained

    model, meta = load_pretrained(model_arg)
    tokenizer, where = _tokenizer_for(model_arg, tokenizer_dir, meta)
    trained = _trained_with(model_arg, meta)
    if trained is not None and trained != tokenizer.fingerprint():
        raise Gpt1Error(f"{where}: not the tokenizer {model_arg} was trained with (sha256 {trained[:12]}..., this "
                        f"one {tokenizer.fingerprint()[:12]}...); pass the bpe folder of the same results tree")
    if model.config.vocab_size < tokenizer.base_vocab_size:
        raise Gpt1Error(f"{where}: {tokenizer.base_vocab_size} tokens, more than the {model.config.vocab_size} rows "
                        f"of {model_arg}; pass the bpe folder the model was trained with")
    return model.to(device), tokenizer


def _sample(args: argparse.Namespace) -> int:
    from gpt1 import cores
    from gpt1.config import load_config

    cfg = load_config(args.params, args.profile, args.overrides)
    cores.prepare_process("sample", cfg.section("cpu"), args.workers)  # pinned kernels: the same draws everywhere

    from gpt1.sampling import SampleSettings, sample_text

    if args.samples < 1:
        raise Gpt1Error(f"--samples {args.samples}: give at least 1")
    settings = SampleSettings(length=args.length, temperature=args.temperature, top_k=args.top_k, seed=args.seed)
    model, tokenizer = load_sampler(args.model, args.tokenizer, args.device)
    for i in range(args.samples):
        drawn = SampleSettings(settings.length, settings.temperature, settings.top_k, settings.seed + i)
        if args.samples > 1:
            print(f"--- sample {i + 1} of {args.samples} (seed {drawn.seed}) ---")
        print(sample_text(model, tokenizer, args.prompt, drawn), flush=True)
    return 0


__all__ = ["load_sampler", "register"]
