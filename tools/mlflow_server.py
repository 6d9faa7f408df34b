"""A throw-away MLflow tracking server on PostgreSQL, on this machine only (127.0.0.1, random free ports).

    python tools/mlflow_server.py up .mlflow-server      # prints: export MLFLOW_TRACKING_URI=http://127.0.0.1:PORT
    python tools/mlflow_server.py down .mlflow-server    # stops both and deletes the database cluster
    eval "$(python tools/mlflow_server.py up .mlflow-server --auth)"   # a server that lets no one in without a password

`up` makes a fresh PostgreSQL cluster (initdb; a random password, scram-sha-256; no Unix socket), starts it on
127.0.0.1 with pg_ctl, creates the database `mlflow`, then starts `mlflow server --backend-store-uri postgresql://...`
on 127.0.0.1 with the artifacts under STATE/artifacts (served by the server: clients need no access to the folder).
STATE/server.json records what `down` stops.

`--auth` starts MLflow's own basic-auth app (`mlflow server --app-name basic-auth`, the `mlflow[auth]` extra): its
users live in a second PostgreSQL database (`mlflow_auth`), the admin gets a random password (STATE/admin.env) and a
user `gpt1` is made for the pipeline (STATE/credentials.env: MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD,
which MLflow's client reads). Both files are mode 0600 and no password is printed: `up` prints the URI's export and
a line that sources credentials.env, so `eval "$(... up STATE --auth)"` sets all three.

Run as root, PostgreSQL runs as the `postgres` user (it refuses root),
with its cluster in a folder of its own under the temp dir. Needs PostgreSQL's server binaries (Debian/Ubuntu:
`apt-get install postgresql`) and psycopg2 (`pip install psycopg2-binary`, in the test extras).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

HOST = "127.0.0.1"
DATABASE = "mlflow"
AUTH_DATABASE = "mlflow_auth"  # the basic-auth app's users and permissions
ADMIN_USER = "admin"
PIPELINE_USER = "gpt1"
CREDENTIALS_FILE = "credentials.env"  # the pipeline user's MLFLOW_TRACKING_USERNAME / _PASSWORD
ADMIN_FILE = "admin.env"  # the admin's, for managing users
AUTH_CONFIG_FILE = "basic_auth.ini"
DB_USER = "gpt1"
STATE_FILE = "server.json"
START_SECONDS = 120.0
PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"


class ServerError(RuntimeError):
    """PostgreSQL or MLflow could not be started: names the step and what it printed."""


@dataclass
class Server:
    uri: str  # MLFLOW_TRACKING_URI for clients
    backend: str  # the PostgreSQL URI the server stores runs in (holds the password)
    pg_bin: str
    pg_data: str
    pg_port: int
    pg_os_user: str | None  # the OS user PostgreSQL runs as (None: this user)
    mlflow_pid: int
    state: str
    auth: bool = False  # the basic-auth app: clients need STATE/credentials.env

    def save(self) -> None:
        path = Path(self.state) / STATE_FILE
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        path.chmod(0o600)  # the backend URI holds the database password

    @classmethod
    def load(cls, state: Path) -> Server:
        return cls(**json.loads((state / STATE_FILE).read_text()))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def pg_bin_dir() -> Path:
    """The newest PostgreSQL server binaries: Debian's /usr/lib/postgresql/<version>/bin, else initdb on PATH."""
    found = sorted(Path("/").glob(PG_BIN_GLOB.lstrip("/")), key=lambda p: int(p.parent.name), reverse=True)
    if found and (found[0] / "initdb").is_file():
        return found[0]
    if initdb := shutil.which("initdb"):
        return Path(initdb).parent
    raise ServerError("no PostgreSQL server binaries (initdb): apt-get install postgresql")


def _as_pg(os_user: str | None, args: list[str]) -> list[str]:
    return ["runuser", "-u", os_user, "--", *args] if os_user else args


