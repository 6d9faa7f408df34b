"""The MLflow store checked in seconds before a stage's work, and its failures as one line (gpt1.pipeline.mlflow_store).
The stages' cases of a broken store are in test_bad_inputs.py."""

import sqlite3
import threading
import time

import pytest

from gpt1.pipeline import mlflow_store
from gpt1.pipeline.errors import TrackingError
from gpt1.pipeline.mlflow_store import check_artifact_folder, check_store, shown, store_error


def test_a_briefly_locked_store_is_waited_for(tmp_path, monkeypatch):
    """sqlite retries while another writer holds the lock; the stage goes on once it is released."""
    store = tmp_path / "mlflow.db"
    with sqlite3.connect(store) as db:  # any sqlite database locks the same way
        db.execute("CREATE TABLE runs (id TEXT)")
    locked, released = threading.Event(), threading.Event()

    def hold() -> None:
        holder = sqlite3.connect(store, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        locked.set()
        time.sleep(0.5)
        released.set()  # before the lock goes: a check that returns having seen it unset did not wait
        holder.execute("ROLLBACK")
        holder.close()

    monkeypatch.setenv("GPT1_MLFLOW_LOCK_TIMEOUT", "20")
    thread = threading.Thread(target=hold)
    thread.start()
    assert locked.wait(10)
    check_store(f"sqlite:///{store}")
    assert released.is_set()  # it waited for the lock, however the threads were scheduled
    thread.join()


def test_a_password_in_the_tracking_uri_is_not_shown():
    assert shown("https://me:secret@mlflow.example:5000/x") == "https://me:***@mlflow.example:5000/x"
    assert shown("sqlite:///mlflow.db") == "sqlite:///mlflow.db"


@pytest.mark.parametrize(("said", "fix"), [
    ("API request to endpoint /api/2.0/mlflow/experiments/get-by-name failed with error code 401 != 200. Response "
     "body: 'You are not authenticated.'", "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"),
    ("API request to endpoint /api/2.0/mlflow/runs/create failed with error code 403 != 200. Response body: "
     "'Permission denied'", "ask the server's admin for EDIT on the experiment"),
])  # fmt: skip
def test_a_server_that_wants_credentials_is_named_with_the_fix(monkeypatch, said, fix):
    from mlflow.exceptions import MlflowException

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    error = store_error(MlflowException(said))
    assert str(error).startswith("MLflow store http://127.0.0.1:5000: API request") and fix in str(error)


@pytest.mark.parametrize(("uri", "probed"), [
    ("postgresql://me@db.example:5433/mlflow", ("db.example", 5433)),
    ("POSTGRESQL+psycopg2://me@db.example/mlflow", ("db.example", 5432)),
    ("mysql+pymysql://me@10.0.0.2/mlflow", ("10.0.0.2", 3306)),
    ("mssql+pymssql://me@sql.example/mlflow", ("sql.example", 1433)),
    ("mysql://me@localhost/mlflow", None),  # MySQL's clients take the socket for localhost
    ("mssql+pyodbc://me:pw@my_dsn", None),  # an ODBC data source's name, no host
    ("postgresql://me@/mlflow?host=/var/run/postgresql", None),  # a local socket
    ("sqlite:///mlflow.db", None),
])
def test_a_database_store_is_probed_at_its_tcp_address_only(monkeypatch, uri, probed):
    """What a dead server costs is seconds, not SQLAlchemy's minute of retries; an address that is no TCP host is
    the driver's to reach (probing it would refuse a store that works)."""
    reached = []
    monkeypatch.setattr(mlflow_store, "_reach", lambda host, port, what: reached.append((host, port)))
    monkeypatch.setattr(mlflow_store, "_check_sqlite", lambda path: None)
    check_store(uri)
    assert reached == ([probed] if probed else [])


def test_a_long_store_message_is_cut_at_a_sentence_and_its_fix_read_from_all_of_it(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    long = "The store said something long. " * 12 + "The server answered 401."
    said = str(store_error(RuntimeError(long)))
    assert said.startswith("MLflow store http://127.0.0.1:5000: The store said something long.")
    assert " ...; the server wants a user" in said and len(said) < 520
    one_sentence = "A. " + "x" * 400
    assert f"{one_sentence[:300]} ...;" in str(store_error(RuntimeError(one_sentence)))  # no 'A ...' left alone
    run_deleted = "The run 12ab must be in the 'active' state. Current state is deleted."
    assert "experiment was deleted" not in str(store_error(RuntimeError(run_deleted)))


def test_the_artifact_folder_is_the_one_mlflow_writes(tmp_path):
    check_artifact_folder(f"file://{tmp_path}/a%20b/artifacts")  # MLflow decodes %20: the folder it will write
    assert (tmp_path / "a b" / "artifacts").is_dir() and not list((tmp_path / "a b" / "artifacts").iterdir())
    check_artifact_folder(f"{tmp_path}/h#1/artifacts")  # a plain path is whole, # and all
    assert (tmp_path / "h#1" / "artifacts").is_dir()
    for remote in ("mlflow-artifacts:/1/abc/artifacts", "s3://bucket/1/abc/artifacts", "file://otherhost/x"):
        check_artifact_folder(remote)  # the server's to check: nothing made here
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a b", "h#1"]


def test_a_sqlite_store_in_a_missing_folder_is_refused_not_made(tmp_path):
    """A mistyped path would have MLflow make its folders wherever it points (once, /nonexistent/dir)."""
    missing = tmp_path / "no" / "such"
    with pytest.raises(TrackingError, match=rf"^{missing}: no such folder for the MLflow store m\.db; create it, or "
                                            r"fix MLFLOW_TRACKING_URI$"):
        check_store(f"sqlite:///{missing}/m.db")
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("exists", [False, True])
def test_a_sqlite_store_whose_folder_takes_no_files_names_the_folder(tmp_path, monkeypatch, exists):
    """sqlite's journal and gpt1's creation lock go beside the database: a read-only folder is named as such (it was
    a lock file's 'Read-only file system; choose another --out')."""
    import errno
    import tempfile

    if exists:
        check_store(f"sqlite:///{tmp_path}/m.db")  # nothing made yet; an empty file is an empty database
        (tmp_path / "m.db").write_bytes(b"")

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
    with pytest.raises(TrackingError, match=rf"^{tmp_path}: the MLflow store's folder cannot be written \(Read-only "
                                            r"file system\); make it writable, or set MLFLOW_TRACKING_URI"):
        check_store(f"sqlite:///{tmp_path}/m.db")


def test_a_sqlite_store_on_a_read_only_file_system_is_named_read_only(tmp_path, monkeypatch):
    """EROFS is no PermissionError: it was a bare OSError, and the boundary's generic line."""
    import errno

    (tmp_path / "m.db").write_bytes(b"")

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(mlflow_store, "open", read_only, raising=False)  # the module's open, not the builtin
    with pytest.raises(TrackingError, match=rf"^{tmp_path}/m\.db: the MLflow store is read-only \(Read-only file "
                                            r"system\); fix its permissions or set MLFLOW_TRACKING_URI"):
        check_store(f"sqlite:///{tmp_path}/m.db")
