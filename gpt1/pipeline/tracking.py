"""MLflow: the one place that opens runs, and that creates the experiment once.

Several stages may start at the same moment (Snakemake runs jobs in parallel). Creating a sqlite store or an
experiment concurrently crashes on schema migration or silently logs into "Default", so creation happens under
a file lock and every run names its experiment by id; every write retries while sqlite reports a locked database.
Before a run opens, its store is checked in seconds, and every failure of the store is one TrackingError naming it
(gpt1.pipeline.mlflow_store). A run ends FINISHED, FAILED, or KILLED (SIGTERM, Ctrl-C), never left RUNNING; a stage's
outputs are published after its run is FINISHED (`published_run`).

What users see: runs named by what they are ("finetune sst2 pretrained seed0"), datasets as run inputs with their
source and sha256, and models logged as MLflow Python models (gpt1.pipeline.mlflow_models, mlflow_task_model) linked
to their run, registered where the store has a registry. The experiment carries what `mlflow ui` reads from it
(experiment_tags): a description that says what to click, and two saved views of the runs page, listed under Views
("gpt1 pipelines": the runs grouped by pipeline; "gpt1 reports": a row per pipeline; both with the report's curated
metrics as columns), which `ui_url` opens; the report nests a pipeline's runs under its own (`nest_pipeline_runs`).
docs/mlflow_ui.md shows the screens (tools/mlflow_screens.py takes them).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpt1.pipeline.clock import PHASES_TAG, PROCESS
from gpt1.pipeline.errors import TrackingError, interruption
from gpt1.pipeline.files import flatten, publication, staged_path
from gpt1.pipeline.mlflow_store import (
    DEFAULT_URI,
    DUPLICATE_ERRORS,
    artifact_location,
    check_artifact_folder,
    check_store,
    creation_lock,
    retry,
    shown,
    tracking_uri,
    translated,
)

if TYPE_CHECKING:
    from gpt1.pipeline.config import Config

PIPELINE_RUN_ENV = "GPT1_PIPELINE_RUN"  # a tag grouping the runs of one pipeline invocation
METRICS_PER_BATCH, PARAMS_PER_BATCH = 1000, 100  # MLflow's caps on a log_batch call
PIPELINE_TAG = "gpt1.pipeline_run"  # the run tag set from PIPELINE_RUN_ENV
PARENT_TAG = "mlflow.parentRunId"  # the tag `mlflow ui` nests runs by
# What the experiment says it holds. MLflow 3.17's UI does not read it to pick the tab an experiment opens on: the
# GenAI / Model training switch at the top of its sidebar decides, kept in the browser (localStorage
# `mlflow.workflowType`, GenAI until a user clicks Model training) or given in the address (`workflowType=`, ui_url).
# Earlier 3.x UIs open on the runs with it; the API reports it.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
# The experiment's description (Markdown), shown on the UI's home page and above the runs; written once, then the
# user's to edit.
NOTE_TAG = "mlflow.note.content"
NOTE = ("To see the runs: click **Model training** (top left), then **Views** → *gpt1 pipelines* (the runs by "
        "pipeline) or *gpt1 reports* (a row per pipeline: tick two, **Compare**).")
# Saved views of the runs page: experiment tags mlflow.sharedViewState.<id>, listed under Views by MLflow 3.17 (value
# {name, createdAt, updatedAt, state}, state the page's search facets and UI state as JSON), opened by
# `#/experiments/<experiment id>/runs?viewStateShareKey=<id>`. id -> name.
PIPELINES_VIEW, REPORTS_VIEW = "gpt1-pipelines", "gpt1-reports"
VIEWS = {PIPELINES_VIEW: "gpt1 pipelines", REPORTS_VIEW: "gpt1 reports"}
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
# The report run's curated metrics (gpt1.report.stage.CURATED_METRICS, then gaps; tests/test_tracking.py checks),
# the views' columns in this order.
VIEW_METRICS = ("ppl_gpt", "ppl_lstm", "glue", "glue_scratch", "race", "t5_no_aux", "t5_lstm", "layers", "zs_gpt",
                "zs_lstm", "heldout_gpt", "heldout_lstm", "gaps")
UI_BASE = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default
DIGEST_CHARS = 32  # MLflow stores a dataset digest in 36 characters (PostgreSQL enforces it); the full hash is a tag
WRITE_EVERY_S = 1.0  # MetricSink: at most one write a second while a loop trains
# Stores with a model registry: a database, a server, Databricks (a file store under ./mlruns has none).
REGISTRY_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks")
# What a logged model needs to run (pinned to what logged it); given, not inferred: inference loads the model in a
# subprocess, seconds for every fine-tuning job.
MODEL_REQUIREMENTS = ("mlflow", "torch", "transformers", "safetensors", "tokenizers", "numpy", "pandas", "pyyaml",
                      "jsonschema", "ftfy", "spacy")


def check_pipeline_run(name: str) -> str:
    """A pipeline invocation's name, as the report will search its runs by it (MLflow's filter strings cannot escape
    quotes or backslashes): refused by every stage, before its work, rather than by the last."""
    if "'" in name or "\\" in name:
        raise TrackingError(f"{PIPELINE_RUN_ENV}={name!r}: quotes and backslashes cannot be searched for; use letters, "
                            "digits, '-', '_' or ':'")
    return name


def pipeline_run_name() -> str | None:
    """$GPT1_PIPELINE_RUN, checked; None when unset."""
    name = os.environ.get(PIPELINE_RUN_ENV)
    return check_pipeline_run(name) if name else None


def ensure_experiment(name: str) -> str:
    """Create (once, under a lock) the store and the experiment; return the experiment id."""
    import mlflow
    from mlflow.tracking import MlflowClient

    for chatty in ("alembic", "mlflow.store.db.utils"):  # a new store's migrations, "Creating initial ... tables"
        logging.getLogger(chatty).setLevel(logging.WARNING)
    uri = tracking_uri()
    with creation_lock(uri), translated():
        mlflow.set_tracking_uri(uri)
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            return client.create_experiment(name, artifact_location=artifact_location(uri, name),
                                            tags=experiment_tags({}))
        # An experiment made before a tag existed, or whose view a user deleted: the missing or changed tags.
        for key, value in experiment_tags(experiment.tags).items():
            if experiment.tags.get(key) != value:
                client.set_experiment_tag(experiment.experiment_id, key, value)
        return experiment.experiment_id


def view_state(view: str) -> dict[str, Any]:
    """The runs page's state in a saved view. gpt1-pipelines: every run grouped by its pipeline, newest first, the
    curated metrics as columns (a group's row shows its report's values: no other run logs them). gpt1-reports: the
    report runs alone, a row per pipeline, the curated metrics as columns."""
    name, metrics = "attributes.`Run Name`", [f"metrics.`{metric}`" for metric in VIEW_METRICS]
    state: dict[str, Any] = {"orderByKey": "attributes.start_time", "orderByAsc": False,
                             "columnWidths": {name: 360, **dict.fromkeys(metrics, 100)}}
    if view == PIPELINES_VIEW:
        grouping = [{"mode": "tag", "groupByData": PIPELINE_TAG}]
        return {**state, "selectedColumns": metrics, "columnOrder": [name, *metrics],
                "groupBy": {"aggregateFunction": "max", "groupByKeys": grouping}}
    if view == REPORTS_VIEW:  # the report run's name says its pipeline (gpt1.report.stage.report_run_name)
        return {**state, "searchFilter": "tags.`gpt1.stage` = 'report'", "selectedColumns": metrics,
                "columnOrder": [name, *metrics]}
    raise ValueError(f"{view!r}: not a saved view; one of {', '.join(VIEWS)}")


def experiment_tags(current: Mapping[str, str]) -> dict[str, str]:
    """The tags the experiment should carry, given those it has: the kind, each saved view (rewritten only when its
    state changed, so that it keeps the time it was made), the description unless one is set."""
    tags = dict(EXPERIMENT_KIND)
    for view, name in VIEWS.items():
        state, key = json.dumps(view_state(view), sort_keys=True), VIEW_TAG_PREFIX + view
        try:
            saved = json.loads(current.get(key, "{}"))
        except ValueError:
            saved = {}
        if isinstance(saved, dict) and saved.get("state") == state and saved.get("name") == name:
            tags[key] = current[key]
        else:
            now = int(time.time() * 1000)
            tags[key] = json.dumps({"name": name, "createdAt": now, "updatedAt": now, "state": state})
    if not current.get(NOTE_TAG):
        tags[NOTE_TAG] = NOTE
    return tags


def ui_url(experiment_id: str, uri: str | None = None, view: str = PIPELINES_VIEW) -> str:
    """The address of a saved view in the UI: on the tracking server for a server URI (without its credentials),
    else where `mlflow ui` serves by default. workflowType=machine_learning: MLflow 3.17 shows the runs, not its
    GenAI pages."""
    uri = uri or tracking_uri()
    base = UI_BASE
    if uri.startswith(("http://", "https://")):
        parts = urllib.parse.urlsplit(uri)
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        netloc += f":{parts.port}" if parts.port else ""
        base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
    return f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning&viewStateShareKey={view}"


def ui_line(experiment_id: str, uri: str | None = None) -> str:
    """Where the UI shows the pipelines, and, for a store that a plain `mlflow ui` in the repo root would not open
    (it serves sqlite:///mlflow.db), the command that serves it."""
    uri = uri or tracking_uri()
    line = f"the pipelines in MLflow's UI: {ui_url(experiment_id, uri)}"
    if uri.startswith(("http://", "https://")) or uri == DEFAULT_URI:
        return line
    return f"{line} (served by: mlflow ui --backend-store-uri {shown(uri)})"


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


class StageRun:
    """What a stage logs into its MLflow run; every write retries on a locked sqlite database."""

    def __init__(self, run_id: str, experiment_id: str | None = None) -> None:
        from mlflow.tracking import MlflowClient

        self.run_id = run_id
        self.experiment_id = experiment_id
        self.client = MlflowClient(tracking_uri())

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.log_steps([(metrics, step or 0)])

    def log_times(self, last: str) -> None:
        """Where this process's time went (`gpt1.pipeline.clock`), as the stage's last metrics: the time since its
        last mark as phase `last`, then time.<phase>_s for every phase and time.process_s, their order as a tag."""
        PROCESS.lap(last)
        metrics, phases = PROCESS.take()
        self.log_metrics(metrics)
        self.set_tags({PHASES_TAG: ",".join(phases)})

    def log_steps(self, rows: Iterable[tuple[Mapping[str, float], int]], timestamps: Sequence[int] | None = None
                  ) -> None:
        """Many steps' metrics, (metrics, step) each, in as few writes as MLflow allows (a write per step costs
        more than a small training update); `timestamps`: each row's time (ms since the epoch), else the write's."""
        from mlflow.entities import Metric

        rows = list(rows)
        stamps = timestamps if timestamps is not None else [int(time.time() * 1000)] * len(rows)
        batch = [Metric(k, float(v), stamp, step) for (metrics, step), stamp in zip(rows, stamps, strict=True)
                 for k, v in metrics.items()]
        self._log_batched("metrics", batch, METRICS_PER_BATCH)

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        self._log_batched("params", [Param(k, str(v)[:6000]) for k, v in flatten(params).items()], PARAMS_PER_BATCH)

    def _log_batched(self, kind: str, entities: Sequence[Any], size: int) -> None:
        """`entities` (metrics or params, by `kind`) in writes of at most `size`, MLflow's limit for one request."""
        for start in range(0, len(entities), size):
            retry(lambda chunk=entities[start : start + size]: self.client.log_batch(self.run_id, **{kind: chunk}))

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        batch = [RunTag(k, str(v)) for k, v in tags.items()]
        retry(lambda: self.client.log_batch(self.run_id, tags=batch))

    def log_artifact(self, path: str | Path, folder: str | None = None) -> None:
        retry(lambda: self.client.log_artifact(self.run_id, str(path), folder))

    def log_output(self, path: str | Path, folder: str | None = None) -> None:
        """An output of the stage as an artifact under its own name, also while `files.publication()` still holds
        it under a temporary one (a stage logs before it publishes)."""
        final, current = Path(path), staged_path(path)
        if current == final:
            self.log_artifact(final, folder)
            return
        with tempfile.TemporaryDirectory(prefix="gpt1-artifact-") as named:
            self.log_artifact(shutil.copyfile(current, Path(named) / final.name), folder)

    def log_dataset(self, name: str, source: str, sha256: str, context: str) -> None:
        """A dataset the stage read, as a run input: its name, where it came from and its hash (`context`: the role
        it plays, e.g. train or eval). Only metadata: the data stays where it is."""
        from mlflow.data.meta_dataset import MetaDataset
        from mlflow.entities import DatasetInput, InputTag

        dataset = MetaDataset(dataset_source(source), name=name, digest=sha256[:DIGEST_CHARS])._to_mlflow_entity()
        tags = [InputTag("mlflow.data.context", context), InputTag("gpt1.sha256", sha256)]
        retry(lambda: self.client.log_inputs(self.run_id, datasets=[DatasetInput(dataset, tags)]),
               transient=("locked", *DUPLICATE_ERRORS))

    def log_model(self, name: str, python_model: Any, artifacts: Mapping[str, str], signature: Any,
                  step: int = 0) -> str:
        """Log an MLflow Python model (its artifacts copied, this package as its code) linked to this run and its
        metrics at `step`; returns the model's URI (models:/<model id>)."""
        import mlflow
        from mlflow.models import Model

        package = Path(__file__).resolve().parents[1]
        mlflow.set_tracking_uri(tracking_uri())
        experiment_id = self.experiment_id or retry(lambda: self.client.get_run(self.run_id).info.experiment_id)
        with _quiet_mlflow():
            retry(lambda: mlflow.set_experiment(experiment_id=experiment_id))  # the logged model's: the run's
            # Retried whole on a locked sqlite store (MLflow's own writes inside are not): an attempt that failed
            # half-way may leave an empty logged model beside the one that counts.
            info = retry(lambda: Model.log(None, name=name, flavor=mlflow.pyfunc, run_id=self.run_id,
                                            python_model=python_model, artifacts=dict(artifacts),
                                            code_paths=[str(package)], signature=signature,
                                            pip_requirements=model_requirements(), step=step))
        return info.model_uri

    def register_model(self, model_uri: str, name: str, tags: Mapping[str, Any]) -> str | None:
        """A new version of registered model `name` from a logged model, tagged (e.g. with its metrics); None, with a
        note, where the store has no registry."""
        import mlflow

        uri = tracking_uri()
        if urllib.parse.urlsplit(uri).scheme not in REGISTRY_SCHEMES:
            print(f"mlflow: {shown(uri)} has no model registry (use a database or a server); {name} not registered")
            return None
        mlflow.set_tracking_uri(uri)
        with _quiet_mlflow():
            version = retry(lambda: mlflow.register_model(model_uri, name, tags={k: str(v) for k, v in tags.items()}))
        return str(version.version)


class MetricSink:
    """Per-update metrics to MLflow from a background thread, so a training loop (pre-training's) never waits for
    sqlite.

    One write costs ~20 ms of Python (SQLAlchemy), longer than a small update, and a thread writing holds the
    interpreter's lock the loop needs: writing whatever had queued as soon as the last write ended, it kept busy and
    halved a small model's updates (bench/metric_sink.py). So it writes at most once every `every` seconds, sleeping
    in between (which leaves the lock to the loop), everything queued since as one batch; `close` writes the rest.
    Failures warn once and never stop training."""

    def __init__(self, run: StageRun | None, every: float = WRITE_EVERY_S) -> None:
        self.run, self.every = run, every
        self.queue: queue.Queue = queue.Queue()
        self.closing = threading.Event()
        self.warned = False
        self.thread = threading.Thread(target=self._work, daemon=True) if run is not None else None
        if self.thread:
            self.thread.start()

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self.thread:  # stamped now: a write holds a second of steps, each at its own time in MLflow
            self.queue.put((metrics, step, int(time.time() * 1000)))

    def _work(self) -> None:
        while True:
            closing = self.closing.wait(self.every)  # set by close(): nothing more will be queued
            items = []
            with contextlib.suppress(queue.Empty):
                while True:
                    items.append(self.queue.get_nowait())
            if items:
                self._write(items)
            if closing:
                return

    def _write(self, items: list[tuple[dict[str, float], int, int]]) -> None:
        try:
            self.run.log_steps([(metrics, step) for metrics, step, _ in items], [stamp for *_, stamp in items])
        except Exception as err:
            if not self.warned:
                warnings.warn(f"MLflow logging failed, training goes on: {err}", stacklevel=1)
                self.warned = True

    def close(self) -> None:
        """Write what is still queued, then stop the thread."""
        if self.thread:
            self.closing.set()
            self.thread.join()
            self.thread = None


def dataset_source(source: str) -> Any:
    """An MLflow dataset source from our source strings: hub:<id>, mirror:<path>, files:<paths>, synthetic:<recipe>
    (what gpt1.data.sources and gpt1.data.rows write into manifests)."""
    from mlflow.data.code_dataset_source import CodeDatasetSource
    from mlflow.data.http_dataset_source import HTTPDatasetSource

    kind, _, where = source.partition(":")
    if kind == "hub" and where:
        return HTTPDatasetSource(f"https://huggingface.co/datasets/{where.split()[0]}")
    return CodeDatasetSource({"gpt1.source": source})


def model_requirements() -> list[str]:
    """MODEL_REQUIREMENTS pinned to the versions installed here (those not installed are left out)."""
    from importlib.metadata import PackageNotFoundError, version

    pinned = []
    for name in MODEL_REQUIREMENTS:
        with contextlib.suppress(PackageNotFoundError):
            pinned.append(f"{name}=={version(name)}")
    return pinned


@contextlib.contextmanager
def _quiet_mlflow() -> Iterator[None]:
    """MLflow's INFO lines and advice while logging a model (environment notes, URLs) are not the stage's output."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    logger = logging.getLogger("mlflow")
    level = logger.level
    logger.setLevel(logging.ERROR)  # also the advice on cloudpickle and on pip's version in conda.yaml
    try:
        with warnings.catch_warnings():  # the signature is given: an input example would only cost a model load
            warnings.filterwarnings("ignore", message=".*input example was not provided", category=UserWarning)
            yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def stage_run(stage: str, profile: str, experiment: str, params: Mapping[str, Any],
              name: str | None = None) -> Iterator[StageRun]:
    """An MLflow run for one stage execution, tagged with stage, profile, commit, pipeline run and the machine it ran
    on (gpt1.training.numerics.machine_tags: processor, instruction sets, kernels and threads in use, torch); `name`
    says what it is in `mlflow ui` (e.g. "finetune sst2 pretrained seed0"), the stage's name by default."""
    from mlflow.tracking import MlflowClient

    from gpt1.training.numerics import machine_tags

    pipeline = pipeline_run_name()
    check_store()
    experiment_id = ensure_experiment(experiment)
    with translated():
        client = MlflowClient(tracking_uri())
    tags = {"gpt1.stage": stage, "gpt1.profile": profile, "mlflow.source.git.commit": git_commit(), **machine_tags()}
    if pipeline:
        tags[PIPELINE_TAG] = pipeline
    run = retry(lambda: client.create_run(experiment_id, tags=tags, run_name=name or stage))
    try:
        check_artifact_folder(run.info.artifact_uri)
        logger = StageRun(run.info.run_id, experiment_id)
        logger.log_params(params)
        yield logger
        retry(lambda: client.set_terminated(run.info.run_id, "FINISHED"))
    except BaseException as err:  # also where marking it FINISHED failed: its outputs stay unpublished
        _end_run(client, run.info.run_id, "KILLED" if interruption(err) else "FAILED")
        raise


def _end_run(client: Any, run_id: str, status: str) -> None:
    """Mark a run that did not finish; one try, silent: the stage's own error is the one to report."""
    with contextlib.suppress(Exception):
        client.set_terminated(run_id, status)


@contextlib.contextmanager
def published_run(stage: str, cfg: Config, params: Mapping[str, Any], name: str | None = None) -> Iterator[StageRun]:
    """A stage's run, and its outputs published only once the run is marked FINISHED: every `files.staged_outputs`
    block inside keeps its temporary files until the end (files.publication), so a store failing at the end leaves
    the outputs of the run before."""
    with publication(), stage_run(stage, cfg.profile, cfg.experiment, params, name) as run:
        yield run


def nest_pipeline_runs(parent_run_id: str, pipeline_run: str | None = None) -> list[str]:
    """Make every run of this pipeline invocation (tag gpt1.pipeline_run, default: $GPT1_PIPELINE_RUN) a child of
    `parent_run_id`, so that `mlflow ui` nests them under it; returns the children's run ids."""
    pipeline_run = pipeline_run if pipeline_run is not None else pipeline_run_name()
    if not pipeline_run:
        return []
    check_pipeline_run(pipeline_run)
    parent = StageRun(parent_run_id)
    experiment = retry(lambda: parent.client.get_run(parent_run_id)).info.experiment_id
    query = f"tags.`{PIPELINE_TAG}` = '{pipeline_run}'"
    children, token = [], None
    while True:
        page = retry(lambda token=token: parent.client.search_runs([experiment], filter_string=query,
                                                                    max_results=1000, page_token=token))
        children += [run.info.run_id for run in page if run.info.run_id != parent_run_id]
        token = page.token
        if not token:
            break
    for child in children:
        retry(lambda child=child: parent.client.set_tag(child, PARENT_TAG, parent_run_id))
    return children