def _run(step: str, args: list[str], env: dict[str, str] | None = None) -> None:
    out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=START_SECONDS)
    if out.returncode != 0:
        raise ServerError(f"{step} failed ({out.returncode}): {(out.stderr or out.stdout).strip()[-1500:]}")


def start_postgres(pg_bin: Path, password: str) -> tuple[str, int, str | None]:
    """initdb and start a cluster on 127.0.0.1; (data folder, port, OS user it runs as)."""
    os_user = "postgres" if os.geteuid() == 0 else None
    data = Path(tempfile.mkdtemp(prefix="gpt1-pg-"))  # the temp dir: the postgres user can reach it
    if os_user:
        shutil.chown(data, os_user)
    password_file = data / "pwfile"
    password_file.write_text(password + "\n")
    if os_user:
        shutil.chown(password_file, os_user)
    cluster = data / "cluster"
    _run("initdb", _as_pg(os_user, [str(pg_bin / "initdb"), "-D", str(cluster), "-U", DB_USER, "-E", "UTF8",
                                    "--auth=scram-sha-256", f"--pwfile={password_file}", "--no-instructions"]))
    password_file.unlink()
    port = free_port()
    options = f"-c listen_addresses={HOST} -p {port} -c unix_socket_directories=''"
    _run("pg_ctl start", _as_pg(os_user, [str(pg_bin / "pg_ctl"), "-D", str(cluster), "-l", str(data / "postgres.log"),
                                          "-o", options, "-w", "-t", str(int(START_SECONDS)), "start"]))
    env = {**os.environ, "PGPASSWORD": password}
    for database in (DATABASE, AUTH_DATABASE):
        _run("createdb", [str(pg_bin / "createdb"), "-h", HOST, "-p", str(port), "-U", DB_USER, database], env)
    return str(data), port, os_user


def stop_postgres(pg_bin: str, data: str, os_user: str | None) -> None:
    cluster = Path(data) / "cluster"
    if (cluster / "postmaster.pid").exists():
        _run("pg_ctl stop", _as_pg(os_user, [str(Path(pg_bin) / "pg_ctl"), "-D", str(cluster), "-m", "fast", "-w",
                                             "stop"]))
    shutil.rmtree(data, ignore_errors=True)


