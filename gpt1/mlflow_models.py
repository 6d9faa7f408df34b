"""What `mlflow.pyfunc.load_model` runs for our models: a pre-trained language model and a fine-tuned task model.

Both are MLflow Python models whose artifacts are plain files (safetensors weights, JSON, our tokenizer folder) and
whose code is this package, shipped with the model (`code_paths`). The pre-trained GPT's weights are its Hugging Face
export (an `OpenAIGPTLMHeadModel` folder): `from_pretrained` loads it without gpt1. Our tokenizer travels beside it
as gpt1 saves it (transformers' OpenAIGPTTokenizer cannot express the spaCy pre-tokeniser, see gpt1/hf.py).

    model = mlflow.pyfunc.load_model("models:/gpt1-smoke-gpt/1")
    model.predict(pd.DataFrame({"text": ["The cat sat on the mat."]}))   # tokens, mean_log_prob, perplexity

A fine-tuned model takes the task's own columns (its hub dataset's names, e.g. `sentence` for SST-2) and returns
the predicted class, choice or score with its probability.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import pandas as pd
import torch

TEXT_COLUMN = "text"
LM_OUTPUTS = ("tokens", "mean_log_prob", "perplexity")
TASK_OUTPUTS = ("prediction", "probability")
TASK_META = "task_model.json"
WEIGHTS = "model.safetensors"


def _windows(ids: list[int], n_ctx: int) -> list[list[int]]:
    """Non-overlapping windows of at most n_ctx + 1 tokens that share their boundary token (every token after the
    first is predicted exactly once)."""
    return [ids[start : start + n_ctx + 1] for start in range(0, max(len(ids) - 1, 1), n_ctx)]


@torch.no_grad()
def text_log_prob(model: torch.nn.Module, ids: list[int]) -> tuple[int, float]:
    """(predicted tokens, their summed log-probability) of one token sequence under a language model."""
    total, count = 0.0, 0
    for window in _windows(ids, model.config.n_ctx):
        if len(window) < 2:
            continue
        tokens = torch.tensor([window], dtype=torch.long)
        logits, _ = model(tokens[:, :-1])
        picked = torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens[:, 1:, None])
        total, count = total + float(picked.sum()), count + len(window) - 1
    return count, total


class LanguageModel(mlflow.pyfunc.PythonModel):
    """A pre-trained GPT (Hugging Face export folder) or LSTM (our weights + model.json) with its tokenizer. Input: a
    `text` column; output per row: predicted tokens, mean log-probability per token, perplexity."""

    def load_context(self, context: Any) -> None:
        from gpt1.checkpoints import load_pretrained
        from gpt1.tokenizer import GPT1Tokenizer

        self.model, _ = load_pretrained(context.artifacts["model"])
        self.tokenizer = GPT1Tokenizer.load(context.artifacts["tokenizer"])

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        rows = []
        for text in pd.DataFrame(model_input)[TEXT_COLUMN]:
            count, total = text_log_prob(self.model, self.tokenizer.encode(str(text)))
            mean = total / count if count else math.nan
            rows.append({"tokens": count, "mean_log_prob": mean, "perplexity": math.exp(-mean) if count else math.nan})
        return pd.DataFrame(rows, columns=list(LM_OUTPUTS))


def _placeholder_label(spec: Any) -> Any:
    """A valid label for a row to predict (parse_row wants one; prediction never reads it)."""
    if spec.encoding in ("names", "letters"):
        return spec.label_names[0]
    if spec.encoding == "float":
        return float(spec.label_range[0]) if spec.label_range else 0.0
    return 1 if spec.encoding == "one_based" else 0


class TaskModel(mlflow.pyfunc.PythonModel):
    """A fine-tuned model (language model + task head) with its tokenizer. Input: the task's text and choice columns,
    named as in its hub dataset; output per row: the predicted class id, choice index or score, and its probability
    (NaN for a score)."""

    def load_context(self, context: Any) -> None:
        from safetensors.torch import load_model

        from gpt1.tokenizer import GPT1Tokenizer

        meta = json.loads(Path(context.artifacts["meta"]).read_text())
        self.model, self.spec = build_task_model(meta)
        load_model(self.model, context.artifacts["weights"])
        self.model.eval()
        self.tokenizer = GPT1Tokenizer.load(context.artifacts["tokenizer"])
        self.n_ctx = int(meta["model"]["n_ctx"])

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        from gpt1.finetune import decode
        from gpt1.heads import collate
        from gpt1.tasks import parse_row, transform

        records = pd.DataFrame(model_input).to_dict("records")
        label = {self.spec.label_field: _placeholder_label(self.spec)}
        examples = [parse_row(self.spec, "input", {**row, **label}, i) for i, row in enumerate(records)]
        transformed = [transform(self.spec, e, self.tokenizer, self.n_ctx) for e in examples]
        with torch.no_grad():
            outputs = self.model(collate(transformed, [e.label for e in examples], self.model.regression))
        decoded = decode(self.spec, outputs.float().numpy())
        probability = (decoded.probabilities.max(axis=1) if decoded.probabilities is not None
                       else [math.nan] * len(examples))
        return pd.DataFrame({"prediction": decoded.predictions.astype(float), "probability": probability})


def task_model_meta(model: Any, task: str, variant: str, clf_dropout: float) -> dict[str, Any]:
    """What TaskModel needs to rebuild a fine-tuned model before loading its weights."""
    import dataclasses

    kind = "lstm" if type(model.lm).__name__ == "LSTMLM" else "gpt"
    return {"task": task, "variant": variant, "kind": kind, "model": dataclasses.asdict(model.lm.config),
            "clf_dropout": clf_dropout}


def build_task_model(meta: dict[str, Any]) -> tuple[Any, Any]:
    """(FinetuneModel with fresh weights, TaskSpec) from task_model_meta's record."""
    from gpt1.checkpoints import build_model, config_from_dict
    from gpt1.heads import FinetuneModel
    from gpt1.tasks import get_task

    spec = get_task(meta["task"])
    lm = build_model(meta["kind"], config_from_dict(meta["kind"], meta["model"], TASK_META))
    return FinetuneModel(lm, spec, float(meta["clf_dropout"])), spec


