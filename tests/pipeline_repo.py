"""A copy of the repository for the end-to-end tests, as a user's checkout after `./setup.sh`: what both engines read,
params.yaml selecting the smoke profile, git and DVC initialised, `.venv` the virtual environment running the tests,
and a user's shell where nothing is activated."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
DVC = [sys.executable, "-m", "dvc"]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert out.returncode == 0, f"{' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout + out.stderr


def user_env() -> dict[str, str]:
    """No MLflow, gpt1 or Snakemake variables, the virtual environment off PATH, a git identity for commits."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "GPT1_", "SNAKEMAKE_", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if Path(p) != VENV_BIN)
    env.update(GIT_AUTHOR_NAME="gpt1 test", GIT_AUTHOR_EMAIL="test@example.org", GIT_COMMITTER_NAME="gpt1 test",
               GIT_COMMITTER_EMAIL="test@example.org")  # fmt: skip
    return env


def link_venv(root: Path) -> None:
    """`root/.venv`: the virtual environment running the tests, where setup.sh would have made it."""
    (root / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)


def smoke_checkout(root: Path, env: dict[str, str], profile: str = "smoke", overrides: tuple[str, ...] = (),
                   **params: object) -> Path:
    """A git + DVC repository in `root` holding the project with params.yaml selecting `profile` (smoke), that
    profile changed by `overrides` (as `gpt1 --set KEY=VALUE` takes them), then the top-level `params`
    (bench.gpu.checkout, which the GPU check's section dag makes its checkout with too)."""
    from bench.gpu import checkout

    checkout.make(root, env, checkout.params(profile, overrides, params))
    link_venv(root)
    return root


def commit_all(root: Path, env: dict[str, str], message: str) -> None:
    run(["git", "add", "-A"], root, env)
    run(["git", "commit", "-q", "-m", message], root, env)


# The second run's fine-tuning tasks (tests/conftest.py's server_smoke_run): the layer curves' two (whose encode_task
# jobs the plan names only for fine-tuned tasks) and RTE, which the ablations need
SERVER_RUN_TASKS = ["mnli", "race", "rte"]
# What the report writes from every job of the plan: a run that plans fewer jobs has other bytes there by design
REPORT_OUTPUTS = ("tables/", "metrics.json", "dvc_commit.done")


def smoke_repo(root: Path, env_extra: dict[str, str] | None = None, **params: object) -> tuple[Path, dict, str]:
    """A checkout in `root` with params.yaml selecting smoke, after one `snakemake --cores 2` from a user's shell
    (the virtual environment not activated: the workflow finds its Python itself); `env_extra` (e.g.
    MLFLOW_TRACKING_URI) is added to that shell's environment, `params` to params.yaml's top level."""
    env = {**user_env(), **(env_extra or {})}
    # Every task and both variants (each transformation and metric), but one ablation task: CI time.
    smoke_checkout(root, env, **{"ablation_tasks": ["rte"], **params})
    log = run([*SNAKEMAKE, "--cores", "2"], root, env)
    return root, env, log


MLFLOW_SERVER = [sys.executable, str(REPO / "tools" / "mlflow_server.py")]


def mlflow_server_command(action: str, state: Path, *options: str) -> subprocess.CompletedProcess:
    """`tools/mlflow_server.py up|down STATE [--auth]`: docs/operations.md's commands for the MLflow server on
    PostgreSQL."""
    return subprocess.run([*MLFLOW_SERVER, action, str(state), *options], capture_output=True, text=True,
                          timeout=600)


# Every output of the smoke pipeline but its logs, as tools/smoke_digests.py wrote them, and the host it ran on
COMMITTED_DIGESTS = Path(__file__).with_name("fixtures") / "smoke_digests.json"
DIGESTS_HOST = Path(__file__).with_name("fixtures") / "smoke_digests_host.json"


def output_digests(root: Path) -> dict[str, str]:
    """sha256 of every file of results/smoke but the logs (they hold timings and progress bars)."""
    results = root / "results" / "smoke"
    return {str(p.relative_to(results)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(results.rglob("*")) if p.is_file() and p.relative_to(results).parts[0] != "logs"}


def assert_outputs_committed(root: Path, job: str = "", *, planned_fewer: bool = False) -> None:
    """`outputs_not_committed` is [] on every x86-64 host with AVX2 and FMA, whatever its vendor (the pinned mode:
    gpt1.training.numerics); a failure names this host's processor, the one that wrote the digests and the first
    output that differs."""
    differing = outputs_not_committed(root, job, planned_fewer=planned_fewer)
    from gpt1.training.numerics import processor

    written = json.loads(DIGESTS_HOST.read_text())["processor"]
    assert differing == [], (f"on {processor()} (the digests were written on {written}): {len(differing)} outputs "
                             f"changed, appeared or went missing, the first {differing[0]}; e.g. {differing[:12]}")


def outputs_not_committed(root: Path, job: str = "", *, planned_fewer: bool = False) -> list[str]:
    """The outputs of results/smoke (under `job`, e.g. finetune/sst2/pretrained/0, if given) whose bytes are not
    those committed, and those only one side has: [] is the proof that a run computed what a clean run computes.
    `planned_fewer`: a run of some of the committed run's jobs (another params.yaml): each of its outputs but the
    report's (REPORT_OUTPUTS) must be committed, with its bytes; what it did not make is not missing."""
    prefix = f"{job}/" if job else ""
    found = {k: v for k, v in output_digests(root).items() if k.startswith(prefix)}
    committed = {k: v for k, v in json.loads(COMMITTED_DIGESTS.read_text()).items() if k.startswith(prefix)}
    if planned_fewer:
        found = {k: v for k, v in found.items() if not k.startswith(REPORT_OUTPUTS)}
        committed = {k: v for k, v in committed.items() if k in found}
    return sorted(name for name in found.keys() | committed.keys() if found.get(name) != committed.get(name))


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (a server to start there, or a store that is down)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
