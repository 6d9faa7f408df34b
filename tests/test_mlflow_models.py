"""MLflow as its users expect it: models logged with their tokenizer and loadable with mlflow.pyfunc, the pre-trained
GPT registered with its metrics, runs named by what they are, fine-tuning runs with predictions, curves and inputs,
and an experiment that opens on its runs."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import torch
from conftest import TinyData, tiny_config
from mlflow.tracking import MlflowClient

from gpt1.data.rows import load_examples
from gpt1.data.tasks import get_task
from gpt1.data.tokenizer import GPT1Tokenizer
from gpt1.modeling.checkpoints import load_pretrained
from gpt1.pipeline.mlflow_models import text_log_prob
from gpt1.stages.finetune import finetune_stage
from gpt1.stages.pretrain import pretrain_stage

SMALL = ["finetune.max_train_examples=16", "finetune.max_eval_examples=16", "finetune.batch_size=8",
         "finetune.eval_batch_size=16"]  # fmt: skip
TEXTS = ["The old man walked to the harbour and looked at the boats.", "Rain."]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, new_store) -> Iterator[str]:
    """A store of this module's own: it holds exactly the runs and model versions made here."""
    uri = new_store(tmp_path_factory.mktemp("mlflow_models"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        yield uri


@pytest.fixture(scope="module")
def pretrained(store: str, tiny_data: TinyData, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny GPT and LSTM pre-trained into the module's store."""
    root = tmp_path_factory.mktemp("pretrained")
    for kind in ("gpt", "lstm"):
        pretrain_stage(tiny_config(), kind, tiny_data.ids, tiny_data.tokenizer, root / kind)
    return {"gpt": root / "gpt", "lstm": root / "lstm"}


def runs_named(client: MlflowClient, name: str) -> list:
    experiment = client.get_experiment_by_name("gpt1")
    return client.search_runs([experiment.experiment_id], f"attributes.run_name = '{name}'")


def expected_scores(model_dir: Path, tokenizer_dir: Path) -> list[tuple[int, float]]:
    model, _ = load_pretrained(model_dir)
    tokenizer = GPT1Tokenizer.load(tokenizer_dir)
    return [text_log_prob(model, tokenizer.encode(text)) for text in TEXTS]


def test_the_experiment_is_tagged_as_custom_model_development(store: str, pretrained: dict[str, Path]) -> None:
    """The tag says what the experiment holds; MLflow 3.17's UI still opens it on its GenAI overview
    (tests/test_mlflow_ui.py shows what a user sees), so this checks the tag, not the page."""
    experiment = MlflowClient(store).get_experiment_by_name("gpt1")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # what it holds (docs/mlflow_ui.md)


def test_pretrained_gpt_is_registered_with_its_metrics_and_loads_with_pyfunc(store: str, pretrained: dict[str, Path],
                                                                              tiny_data: TinyData) -> None:
    client = MlflowClient(store)
    (version,) = client.search_model_versions("name = 'gpt1-smoke-gpt'")
    (run,) = runs_named(client, "pretrain gpt")
    metrics = json.loads((pretrained["gpt"] / "metrics.json").read_text())
    (output,) = run.outputs.model_outputs
    assert version.run_id == run.info.run_id and version.tags["gpt1.run_id"] == run.info.run_id
    assert output.model_id in version.source
    assert float(version.tags["metric.val_perplexity"]) == pytest.approx(metrics["val_perplexity"])
    logged = mlflow.get_logged_model(output.model_id)
    assert logged.metrics and {m.key for m in logged.metrics} >= {"val_loss", "val_perplexity"}

    loaded = mlflow.pyfunc.load_model(f"models:/gpt1-smoke-gpt/{version.version}")
    got = loaded.predict(pd.DataFrame({"text": TEXTS}))
    for (tokens, total), (_, row) in zip(expected_scores(pretrained["gpt"], tiny_data.tokenizer), got.iterrows(),
                                         strict=True):
        assert row["tokens"] == tokens > 0
        assert row["mean_log_prob"] == pytest.approx(total / tokens, rel=1e-5)
        assert row["perplexity"] == pytest.approx(math.exp(-total / tokens), rel=1e-5)


def test_the_gpt_model_holds_its_hugging_face_export_and_the_tokenizer(store: str,
                                                                       pretrained: dict[str, Path]) -> None:
    from transformers import OpenAIGPTLMHeadModel

    (version,) = MlflowClient(store).search_model_versions("name = 'gpt1-smoke-gpt'")
    folder = Path(mlflow.artifacts.download_artifacts(f"models:/gpt1-smoke-gpt/{version.version}"))
    hf = OpenAIGPTLMHeadModel.from_pretrained(folder / "artifacts" / "hf_model")
    assert hf.config.n_layer == json.loads((pretrained["gpt"] / "model.json").read_text())["config"]["n_layer"]
    run = MlflowClient(store).get_run(version.run_id)
    tokenizer = GPT1Tokenizer.load(folder / "artifacts" / "tokenizer")
    assert tokenizer.fingerprint() == run.data.tags["gpt1.tokenizer_sha256"]
    assert (folder / "MLmodel").is_file() and "python_function" in (folder / "MLmodel").read_text()


def test_the_lstm_is_logged_but_not_registered(store: str, pretrained: dict[str, Path], tiny_data: TinyData) -> None:
    client = MlflowClient(store)
    (run,) = runs_named(client, "pretrain lstm")
    (output,) = run.outputs.model_outputs
    got = mlflow.pyfunc.load_model(f"models:/{output.model_id}").predict(pd.DataFrame({"text": TEXTS[:1]}))
    ((tokens, total),) = expected_scores(pretrained["lstm"], tiny_data.tokenizer)[:1]
    assert got["mean_log_prob"][0] == pytest.approx(total / tokens, rel=1e-5)
    assert client.search_model_versions("name = 'gpt1-smoke-lstm'") == []


def test_pretraining_logs_the_token_ids_it_read(store: str, pretrained: dict[str, Path], tiny_data: TinyData) -> None:
    (run,) = runs_named(MlflowClient(store), "pretrain gpt")
    inputs = {d.dataset.name: d for d in run.inputs.dataset_inputs}
    assert set(inputs) == {"ids/train.bin", "ids/validation.bin"}
    for name, given in inputs.items():
        split = name.split("/")[1].removesuffix(".bin")
        sha256 = json.loads((tiny_data.ids / f"{split}.json").read_text())["sha256"]
        tags = {t.key: t.value for t in given.tags}
        assert (tags["gpt1.sha256"], given.dataset.digest) == (sha256, sha256[:32])
        assert tags["mlflow.data.context"] == split and str(tiny_data.ids / f"{split}.bin") in given.dataset.source


def rows_of(task: str, split: str) -> tuple[pd.DataFrame, list[tuple[str | None, int]]]:
    """The evaluation rows a smoke fine-tuning job scores (synthetic data, capped at 16 with seed 0), as the task's
    columns, and their (configuration, row) keys."""
    spec = get_task(task)
    examples = load_examples(spec, split, synthetic=True, max_examples=16, seed=0).examples
    columns: dict[str, list] = {name: [e.texts[i] for e in examples] for i, name in enumerate(spec.text_fields)}
    if len(spec.choice_fields) == 1:
        columns[spec.choice_fields[0]] = [list(e.choices) for e in examples]
    return pd.DataFrame(columns), [(e.config, e.index) for e in examples]


@pytest.mark.parametrize(("task", "variant", "split"), [("sst2", "pretrained", "validation"),
                                                        ("race", "lstm", "test")])
def test_a_finetuning_run_carries_its_outputs_inputs_and_a_model_that_predicts_the_same(
        store: str, pretrained: dict[str, Path], tiny_data: TinyData, tmp_path: Path, task: str, variant: str,
        split: str) -> None:
    source = pretrained["lstm" if variant == "lstm" else "gpt"]
    finetune_stage(tiny_config(*SMALL), task, variant, 0, source, tiny_data.tokenizer, tmp_path)
    client = MlflowClient(store)
    (run,) = runs_named(client, f"finetune {task} {variant} seed0")
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"metrics.json", "predictions.jsonl",
                                                                        "curves.csv"}
    contexts = {t.value for d in run.inputs.dataset_inputs for t in d.tags if t.key == "mlflow.data.context"}
    assert contexts == {"train", "eval"}
    assert all(d.dataset.source_type == "code" and "synthetic" in d.dataset.source for d in run.inputs.dataset_inputs)

    (output,) = run.outputs.model_outputs
    frame, keys = rows_of(task, split)
    got = mlflow.pyfunc.load_model(f"models:/{output.model_id}").predict(frame)
    lines = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    wanted = {(p.get("config"), p["index"]): p for p in lines if p["report"] == task}
    assert len(wanted) == len(keys) == len(got)
    for key, (_, row) in zip(keys, got.iterrows(), strict=True):
        assert row["prediction"] == wanted[key]["prediction"]
        assert row["probability"] == pytest.approx(max(wanted[key]["probabilities"]), abs=1e-4)


def test_text_log_prob_predicts_every_token_after_the_first_once() -> None:
    """The pyfunc's score of a text longer than the context: windows of n_ctx tokens sharing their boundary token,
    scored by gpt1.evaluation.scoring, sum to what the model's own forward passes give."""
    import torch

    from gpt1.modeling.model import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, n_ctx=8, n_embd=16, n_layer=1, n_head=2)).eval()
    ids = torch.randint(0, 50, (20,)).tolist()
    expected = 0.0
    with torch.no_grad():
        for start in (0, 7, 14):  # windows ids[0:8], ids[7:15], ids[14:20]
            window = torch.tensor([ids[start : start + 8]])
            logits, _ = model(window[:, :-1])
            expected += float(torch.log_softmax(logits.float(), -1).gather(-1, window[:, 1:, None]).sum())
    count, total = text_log_prob(model, ids)
    assert count == len(ids) - 1
    assert total == pytest.approx(expected, abs=1e-4)
    assert text_log_prob(model, ids[:1]) == (0, 0.0)  # one token: nothing to predict


