"""A team's MLflow server that lets no one in without credentials: `tools/mlflow_server.py up STATE --auth` (MLflow's
basic-auth app on PostgreSQL, 127.0.0.1 only). An unauthenticated client is refused; a stage logs with the user's
credentials from the environment (MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD); a stage without them fails in
one line that says what to set; and no password appears in what `up` prints, in a stage's output, in the server's
log or in any tag or parameter of the runs. Skipped where PostgreSQL cannot start."""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, gpt1_command
from pipeline_repo import mlflow_server_command

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE of the `export KEY=VALUE` lines `up --auth` writes."""
    return dict(line.removeprefix("export ").split("=", 1) for line in path.read_text().splitlines() if line)


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    pytest.importorskip("psycopg2", reason="psycopg2 is not installed (pip install -e '.[test]')")
    pytest.importorskip("flask_wtf", reason="Flask-WTF is not installed (pip install -e '.[test]')")
    state = tmp_path_factory.mktemp("mlflow-auth")
    started = mlflow_server_command("up", state, "--auth")
    if started.returncode != 0:
        pytest.skip(f"PostgreSQL and mlflow server cannot start here: {started.stderr.strip()[-500:]}")
    try:  # from here the servers run: a failed read below stops them too
        recorded = json.loads((state / "server.json").read_text())
        yield {**recorded, "state": state, "stdout": started.stdout, "stderr": started.stderr,
               "user": read_env_file(state / "credentials.env"), "admin": read_env_file(state / "admin.env")}
    finally:
        if (state / "server.json").exists():
            mlflow_server_command("down", state)


def passwords(server: dict) -> list[str]:
    return [server["user"]["MLFLOW_TRACKING_PASSWORD"], server["admin"]["MLFLOW_TRACKING_PASSWORD"]]


def test_up_prints_how_to_log_in_but_no_password(auth_server: dict) -> None:
    state = auth_server["state"]
    assert auth_server["stdout"].splitlines() == [f"export MLFLOW_TRACKING_URI={auth_server['uri']}",
                                                  f". {state / 'credentials.env'}"]
    assert auth_server["user"]["MLFLOW_TRACKING_USERNAME"] == "gpt1"
    for name in ("credentials.env", "admin.env", "basic_auth.ini", "server.json"):
        assert (state / name).stat().st_mode & 0o077 == 0, f"{name} is readable by others"
    shown = auth_server["stdout"] + auth_server["stderr"] + (state / "mlflow-server.log").read_text()
    assert not [p for p in passwords(auth_server) if p in shown]


def _search(uri: str, credentials: tuple[str, str] | None) -> int:
    request = urllib.request.Request(f"{uri}/api/2.0/mlflow/experiments/search?max_results=10")
    if credentials:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(credentials).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code


def test_an_unauthenticated_client_is_refused(auth_server: dict) -> None:
    user = auth_server["user"]
    assert _search(auth_server["uri"], None) == 401
    assert _search(auth_server["uri"], (user["MLFLOW_TRACKING_USERNAME"], "not-the-password")) == 401
    assert _search(auth_server["uri"], (user["MLFLOW_TRACKING_USERNAME"], user["MLFLOW_TRACKING_PASSWORD"])) == 200


def _stage(tiny_data, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The smoke profile's pre-training on the tiny ids: it logs params, metrics, artifacts and a registered model."""
    args = gpt1_command("pretrain", "--params", str(REPO / "params.yaml"), "--profile", "smoke", "--ids",
                        str(tiny_data.ids), "--tokenizer", str(tiny_data.tokenizer), "--out", str(tmp_path / "out"))
    return subprocess.run(args, env=env, capture_output=True, text=True, cwd=tmp_path, timeout=600)


def test_a_stage_without_credentials_fails_in_one_line(auth_server: dict, tiny_data, subprocess_env,
                                                       tmp_path: Path) -> None:
    done = _stage(tiny_data, tmp_path, {**subprocess_env, "MLFLOW_TRACKING_URI": auth_server["uri"]})
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert auth_server["uri"] in lines[0] and "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" in lines[0]
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_a_stage_logs_with_credentials_and_leaks_none(auth_server: dict, tiny_data, subprocess_env,
                                                      tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    env = {**subprocess_env, "MLFLOW_TRACKING_URI": auth_server["uri"], **auth_server["user"]}
    done = _stage(tiny_data, tmp_path, env)
    assert done.returncode == 0, done.stderr[-2000:]
    with pytest.MonkeyPatch.context() as patch:
        for key, value in auth_server["user"].items():
            patch.setenv(key, value)
        client = MlflowClient(auth_server["uri"])
        experiment = client.get_experiment_by_name("gpt1")
        (run,) = client.search_runs([experiment.experiment_id], "tags.`gpt1.stage` = 'pretrain-gpt'")
        (version,) = client.search_model_versions("name = 'gpt1-smoke-gpt'")
    assert run.info.status == "FINISHED" and version.run_id == run.info.run_id
    recorded = json.dumps({**run.data.tags, **run.data.params})
    shown = done.stdout + done.stderr + (auth_server["state"] / "mlflow-server.log").read_text() + recorded
    assert not [p for p in passwords(auth_server) if p in shown]
