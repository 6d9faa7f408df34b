"""The suite on several cores (`pytest -n auto`, the README's test command): a worker per core, each running test
files whole, the longest files and those with pipelines handed out first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import conftest
import pytest

TESTS = Path(__file__).resolve().parent
PYPROJECT = TESTS.parent / "pyproject.toml"
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


@pytest.mark.parametrize(("cores", "workers"), [(1, 1), (2, 2), (3, 3), (16, 4)])
def test_auto_starts_a_worker_per_core_and_at_most_four(monkeypatch, cores: int, workers: int) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert conftest.pytest_xdist_auto_num_workers(None) == workers


def test_two_workers_run_each_file_whole_the_longest_and_slow_ones_first(tmp_path: Path) -> None:
    longest = conftest.LONGEST_FIRST[0]
    files = {"test_a.py": "", "test_b.py": "", longest: "", "test_z.py": "pytestmark = pytest.mark.slow"}
    for name, mark in files.items():
        (tmp_path / name).write_text(PROBE.format(mark=mark))
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PROBE_OUT": str(out), "PYTHONPATH": str(TESTS)}
    # The repository's pytest options (`--dist loadfile`) and its conftest as a plugin, so these files are
    # scheduled as the suite's are
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-c", str(PYPROJECT), "--rootdir",
                           str(tmp_path), "-p", "conftest", "-p", "no:cacheprovider", "-W",
                           "ignore::pytest.PytestUnknownMarkWarning", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    records = [json.loads(p.read_text()) for p in out.glob("*.json")]
    assert len(records) == 3 * len(files)
    workers = {name: {r["worker"] for r in records if r["file"] == name} for name in files}
    assert all(len(w) == 1 for w in workers.values()), workers
    first = {name: min(r["start"] for r in records if r["file"] == name) for name in files}
    # The longest file and the slow one are the first two units handed out, one to each worker: each worker starts
    # with one of them (compared within a worker, so that one worker starting late does not matter)
    assert workers["test_z.py"] != workers[longest]
    for worker in set().union(*workers.values()):
        ran = {name: start for name, start in first.items() if worker in workers[name]}
        assert min(ran, key=ran.__getitem__) in ("test_z.py", longest), ran
