"""bench/gpu_check.sh, the GPU check of issue 33: its CPU rehearsal end to end, so that the script cannot rot while no
GPU runs it, and the pieces that decide what travels to the GPU machine.

The rehearsal (slow, ~2-3 min on 2 cores) builds a quick bundle (`--prepare --no-wheels`: this environment has the
packages; few examples for the token counts), then runs every section at its tiny CPU size through the script as
the GPU machine would, and reads back what it wrote."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpt1.training.numerics import PINNED_ENV

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "gpu_check.sh"
# Every section in the order they run; DEFAULT is what a run without --sections does (issue 43's, then the rest)
SECTIONS = ["hardware", "host_probe", "dropout", "speed", "levers", "finetune_speed", "finetune_graphs", "stages",
            "precision", "speed_extra", "pretrain_minutes"]
DEFAULT = SECTIONS[:7]


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


def test_sections_default_to_issue_43s_and_all_names_every_one() -> None:
    from bench import gpu_check
    from bench.gpu import report

    assert [name for name, _, _ in report.SECTIONS] == SECTIONS == list(gpu_check.RUNS)
    assert gpu_check.parse_args(["run", "out"]).sections == DEFAULT
    assert gpu_check.parse_args(["run", "out", "--sections", "all"]).sections == SECTIONS
    assert all(set(limits) == set(SECTIONS) for limits in gpu_check.LIMITS.values())
    # Sections other workers write: registered with their limits, run when their modules are there
    assert gpu_check.RUNS["levers"] == "bench.gpu.levers:run" and report.TITLES["levers"][0] == "b2"
    assert gpu_check.RUNS["finetune_graphs"] == "bench.gpu.finetune_speed:run_graphs"
    assert report.TITLES["finetune_graphs"][0] == "e2"
    assert gpu_check.LIMITS["cuda"]["levers"] == 200 and gpu_check.LIMITS["cuda"]["finetune_graphs"] == 190
    # The default run fits the device tool's 600 s command with the wheels' install; each limit fits the budget
    assert gpu_check.BUDGET["cuda"] <= 540 and max(gpu_check.LIMITS["cuda"].values()) < gpu_check.BUDGET["cuda"]


def test_commit_comes_from_the_bundle_and_says_where_the_trees_git_disagrees(tmp_path: Path, monkeypatch) -> None:
    """The device tool's copy of the tree carries the .git of the session's start (a stale HEAD), so the commit the
    bundle was prepared at comes first; git's only where no bundle names one."""
    from bench.gpu import env

    here = env.git_commit()
    assert here and len(here.removesuffix("-dirty")) == 40
    assert env.commit(tmp_path) == here  # nothing prepared: git's
    assert env.write_commit(tmp_path) == here and env.commit(tmp_path) == f"{here} (as prepared)"
    monkeypatch.setattr(env, "git_commit", lambda: "0" * 40)  # a stale HEAD
    assert env.commit(tmp_path) == f"{here} (as prepared; the .git here says {'0' * 40})"
    monkeypatch.setattr(env, "git_commit", lambda: None)  # no .git at all
    assert env.commit(tmp_path) == f"{here} (as prepared)"
    assert env.commit(tmp_path / "none").startswith("unknown (no git checkout, and no commit.txt")


def probe_bundle(bundle: Path) -> None:
    """A bundle with section h's probe (no numpy wheel: this environment's numpy) and the commit, nothing else."""
    from bench.gpu import env, host_probe

    if not (host_probe.SOURCE / "probe.py").is_file():
        pytest.skip(f"no numerics probe at {host_probe.SOURCE}")
    host_probe.prepare(bundle, wheels=False)
    env.write_commit(bundle)


