"""MLflow: the one place that opens runs, and that creates the store and the experiment once.

Several stages may start at the same moment (Snakemake runs jobs in parallel). Creating a sqlite store or an
experiment concurrently crashes on schema migration or silently logs into "Default", so creation happens under
a file lock and every run names its experiment by id. Writes retry while sqlite reports a locked database.

Before a stage opens its run, the store is checked in seconds (a server that does not answer, a sqlite file that
is not a database, truncated, or locked for longer than GPT1_MLFLOW_LOCK_TIMEOUT); every failure of the store is
one TrackingError naming it. A run ends FINISHED, FAILED, or KILLED (SIGTERM, Ctrl-C), never left RUNNING.

What users see: runs named by what they are ("finetune sst2 pretrained seed0"), datasets as run inputs with their
source and sha256, and models logged as MLflow Python models (gpt1.pipeline.mlflow_models) linked to their run,
registered where the store has a registry. The experiment carries what `mlflow ui` reads from it (experiment_tags): a
description that says what to click, and two saved views of the runs page, listed under Views ("gpt1 pipelines": the
runs grouped by pipeline; "gpt1 reports": a row per pipeline; both with the report's curated metrics as columns), which
`ui_url` opens. docs/mlflow_ui.md shows the screens (tools/mlflow_screens.py takes them).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import random
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from gpt1.pipeline.errors import Gpt1Error, TrackingError, interruption
from gpt1.pipeline.files import staged_path

DEFAULT_URI = "sqlite:///mlflow.db"
DATABASE_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}  # SQLAlchemy's dialects MLflow stores in
PIPELINE_RUN_ENV = "GPT1_PIPELINE_RUN"  # a tag grouping the runs of one pipeline invocation
METRICS_PER_BATCH = 1000  # MLflow's cap on metrics per log_batch call
LOCK_TIMEOUT_ENV = "GPT1_MLFLOW_LOCK_TIMEOUT"  # seconds to wait for a locked sqlite store before giving up
LOCK_TIMEOUT_SECONDS = 60.0
PROBE_SECONDS = 5.0  # a tracking server that does not accept a connection in this time is down
# MLflow retries a failing HTTP request 7 times with exponential back-off (minutes); a stage fails sooner.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}
SQLITE_MAGIC = b"SQLite format 3\x00"
PIPELINE_TAG = "gpt1.pipeline_run"  # the run tag set from PIPELINE_RUN_ENV
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
                "zs_lstm", "gaps")
UI_BASE = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default
DIGEST_CHARS = 32  # MLflow stores a dataset digest in 36 characters (PostgreSQL enforces it); the full hash is a tag
# Stores with a model registry: a database, a server, Databricks (a file store under ./mlruns has none).
REGISTRY_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks")
# What a logged model needs to run (pinned to what logged it); given, not inferred: inference loads the model in a
# subprocess, seconds for every fine-tuning job.
MODEL_REQUIREMENTS = ("mlflow", "torch", "transformers", "safetensors", "tokenizers", "numpy", "pandas", "pyyaml",
                      "jsonschema", "ftfy", "spacy")
T = TypeVar("T")


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI


def _sqlite_file(uri: str) -> Path | None:
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def shown(uri: str) -> str:
    """The URI for a message: a password in it is not printed."""
    parts = urllib.parse.urlsplit(uri)
    if not parts.password:
        return uri
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _probe_server(uri: str) -> None:
    """Fail in seconds, not after MLflow's minutes of retries, when nothing listens at the server's address."""
    for key, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    parts = urllib.parse.urlsplit(uri)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if not parts.hostname:
            raise ValueError("no host")
    except ValueError as err:
        raise TrackingError(f"MLFLOW_TRACKING_URI={shown(uri)}: not a server address ({err}); e.g. "
                            f"http://127.0.0.1:5000") from err
    _reach(parts.hostname, port, f"MLflow server {shown(uri)}")


def _reach(host: str, port: int, what: str) -> None:
    try:
        socket.create_connection((host, port), timeout=PROBE_SECONDS).close()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise TrackingError(f"{what} is unreachable ({reason}); start it, or set MLFLOW_TRACKING_URI to a running "
                            f"one or to {DEFAULT_URI}") from err


def _database_dialect(uri: str) -> str | None:
    """postgresql, mysql or mssql for a database store's URI (postgresql+psycopg2://... too), else None."""
    dialect = urllib.parse.urlsplit(uri).scheme.lower().partition("+")[0]
    return dialect if dialect in DATABASE_PORTS else None


