"""The suite on several cores (`pytest -n auto`, the README's test command): a worker runs a test file whole, the two
files of the MLflow server's smoke run together, and the files with pipelines start first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import SERVER_RUN, worker_unit

TESTS = Path(__file__).resolve().parent
# Each test writes down which worker ran it and when it started
PROBE = """
import json, os, time
from pathlib import Path

import pytest

{mark}

@pytest.mark.parametrize("n", range(3))
def test_it(n):
    record = {{"file": Path(__file__).name, "worker": os.environ["PYTEST_XDIST_WORKER"], "start": time.monotonic()}}
    Path(os.environ["PROBE_OUT"], f"{{Path(__file__).stem}}-{{n}}.json").write_text(json.dumps(record))
    time.sleep(0.3)
"""


def test_a_worker_unit_is_a_file_or_the_server_runs_two_files() -> None:
    assert worker_unit("tests/test_workflow.py::test_lint_is_clean") == SERVER_RUN
    assert worker_unit("tests/test_mlflow_server.py::test_down_stops_both_servers") == SERVER_RUN
    assert worker_unit("tests/test_dag.py::test_x[smoke]") == "tests/test_dag.py"


def test_two_workers_run_each_file_whole_and_the_server_runs_files_together(tmp_path: Path) -> None:
    files = {"test_a.py": "", "test_b.py": "", "test_mlflow_server.py": "", "test_workflow.py": "",
             "test_z.py": "pytestmark = pytest.mark.slow"}
    for name, mark in files.items():
        (tmp_path / name).write_text(PROBE.format(mark=mark))
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PROBE_OUT": str(out), "PYTHONPATH": str(TESTS)}
    # The repository's conftest as a plugin, so these files are scheduled as the suite's are
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "conftest", "-p", "no:cacheprovider",
                           "-W", "ignore::pytest.PytestUnknownMarkWarning", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    records = [json.loads(p.read_text()) for p in out.glob("*.json")]
    assert len(records) == 3 * len(files)
    workers = {name: {r["worker"] for r in records if r["file"] == name} for name in files}
    assert all(len(w) == 1 for w in workers.values()), workers
    assert workers["test_mlflow_server.py"] == workers["test_workflow.py"]
    first = {name: min(r["start"] for r in records if r["file"] == name) for name in files}
    # The server run's files and the slow file are the first two units handed out, one to each worker
    assert workers["test_z.py"] != workers["test_workflow.py"]
    assert max(first["test_z.py"], first["test_mlflow_server.py"]) < min(first["test_a.py"], first["test_b.py"])
