"""The smoke pipeline through a real Slurm: workflow/profiles/slurm with snakemake-executor-plugin-slurm, on the
single-node cluster tools/slurm_cluster.sh brings up on this machine (Debian's munge, slurmctld, slurmd; root).

Minutes of work, so it runs only when asked for (GPT1_SLURM_TEST=1, see docs/operations.md "Slurm"), and is skipped
where the plugin is missing or Slurm cannot start.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from pipeline_repo import REPO, run, smoke_checkout, user_env

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
CLUSTER = REPO / "tools" / "slurm_cluster.sh"
# What a user changes on the command line: partition, memory, run time for every job; no GPU for pre-training here.
SLURM_ARGS = [
    "--workflow-profile", "workflow/profiles/slurm", "--cores", "2", "--slurm-status-command", "squeue",
    "--default-resources", "slurm_partition=debug", "mem_mb=1000", "runtime=60",
    "--set-resources", "pretrain:gpu=0", "pretrain:mem_mb=2000", "finetune:mem_mb=1500",
]  # fmt: skip
STAGES = {"fetch", "clean", "bpe", "encode", "pretrain-gpt", "pretrain-lstm", "encode_task", "finetune", "zeroshot",
          "layers", "report"}


def slurm_cluster() -> str:
    """Bring the cluster up (or find it up); skip the module with the reason when it cannot start here."""
    if os.environ.get("GPT1_SLURM_TEST") != "1":
        pytest.skip("the Slurm smoke run takes minutes: set GPT1_SLURM_TEST=1 to run it")
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        pytest.skip("snakemake-executor-plugin-slurm is not installed (pip install -e '.[test]')")
    if shutil.which("sinfo") and subprocess.run([CLUSTER, "status"], capture_output=True).returncode == 0:
        return "already up"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("no Slurm cluster answering, and starting one needs root and apt-get")
    started = subprocess.run([CLUSTER, "up"], capture_output=True, text=True)
    if started.returncode != 0:
        pytest.skip(f"Slurm could not start here: {(started.stdout + started.stderr)[-500:]}")
    return "started"


@pytest.fixture(scope="module")
def slurm_run(tmp_path_factory):
    slurm_cluster()
    env = user_env()
    root = smoke_checkout(tmp_path_factory.mktemp("slurm"), env, ablation_tasks=["rte"])
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{root}/mlflow.db"  # one node: a file every job reaches
    start = time.monotonic()
    log = run([sys.executable, "-m", "snakemake", *SLURM_ARGS], root, env)
    seconds = time.monotonic() - start
    print(f"\nSlurm smoke run: {seconds:.0f} s")
    (root / "slurm_seconds.txt").write_text(f"{seconds:.0f}\n")
    return root, env, log


def test_every_job_ran_as_a_slurm_job(slurm_run):
    """One sbatch job per job of the plan but the two Snakemake runs itself (dvc_commit, all), in the partition the
    command line named."""
    root, env, log = slurm_run
    submitted = [line for line in log.splitlines() if "has been submitted with SLURM jobid" in line]
    total = next(int(line.split()[1]) for line in log.splitlines() if line.startswith("total "))
    assert len(submitted) == total - 2
    queue = run(["squeue", "--states=all", "--noheader", "--format=%P %j"], root, env).split()
    assert "debug" in queue and set(queue[::2]) == {"debug"}


def test_every_output_is_there_and_up_to_date(slurm_run):
    root, env, _ = slurm_run
    assert "Nothing to be done" in run([sys.executable, "-m", "snakemake", "-n", "--cores", "2"], root, env)
    for name in ("tables/table5.md", "tables/summary.json", "metrics.json", "figures/figure2_left.png",
                 "pretrain/gpt/model.safetensors", "finetune/rte/lstm/0/predictions.jsonl"):
        assert (root / "results" / "smoke" / name).stat().st_size > 0, name


def test_dvc_recorded_the_slurm_run(slurm_run):
    root, env, _ = slurm_run
    status = run([sys.executable, "-m", "dvc", "status", "--json"], root, env)
    assert json.loads(status.strip().splitlines()[-1]) == {}


def test_mlflow_has_every_stage_nested_under_the_report(slurm_run):
    from mlflow.tracking import MlflowClient

    root, _, _ = slurm_run
    client = MlflowClient(f"sqlite:///{root}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("gpt1").experiment_id], max_results=1000)
    tags = [r.data.tags for r in runs]
    assert {t["gpt1.stage"] for t in tags} >= STAGES
    assert all(r.info.status == "FINISHED" for r in runs)
    report = next(r.info.run_id for r in runs if r.data.tags["gpt1.stage"] == "report")
    assert all(t.get("mlflow.parentRunId") == report for t in tags if t["gpt1.stage"] != "report")