def _probe_database(uri: str, dialect: str) -> None:
    """A database store (postgresql://, mysql://, mssql://): fail in seconds, not after SQLAlchemy's minute of
    retries, when nothing listens at its address. Left to the driver where the address is no TCP host: a local
    socket (no host, or ?host= / ?unix_socket=), MySQL's localhost (its clients take the socket), an ODBC DSN."""
    parts = urllib.parse.urlsplit(uri)
    try:
        port = parts.port
    except ValueError as err:
        raise TrackingError(f"MLFLOW_TRACKING_URI={shown(uri)}: not a database address ({err}); e.g. "
                            f"postgresql://user:password@127.0.0.1:5432/mlflow") from err
    query = urllib.parse.parse_qs(parts.query)
    socket_only = (not parts.hostname or "host" in query or "unix_socket" in query or "odbc_connect" in query
                   or (dialect == "mysql" and parts.hostname == "localhost" and port is None)
                   or ("pyodbc" in parts.scheme.lower() and port is None))
    if not socket_only:
        _reach(parts.hostname, port or DATABASE_PORTS[dialect], f"MLflow database {shown(uri)}")


def _size_problem(path: Path) -> str | None:
    """A sqlite file shorter than its header says (read under sqlite's shared lock: mid-commit, a bare read of the
    header could run ahead of the file's size)."""
    with open(path, "rb") as handle:
        header = handle.read(100)
    if len(header) < 100:
        return f"truncated ({len(header)} bytes, shorter than an SQLite header)"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages, counter, valid_for = (int.from_bytes(header[i : i + 4], "big") for i in (28, 24, 92))
    size = path.stat().st_size
    if counter == valid_for and size < pages * page_size:  # the page count is only valid when these agree
        return f"truncated ({size} of {pages * page_size} bytes)"
    return None


def lock_timeout() -> float:
    try:
        return float(os.environ.get(LOCK_TIMEOUT_ENV) or LOCK_TIMEOUT_SECONDS)
    except ValueError as err:
        raise TrackingError(f"{LOCK_TIMEOUT_ENV}={os.environ[LOCK_TIMEOUT_ENV]!r}: not a number of seconds") from err


def _locked_problem(path: Path) -> str | None:
    """Read the schema and check the size under a shared lock, then take and release the write lock, waiting up to
    lock_timeout() for each (sqlite retries while it waits). Returns what is wrong with the file, or None."""
    wait = lock_timeout()
    connection = sqlite3.connect(path, timeout=wait, isolation_level=None)
    try:
        connection.execute("BEGIN")
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()  # takes the shared lock
        problem = _size_problem(path)
        connection.execute("ROLLBACK")
        if problem is None:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("ROLLBACK")
        return problem
    except sqlite3.OperationalError as err:
        if "locked" not in str(err):
            raise
        raise TrackingError(f"{path}: the MLflow store is locked by another process (waited {wait:g} s); let it "
                            f"finish or stop it, then rerun ({LOCK_TIMEOUT_ENV} sets the wait)") from err
    finally:
        connection.close()


def _check_sqlite(path: Path) -> None:
    if not path.exists():
        return  # MLflow creates it
    if not path.is_file():
        raise TrackingError(f"{path}: the MLflow store is not a file; set MLFLOW_TRACKING_URI to a sqlite file")
    try:
        with open(path, "r+b") as handle:  # r+: a store MLflow could not write fails here, by name
            magic = handle.read(len(SQLITE_MAGIC))
    except PermissionError as err:
        raise TrackingError(f"{path}: the MLflow store is read-only ({err.strerror}); fix its permissions or set "
                            f"MLFLOW_TRACKING_URI to a writable store") from err
    if not magic:
        return  # an empty file is an empty database
    try:
        problem = "not an SQLite database" if magic != SQLITE_MAGIC else _locked_problem(path)
    except sqlite3.DatabaseError as err:  # a short file is the likeliest cause of "malformed": say so
        problem = _size_problem(path) or f"corrupt ({err})"
    if problem:
        raise TrackingError(f"{path}: the MLflow store is {problem}; move it away (mv {path} {path}.bad) to start "
                            f"a new store, or set MLFLOW_TRACKING_URI to the right one")


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


