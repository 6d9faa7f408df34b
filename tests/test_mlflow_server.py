"""The smoke pipeline against `mlflow server` on a throw-away PostgreSQL cluster (tools/mlflow_server.py), both on
127.0.0.1 (conftest.py's fixtures `mlflow_server` and `server_smoke_run`): every stage's run arrives, named by what
it is and nested under the report run, with its metrics, its artifacts byte for byte, its models, and the
pre-trained GPT registered; PostgreSQL holds them; and this second run of the pipeline from nothing, in another
folder with another tracking store, has the committed bytes of every output it makes. Skipped where PostgreSQL cannot
start. The commands are docs/operations.md's ("An MLflow server on PostgreSQL")."""

from __future__ import annotations

import hashlib
import json
import socket
from pathlib import Path

import pytest
import yaml
from pipeline_repo import SERVER_RUN_TASKS, assert_outputs_committed, mlflow_server_command, output_digests

from gpt1.pipeline.plan import Plan

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
def expected_run_names(root: Path) -> set[str]:
    params = yaml.safe_load((root / "params.yaml").read_text())
    names = {"fetch", "clean", "bpe", "encode"}  # and "report <pipeline id>"
    names |= {f"{stage} {model}" for stage in ("pretrain", "zeroshot") for model in params["pretrain_models"]}
    plan = Plan.from_params(params)
    names |= {f"finetune {t} {v} seed{s}" for t, v, s in plan.finetune_runs()}
    names |= {f"layers {t} seed{s}" for t, s in plan.layer_runs()}
    names |= {f"encode_task {t}" for t in params["finetune_tasks"]}
    return names


@pytest.fixture(scope="module")
def runs(mlflow_server: dict, server_smoke_run: Path) -> dict:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_server["uri"])
    experiment = client.get_experiment_by_name("gpt1")
    found = client.search_runs([experiment.experiment_id], max_results=1000)
    return {"client": client, "experiment": experiment, "runs": {r.info.run_name: r for r in found}, "all": found}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_second_run_from_nothing_has_the_committed_bytes(server_smoke_run: Path) -> None:
    """Bit-for-bit reproducible on the CPU: this run from nothing in a fresh folder, logging to another tracking
    store, computes every output it makes (data, both pre-trainings, three tasks' fine-tuning jobs and RTE's
    ablations, zero-shot, layers, the figures) with the bytes committed in tests/fixtures/smoke_digests.json, which
    tests/test_workflow.py holds the whole smoke run to. Its report, from fewer jobs, differs by design."""
    made = output_digests(server_smoke_run)
    assert len(made) > 60, sorted(made)
    assert {name.split("/")[1] for name in made if name.startswith("finetune/")} == set(SERVER_RUN_TASKS)
    assert_outputs_committed(server_smoke_run, planned_fewer=True)


def test_every_stage_run_arrives_named_finished_and_nested(runs: dict, server_smoke_run: Path) -> None:
    assert len(runs["all"]) == len(runs["runs"]), "two runs share a name"
    (report,) = [r for r in runs["all"] if r.data.tags["gpt1.stage"] == "report"]
    assert report.info.run_name == f"report {report.data.tags['gpt1.pipeline_run']}"
    assert set(runs["runs"]) - {report.info.run_name} == expected_run_names(server_smoke_run)
    assert all(r.info.status == "FINISHED" and r.data.tags["gpt1.profile"] == "smoke" for r in runs["all"])
    assert all(r.data.tags.get("mlflow.parentRunId") == report.info.run_id for r in runs["all"] if r is not report)
    assert runs["experiment"].tags["mlflow.experimentKind"] == "custom_model_development"


