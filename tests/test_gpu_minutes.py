"""The gpu-minutes profile (issue 44): the paper's study within 8 minutes of one H100. Its plan fits the 8 minutes by
the speeds an H100 measured (bench/gpu_budget.py), a plan over its limit fails naming it, and the whole DAG runs
through Snakemake on the CPU at a shape shrunk with --set: the rehearsal of the GPU run, its every stage, MLflow run
and DVC record."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_repo import SNAKEMAKE, run, smoke_checkout, user_env

REPO = Path(__file__).resolve().parents[1]
SHARED_MIRROR = REPO.parent / "shared" / "data"
PROFILE = "gpu-minutes"
PLAN = [sys.executable, "-m", "bench.gpu_budget", "--profile", PROFILE, "--lengths",
        str(REPO / "bench" / "results" / "gpu_budget_lengths.json"), "--measured",
        str(REPO / "bench" / "results" / "gpu_speeds_h100.json"), "--jobs-at-once", "8", "--max-minutes", "8"]
# The profile at a CPU's size: the same stages, data sources, cuts and recipe, a tiny model on a little of each
SHRINK = ("corpus.max_documents=2", "corpus.max_bytes=300000", "bpe.merges=300", "bpe.limit_alphabet=200",
          "model.n_layer=2", "model.n_embd=32", "model.n_head=2", "model.n_ctx=64", "model.lstm_hidden=32",
          "pretrain.batch_size=4", "pretrain.micro_batch_size=4", "pretrain.max_steps=8", "pretrain.warmup_steps=2",
          "pretrain.eval_every=4", "pretrain.eval_batches=2", "pretrain.checkpoint_every=8", "pretrain.snapshots=4",
          "samples.snapshots=[0, 2, -1]", "samples.length=4", "zeroshot.max_examples=16",
          "layers.max_train_examples=16", "layers.max_eval_examples=16",
          "layers.by_task={race: {max_train_examples: 8, max_eval_examples: 8}}",
          "finetune.max_train_examples=24", "finetune.train_examples_by_task={race: 8}",
          "finetune.max_eval_examples=24", "finetune.batch_size=8", "finetune.epochs=1",
          "finetune.eval_batch_size=16")  # fmt: skip
# A task of each input transformation and of each way the profile picks rows: MNLI and QQP train on a cut of
# validation, RACE has its own caps, MNLI and RACE feed the layer curves, RTE the ablations (one task: CI time; the
# dry run of tests/test_dag.py plans all 12, tests/test_tasks.py loads each from the mirror)
TASKS = ["mnli", "qqp", "race", "sst2", "rte"]


def plan(*extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*PLAN, *extra], capture_output=True, text=True, cwd=REPO)


def test_the_plan_fits_eight_minutes_of_an_h100_by_the_measured_speeds() -> None:
    out = plan()
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    total = re.search(r"\| \*\*whole DAG\*\* \| (\d+) \| [\d,]+ \| [\d,]+ \| \*\*([\d,]+)\*\*", out.stdout)
    assert total and 300 < int(total.group(2).replace(",", "")) <= 480
    assert "| MFU (GPT pre-training) | 42.7% | measured (H100, section b2" in out.stdout
    assert "fine-tuning eager: 31.9 ms an update" in out.stdout  # the profile's cuda_graphs: false


def test_a_plan_over_its_limit_fails_naming_the_limit() -> None:
    out = plan("--set", "pretrain.max_steps=3000")
    assert out.returncode == 1
    assert re.search(r"the plan takes \d+ s, over --max-minutes 8 \(480 s\)", out.stderr), out.stderr[-2000:]


def test_a_plan_with_the_captured_update_is_refused_until_a_gpu_has_timed_it() -> None:
    out = plan("--set", "finetune.cuda_graphs=capture")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "profile gpu-minutes: finetune.cuda_graphs: capture has no GPU speed yet (bash bench/gpu_check.sh --sections "
        "finetune_graphs times it); estimate with auto or false")


@pytest.mark.slow
@pytest.mark.mirror
@pytest.mark.skipif(not SHARED_MIRROR.is_dir(), reason="the shared data mirror is absent")
def test_the_whole_dag_runs_through_snakemake_on_the_cpu_at_a_shrunk_shape(tmp_path: Path) -> None:
    env = {**user_env(), "GPT1_DATA_MIRROR": str(SHARED_MIRROR)}
    root = smoke_checkout(tmp_path / "repo", env, profile=PROFILE, overrides=SHRINK, finetune_tasks=TASKS,
                          ablation_tasks=["rte"])
    log = run([*SNAKEMAKE, "--cores", "2"], root, env)
    assert re.search(r"(\d+) of \1 steps \(100%\) done", log)
    results = root / "results" / PROFILE
    for table in ("table2", "table3", "table4", "table5"):
        assert (results / "tables" / f"{table}.md").stat().st_size > 0
    assert "Transformer w/ aux LM (full)" in (results / "tables" / "table5.md").read_text()
    assert "Nothing to be done" in run([*SNAKEMAKE, "--cores", "2"], root, env)
    status = run([sys.executable, "-m", "dvc", "status", "--json"], root, env)
    assert json.loads(status.strip().splitlines()[-1]) == {}

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{root}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("gpt1").experiment_id])
    assert all(r.info.status == "FINISHED" and r.data.tags["gpt1.profile"] == PROFILE for r in runs)
    stages = [r.data.tags["gpt1.stage"] for r in runs]
    assert stages.count("finetune") == 2 * len(TASKS) + 2  # both variants of each, and RTE's two ablations
    assert {"pretrain-gpt", "pretrain-lstm", "zeroshot", "layers"} <= set(stages)
    # The real data of the mirror, cut as the profile cuts it: MNLI trains on a part of validation_matched
    mnli = json.loads((results / "finetune" / "mnli" / "pretrained" / "0" / "metrics.json").read_text())
    assert mnli["reports"]["mnli_m"]["counts"]["train"] == 24
    assert mnli["reports"]["mnli_m"]["evaluated_on"].startswith("validation_matched[80%:100%]")