def flatten_into_one_buffer(module: torch.nn.Module) -> None:
    """Make every parameter a view of one flat buffer, as cuDNN's flatten_parameters leaves an LSTM's on a GPU."""
    params = list(module.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    offset = 0
    for p in params:
        p.data = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()


@pytest.mark.parametrize("kind", ["gpt", "lstm"])
def test_a_task_model_whose_weights_share_one_buffer_saves_and_loads_the_same(kind: str, tmp_path: Path) -> None:
    """The first whole DAG on an H100 (2026-11-27) failed in every LSTM fine-tuning: safetensors' save_model refuses
    cuDNN's flattened weights. The same layout made on the CPU saves, and loads back to the same tensors."""
    from safetensors.torch import load_model

    from gpt1.modeling.checkpoints import model_config
    from gpt1.pipeline.mlflow_task_model import build_task_model, save_task_model, task_model_meta

    config = model_config(kind, tiny_config().section("model"), vocab_size=64)
    meta = {"task": "rte", "variant": "pretrained", "kind": kind, "model": dataclasses.asdict(config),
            "clf_dropout": 0.1}
    model, _ = build_task_model(meta)
    flatten_into_one_buffer(model.lm.lstm if kind == "lstm" else model)
    artifacts = save_task_model(model, task_model_meta(model, "rte", "pretrained", 0.1), tmp_path)
    loaded, _ = build_task_model(json.loads(Path(artifacts["meta"]).read_text()))
    load_model(loaded, artifacts["weights"])
    for (name, want), (_, got) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(want, got), name
