"""MLflow: the one place that opens runs, and that creates the store and the experiment once.

Several stages may start at the same moment (Snakemake runs jobs in parallel). Creating a sqlite store or an
experiment concurrently crashes on schema migration or silently logs into "Default", so creation happens under
a file lock and every run names its experiment by id. Writes retry while sqlite reports a locked database.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import random
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

DEFAULT_URI = "sqlite:///mlflow.db"
PIPELINE_RUN_ENV = "GPT1_PIPELINE_RUN"  # a tag grouping the runs of one pipeline invocation
METRICS_PER_BATCH = 1000  # MLflow's cap on metrics per log_batch call
T = TypeVar("T")


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI


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


def _retry(call: Callable[[], T], attempts: int = 12) -> T:
    """sqlite allows one writer at a time; back off and retry on 'database is locked'."""
    for attempt in range(attempts):
        try:
            return call()
        except Exception as err:  # MlflowException or sqlalchemy OperationalError, depending on the layer
            if "locked" not in str(err).lower() or attempt == attempts - 1:
                raise
            time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def ensure_experiment(name: str) -> str:
    """Create (once, under a lock) the store and the experiment; return the experiment id."""
    import mlflow
    from mlflow.tracking import MlflowClient

    logging.getLogger("alembic").setLevel(logging.WARNING)
    uri = tracking_uri()
    with _exclusive(_lock_path(uri)):
        mlflow.set_tracking_uri(uri)
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name(name)
        if experiment is not None:
            return experiment.experiment_id
        return client.create_experiment(name)


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

    def __init__(self, run_id: str) -> None:
        from mlflow.tracking import MlflowClient

        self.run_id = run_id
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


@contextlib.contextmanager
def stage_run(stage: str, profile: str, experiment: str, params: Mapping[str, Any]) -> Iterator[StageRun]:
    """An MLflow run for one stage execution, tagged with stage, profile, commit and pipeline run."""
    from mlflow.tracking import MlflowClient

    experiment_id = ensure_experiment(experiment)
    client = MlflowClient(tracking_uri())
    tags = {"gpt1.stage": stage, "gpt1.profile": profile, "mlflow.source.git.commit": git_commit()}
    if os.environ.get(PIPELINE_RUN_ENV):
        tags["gpt1.pipeline_run"] = os.environ[PIPELINE_RUN_ENV]
    run = _retry(lambda: client.create_run(experiment_id, tags=tags, run_name=f"{stage}-{profile}"))
    logger = StageRun(run.info.run_id)
    logger.log_params(params)
    try:
        yield logger
    except BaseException:
        _retry(lambda: client.set_terminated(run.info.run_id, "FAILED"))
        raise
    _retry(lambda: client.set_terminated(run.info.run_id, "FINISHED"))
