"""The export stage: a pre-trained GPT folder -> a folder transformers' `OpenAIGPTLMHeadModel.from_pretrained` loads,
plus where it came from; the weights are converted by `gpt1.modeling.hf`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpt1.modeling.hf import save_hf_dir
from gpt1.pipeline import layout
from gpt1.pipeline.errors import Gpt1Error, UsageError
from gpt1.pipeline.files import temp_path, write_json

if TYPE_CHECKING:
    from gpt1.pipeline.config import Config

EXPORT_FORMATS = ("hf",)


def _provenance(model_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "source": str(model_dir),
        "kind": meta["kind"],
        "step": meta.get("step"),
        "tokens": meta.get("tokens"),
        "tokenizer_sha256": meta.get("tokenizer_sha256"),
        "tokenizer": "not exported: load the pretrain stage's tokenizer folder with gpt1.data.tokenizer.GPT1Tokenizer",
    }


def _publish(staging: Path, out_dir: Path) -> None:
    """The staged folder's files into OUT, config.json last: whatever was there stops looking loadable first."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").unlink(missing_ok=True)
    for path in sorted(staging.iterdir(), key=lambda p: p.name == "config.json"):
        os.replace(path, out_dir / path.name)


def export_stage(cfg: Config, model_dir: str | Path, out_dir: str | Path, fmt: str = "hf") -> Path:
    """`gpt1 export`: a pretrain folder (model.safetensors + model.json) -> OUT/ that
    `OpenAIGPTLMHeadModel.from_pretrained(OUT)` loads, plus gpt1_export.json (where it came from)."""
    from gpt1.modeling.checkpoints import load_pretrained
    from gpt1.pipeline.tracking import stage_run

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if fmt not in EXPORT_FORMATS:
        raise UsageError(f"--format {fmt!r}: valid formats are {', '.join(EXPORT_FORMATS)}")
    if not (model_dir / layout.MODEL_JSON).is_file():
        raise Gpt1Error(f"{model_dir}: no {layout.MODEL_JSON}; pass the output folder of gpt1 pretrain")
    model, meta = load_pretrained(model_dir)
    if meta["kind"] != "gpt":
        raise Gpt1Error(f"{model_dir}: a {meta['kind']!r} model has no OpenAIGPT counterpart; export a gpt model")
    params = {"export": {"format": fmt, "source": str(model_dir)}, "model": meta["config"]}
    staging = temp_path(out_dir)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        with stage_run("export", cfg.profile, cfg.experiment, params, name=f"export {fmt}") as run:
            save_hf_dir(model, staging)
            write_json(staging / layout.HF_EXPORT_RECORD, _provenance(model_dir, meta), sort_keys=False)
            run.set_tags({"gpt1.tokenizer_sha256": str(meta.get("tokenizer_sha256"))})
            run.log_artifact(staging / layout.HF_EXPORT_RECORD)
        _publish(staging, out_dir)  # once MLflow has the run: a failure before leaves OUT as it was
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir
