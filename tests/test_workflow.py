"""End to end: the smoke profile through Snakemake, then DVC agrees nothing is left to do, and MLflow has the runs."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def run(args: list[str], cwd: Path, env: dict) -> str:
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert out.returncode == 0, f"{' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout + out.stderr


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """A copy of the repository with params.yaml selecting smoke, after one `snakemake --cores 2`."""
    root = tmp_path_factory.mktemp("repo")
    for name in ("workflow", "gpt1"):
        shutil.copytree(REPO / name, root / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", "environment.yml"):
        shutil.copy(REPO / name, root / name)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    # Every task and both variants (each transformation and metric), but one ablation task: CI time.
    params.update(profile="smoke", ablation_tasks=["rte"])
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "GPT1_", "SNAKEMAKE_"))}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    run(["git", "init", "-q"], root, env)
    run([sys.executable, "-m", "dvc", "init", "-q"], root, env)
    shutil.copy(REPO / ".dvc" / "config", root / ".dvc" / "config")
    log = run([sys.executable, "-m", "snakemake", "--cores", "2"], root, env)
    return root, env, log


def test_snakemake_builds_the_data_stages(smoke_run):
    root, _, _ = smoke_run
    header = json.loads((root / "results/smoke/ids/train.json").read_text())
    assert header["tokens"] > 10_000 and header["pretokenizer"] == "spacy"
    assert (root / "results/smoke/ids/train.bin").stat().st_size == 2 * header["tokens"]
    assert (root / "results/smoke/logs/encode.log").read_text()


def test_dvc_recorded_everything(smoke_run):
    root, env, _ = smoke_run
    status = run([sys.executable, "-m", "dvc", "status", "--json"], root, env)
    assert json.loads(status.strip().splitlines()[-1]) == {}
    assert "didn't change, skipping" in run([sys.executable, "-m", "dvc", "repro"], root, env)
    # The DVC cache links rather than copies the outputs (cache.type hardlink first).
    assert (root / "results/smoke/ids/train.bin").stat().st_nlink == 2


def test_second_snakemake_does_nothing(smoke_run):
    root, env, _ = smoke_run
    assert "Nothing to be done" in run([sys.executable, "-m", "snakemake", "--cores", "2"], root, env)


def test_mlflow_in_the_repo_root_lists_every_stage(smoke_run):
    from mlflow.tracking import MlflowClient

    root, _, _ = smoke_run
    client = MlflowClient(f"sqlite:///{root}/mlflow.db")
    experiment = client.get_experiment_by_name("gpt1")
    runs = client.search_runs([experiment.experiment_id])
    assert {r.data.tags["gpt1.stage"] for r in runs} >= {"fetch", "clean", "bpe", "encode"}
    assert all(r.info.status == "FINISHED" and r.data.tags["gpt1.profile"] == "smoke" for r in runs)
    encode = next(r for r in runs if r.data.tags["gpt1.stage"] == "encode")
    assert encode.data.metrics["train_tokens"] > 10_000 and "gpt1.tokenizer_sha256" in encode.data.tags


def test_lint_is_clean():
    out = subprocess.run([sys.executable, "-m", "snakemake", "--lint"], cwd=REPO, capture_output=True, text=True)
    assert "Congratulations, your workflow is in a good condition!" in out.stdout + out.stderr
