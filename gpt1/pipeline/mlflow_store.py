"""The MLflow store: where it is, checked in seconds before a stage's work, and its failures as one TrackingError.

A stage's outputs and metrics are logged at its end, too late to stop: so before its work `check_store` fails in
seconds, naming the store, where the stage could not log (a server that does not answer, a database nothing listens
for, a sqlite file that is not a database, truncated, read-only, or locked for longer than GPT1_MLFLOW_LOCK_TIMEOUT),
and once its run is open `check_artifact_folder` fails where its artifacts could not be written. Whatever the store
raises later becomes one `store_error` line: what it said and what to do (`translated`). sqlite allows one writer at
a time, and Snakemake runs jobs in parallel: writes `retry` while the database is locked, and the store and
experiments are created under `creation_lock`. gpt1.pipeline.tracking opens the runs.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import random
import re
import socket
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from gpt1.pipeline.errors import Gpt1Error, TrackingError
from gpt1.pipeline.files import unwritable

DEFAULT_URI = "sqlite:///mlflow.db"
DATABASE_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}  # SQLAlchemy's dialects MLflow stores in
LOCK_TIMEOUT_ENV = "GPT1_MLFLOW_LOCK_TIMEOUT"  # seconds to wait for a locked sqlite store before giving up
LOCK_TIMEOUT_SECONDS = 60.0
PROBE_SECONDS = 5.0  # a tracking server that does not accept a connection in this time is down
# MLflow retries a failing HTTP request 7 times with exponential back-off (minutes); a stage fails sooner.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}
SQLITE_MAGIC = b"SQLite format 3\x00"
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


def _check_sqlite_folder(path: Path) -> None:
    """sqlite writes its journal beside the database, and gpt1 its creation lock: the folder must exist (a mistyped
    path is refused, not made) and take files."""
    folder = path.parent
    if not folder.is_dir():
        raise TrackingError(f"{folder}: no such folder for the MLflow store {path.name}; create it, or fix "
                            f"MLFLOW_TRACKING_URI")
    if (err := unwritable(folder)) is not None:
        raise TrackingError(f"{folder}: the MLflow store's folder cannot be written ({err.strerror or err}); make it "
                            f"writable, or set MLFLOW_TRACKING_URI to a store in a writable folder") from err


def _check_sqlite(path: Path) -> None:
    if not path.exists():
        _check_sqlite_folder(path)
        return  # MLflow creates it
    if not path.is_file():
        raise TrackingError(f"{path}: the MLflow store is not a file; set MLFLOW_TRACKING_URI to a sqlite file")
    try:
        with open(path, "r+b") as handle:  # r+: a store MLflow could not write fails here, by name
            magic = handle.read(len(SQLITE_MAGIC))
    except OSError as err:
        if not isinstance(err, PermissionError) and err.errno != errno.EROFS:
            raise
        raise TrackingError(f"{path}: the MLflow store is read-only ({err.strerror}); fix its permissions or set "
                            f"MLFLOW_TRACKING_URI to a writable store") from err
    _check_sqlite_folder(path)
    if not magic:
        return  # an empty file is an empty database
    try:
        problem = "not an SQLite database" if magic != SQLITE_MAGIC else _locked_problem(path)
    except sqlite3.DatabaseError as err:  # a short file is the likeliest cause of "malformed": say so
        problem = _size_problem(path) or f"corrupt ({err})"
    if problem:
        raise TrackingError(f"{path}: the MLflow store is {problem}; move it away (mv {path} {path}.bad) to start "
                            f"a new store, or set MLFLOW_TRACKING_URI to the right one")


def check_store(uri: str | None = None) -> None:
    """Fail in seconds, naming the store, when a stage could not log into it."""
    uri = uri or tracking_uri()
    if uri.startswith(("http://", "https://")):
        _probe_server(uri)
    elif dialect := _database_dialect(uri):
        _probe_database(uri, dialect)
    elif (path := _sqlite_file(uri)) is not None:
        _check_sqlite(path)


def artifact_location(uri: str, experiment: str) -> str | None:
    """Where a new experiment of store `uri` keeps its artifacts: beside a sqlite store. MLflow's default is ./mlruns
    of the working folder, so a store elsewhere (a shared file, a test's) would leave its runs' files in whatever
    folder each job ran in; there the experiment gets <store's folder>/mlruns/<experiment>. None (MLflow's default,
    ./mlruns/<id>) for a store in the working folder, the default one, and for a database or server."""
    path = _sqlite_file(uri)
    if path is None or path.resolve().parent == Path.cwd().resolve():
        return None
    return (path.resolve().parent / "mlruns" / re.sub(r"[^\w.-]", "_", experiment)).as_uri()


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
        problem = unwritable(folder)
    except OSError as err:
        problem = err
    if problem is not None:
        raise TrackingError(f"MLflow artifact folder {folder}: {problem.strerror or problem}; make it a writable "
                            "folder (the experiment's artifact location), or set MLFLOW_TRACKING_URI to another "
                            "store") from problem


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
def translated() -> Iterator[None]:
    try:
        yield
    except Exception as err:
        if isinstance(err, Gpt1Error) or not isinstance(err, _store_errors()):
            raise
        raise store_error(err) from err


@contextlib.contextmanager
def creation_lock(uri: str) -> Iterator[None]:
    """Held while creating the store or an experiment: a file beside a sqlite store; for a server or another store,
    one in the temp folder (the jobs of one machine are the ones that race)."""
    sqlite = _sqlite_file(uri)
    path = Path(f"{sqlite}.lock") if sqlite else Path(os.environ.get("TMPDIR", "/tmp"), "gpt1-mlflow.lock")
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# Two runs logging the same new dataset at once: both look it up, both insert it, one breaks the unique key (sqlite
# and PostgreSQL say it differently); tried again, the lookup finds it.
DUPLICATE_ERRORS = ("unique constraint", "duplicate key")


def retry(call: Callable[[], T], attempts: int = 12, transient: tuple[str, ...] = ("locked",)) -> T:
    """sqlite allows one writer at a time; back off and retry on 'database is locked' (and what else `transient`
    names). Then name the store."""
    with translated():
        for attempt in range(attempts):
            try:
                return call()
            except Exception as err:  # MlflowException or sqlalchemy OperationalError, depending on the layer
                message = str(err).lower()
                if not any(word in message for word in transient) or attempt == attempts - 1:
                    raise
                time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")
