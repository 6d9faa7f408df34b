"""Faults at the scale users run (issue 35): a disk that fills during the fine-tuning fan-out.

The smoke checkout lives on a tmpfs of fixed size (root only: skipped where it cannot be mounted). The data stages,
the task encodings and the pre-training run, then one fine-tuning job; then a file takes all but a little of the
free space, and two more fine-tuning jobs run with --keep-going. Each says in one line that the disk is full,
nothing finished changes, no half-written output is left; once the space is freed, the same command completes with
the bytes of a clean run (tests/fixtures/smoke_digests.json, which tests/test_workflow.py proves for the whole
pipeline).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from pipeline_repo import SNAKEMAKE, assert_outputs_committed, smoke_checkout, user_env

FIRST = "finetune/sst2/pretrained/0"
AFTER = ("finetune/rte/pretrained/0", "finetune/cola/scratch/0")  # the jobs that meet the full disk
HEADROOM = 512 * 1024  # what the filler leaves: Snakemake's own bookkeeping fits, a job's outputs and MLflow's don't


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 400 MB tmpfs at tmp_path/disk, unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400m", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip() or 'mount failed'}); needs root")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def snakemake(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SNAKEMAKE, *args], cwd=root, env=env, capture_output=True, text=True, timeout=1800)


def targets(*jobs: str) -> list[str]:
    return [f"results/smoke/{job}/metrics.json" for job in jobs]


@pytest.mark.slow
def test_a_full_disk_mid_fan_out_fails_in_one_line_and_the_rerun_completes_with_the_same_bytes(
    small_disk: Path, tmp_path: Path
) -> None:
    import yaml
    from mlflow.tracking import MlflowClient

    env = {**user_env(), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}  # the store stays writable
    root = smoke_checkout(small_disk / "repo", env, ablation_tasks=["rte"])
    # ... and the artifacts on the full disk, as the default store keeps them (./mlruns of the checkout)
    experiment = yaml.safe_load((root / "params.yaml").read_text())["mlflow"]["experiment"]
    MlflowClient(env["MLFLOW_TRACKING_URI"]).create_experiment(experiment, artifact_location=(root / "mlruns").as_uri())
    results = root / "results" / "smoke"
    encoded = [f"results/smoke/tasks/{job.split('/')[1]}/encoded.json" for job in AFTER]
    for step in (encoded, targets(FIRST)):  # every input the jobs read (the rest of the fan-out's: CI time), one job
        done = snakemake(root, env, "--cores", "2", *step)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    before = {p: p.read_bytes() for p in results.rglob("*") if p.is_file() and "logs" not in p.parts}

    free = os.statvfs(small_disk)
    filler = small_disk / "filler"
    with open(filler, "wb") as handle:  # all but HEADROOM of the free space, written (tmpfs has no fallocate)
        left = free.f_bavail * free.f_frsize - HEADROOM
        while left > 0:
            left -= handle.write(b"\0" * min(left, 1 << 24))
    full = snakemake(root, env, "--cores", "1", "--keep-going", *targets(FIRST, *AFTER))
    (tmp_path / "full-disk.log").write_text(full.stdout + full.stderr)  # kept with the test's folder, off the tmpfs
    assert full.returncode != 0
    said = [line for line in (full.stdout + full.stderr).splitlines() if "the disk is full; free some space" in line]
    assert said, (full.stdout + full.stderr)[-4000:]
    assert all(line.count("the disk is full") == 1 for line in said)
    # No traceback of ours (Snakemake's own log handler, writing on the same disk, prints one: "--- Logging error ---")
    assert f'File "{root / "gpt1"}' not in full.stdout + full.stderr
    after = {p: p.read_bytes() for p in results.rglob("*") if p.is_file() and "logs" not in p.parts}
    assert {p: b for p, b in after.items() if p in before} == before, "a finished output changed"
    # A job publishes its outputs last, after MLflow has its run (gpt1.pipeline.files.publication): none of the
    # failed jobs' files is there, even where Snakemake, its own log on the same full disk, could not clean up
    assert not any((results / job / "metrics.json").exists() for job in AFTER), "a failed job left its record"
    assert [str(p) for p in after if p not in before] == [], "a failed job left a file"

    filler.unlink()
    rerun = snakemake(root, env, "--cores", "2", *targets(FIRST, *AFTER))
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    for job in (FIRST, *AFTER):
        assert_outputs_committed(root, job)


def start_snakemake(root: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    """Snakemake in a process group of its own, which `stop_group` ends with its jobs."""
    return subprocess.Popen([*SNAKEMAKE, *args], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def stop_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


@pytest.mark.slow
def test_two_pipelines_at_once_share_the_checkout_and_the_store_and_a_true_collision_is_refused(
    tmp_path: Path,
) -> None:
    """Two profiles side by side in one checkout, logging into its one sqlite store (`mlflow.db` in the root): both
    finish, each in its own results tree, every run in MLflow; a third Snakemake asking for the first one's very
    outputs is refused by Snakemake's lock before it does anything."""
    import time

    import yaml
    from mlflow.tracking import MlflowClient

    env = user_env()  # MLflow's default store: the checkout's mlflow.db, for both pipelines
    root = smoke_checkout(tmp_path / "repo", env, ablation_tasks=["rte"])
    params = yaml.safe_load((root / "params.yaml").read_text())
    other = json.loads(json.dumps(params["profiles"]["smoke"]))
    other["finetune"]["lr"] = 2.0e-3
    params["profiles"]["smoke_b"] = other
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    job = FIRST

    # Targets before --config, which takes every word after it
    first = start_snakemake(root, env, f"results/smoke/{job}/metrics.json", "--cores", "1", "--config",
                            "profile=smoke")
    started = [first]
    try:
        locks = root / ".snakemake" / "locks"
        deadline = time.monotonic() + 300
        while not (locks.is_dir() and any(locks.iterdir())) and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        clash = snakemake(root, env, f"results/smoke/{job}/metrics.json", "--cores", "1", "--config", "profile=smoke")
        second = start_snakemake(root, env, f"results/smoke_b/{job}/metrics.json", "--cores", "1", "--config",
                                 "profile=smoke_b")
        started.append(second)
        outputs = [process.communicate(timeout=1800)[0] for process in (first, second)]
    finally:  # a time-out above leaves neither Snakemake nor a job of theirs running
        for process in started:
            stop_group(process)
    assert [first.returncode, second.returncode] == [0, 0], "\n".join(o[-3000:] for o in outputs)

    said = clash.stdout + clash.stderr
    assert clash.returncode != 0 and "Directory cannot be locked" in said and "--unlock" in said
    assert "Select jobs to execute" not in said  # refused before planning any job

    results = root / "results"
    assert_outputs_committed(root, job)
    recipes = {p: json.loads((results / p / job / "metrics.json").read_text())["recipe"]["lr"]
               for p in ("smoke", "smoke_b")}
    assert recipes == {"smoke": params["profiles"]["smoke"]["finetune"]["lr"], "smoke_b": 2.0e-3}

    client = MlflowClient(f"sqlite:///{root}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("gpt1").experiment_id])
    stages = {p: {r.data.tags["gpt1.stage"] for r in runs if r.data.tags["gpt1.profile"] == p}
              for p in ("smoke", "smoke_b")}
    wanted = {"fetch", "clean", "bpe", "encode", "encode_task", "pretrain-gpt", "finetune"}
    assert stages["smoke"] >= wanted and stages["smoke_b"] >= wanted, stages
    assert all(r.info.status == "FINISHED" for r in runs)
