"""gpt1.data.taskdata and the encode_task stage: a task's examples planned once, written, read back exactly, refused
when they belong to another tokenizer, context or setting, or were edited."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpt1.data.rows import data_settings, data_source, train_cap
from gpt1.data.taskdata import TaskData, narrow, plan_task_data, read_encoded, write_encoded
from gpt1.data.tasks import get_task
from gpt1.data.tokenizer import GPT1Tokenizer
from gpt1.pipeline import layout
from gpt1.pipeline.config import load_config
from gpt1.pipeline.errors import Gpt1Error, TaskDataError
from gpt1.stages.encode_task import encode_task_stage

REPO = Path(__file__).resolve().parents[1]
N_CTX = 48


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> GPT1Tokenizer:
    from gpt1.data.synthetic.corpus import synthetic_corpus
    from gpt1.data.tokenizer import train

    folder = tmp_path_factory.mktemp("taskdata") / "tokenizer"
    train([d["text"] for d in synthetic_corpus(24, seed=1)], "fast", merges=200, limit_alphabet=100).save(folder)
    return GPT1Tokenizer.load(folder)


def smoke_settings(*overrides: str) -> dict:
    caps = ["finetune.max_train_examples=20", "finetune.max_eval_examples=12"]
    return load_config(REPO / "params.yaml", "smoke", [*caps, *overrides]).section("finetune")


def planned(task: str, tok: GPT1Tokenizer, settings: dict) -> tuple[TaskData, dict]:
    spec = get_task(task)
    source = data_source(None, True, spec)
    return plan_task_data(spec, settings, source, tok, N_CTX), data_settings(spec, settings, source)


def assert_same(a: TaskData, b: TaskData) -> None:
    for x, y in zip([a.train, *a.evals], [b.train, *b.evals], strict=True):
        assert type(x) is type(y)
        assert (x.split, x.cut, x.examples, x.transformed) == (y.split, y.cut, y.examples, y.transformed)
        assert vars(x.loaded) == vars(y.loaded)
        assert getattr(x, "reports", None) == getattr(y, "reports", None)


@pytest.mark.parametrize("task", ["rte", "mnli", "stsb", "race", "story_cloze"])
def test_encoded_examples_read_back_exactly_as_planned(task: str, tok: GPT1Tokenizer, tmp_path: Path) -> None:
    settings = smoke_settings()
    data, recorded = planned(task, tok, settings)
    write_encoded(tmp_path, get_task(task), data, tok.fingerprint(), N_CTX, recorded)
    assert sorted(p.name for p in tmp_path.iterdir()) == [layout.ENCODED_JSON, layout.EXAMPLES_FILE]
    again = read_encoded(tmp_path, get_task(task), tok.fingerprint(), N_CTX, recorded)
    assert_same(again, data)
    assert isinstance(again.train.examples[0].texts, tuple)  # JSON lists come back as the tuples loading makes


def test_encoded_examples_of_another_tokenizer_context_or_setting_are_refused(tok: GPT1Tokenizer,
                                                                              tmp_path: Path) -> None:
    data, recorded = planned("rte", tok, smoke_settings())
    write_encoded(tmp_path, get_task("rte"), data, tok.fingerprint(), N_CTX, recorded)
    spec = get_task("rte")
    with pytest.raises(TaskDataError, match=r"encoded.json: tokenizer_sha256 is .* re-run the encode_task stage"):
        read_encoded(tmp_path, spec, "0" * 64, N_CTX, recorded)
    with pytest.raises(TaskDataError, match=r"n_ctx is 48, this job needs 64"):
        read_encoded(tmp_path, spec, tok.fingerprint(), 64, recorded)
    with pytest.raises(TaskDataError, match=r"task is 'rte', this job needs 'mrpc'"):
        read_encoded(tmp_path, get_task("mrpc"), tok.fingerprint(), N_CTX, recorded)
    other = planned("rte", tok, smoke_settings("finetune.max_train_examples=10"))[1]
    with pytest.raises(TaskDataError, match=r"encoded with max_train_examples=20, but the job's settings say 10"):
        read_encoded(tmp_path, spec, tok.fingerprint(), N_CTX, other)


def test_a_task_of_train_examples_by_task_keeps_its_own_cap(tok: GPT1Tokenizer) -> None:
    settings = smoke_settings("finetune.train_examples_by_task={sst2: 30}")
    assert train_cap(get_task("sst2"), settings) == 30 and train_cap(get_task("cola"), settings) == 20
    sst2, recorded = planned("sst2", tok, settings)
    assert len(sst2.train.examples) == 30 and recorded["max_train_examples"] == 30
    cola, recorded = planned("cola", tok, settings)
    assert len(cola.train.examples) == 20 and recorded["max_train_examples"] == 20
    assert len(sst2.evals[0].examples) == len(cola.evals[0].examples) == 12  # evaluation caps are not per task


def test_an_edited_or_missing_examples_file_is_refused(tok: GPT1Tokenizer, tmp_path: Path) -> None:
    data, recorded = planned("sst2", tok, smoke_settings())
    write_encoded(tmp_path, get_task("sst2"), data, tok.fingerprint(), N_CTX, recorded)
    lines = (tmp_path / layout.EXAMPLES_FILE).read_text().splitlines()
    (tmp_path / layout.EXAMPLES_FILE).write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(TaskDataError, match=r"examples.jsonl: .* bytes, but .*encoded.json records"):
        read_encoded(tmp_path, get_task("sst2"), tok.fingerprint(), N_CTX, recorded)
    header = json.loads((tmp_path / layout.ENCODED_JSON).read_text())
    header["n_ctx"] = 64
    (tmp_path / layout.ENCODED_JSON).write_text(json.dumps(header))
    sealed = r"content_sha256; the file was changed or is corrupt, re-run the encode_task stage \(gpt1 encode-task\)"
    with pytest.raises(TaskDataError, match=rf"content differs from its recorded {sealed}"):
        read_encoded(tmp_path, get_task("sst2"), tok.fingerprint(), 64, recorded)
    (tmp_path / layout.ENCODED_JSON).unlink()
    with pytest.raises(TaskDataError, match=r"encoded.json: missing; re-run the encode_task stage"):
        read_encoded(tmp_path, get_task("sst2"), tok.fingerprint(), N_CTX, recorded)


def test_narrow_keeps_a_seeded_subset_in_order_and_all_when_it_fits(tok: GPT1Tokenizer) -> None:
    data, _ = planned("mrpc", tok, smoke_settings())
    assert narrow(data.train, None) is data.train and narrow(data.train, 100) is data.train
    small = narrow(data.train, 7)
    indices = [e.index for e in small.examples]
    assert len(indices) == 7 and indices == sorted(indices)
    assert set(indices) <= {e.index for e in data.train.examples}
    assert [e.index for e in narrow(data.train, 7).examples] == indices  # DATA_SEED, not the job's seed
    evals = narrow(data.evals[0], 5)
    assert evals.reports == data.evals[0].reports and len(evals.transformed) == 5


def test_the_stage_writes_both_files_and_logs_a_run(tok: GPT1Tokenizer, tmp_path: Path, mlflow_env: str) -> None:
    folder = tmp_path / "tok"
    tok.save(folder)
    cfg = load_config(REPO / "params.yaml", "smoke", [f"model.n_ctx={N_CTX}", "finetune.max_train_examples=20"])
    header = encode_task_stage(cfg, "qnli", folder, tmp_path / "out")
    assert header["task"] == "qnli" and header["n_ctx"] == N_CTX
    assert [p["role"] for p in header["parts"]] == ["train", "eval"]
    lines = (tmp_path / "out" / layout.EXAMPLES_FILE).read_text().splitlines()
    assert len(lines) == sum(p["examples"] for p in header["parts"])
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_env)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    run = next(r for r in runs if r.data.tags.get("gpt1.stage") == "encode_task")
    assert run.info.run_name == "encode_task qnli" and run.data.metrics["train.train.examples"] == 20
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == [layout.ENCODED_JSON]


def test_the_stage_refuses_an_analysis_dataset(tok: GPT1Tokenizer, tmp_path: Path) -> None:
    cfg = load_config(REPO / "params.yaml", "smoke")
    with pytest.raises(Gpt1Error, match=r"--task 'dprd' is an analysis dataset"):
        encode_task_stage(cfg, "dprd", tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cuts_are_complementary_in_the_encoded_parts(tok: GPT1Tokenizer) -> None:
    settings = smoke_settings("finetune.max_train_examples=null", "finetune.max_eval_examples=null",
                              "finetune.train_cuts.mnli={split: validation_matched, fraction: 0.5, seed: 3}")
    data, _ = planned("mnli", tok, settings)  # trains on a cut of validation_matched, scores on the rest
    train = {e.index for e in data.train.examples}
    scored = {e.index for e in data.evals[0].examples}
    assert train and scored and not train & scored
    assert data.evals[0].cut is not None and data.evals[1].cut is None  # mismatched: whole
    assert np.all(np.diff([e.index for e in data.evals[0].examples]) > 0)
