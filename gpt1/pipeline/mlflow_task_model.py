"""What `mlflow.pyfunc.load_model` runs for a fine-tuned task model: language model + task head, with its tokenizer.

It takes the task's own columns (its hub dataset's names, e.g. `sentence` for SST-2) and returns the predicted class,
choice or score with its probability:

    model = mlflow.pyfunc.load_model("runs:/<run id>/model")
    model.predict(pd.DataFrame({"sentence": ["A gripping, funny film."]}))   # prediction, probability
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow.pyfunc
import pandas as pd
import torch

from gpt1.pipeline import layout

if TYPE_CHECKING:
    from gpt1.pipeline.tracking import StageRun

TASK_META = "task_model.json"


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

        from gpt1.data.tokenizer import GPT1Tokenizer

        meta = json.loads(Path(context.artifacts["meta"]).read_text())
        self.model, self.spec = build_task_model(meta)
        load_model(self.model, context.artifacts["weights"])
        self.model.eval()
        self.tokenizer = GPT1Tokenizer.load(context.artifacts["tokenizer"])
        self.n_ctx = int(meta["model"]["n_ctx"])

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        from gpt1.data.rows import parse_row
        from gpt1.data.transforms import transform
        from gpt1.modeling.heads import collate, decode

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
    from gpt1.data.tasks import get_task
    from gpt1.modeling.checkpoints import build_model, config_from_dict
    from gpt1.modeling.heads import FinetuneModel

    spec = get_task(meta["task"])
    lm = build_model(meta["kind"], config_from_dict(meta["kind"], meta["model"], TASK_META))
    return FinetuneModel(lm, spec, float(meta["clf_dropout"])), spec


def save_task_model(model: Any, meta: dict[str, Any], folder: Path) -> dict[str, str]:
    """Write the weights (tied tensors once, as checkpoints write them: on a GPU cuDNN's LSTM keeps its weights as
    views of one flat buffer, which safetensors' save_model refuses) and the meta record; return them as pyfunc
    artifacts."""
    from gpt1.modeling.checkpoints import save_weights
    from gpt1.pipeline.files import write_json

    folder.mkdir(parents=True, exist_ok=True)
    save_weights(model, folder / layout.MODEL_WEIGHTS)
    write_json(folder / TASK_META, meta)
    return {"weights": str(folder / layout.MODEL_WEIGHTS), "meta": str(folder / TASK_META)}


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


def log_task_model(run: StageRun, model: Any, spec: Any, variant: str, clf_dropout: float, tokenizer_dir: Path,
                   step: int) -> str:
    """Log a fine-tuned model (all its weights: the backbone changed too) as a TaskModel. Returns the model URI."""
    import tempfile

    meta = task_model_meta(model, spec.name, variant, clf_dropout)
    with tempfile.TemporaryDirectory(prefix="gpt1-model-") as tmp:
        artifacts = {**save_task_model(model, meta, Path(tmp)), "tokenizer": str(tokenizer_dir)}
        return run.log_model("model", TaskModel(), artifacts, task_signature(spec), step)


__all__ = ["TaskModel", "build_task_model", "log_task_model", "save_task_model", "task_model_meta", "task_signature"]