def save_task_model(model: Any, meta: dict[str, Any], folder: Path) -> dict[str, str]:
    """Write the weights (tied tensors once) and the meta record; return them as pyfunc artifacts."""
    from safetensors.torch import save_model

    folder.mkdir(parents=True, exist_ok=True)
    save_model(model, str(folder / WEIGHTS))
    (folder / TASK_META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return {"weights": str(folder / WEIGHTS), "meta": str(folder / TASK_META)}


def lm_signature() -> Any:
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    outputs = Schema([ColSpec("long", "tokens"), ColSpec("double", "mean_log_prob"), ColSpec("double", "perplexity")])
    return ModelSignature(Schema([ColSpec("string", TEXT_COLUMN)]), outputs)


def task_signature(spec: Any) -> Any:
    """The task's text columns, and its choice columns (a list column of strings when it has one)."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema
    from mlflow.types.schema import Array

    columns = [ColSpec("string", name) for name in spec.text_fields]
    if len(spec.choice_fields) == 1:
        columns.append(ColSpec(Array("string"), spec.choice_fields[0]))
    else:
        columns += [ColSpec("string", name) for name in spec.choice_fields]
    outputs = Schema([ColSpec("double", "prediction"), ColSpec("double", "probability")])
    return ModelSignature(Schema(columns), outputs)


def _copy_files(names: tuple[str, ...], source: Path, folder: Path) -> Path:
    import shutil

    folder.mkdir(parents=True)
    for name in names:
        shutil.copy2(source / name, folder / name)
    return folder


def log_language_model(run: Any, kind: str, model: torch.nn.Module, out_dir: Path, tokenizer_dir: Path,
                       step: int) -> str:
    """Log a pre-trained model as a LanguageModel: a GPT as its Hugging Face export, an LSTM as our weights and
    model.json; the tokenizer folder beside it. Returns the model URI."""
    import tempfile

    from gpt1.checkpoints import MODEL_FILE, MODEL_JSON

    with tempfile.TemporaryDirectory(prefix="gpt1-model-") as tmp:
        if kind == "gpt":
            from gpt1.hf import save_hf_dir

            folder = save_hf_dir(model, Path(tmp) / "hf_model")
        else:
            folder = _copy_files((MODEL_FILE, MODEL_JSON), out_dir, Path(tmp) / "model")
        artifacts = {"model": str(folder), "tokenizer": str(tokenizer_dir)}
        return run.log_model("model", LanguageModel(), artifacts, lm_signature(), step)


def log_task_model(run: Any, model: Any, spec: Any, variant: str, clf_dropout: float, tokenizer_dir: Path,
                   step: int) -> str:
    """Log a fine-tuned model (all its weights: the backbone changed too) as a TaskModel. Returns the model URI."""
    import tempfile

    meta = task_model_meta(model, spec.name, variant, clf_dropout)
    with tempfile.TemporaryDirectory(prefix="gpt1-model-") as tmp:
        artifacts = {**save_task_model(model, meta, Path(tmp)), "tokenizer": str(tokenizer_dir)}
        return run.log_model("model", TaskModel(), artifacts, task_signature(spec), step)


__all__ = [
    "LanguageModel",
    "TaskModel",
    "build_task_model",
    "lm_signature",
    "log_language_model",
    "log_task_model",
    "save_task_model",
    "task_model_meta",
    "task_signature",
    "text_log_prob",
]