def wait_for_mlflow(uri: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerError(f"mlflow server exited ({process.returncode}): {log.read_text()[-1500:]}")
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise ServerError(f"mlflow server did not answer at {uri} within {START_SECONDS:g} s; see {log}")


def _private(path: Path, text: str) -> Path:
    """A file only its owner reads (it holds a password)."""
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(text)
    return path


def auth_environment(state: Path, auth_backend: str, admin_password: str) -> dict[str, str]:
    """The basic-auth app's settings: its config file (users in `auth_backend`; a request without a user's password
    is refused, a user may read every experiment) and, in the server's environment only, the admin's first password
    and the CSRF secret."""
    config = _private(state / AUTH_CONFIG_FILE, "[mlflow]\ndefault_permission = READ\n"
                      f"database_uri = {auth_backend}\nadmin_username = {ADMIN_USER}\n"
                      "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
    return {"MLFLOW_AUTH_CONFIG_PATH": str(config), "MLFLOW_AUTH_ADMIN_PASSWORD": admin_password,
            "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_urlsafe(32)}


def create_user(uri: str, admin_password: str, username: str, password: str) -> None:
    """A user of the basic-auth app, made by the admin through its REST API."""
    request = urllib.request.Request(
        f"{uri}/api/2.0/mlflow/users/create", data=json.dumps({"username": username, "password": password}).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Basic " + base64.b64encode(
            f"{ADMIN_USER}:{admin_password}".encode()).decode()}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()
    except OSError as err:  # HTTPError included: its text names the status, never the password
        raise ServerError(f"creating the MLflow user {username!r} failed: {err}") from None


def start_mlflow(backend: str, state: Path, workers: int,
                 auth_env: dict[str, str] | None = None) -> tuple[str, subprocess.Popen]:
    port = free_port()
    uri = f"http://{HOST}:{port}"
    log = state / "mlflow-server.log"
    args = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend, "--host", HOST, "--port",
            str(port), "--artifacts-destination", str(state / "artifacts"), "--workers", str(workers)]
    if auth_env is not None:
        args += ["--app-name", "basic-auth"]
    env = {**os.environ, **(auth_env or {})}
    with open(log, "w") as handle:  # its own session: `down` stops the server and its workers as one group
        process = subprocess.Popen(args, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
                                   cwd=state, env=env)
    try:
        wait_for_mlflow(uri, process, log)
    except ServerError:
        _stop_group(process.pid)
        raise
    return uri, process


def _stop_group(pid: int, wait: float = 30.0) -> None:
    """SIGTERM the process group `pid` leads (the server and its workers), SIGKILL what is left after `wait`."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(pid, signal.SIGKILL)


def up(state: Path, workers: int = 2, auth: bool = False) -> Server:
    """PostgreSQL, then MLflow on it (with `auth`, its basic-auth app and the pipeline's user); all stopped again if
    any step fails."""
    state = state.resolve()
    state.mkdir(parents=True, exist_ok=True)
    if (state / STATE_FILE).exists():
        raise ServerError(f"{state / STATE_FILE}: a server is already recorded here; run down first")
    pg_bin = pg_bin_dir()
    password = secrets.token_urlsafe(24)
    data, pg_port, os_user = start_postgres(pg_bin, password)
    backend = f"postgresql://{DB_USER}:{password}@{HOST}:{pg_port}/{DATABASE}"
    process = None
    try:
        admin_password = secrets.token_urlsafe(24)
        auth_env = auth_environment(state, backend.removesuffix(DATABASE) + AUTH_DATABASE,
                                    admin_password) if auth else None
        uri, process = start_mlflow(backend, state, workers, auth_env)
        if auth:
            pipeline_password = secrets.token_urlsafe(24)
            create_user(uri, admin_password, PIPELINE_USER, pipeline_password)
            _private(state / ADMIN_FILE, f"export MLFLOW_TRACKING_USERNAME={ADMIN_USER}\n"
                     f"export MLFLOW_TRACKING_PASSWORD={admin_password}\n")
            _private(state / CREDENTIALS_FILE, f"export MLFLOW_TRACKING_USERNAME={PIPELINE_USER}\n"
                     f"export MLFLOW_TRACKING_PASSWORD={pipeline_password}\n")
    except BaseException:
        if process is not None:
            _stop_group(process.pid)
        stop_postgres(str(pg_bin), data, os_user)
        raise
    server = Server(uri, backend, str(pg_bin), data, pg_port, os_user, process.pid, str(state), auth)
    server.save()
    return server


def down(state: Path) -> None:
    """Stop the MLflow server and PostgreSQL recorded in STATE and delete the cluster (the artifacts stay)."""
    server = Server.load(state.resolve())
    _stop_group(server.mlflow_pid)
    stop_postgres(server.pg_bin, server.pg_data, server.pg_os_user)
    (Path(server.state) / STATE_FILE).unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("state", type=Path, help="folder for the server's state, logs and artifacts")
    parser.add_argument("--workers", type=int, default=2, help="mlflow server workers (default 2)")
    parser.add_argument("--auth", action="store_true",
                        help="MLflow's basic-auth app: no request without a user's password (STATE/credentials.env)")
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            server = up(args.state, args.workers, args.auth)
            print(f"export MLFLOW_TRACKING_URI={server.uri}")
            if server.auth:  # the password stays in the file: this line is what a shell log shows
                print(f". {shlex.quote(str(Path(server.state) / CREDENTIALS_FILE))}")
        else:
            down(args.state)
    except (ServerError, OSError, subprocess.TimeoutExpired) as err:
        print(f"mlflow_server {args.action}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
