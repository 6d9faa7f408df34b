"""What `mlflow.pyfunc.load_model` runs for a pre-trained language model (fine-tuned ones:
gpt1.pipeline.mlflow_task_model).

Both kinds are MLflow Python models whose artifacts are plain files (safetensors weights, JSON, our tokenizer) and
whose code is this package, shipped with the model (`code_paths`). The pre-trained GPT's weights are its Hugging Face
export (an `OpenAIGPTLMHeadModel` folder): `from_pretrained` loads it without gpt1. Our tokenizer travels beside it
as gpt1 saves it (transformers' OpenAIGPTTokenizer cannot express the spaCy pre-tokeniser, see gpt1/modeling/hf.py).

    model = mlflow.pyfunc.load_model("models:/gpt1-smoke-gpt/1")
    model.predict(pd.DataFrame({"text": ["The cat sat on the mat."]}))   # tokens, mean_log_prob, perplexity

Pre-training imports this module, so it names no fine-tuning code: a change there does not rerun pre-training.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow.pyfunc
import pandas as pd
import torch

if TYPE_CHECKING:
    from gpt1.pipeline.tracking import StageRun

TEXT_COLUMN = "text"
LM_OUTPUTS = ("tokens", "mean_log_prob", "perplexity")


def text_log_prob(model: torch.nn.Module, ids: list[int]) -> tuple[int, float]:
    """(predicted tokens, their summed log-probability) of one token sequence under a language model, scored by
    `gpt1.evaluation.scoring`: windows of n_ctx tokens that share their boundary token, so every token after the first
    is predicted exactly once."""
    from gpt1.evaluation.scoring import BATCH_TOKENS, Window, token_logprobs

    n_ctx = model.config.n_ctx
    starts = range(0, max(len(ids) - 1, 1), max(n_ctx - 1, 1))
    model.eval()  # dropout off: a score is a property of the weights
    values = token_logprobs(model, [Window(list(ids[s : s + n_ctx]), 1, False) for s in starts], BATCH_TOKENS)
    return sum(v.size for v in values), float(sum(v.sum() for v in values))


class LanguageModel(mlflow.pyfunc.PythonModel):
    """A pre-trained GPT (Hugging Face export folder) or LSTM (our weights + model.json) with its tokenizer. Input: a
    `text` column; output per row: predicted tokens, mean log-probability per token, perplexity."""

    def load_context(self, context: Any) -> None:
        from gpt1.data.tokenizer import GPT1Tokenizer
        from gpt1.modeling.checkpoints import load_pretrained

        self.model, _ = load_pretrained(context.artifacts["model"])
        self.tokenizer = GPT1Tokenizer.load(context.artifacts["tokenizer"])

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        rows = []
        for text in pd.DataFrame(model_input)[TEXT_COLUMN]:
            count, total = text_log_prob(self.model, self.tokenizer.encode(str(text)))
            mean = total / count if count else math.nan
            rows.append({"tokens": count, "mean_log_prob": mean, "perplexity": math.exp(-mean) if count else math.nan})
        return pd.DataFrame(rows, columns=list(LM_OUTPUTS))


def lm_signature() -> Any:
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    outputs = Schema([ColSpec("long", "tokens"), ColSpec("double", "mean_log_prob"), ColSpec("double", "perplexity")])
    return ModelSignature(Schema([ColSpec("string", TEXT_COLUMN)]), outputs)


def _copy_files(names: tuple[str, ...], source: Path, folder: Path) -> Path:
    """The stage's outputs `names` in `source` (or where its publication still holds them) copied into `folder`."""
    import shutil

    from gpt1.pipeline.files import staged_path

    folder.mkdir(parents=True)
    for name in names:
        shutil.copy2(staged_path(source / name), folder / name)
    return folder


def log_language_model(run: StageRun, kind: str, model: torch.nn.Module, out_dir: Path, tokenizer_dir: Path,
                       step: int) -> str:
    """Log a pre-trained model as a LanguageModel: a GPT as its Hugging Face export, an LSTM as our weights and
    model.json; the tokenizer folder beside it. Returns the model URI."""
    import tempfile

    from gpt1.pipeline import layout

    with tempfile.TemporaryDirectory(prefix="gpt1-model-") as tmp:
        if kind == "gpt":
            from gpt1.modeling.hf import save_hf_dir

            folder = save_hf_dir(model, Path(tmp) / "hf_model")
        else:
            folder = _copy_files((layout.MODEL_WEIGHTS, layout.MODEL_JSON), out_dir, Path(tmp) / "model")
        artifacts = {"model": str(folder), "tokenizer": str(tokenizer_dir)}
        return run.log_model("model", LanguageModel(), artifacts, lm_signature(), step)


__all__ = [
    "LanguageModel",
    "lm_signature",
    "log_language_model",
    "text_log_prob",
]