def check_store(uri: str | None = None) -> None:
    """Fail in seconds, naming the store (or the pipeline's name its runs are tagged with), when a stage could not
    log into it."""
    pipeline_run_name()
    uri = uri or tracking_uri()
    if uri.startswith(("http://", "https://")):
        _probe_server(uri)
    elif dialect := _database_dialect(uri):
        _probe_database(uri, dialect)
    elif (path := _sqlite_file(uri)) is not None:
        _check_sqlite(path)


def check_artifact_folder(artifact_uri: str) -> None:
    """Fail before the stage's work, naming the folder, when a run's artifacts could not be written there (a local
    store's experiment keeps the folder it was made with, ./mlruns/<id> by default): a stage logs its artifacts after
    its outputs are in place, too late to stop. A remote artifact store is the server's to check."""
    from mlflow.utils.file_utils import get_local_path_or_none

    local = get_local_path_or_none(artifact_uri)  # the path as MLflow will write it; None where it is not local
    if local is None:
        return
    folder = Path(local)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise TrackingError(f"MLflow artifact folder {folder}: {err.strerror or err}; make it a writable folder (the "
                            "experiment's artifact location), or set MLFLOW_TRACKING_URI to another store") from err


def _store_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a broken store raises through MLflow (imported late: mlflow is slow to import)."""
    import requests
    import sqlalchemy.exc
    from mlflow.exceptions import MlflowException

    return MlflowException, sqlalchemy.exc.SQLAlchemyError, requests.RequestException, sqlite3.Error


def _store_fix(message: str) -> str:
    lowered = message.lower()
    if "401" in lowered or "not authenticated" in lowered or "unauthorized" in lowered:
        return ("the server wants a user: set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (the server's "
                "admin makes users; tools/mlflow_server.py --auth writes them to STATE/credentials.env)")
    if "403" in lowered or "permission" in lowered:
        return "this user may not do that: ask the server's admin for EDIT on the experiment (params.yaml mlflow)"
    if "locked" in lowered:
        return "another process holds the store; let it finish or stop it, then rerun"
    if "filesystem tracking backend" in lowered:
        return ("MLflow 3 keeps runs in a database: set MLFLOW_TRACKING_URI=sqlite:///mlflow.db (`mlflow "
                "migrate-filestore` moves the old runs there), or MLFLOW_ALLOW_FILE_STORE=true to keep the file store")
    if "experiment" in lowered and ("'active' state" in lowered or "deleted" in lowered):
        return ("the experiment was deleted: restore it (mlflow experiments restore --experiment-id <id>), or name "
                "another in params.yaml (mlflow.experiment)")
    if "malformed" in lowered or "not a database" in lowered:
        return "the store is corrupt; move it away to start a new one"
    if "connection" in lowered or "max retries" in lowered or "timed out" in lowered:
        return "the tracking server does not answer; start it or set MLFLOW_TRACKING_URI"
    return "check MLFLOW_TRACKING_URI and the store"


def store_error(err: BaseException) -> TrackingError:
    """One line for an error of the MLflow store: what it said (first line) and what to do."""
    uri = tracking_uri()
    where = _sqlite_file(uri) or shown(uri)
    first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
    said = first_line
    if len(said) > 300:  # whole sentences where that keeps most of it
        sentences = said[:300].rsplit(". ", 1)[0]
        said = (sentences if len(sentences) >= 150 else said[:300]) + " ..."
    return TrackingError(f"MLflow store {where}: {said}; {_store_fix(first_line)}")


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except Exception as err:
        if isinstance(err, Gpt1Error) or not isinstance(err, _store_errors()):
            raise
        raise store_error(err) from err


def _lock_path(uri: str) -> Path:
    """A lock beside a sqlite file; a shared lock in the temp dir for servers and other stores."""
    if uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///") + ".lock")
    return Path(os.environ.get("TMPDIR", "/tmp"), "gpt1-mlflow.lock")


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# Two runs logging the same new dataset at once: both look it up, both insert it, one breaks the unique key (sqlite
# and PostgreSQL say it differently); tried again, the lookup finds it.
DUPLICATE_ERRORS = ("unique constraint", "duplicate key")


def _retry(call: Callable[[], T], attempts: int = 12, transient: tuple[str, ...] = ("locked",)) -> T:
    """sqlite allows one writer at a time; back off and retry on 'database is locked' (and what else `transient`
    names). Then name the store."""
    with _translated():
        for attempt in range(attempts):
            try:
                return call()
            except Exception as err:  # MlflowException or sqlalchemy OperationalError, depending on the layer
                message = str(err).lower()
                if not any(word in message for word in transient) or attempt == attempts - 1:
                    raise
                time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def ensure_experiment(name: str) -> str:
    """Create (once, under a lock) the store and the experiment; return the experiment id."""
    import mlflow
    from mlflow.tracking import MlflowClient

    logging.getLogger("alembic").setLevel(logging.WARNING)
    uri = tracking_uri()
    with _exclusive(_lock_path(uri)), _translated():
        mlflow.set_tracking_uri(uri)
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            return client.create_experiment(name, tags=experiment_tags({}))
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


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}: MLflow params are flat."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


class StageRun:
    """What a stage logs into its MLflow run; every write retries on a locked sqlite database."""

    def __init__(self, run_id: str, experiment_id: str | None = None) -> None:
        from mlflow.tracking import MlflowClient

        self.run_id = run_id
        self.experiment_id = experiment_id
        self.client = MlflowClient(tracking_uri())

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, step or 0) for k, v in metrics.items()]
        _retry(lambda: self.client.log_batch(self.run_id, metrics=batch))

    def log_steps(self, rows: Iterable[tuple[Mapping[str, float], int]]) -> None:
        """Many steps' metrics, (metrics, step) each, in as few writes as MLflow allows (a write per step costs
        more than a small training update)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, step) for metrics, step in rows for k, v in metrics.items()]
        for start in range(0, len(batch), METRICS_PER_BATCH):
            _retry(lambda chunk=batch[start : start + METRICS_PER_BATCH]: self.client.log_batch(self.run_id,
                                                                                                 metrics=chunk))

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        batch = [Param(k, str(v)[:6000]) for k, v in flatten(params).items()]
        for start in range(0, len(batch), 100):  # MLflow caps a batch at 100 params
            _retry(lambda chunk=batch[start : start + 100]: self.client.log_batch(self.run_id, params=chunk))

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        batch = [RunTag(k, str(v)) for k, v in tags.items()]
        _retry(lambda: self.client.log_batch(self.run_id, tags=batch))

    def log_artifact(self, path: str | Path, folder: str | None = None) -> None:
        _retry(lambda: self.client.log_artifact(self.run_id, str(path), folder))

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
        _retry(lambda: self.client.log_inputs(self.run_id, datasets=[DatasetInput(dataset, tags)]),
               transient=("locked", *DUPLICATE_ERRORS))

    def log_model(self, name: str, python_model: Any, artifacts: Mapping[str, str], signature: Any,
                  step: int = 0) -> str:
        """Log an MLflow Python model (its artifacts copied, this package as its code) linked to this run and its
        metrics at `step`; returns the model's URI (models:/<model id>)."""
        import mlflow
        from mlflow.models import Model

        package = Path(__file__).resolve().parents[1]
        mlflow.set_tracking_uri(tracking_uri())
        experiment_id = self.client.get_run(self.run_id).info.experiment_id
        with _quiet_mlflow():
            _retry(lambda: mlflow.set_experiment(experiment_id=experiment_id))  # the logged model's: the run's
            # Retried whole on a locked sqlite store (MLflow's own writes inside are not): an attempt that failed
            # half-way may leave an empty logged model beside the one that counts.
            info = _retry(lambda: Model.log(None, name=name, flavor=mlflow.pyfunc, run_id=self.run_id,
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
            version = _retry(lambda: mlflow.register_model(model_uri, name, tags={k: str(v) for k, v in tags.items()}))
        return str(version.version)


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
    import warnings

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

    check_store()
    experiment_id = ensure_experiment(experiment)
    with _translated():
        client = MlflowClient(tracking_uri())
    tags = {"gpt1.stage": stage, "gpt1.profile": profile, "mlflow.source.git.commit": git_commit(), **machine_tags()}
    if pipeline := pipeline_run_name():
        tags[PIPELINE_TAG] = pipeline
    run = _retry(lambda: client.create_run(experiment_id, tags=tags, run_name=name or stage))
    try:
        check_artifact_folder(run.info.artifact_uri)
        logger = StageRun(run.info.run_id, experiment_id)
        logger.log_params(params)
        yield logger
        _retry(lambda: client.set_terminated(run.info.run_id, "FINISHED"))
    except BaseException as err:  # also where marking it FINISHED failed: its outputs stay unpublished
        _end_run(client, run.info.run_id, "KILLED" if interruption(err) else "FAILED")
        raise


def _end_run(client: Any, run_id: str, status: str) -> None:
    """Mark a run that did not finish; one try, silent: the stage's own error is the one to report."""
    with contextlib.suppress(Exception):
        client.set_terminated(run_id, status)
