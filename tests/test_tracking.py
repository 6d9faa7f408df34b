"""MLflow: parallel stages must not lose a metric, fail on a locked database, or land in the wrong experiment."""

import json
import os
import subprocess
import sys
import time

import pytest
from mlflow.tracking import MlflowClient

WRITER = """
import sys
from gpt1.pipeline.tracking import stage_run
index = int(sys.argv[1])
with stage_run(f"writer{index}", "smoke", "parallel", {"index": index, "nested": {"a": 1}}) as run:
    for step in range(25):
        run.log_metrics({"loss": index + step / 100, "lr": 0.1}, step=step)
"""


def test_eight_processes_logging_at_once_into_a_new_store(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    env = {"MLFLOW_TRACKING_URI": uri, "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(i)], env=env, stderr=subprocess.PIPE, text=True)
             for i in range(8)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, errors
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("parallel")
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    assert len(runs) == 8
    assert client.search_runs(["0"], max_results=10) == []  # nothing in "Default"
    points = sum(len(client.get_metric_history(r.info.run_id, m)) for r in runs for m in ("loss", "lr"))
    assert points == 8 * 25 * 2
    assert all(r.info.status == "FINISHED" and r.data.params["nested.a"] == "1" for r in runs)
    assert {r.data.tags["gpt1.stage"] for r in runs} == {f"writer{i}" for i in range(8)}


def test_log_steps_writes_more_than_one_batch_of_steps(tmp_path, monkeypatch):
    from gpt1.pipeline.tracking import METRICS_PER_BATCH, stage_run

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    steps = METRICS_PER_BATCH  # two metrics per step: two batches
    with stage_run("steps", "smoke", "batched", {}) as run:
        run.log_steps(({"loss": 1.0 / (step + 1), "lr": 0.5}, step) for step in range(steps))
        run_id = run.run_id
    history = MlflowClient(uri).get_metric_history(run_id, "loss")
    assert sorted(m.step for m in history) == list(range(steps))
    assert {m.step: m.value for m in history}[3] == 0.25


def test_log_params_writes_more_than_one_batch_of_params(tmp_path, monkeypatch):
    from gpt1.pipeline.tracking import PARAMS_PER_BATCH, stage_run

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    params = {f"p{i}": i for i in range(2 * PARAMS_PER_BATCH + 1)}  # three writes
    with stage_run("params", "smoke", "batched", params) as run:
        run.log_metrics({"done": 1.0})
        run_id = run.run_id
    logged = MlflowClient(uri).get_run(run_id).data
    assert logged.params == {k: str(v) for k, v in params.items()} and logged.metrics == {"done": 1.0}


def test_a_store_outside_the_working_folder_keeps_its_artifacts_beside_it(tmp_path, monkeypatch):
    """MLflow puts a sqlite store's artifacts in ./mlruns of whatever folder a job runs in; a store elsewhere gets
    them beside it, and the default store in the working folder keeps MLflow's ./mlruns/<id>."""
    from gpt1.pipeline.mlflow_store import artifact_location
    from gpt1.pipeline.tracking import stage_run

    work, store = tmp_path / "work", tmp_path / "store"
    work.mkdir(), store.mkdir()
    monkeypatch.chdir(work)
    assert artifact_location("sqlite:///mlflow.db", "gpt1") is None
    assert artifact_location(f"sqlite:///{work}/mlflow.db", "gpt1") is None
    assert artifact_location("postgresql://localhost/mlflow", "gpt1") is None
    uri = f"sqlite:///{store}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    (work / "note.txt").write_text("an artifact\n")
    with stage_run("beside", "smoke", "gpt1 elsewhere", {}) as run:
        run.log_artifact(work / "note.txt")
        run_id = run.run_id
    artifacts = MlflowClient(uri).get_run(run_id).info.artifact_uri
    assert artifacts.startswith((store / "mlruns" / "gpt1_elsewhere").as_uri())
    assert (store / "mlruns" / "gpt1_elsewhere" / run_id / "artifacts" / "note.txt").is_file()
    assert not (work / "mlruns").exists()


def test_an_experiment_made_before_the_kind_tag_gets_it(tmp_path, monkeypatch):
    """The kind says the experiment holds model training runs (MLflow 3.17's UI does not read it for the tab it opens
    on: docs/mlflow_ui.md)."""
    from gpt1.pipeline.tracking import EXPERIMENT_KIND, ensure_experiment

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(uri)
    old = client.create_experiment("older")
    assert ensure_experiment("older") == old
    assert ensure_experiment("newer") != old
    for name in ("older", "newer"):
        assert client.get_experiment_by_name(name).tags.items() >= EXPERIMENT_KIND.items()


def test_an_artifact_folder_that_cannot_be_written_stops_the_stage_before_its_work(tmp_path, monkeypatch):
    """A stage logs its artifacts after its outputs are in place: a folder it cannot write (here a file named mlruns
    where the experiment keeps them) must stop it first, and the run is marked failed."""
    from gpt1.pipeline.errors import TrackingError
    from gpt1.pipeline.tracking import stage_run

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    (tmp_path / "mlruns").write_text("not a folder\n")
    client = MlflowClient(uri)
    experiment = client.create_experiment("blocked", artifact_location=str(tmp_path / "mlruns" / "7"))
    worked = []
    said = rf"^MLflow artifact folder {tmp_path}/mlruns/7/\w+/artifacts: Not a directory; make it a writable folder"
    with pytest.raises(TrackingError, match=said), stage_run("fetch", "smoke", "blocked", {}):
        worked.append(True)
    assert not worked
    assert [run.info.status for run in client.search_runs([experiment])] == ["FAILED"]


def test_a_deleted_experiment_is_named_with_how_to_restore_it(tmp_path, monkeypatch):
    from gpt1.pipeline.errors import TrackingError
    from gpt1.pipeline.tracking import stage_run

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(uri)
    client.delete_experiment(client.create_experiment("gone", artifact_location=str(tmp_path / "artifacts")))
    said = r"the experiment was deleted: restore it \(mlflow experiments restore --experiment-id <id>\), or name"
    with pytest.raises(TrackingError, match=said), stage_run("fetch", "smoke", "gone", {}):
        pass


def _views(client: MlflowClient, name: str) -> dict[str, dict]:
    from gpt1.pipeline.tracking import VIEW_TAG_PREFIX

    tags = client.get_experiment_by_name(name).tags
    return {key.removeprefix(VIEW_TAG_PREFIX): json.loads(value) for key, value in tags.items()
            if key.startswith(VIEW_TAG_PREFIX)}


def test_the_experiment_carries_saved_views_of_its_runs_and_says_what_to_click(tmp_path, monkeypatch):
    """What MLflow 3.17's runs page lists under Views: the runs grouped by pipeline, and a row per pipeline (its
    report run), each with the curated metrics as columns; the description says where they are."""
    from gpt1.pipeline.tracking import NOTE, NOTE_TAG, PIPELINE_TAG, VIEW_METRICS, VIEWS, ensure_experiment

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(uri)
    ensure_experiment("made")
    views = _views(client, "made")
    assert {view: saved["name"] for view, saved in views.items()} == VIEWS
    pipelines, reports = (json.loads(views[view]["state"]) for view in ("gpt1-pipelines", "gpt1-reports"))
    assert pipelines["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": PIPELINE_TAG}]
    assert pipelines["selectedColumns"] == [f"metrics.`{name}`" for name in VIEW_METRICS]
    assert reports["searchFilter"] == "tags.`gpt1.stage` = 'report'"
    assert reports["selectedColumns"] == pipelines["selectedColumns"]
    assert "groupBy" not in reports
    assert client.get_experiment_by_name("made").tags[NOTE_TAG] == NOTE


def test_the_saved_views_come_back_and_a_users_description_stays(tmp_path, monkeypatch):
    """Each stage checks the experiment's tags: a view deleted in the UI, or saved by an older version, is written
    again; one that is up to date is left as it is (its time kept); a description a user wrote is theirs."""
    from gpt1.pipeline.tracking import NOTE_TAG, VIEW_TAG_PREFIX, ensure_experiment

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(uri)
    experiment = ensure_experiment("kept")
    before = _views(client, "kept")
    client.delete_experiment_tag(experiment, VIEW_TAG_PREFIX + "gpt1-pipelines")
    client.set_experiment_tag(experiment, VIEW_TAG_PREFIX + "gpt1-reports", json.dumps({**before["gpt1-reports"],
                                                                                        "state": "{}"}))
    client.set_experiment_tag(experiment, NOTE_TAG, "my notes")
    later = before["gpt1-pipelines"]["createdAt"] / 1000 + 60  # the clock a minute on: a view written again says so
    with pytest.MonkeyPatch.context() as clock:
        clock.setattr(time, "time", lambda: later)
        assert ensure_experiment("kept") == experiment
    after = _views(client, "kept")
    assert {view: saved["state"] for view, saved in after.items()} == {v: s["state"] for v, s in before.items()}
    assert after["gpt1-pipelines"]["createdAt"] == int(later * 1000)  # written again
    assert after["gpt1-reports"]["createdAt"] == int(later * 1000)  # its old state replaced
    assert client.get_experiment_by_name("kept").tags[NOTE_TAG] == "my notes"
    ensure_experiment("kept")
    assert _views(client, "kept") == after  # up to date: not rewritten


def test_the_ui_address_opens_the_view_on_the_runs_not_the_genai_pages():
    from gpt1.pipeline.tracking import ui_url

    query = "runs?workflowType=machine_learning&viewStateShareKey="
    assert ui_url("3", "sqlite:///mlflow.db") == f"http://127.0.0.1:5000/#/experiments/3/{query}gpt1-pipelines"
    assert (ui_url("3", "https://me:secret@mlflow.example.org:8443/team/", "gpt1-reports")
            == f"https://mlflow.example.org:8443/team/#/experiments/3/{query}gpt1-reports")


def test_the_report_says_how_to_serve_a_store_plain_mlflow_ui_would_not_open():
    from gpt1.pipeline.tracking import ui_line

    assert ui_line("3", "sqlite:///mlflow.db").endswith("gpt1-pipelines")  # `mlflow ui` in the repo root
    assert ui_line("3", "http://127.0.0.1:5005").endswith("gpt1-pipelines")  # the server serves its own UI
    assert ui_line("3", "sqlite:////tmp/ci/mlflow.db").endswith(
        "gpt1-pipelines (served by: mlflow ui --backend-store-uri sqlite:////tmp/ci/mlflow.db)")
    assert ui_line("3", "postgresql://me:secret@db:5432/mlflow").endswith(
        "(served by: mlflow ui --backend-store-uri postgresql://me:***@db:5432/mlflow)")


def test_dataset_sources_say_where_the_data_came_from():
    from gpt1.pipeline.tracking import dataset_source

    hub = dataset_source("hub:nyu-mll/glue (sst2, split train)")
    assert (hub._get_source_type(), hub.url) == ("http", "https://huggingface.co/datasets/nyu-mll/glue")
    local = dataset_source("mirror:/data/glue/sst2/train.parquet")
    assert (local._get_source_type(), local.to_dict()) == ("code", {"tags": {"gpt1.source":
                                                                              "mirror:/data/glue/sst2/train.parquet"}})


def test_a_dataset_another_run_inserted_at_the_same_moment_is_logged_on_the_retry(tmp_path, monkeypatch):
    """Two fine-tuning runs of one task log the same new dataset at once: the loser's insert breaks the unique key."""
    from mlflow.exceptions import MlflowException

    from gpt1.pipeline.tracking import stage_run

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    with stage_run("finetune", "smoke", "inputs", {}) as run:
        real, calls = run.client.log_inputs, []

        def racing(*args, **kwargs):
            calls.append(args)
            if len(calls) == 1:
                raise MlflowException('(psycopg2.errors.UniqueViolation) duplicate key value violates "dataset_pk"')
            return real(*args, **kwargs)

        monkeypatch.setattr(run.client, "log_inputs", racing)
        run.log_dataset("sst2/train", "hub:nyu-mll/glue (sst2, split train)", "f" * 64, "train")
        run_id = run.run_id
    (given,) = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").get_run(run_id).inputs.dataset_inputs
    assert len(calls) == 2 and (given.dataset.name, given.dataset.digest) == ("sst2/train", "f" * 32)


def test_a_stop_that_breaks_a_pipe_on_the_way_out_still_ends_the_run_killed(tmp_path, monkeypatch):
    """Slurm's SIGTERM (a requeue) reaches the whole job, the `tee` a stage writes through too: the stage's next
    progress line raises BrokenPipeError while it stops. The run is KILLED and the exit 143 all the same (the Slurm
    test's requeued pre-training ended FAILED before)."""
    import signal
    from argparse import Namespace

    from gpt1.cli.boundary import Killed, failure_line
    from gpt1.pipeline.tracking import stage_run

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(uri)
    experiment = client.create_experiment("stops", artifact_location=str(tmp_path / "artifacts"))
    with pytest.raises(BrokenPipeError) as raised, stage_run("pretrain-gpt", "smoke", "stops", {}):
        try:
            raise Killed(signal.SIGTERM)
        except Killed:
            raise BrokenPipeError(32, "Broken pipe")  # noqa: B904 (as print() raises it: the stop is its context)
    assert [run.info.status for run in client.search_runs([experiment])] == ["KILLED"]
    line, code = failure_line(raised.value, Namespace(command="pretrain"))
    assert code == 143 and line.startswith("gpt1 pretrain: stopped by SIGTERM")


def test_a_pipeline_id_with_a_quote_is_refused() -> None:
    from gpt1.pipeline.errors import TrackingError
    from gpt1.pipeline.tracking import nest_pipeline_runs

    with pytest.raises(TrackingError, match="GPT1_PIPELINE_RUN"):  # every stage refuses it first (test_bad_inputs)
        nest_pipeline_runs("run", "it's")
    assert nest_pipeline_runs("run", "") == []  # no pipeline invocation: nothing to group


def test_a_new_store_is_made_without_mlflows_info_lines(tmp_path):
    """'Creating initial MLflow database tables...' and 'Updating database tables' are no stage's output."""
    done = subprocess.run([sys.executable, "-c", "from gpt1.pipeline.tracking import ensure_experiment; "
                           "print(ensure_experiment('fresh'))"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"})
    assert (done.returncode, done.stdout, done.stderr) == (0, "1\n", "")
