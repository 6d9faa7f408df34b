"""bench/gpu_check.sh, the GPU check of issue 33: its CPU rehearsal end to end, so that the script cannot rot while no
GPU runs it, and the pieces that decide what travels to the GPU machine.

The rehearsal (slow, ~2-3 min on 2 cores) builds a quick bundle (`--prepare --no-wheels`: this environment has the
packages; few examples for the token counts), then runs every section at its tiny CPU size through the script as
the GPU machine would, and reads back what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpt1.numerics import PINNED_ENV

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "gpu_check.sh"
sys.path.insert(0, str(REPO / "bench"))
SECTIONS = ["hardware", "speed", "stages", "precision", "finetune_speed", "speed_extra", "pretrain_minutes"]


def script_env() -> dict[str, str]:
    """This Python for the script, a process as a user's shell starts it (not the suite's pinned kernels)."""
    env = {k: v for k, v in os.environ.items() if k not in PINNED_ENV and not k.startswith("MLFLOW_")}
    return {**env, "GPT1_PYTHON": sys.executable, "PYTHONPATH": str(REPO)}


def run_script(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], env=script_env(), capture_output=True, text=True,
                          timeout=timeout)


def test_script_without_an_output_folder_prints_its_usage() -> None:
    done = run_script()
    assert done.returncode == 2 and "usage: bash bench/gpu_check.sh OUT" in done.stderr


def test_sections_runs_only_the_named_ones_and_refuses_an_unknown_name(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_script(str(out), "--device", "cpu", "--sections", "speed_extra", "--work", str(tmp_path / "work"))
    assert done.returncode == 0, done.stdout + done.stderr
    table = done.stdout.split("| section | status |")[1]
    assert "b+. speed_extra | skipped | CUDA only" in table and "a. hardware" not in table
    assert list(json.loads((out / "results.json").read_text())["sections"]) == ["speed_extra"]
    refused = run_script(str(tmp_path / "other"), "--sections", "speed,bogus")
    assert refused.returncode == 2 and "unknown section(s) bogus; choose from hardware" in refused.stdout


def test_bundle_carries_what_the_stages_need_beyond_the_gpu_machines_packages() -> None:
    from gpu.bundle import BASE, ON_GPU, carried, closure

    wanted, sure = set(carried()), set(closure(BASE)) & ON_GPU
    assert {"mlflow-skinny", "mlflow-tracing", "datasets", "jsonschema", "sqlalchemy", "alembic"} <= wanted
    assert {"attrs", "pydantic"} <= wanted  # not needed by the list of packages, or not on the image
    assert not wanted & sure
    assert {"torch", "transformers", "numpy", "pyarrow", "huggingface-hub", "typing-extensions"} <= sure


def test_budget_marks_each_speed_measured_or_assumed(tmp_path: Path) -> None:
    import gpu_budget

    measured = tmp_path / "measured.json"
    measured.write_text(json.dumps({"source": "NVIDIA H100, 2026-12-01", "peak_tflops": 800.0, "mfu": 0.5,
                                    "finetune_mfu": None, "update_ms": 12.0}))
    found = gpu_budget.speeds(gpu_budget.parse_args(["--measured", str(measured)]))
    assert found["peak_tflops"] == (800.0, "measured (NVIDIA H100, 2026-12-01)")
    assert found["update_ms"] == (12.0, "measured (NVIDIA H100, 2026-12-01)")
    assert found["lstm_mfu"] == (0.20, "assumed")
    assert found["finetune_mfu"] == (0.5, "measured (NVIDIA H100, 2026-12-01): pre-training's")
    assumed = gpu_budget.speeds(gpu_budget.parse_args([]))
    assert {source for _, source in assumed.values()} == {"assumed", "assumed: pre-training's"}


@pytest.mark.slow
def test_cpu_rehearsal_runs_every_section_and_prints_the_table(tmp_path: Path, tiny_data) -> None:
    import shutil

    from gpu.report import OUT_FILES

    bundle, out = tmp_path / "bundle", tmp_path / "out"
    prepared = run_script("--prepare", "--no-wheels", "--bundle", str(bundle), "--sample", "20", "--book-chars",
                          "5000")
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    assert (bundle / "data" / "tasks" / "story_cloze" / "encoded.json").is_file()
    # Section f's data: the gpu profile's tokenizer and the novels' ids (--prepare --gpu-profile: ~35 min); here the
    # suite's tiny ones, in the same layout
    for name, source in (("tokenizer", tiny_data.tokenizer), ("ids", tiny_data.ids)):
        shutil.copytree(source, bundle / "gpu_profile" / name)
    done = run_script(str(out), "--device", "cpu", "--work", str(tmp_path / "work"), "--bundle", str(bundle))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]

    # What comes back from the GPU machine: at most 8 files, every one written
    assert sorted(p.name for p in out.iterdir()) == sorted(OUT_FILES) and len(OUT_FILES) <= 8
    sections = json.loads((out / "results.json").read_text())["sections"]
    assert list(sections) == SECTIONS
    assert {n: s["status"] for n, s in sections.items()} == {**dict.fromkeys(SECTIONS, "ok"), "speed_extra": "skipped"}
    curve = (out / "pretrain_curve.csv").read_text().splitlines()
    assert curve[0] == "step,train_loss,lr,tokens_per_second,val_loss" and len(curve) > 5

    stages = sections["stages"]["data"]
    assert stages["killed"]["cuda_rng_states"] == 0 and stages["killed"]["checkpoint_device"] == "cpu"
    assert stages["resumed"]["from_step"] >= stages["killed"]["checkpoint_step"] > 0
    assert {job["status"] for job in stages["jobs"].values()} == {"verified"} and len(stages["jobs"]) == 8
    assert all(job["device"] == "cpu" for name, job in stages["jobs"].items() if "device" in job)
    assert "FINISHED" in stages["mlflow"]["runs"]["finetune"] and stages["mlflow"]["registered_versions"] >= 1

    precision = sections["precision"]["data"]
    fp32 = [r for r in precision["logits"] if r["arm"] == "fp32"]
    assert fp32 and all(r["max_abs_logit_delta"] == 0.0 for r in fp32)  # the CPU against itself
    assert {r.get("skipped") for r in precision["logits"] if r["arm"] == "tf32"} == {"CUDA only"}
    # On the CPU, two runs of the same command and a killed-and-resumed one end with the same bytes
    assert precision["twins"]["identical"] and precision["twins"]["resumed_vs_run1"]["identical"]

    speed = sections["speed"]["data"]
    assert [v["name"] for v in speed["variants"]] == ["ours, fp32", "HF OpenAIGPT"]
    assert set(sections["finetune_speed"]["data"]["updates"]) == {"fixed", "mnli", "qqp", "race"}

    table = done.stdout.strip().splitlines()[-len(SECTIONS) - 3:]
    assert table[0] == "| section | status | result | seconds |"
    assert [line.split("|")[1].strip() for line in table[2:-1]] == [
        "a. hardware", "b. speed", "c. stages", "d. precision", "e. finetune_speed", "b+. speed_extra",
        "f. pretrain_minutes"]
    assert (out / "report.md").read_text().rstrip().endswith(table[-1])
