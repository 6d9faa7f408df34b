"""The smoke pipeline through a real Slurm: workflow/profiles/slurm with snakemake-executor-plugin-slurm, on the
single-node cluster tools/slurm_cluster.sh brings up on this machine (Debian's munge, slurmctld, slurmd; root).

Mid-run, the GPT pre-training job is requeued (`scontrol requeue`, what Slurm does to a preempted job or one whose
node failed): Slurm starts it again, it resumes from its last checkpoint, Snakemake on the "login node" waits it out,
and every output of the pipeline has the bytes of an uninterrupted run (tests/fixtures/smoke_digests.json). To requeue
it mid-run every time, not when a race allows, the job is held just after its first checkpoint: a sitecustomize
module (test-only, on PYTHONPATH, which sbatch --export=ALL hands on) sleeps in the audit hook of the second
checkpoint's first write, once.

Minutes of work, so it runs only when asked for (GPT1_SLURM_TEST=1, see docs/operations.md "Slurm"), and is skipped
where the plugin is missing or Slurm cannot start.
"""

from __future__ import annotations

import getpass
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pipeline_repo import REPO, assert_outputs_committed, run, smoke_checkout, user_env

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


# Holds the GPT's pre-training once (not the LSTM's, which runs beside it and took the hold first in two runs of
# 2026-11-28), just after its first checkpoint is complete (latest.json written), by
# sleeping in the audit hook of the next checkpoint's first write, until Slurm's SIGTERM ends the sleep. Writes the
# Slurm job id to $HOLD_MARKER first, so the test knows what to requeue; never again once the marker exists.
HOLD_AFTER_FIRST_CHECKPOINT = """
import os, sys, time
from pathlib import Path

MARKER = os.environ.get("HOLD_MARKER")


def hold(event, args):
    if event != "open" or not MARKER or not isinstance(args[0], str) or "/pretrain/gpt/resume/.state-" not in args[0]:
        return
    if Path(MARKER).exists() or not (Path(args[0]).parent / "latest.json").exists():
        return
    Path(MARKER).write_text(os.environ.get("SLURM_JOB_ID", "?"))
    time.sleep(600)


sys.addaudithook(hold)
"""


@dataclass
class SlurmRun:
    root: Path
    env: dict[str, str]
    log: str
    requeued_job: str
    requeued_state: str  # `scontrol show job` once Slurm had requeued it (Slurm forgets a job MinJobAge after its end)


def requeue_when_held(pipeline: subprocess.Popen, marker: Path) -> tuple[str, str]:
    """Wait for the held pre-training job, requeue it; its Slurm job id and its state once Slurm restarted it."""
    deadline = time.monotonic() + 1800
    while not marker.exists() or not marker.read_text():
        assert pipeline.poll() is None, f"the pipeline ended before pre-training was held: {pipeline.stdout.read()}"
        assert time.monotonic() < deadline, "pre-training was not held within 30 min"
        time.sleep(0.5)
    job = marker.read_text()
    subprocess.run(["scontrol", "requeue", job], check=True, capture_output=True, text=True)
    deadline = time.monotonic() + 300
    while "Restarts=1" not in (state := run(["scontrol", "show", "job", job], marker.parent, os.environ.copy())):
        assert time.monotonic() < deadline, f"Slurm did not requeue job {job} within 300 s: {state}"
        time.sleep(0.5)
    return job, state


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The cluster for this module's tests; after them no job of theirs is left queued or running, and a cluster
    this module started is stopped (one it found up is left up)."""
    how = slurm_cluster()
    try:
        yield how
    finally:
        subprocess.run(["scancel", f"--user={getpass.getuser()}"], capture_output=True)
        if how == "started":
            subprocess.run([CLUSTER, "down"], capture_output=True)


@pytest.fixture(scope="module")
def slurm_run(cluster: str, tmp_path_factory) -> SlurmRun:
    env = user_env()
    root = smoke_checkout(tmp_path_factory.mktemp("slurm"), env, ablation_tasks=["rte"])
    hook = tmp_path_factory.mktemp("hold")
    (hook / "sitecustomize.py").write_text(HOLD_AFTER_FIRST_CHECKPOINT)
    env.update(MLFLOW_TRACKING_URI=f"sqlite:///{root}/mlflow.db",  # one node: a file every job reaches
               PYTHONPATH=str(hook), HOLD_MARKER=str(hook / "held"))
    start = time.monotonic()
    pipeline = subprocess.Popen([sys.executable, "-m", "snakemake", *SLURM_ARGS], cwd=root, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        job, state = requeue_when_held(pipeline, hook / "held")
        log, _ = pipeline.communicate(timeout=3600)
    finally:
        pipeline.kill()
    assert pipeline.returncode == 0, log[-5000:]
    seconds = time.monotonic() - start
    print(f"\nSlurm smoke run: {seconds:.0f} s, pre-training job {job} requeued")
    (root / "slurm_seconds.txt").write_text(f"{seconds:.0f}\n")
    return SlurmRun(root, env, log, job, state)


def test_every_job_ran_as_a_slurm_job(slurm_run):
    """One sbatch job per job of the plan but the two Snakemake runs itself (dvc_commit, all), in the partition the
    command line named."""
    root, env, log = slurm_run.root, slurm_run.env, slurm_run.log
    submitted = [line for line in log.splitlines() if "has been submitted with SLURM jobid" in line]
    total = next(int(line.split()[1]) for line in log.splitlines() if line.startswith("total "))
    assert len(submitted) == total - 2
    queue = run(["squeue", "--states=all", "--noheader", "--format=%P %j"], root, env).split()
    assert "debug" in queue and set(queue[::2]) == {"debug"}


def test_the_requeued_pretraining_resumed_and_every_output_has_the_uninterrupted_bytes(slurm_run):
    """Slurm requeued the GPT pre-training job and ran it again (Restarts=1, checked in the fixture); the second
    attempt resumed from the checkpoint of step 10; every output of the pipeline (the logs aside) has the
    committed bytes of a run with no requeue."""
    assert f"JobId={slurm_run.requeued_job} " in slurm_run.requeued_state
    assert "Comment=rule_pretrain_wildcards_gpt" in slurm_run.requeued_state
    pretrain_log = (slurm_run.root / "results/smoke/logs/pretrain-gpt.log").read_text()
    assert "resuming from the checkpoint at step 10" in pretrain_log
    assert_outputs_committed(slurm_run.root)


def test_every_output_is_there_and_up_to_date(slurm_run):
    root, env = slurm_run.root, slurm_run.env
    assert "Nothing to be done" in run([sys.executable, "-m", "snakemake", "-n", "--cores", "2"], root, env)
    for name in ("tables/table5.md", "tables/summary.json", "metrics.json", "figures/figure2_left.png",
                 "pretrain/gpt/model.safetensors", "finetune/rte/lstm/0/predictions.jsonl"):
        assert (root / "results" / "smoke" / name).stat().st_size > 0, name


def test_dvc_recorded_the_slurm_run(slurm_run):
    root, env = slurm_run.root, slurm_run.env
    status = run([sys.executable, "-m", "dvc", "status", "--json"], root, env)
    assert json.loads(status.strip().splitlines()[-1]) == {}


def test_mlflow_has_every_stage_nested_under_the_report(slurm_run):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{slurm_run.root}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("gpt1").experiment_id], max_results=1000)
    tags = [r.data.tags for r in runs]
    assert {t["gpt1.stage"] for t in tags} >= STAGES
    # The requeued attempt's run ends KILLED (Slurm's SIGTERM), its resumption FINISHED and says where it resumed.
    killed = [r for r in runs if r.info.status == "KILLED"]
    assert [r.data.tags["gpt1.stage"] for r in killed] == ["pretrain-gpt"]
    assert all(r.info.status == "FINISHED" for r in runs if r not in killed)
    assert sorted(t.get("gpt1.resumed_from_step") for t in tags if t["gpt1.stage"] == "pretrain-gpt") == ["0", "10"]
    report = next(r.info.run_id for r in runs if r.data.tags["gpt1.stage"] == "report")
    assert all(t.get("mlflow.parentRunId") == report for t in tags if t["gpt1.stage"] != "report")