def test_the_metrics_are_those_of_the_output_files(runs: dict, server_smoke_run: Path) -> None:
    results = server_smoke_run / "results" / "smoke"
    finetuned = sorted(results.glob("finetune/*/*/*/metrics.json"))
    assert finetuned and len(finetuned) == sum(name.startswith("finetune ") for name in runs["runs"])
    for path in finetuned:
        task, variant, seed = path.parts[-4:-1]
        logged = runs["runs"][f"finetune {task} {variant} seed{seed}"].data.metrics
        written = json.loads(path.read_text())
        for report, block in written["reports"].items():
            for name, value in block["metrics"].items():
                assert logged[f"{report}.{name}"] == pytest.approx(value), (path, report, name)
        assert logged["updates"] == written["updates"]
    for model in ("gpt", "lstm"):
        written = json.loads((results / "pretrain" / model / "metrics.json").read_text())
        logged = runs["runs"][f"pretrain {model}"].data.metrics
        assert logged["val_perplexity"] == pytest.approx(written["val_perplexity"])


def test_every_artifact_is_a_file_of_the_pipeline_byte_for_byte(runs: dict, server_smoke_run: Path,
                                                               tmp_path: Path) -> None:
    import mlflow

    results = server_smoke_run / "results" / "smoke"
    outputs = {sha256(p) for p in results.rglob("*") if p.is_file()}
    for name, run in runs["runs"].items():
        folder = Path(mlflow.artifacts.download_artifacts(run_id=run.info.run_id, dst_path=str(tmp_path / name),
                                                          tracking_uri=runs["client"].tracking_uri))
        files = [p for p in folder.rglob("*") if p.is_file()]
        assert files, f"{name}: no artifacts"
        assert all(sha256(p) in outputs for p in files), name
        if name.startswith("finetune "):
            assert {p.name for p in files} == {"metrics.json", "predictions.jsonl", "curves.csv"}


def test_models_are_logged_and_the_gpt_is_registered_and_loads(runs: dict, server_smoke_run: Path) -> None:
    import mlflow
    import pandas as pd

    models = {n: r.outputs.model_outputs for n, r in runs["runs"].items() if r.outputs.model_outputs}
    assert set(models) == {n for n in runs["runs"] if n.startswith(("finetune ", "pretrain "))}
    client = runs["client"]
    (version,) = client.search_model_versions("name = 'gpt1-smoke-gpt'")
    written = json.loads((server_smoke_run / "results/smoke/pretrain/gpt/metrics.json").read_text())
    assert version.run_id == runs["runs"]["pretrain gpt"].info.run_id
    assert float(version.tags["metric.val_perplexity"]) == pytest.approx(written["val_perplexity"])
    mlflow.set_tracking_uri(client.tracking_uri)
    scores = mlflow.pyfunc.load_model("models:/gpt1-smoke-gpt/1").predict(pd.DataFrame({"text": ["A quiet day."]}))
    assert scores["tokens"][0] > 0 and scores["perplexity"][0] > 1


def test_the_datasets_are_inputs_with_source_and_hash(runs: dict, server_smoke_run: Path) -> None:
    manifest = json.loads((server_smoke_run / "results/smoke/corpus/raw.manifest.json").read_text())
    (raw,) = runs["runs"]["fetch"].inputs.dataset_inputs
    assert raw.dataset.name == "corpus/raw.jsonl" and manifest["source"] in raw.dataset.source
    assert {t.key: t.value for t in raw.tags}["gpt1.sha256"] == manifest["sha256"]
    task_inputs = runs["runs"]["finetune rte pretrained seed0"].inputs.dataset_inputs  # one of SERVER_RUN_TASKS
    assert {d.dataset.name for d in task_inputs} == {"rte/train", "rte/validation"}


def test_postgresql_holds_the_runs(mlflow_server: dict, runs: dict) -> None:
    import psycopg2

    with psycopg2.connect(mlflow_server["backend"]) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runs WHERE experiment_id = %s", (int(runs["experiment"].experiment_id),))
        assert cursor.fetchone()[0] == len(runs["all"])
        cursor.execute("SELECT count(*) FROM model_versions WHERE name = 'gpt1-smoke-gpt'")
        assert cursor.fetchone()[0] == 1
    connection.close()


def test_down_stops_both_servers(mlflow_server: dict, runs: dict) -> None:
    stopped = mlflow_server_command("down", mlflow_server["state"])
    assert stopped.returncode == 0, stopped.stderr
    for port in (int(mlflow_server["uri"].rsplit(":", 1)[1]), mlflow_server["pg_port"]):
        with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    assert not Path(mlflow_server["pg_data"]).exists()
