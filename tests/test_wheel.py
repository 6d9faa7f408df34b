"""The package as a wheel: built from the tracked files, installed into a fresh virtual environment at the pinned
versions, and run from outside the checkout (its `--help` and a smoke stage), so nothing it needs lives only in the
source tree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TORCH_WHEELS = Path(os.environ.get("TORCH_WHEELS", "/opt/wheels"))


def tracked_copy(dest: Path) -> Path:
    """The checkout's tracked files only (what a clone holds), so a stale build/ or egg-info cannot leak in."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


def uv(*args: str, cwd: Path) -> None:
    done = subprocess.run(["uv", *args], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, f"uv {' '.join(args)}:\n{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("uv") is None:
        pytest.skip("uv is not installed (setup.sh installs it)")
    source = tracked_copy(tmp_path_factory.mktemp("source"))
    dist = tmp_path_factory.mktemp("dist")
    uv("build", "--wheel", "--out-dir", str(dist), str(source), cwd=source)
    (found,) = dist.glob("gpt1-*.whl")
    return found


def test_the_wheel_holds_every_subpackage_and_data_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(["git", "ls-files", "gpt1"], cwd=REPO, capture_output=True, text=True, check=True)
    wanted = {n for n in tracked.stdout.split() if n.endswith((".py", ".yaml"))}
    assert wanted and wanted <= names, f"missing from the wheel: {sorted(wanted - names)}"
    assert {"gpt1/data/synthetic/__init__.py", "gpt1/report/__init__.py", "gpt1/pipeline/params.schema.yaml"} <= names
    assert any(n.endswith("entry_points.txt") for n in names)


@pytest.mark.slow
def test_the_installed_wheel_runs_a_smoke_stage_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    uv("venv", "-q", str(venv), "-p", sys.executable, cwd=tmp_path)
    python = venv / "bin" / "python"
    links = ["--find-links", str(TORCH_WHEELS)] if TORCH_WHEELS.is_dir() else []
    constraints = ["-c", str(REPO / "constraints.txt")]
    # torch first, as setup.sh does: a bare torch requirement with no torch installed pulls the CUDA build
    torch_pin = next(line for line in (REPO / "constraints.txt").read_text().splitlines() if line.startswith("torch=="))
    uv("pip", "install", "-q", "-p", str(python), *links, torch_pin, cwd=tmp_path)
    uv("pip", "install", "-q", "-p", str(python), *links, *constraints, str(wheel), cwd=tmp_path)

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}", "PATH": f"{venv / 'bin'}:{env['PATH']}"}

    def gpt1(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin" / "gpt1"), *args], cwd=work, env=env, capture_output=True, text=True,
                              timeout=600)

    where = subprocess.run([str(python), "-c", "import gpt1; print(gpt1.__file__)"], cwd=work, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(venv)), f"gpt1 imported from {where}, not from the installed wheel"
    helped = gpt1("--help")
    assert helped.returncode == 0 and "pretrain" in helped.stdout and "finetune" in helped.stdout

    params = str(REPO / "params.yaml")  # a user's params file, anywhere: the package carries its schema
    for stage in (["fetch", "--out", "corpus"], ["clean", "--raw", "corpus", "--out", "corpus"],
                  ["bpe", "--corpus", "corpus", "--out", "tokenizer"]):
        done = gpt1(stage[0], "--params", params, "--profile", "smoke", *stage[1:])
        assert done.returncode == 0, f"gpt1 {stage[0]}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert json.loads((work / "corpus" / "manifest.json").read_text())
    assert (work / "tokenizer").is_dir() and any((work / "tokenizer").iterdir())