def test_host_probe_rehearsal_compares_with_the_amd_file_and_the_report_names_machine_and_commit(
        tmp_path: Path) -> None:
    from bench.gpu import env

    bundle, out = tmp_path / "bundle", tmp_path / "out"
    probe_bundle(bundle)
    done = run_script(str(out), "--device", "cpu", "--sections", "host_probe", "--bundle", str(bundle), "--work",
                      str(tmp_path / "work"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    record = results["sections"]["host_probe"]
    assert record["status"] == "ok" and record["summary"].startswith(f"{env.cpu_model()}: pinned: ")
    pinned = record["data"]["runs"]["pinned"]
    assert pinned["reference"] == "amd-epyc-family26.pinned.json" and pinned["args"] == ["shared", "--env", "pinned"]
    assert len(pinned["probe"]["hashes"]) == len(pinned["equal"]) + len(pinned["differ"]) + len(
        pinned["not_in_reference"]) >= 27
    assert pinned["probe"]["env"]["OPENBLAS_CORETYPE"] == "Haswell" and record["data"]["lscpu"]
    # Provenance, though section a did not run: the machine and the commit
    header = (out / "report.md").read_text().split("## ")[0]
    assert f"CPU {env.cpu_model()}" in header and "no GPU (device cpu)" in header
    assert f"torch {importlib.metadata.version('torch')};" in header
    assert f"commit: {env.git_commit()} (as prepared)" in header and "unknown" not in header
    assert results["machine"]["commit"] == f"{env.git_commit()} (as prepared)" and results["machine"]["host"]


def test_dropout_rehearsal_measures_the_math_backends_rate_within_its_standard_error(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_script(str(out), "--device", "cpu", "--sections", "dropout", "--work", str(tmp_path / "work"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    record = json.loads((out / "results.json").read_text())["sections"]["dropout"]
    assert record["status"] == "ok" and record["data"]["training_step"]["ran"] == ["math"]
    attention = {r["backend"]: r for r in record["data"]["attention"]}
    assert set(attention) == {"flash", "efficient", "cudnn", "math", "as trained"}
    for found in (attention["math"], attention["as trained"], *record["data"]["other"]):
        assert found["p"] == 0.1 and found["within_3se"], found
        assert abs(found["measured"] - 0.1) < 3 * found["se"] and found["se"] < 0.001
    assert abs(attention["math"]["scale_p"] - 0.1) < 1e-3  # kept weights scaled by 1/(1-p)
    assert "174245" in record["data"]["note"] and "| math | 0.1 |" in record["markdown"]


def test_host_probe_runs_the_modes_its_scripts_offer(tmp_path: Path) -> None:
    from bench.gpu import host_probe

    probe_bundle(tmp_path)
    shared = [mode for mode in host_probe.MODES if mode.script == "shared"]
    assert [host_probe.offered(mode, tmp_path / "probe") for mode in shared] == [True, True, True]
    assert not host_probe.offered(host_probe.Mode("x", "shared", ("--env", "bogus")), tmp_path / "probe")
    project = next(mode for mode in host_probe.MODES if mode.script == "project")
    if project.path(tmp_path).is_file():  # issue 42's probe, against its committed hashes
        assert host_probe.offered(project, tmp_path / "probe") and (REPO / project.reference).is_file()


def test_bundle_carries_what_the_stages_need_beyond_the_gpu_machines_packages() -> None:
    from bench.gpu.bundle import BASE, ON_GPU, carried, closure

    wanted, sure = set(carried()), set(closure(BASE)) & ON_GPU
    assert {"mlflow-skinny", "mlflow-tracing", "datasets", "jsonschema", "sqlalchemy", "alembic"} <= wanted
    assert {"attrs", "pydantic"} <= wanted  # not needed by the issue's list of packages, or not on the image
    assert not wanted & sure
    assert {"torch", "transformers", "numpy", "pyarrow", "huggingface-hub", "typing-extensions"} <= sure


def test_budget_marks_each_speed_measured_or_assumed(tmp_path: Path) -> None:
    from bench import gpu_budget

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


def present(name: str) -> bool:
    """Whether a section's function exists yet (levers and finetune_graphs are written by others, in parallel)."""
    import importlib

    from bench import gpu_check

    module, function = gpu_check.RUNS[name].split(":")
    if name == "host_probe":  # its probe lives beside the repository, in ../shared
        from bench.gpu.host_probe import SOURCE

        return (SOURCE / "probe.py").is_file()
    try:
        return hasattr(importlib.import_module(module), function)
    except ImportError:
        return False


# Sections whose rehearsal is a test of its own (the host probe's three, dropout's), left out of the whole run
REHEARSED_ALONE = ("host_probe", "dropout")


@pytest.mark.slow
def test_cpu_rehearsal_runs_every_section_and_prints_the_table(tmp_path: Path, tiny_data) -> None:
    """Every section in one run, but those their own tests above rehearse alone (REHEARSED_ALONE: CI time)."""
    import shutil

    from bench.gpu.report import OUT_FILES, TITLES

    bundle, out = tmp_path / "bundle", tmp_path / "out"
    prepared = run_script("--prepare", "--no-wheels", "--bundle", str(bundle), "--sample", "20", "--book-chars",
                          "5000")
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    assert (bundle / "data" / "tasks" / "story_cloze" / "encoded.json").is_file()
    assert (bundle / "commit.txt").is_file()
    # Section f's data: the gpu profile's tokenizer and the novels' ids (--prepare --gpu-profile: ~35 min); here the
    # suite's tiny ones, in the same layout
    for name, source in (("tokenizer", tiny_data.tokenizer), ("ids", tiny_data.ids)):
        shutil.copytree(source, bundle / "gpu_profile" / name)
    names = [name for name in SECTIONS if present(name) and name not in REHEARSED_ALONE]
    done = run_script(str(out), "--device", "cpu", "--work", str(tmp_path / "work"), "--bundle", str(bundle),
                      "--sections", ",".join(names))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]

    # What comes back from the GPU machine: at most 8 files, every one written
    assert sorted(p.name for p in out.iterdir()) == sorted(OUT_FILES) and len(OUT_FILES) <= 8
    sections = json.loads((out / "results.json").read_text())["sections"]
    assert list(sections) == names
    assert {n: s["status"] for n, s in sections.items()} == {**dict.fromkeys(names, "ok"), "speed_extra": "skipped"}
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

    table = done.stdout.strip().splitlines()[-len(names) - 3:]
    assert table[0] == "| section | status | result | seconds |"
    assert [line.split("|")[1].strip() for line in table[2:-1]] == [f"{TITLES[n][0]}. {n}" for n in names]
    assert (out / "report.md").read_text().rstrip().endswith(table[-1])
