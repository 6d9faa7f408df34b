"""bench/gpu_check.sh, the GPU check of issue 33: its CPU rehearsal end to end, so that the script cannot rot while no
GPU runs it, and the pieces that decide what travels to the GPU machine.

The rehearsal (slow, ~2-3 min on 2 cores) builds a quick bundle (`--prepare --no-wheels`: this environment has the
packages; few examples for the token counts), then runs every section at its tiny CPU size through the script as
the GPU machine would, and reads back what it wrote. Section dag has a rehearsal of its own (slow): a shrunk smoke
profile's whole DAG through Snakemake, its data stages made here and carried as on the GPU machine."""

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
            "precision", "speed_extra", "pretrain_minutes", "dag"]
DEFAULT = SECTIONS[:7]


def script_env() -> dict[str, str]:
    """This Python for the script, a process as a user's shell starts it (not the suite's pinned kernels)."""
    env = {k: v for k, v in os.environ.items() if k not in PINNED_ENV and not k.startswith("MLFLOW_")}
    return {**env, "GPT1_PYTHON": sys.executable, "PYTHONPATH": str(REPO)}


def run_script(*args: str, timeout: int = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], env={**script_env(), **(env or {})}, capture_output=True,
                          text=True, timeout=timeout)


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
    assert set(attention) == {"flash", "efficient", "cudnn", "math", "as trained", "as fine-tuned (math)"}
    for found in (attention["math"], attention["as trained"], attention["as fine-tuned (math)"],
                  *record["data"]["other"]):
        assert found["p"] == 0.1 and found["within_3se"], found
        assert abs(found["measured"] - 0.1) < 3 * found["se"] and found["se"] < 0.001
    assert abs(attention["math"]["scale_p"] - 0.1) < 1e-3  # kept weights scaled by 1/(1-p)
    assert "174245" in record["data"]["note"] and "| math | 0.1 |" in record["markdown"]
    assert f"as fine-tuned (math) {attention['as fine-tuned (math)']['measured']:.4f} ± " in record["summary"]


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


def test_dag_wheels_carry_snakemake_dvc_and_spacy_beyond_what_the_machine_has_by_then() -> None:
    """Section dag's two wheel folders: each what the GPU machine lacks once the calls before it have installed,
    and no PuLP (the greedy scheduler runs there)."""
    from bench.gpu.bundle import carried, dag_carried, spacy_carried, sure

    dag, spacy, before = set(dag_carried()), set(spacy_carried()), set(carried()) | sure()
    assert {"snakemake", "dvc", "dvc-data", "scmrepo", "pygit2", "antlr4-python3-runtime", "connection-pool"} <= dag
    assert {"spacy", "ftfy", "thinc", "blis", "cymem", "preshed", "srsly"} <= spacy
    assert "pulp" not in dag | spacy and not dag & before and not spacy & (before | dag)


def fake_results(root: Path, tasks: tuple[str, ...] = ("rte",), leave_out: str = "") -> Path:
    """A results/<profile>/ folder holding a file in each data stage's folder (tasks/<task>/ for `tasks`), but
    `leave_out`'s."""
    for folder in ("corpus", "tokenizer", "ids", *(f"tasks/{t}" for t in tasks)):
        if folder.split("/")[0] != leave_out:
            (root / folder).mkdir(parents=True)
            (root / folder / "made.json").write_text(json.dumps({"folder": folder}))
    return root


@pytest.mark.parametrize("missing", ["corpus", "tokenizer", "ids", "tasks", "tasks/rte"])
def test_dag_prepare_refuses_a_results_folder_lacking_a_data_folder_naming_it(tmp_path: Path, missing: str) -> None:
    from bench.gpu.dag_prepare import data_entries

    results = fake_results(tmp_path, tasks=("sst2",) if missing == "tasks/rte" else ("rte",),
                           leave_out=missing.split("/")[0] if missing != "tasks/rte" else "")
    with pytest.raises(SystemExit, match=f"^prepare: {tmp_path} has no {missing}/"):
        data_entries(results, ["rte"])


def test_dag_prepare_says_in_one_line_which_data_folder_is_missing(tmp_path: Path) -> None:
    results = fake_results(tmp_path / "results", leave_out="ids")
    done = run_script("--prepare", "--no-wheels", "--bundle", str(tmp_path / "bundle"), "--dag-results",
                      str(results), "--dag-profile", "smoke", "--dag-set", "finetune_tasks=[rte]")
    assert done.returncode == 1 and done.stderr.strip() == (
        f"prepare: {results} has no ids/; --dag-results takes a results/<profile>/ folder holding the data "
        f"stages' corpus, tokenizer, ids, tasks")


def test_dag_manifests_overrides_and_lists_reach_the_checkouts_params(tmp_path: Path) -> None:
    """--dag-set of a top-level key sets that list, any other the profile's setting; the section's checkout takes
    both, and git and DVC are initialised in it."""
    import yaml
    from pipeline_repo import user_env

    from bench.gpu import dag, dag_prepare

    results = fake_results(tmp_path / "results", tasks=("rte", "sst2"))
    sets = ["finetune_tasks=[rte]", "ablation_tasks=[rte]", "layer_transfer_tasks=[]", "model.n_layer=3"]
    manifest = dag_prepare.make_dag(tmp_path / "dag", results, "smoke", sets, None)
    assert manifest["overrides"] == ["model.n_layer=3"] and manifest["jobs"] == 8  # workflow/profiles/gpu's K
    assert manifest["params"] == {"finetune_tasks": ["rte"], "ablation_tasks": ["rte"], "layer_transfer_tasks": []}
    assert set(manifest["files"]) == {"corpus/made.json", "tokenizer/made.json", "ids/made.json",
                                      "tasks/rte/made.json"}  # not sst2's: no rule makes it in that checkout
    assert manifest["mirror"] is None  # smoke makes its own data
    assert dag.checkout_repo(tmp_path / "repo", user_env(), manifest) is True
    params = yaml.safe_load((tmp_path / "repo" / "params.yaml").read_text())
    assert params["profile"] == "smoke" and params["finetune_tasks"] == ["rte"] and params["layer_transfer_tasks"] == []
    assert params["profiles"]["smoke"]["model"]["n_layer"] == 3 != params["profiles"]["default"]["model"]["n_layer"]
    assert (tmp_path / "repo" / ".dvc" / "config").read_text() == (REPO / ".dvc" / "config").read_text()
    assert (tmp_path / "repo" / ".git").is_dir() and (tmp_path / "repo" / "workflow" / "Snakefile").is_file()


def test_dag_calls_count_only_what_each_carries(tmp_path: Path, monkeypatch) -> None:
    from bench.gpu import bundle, dag_prepare

    for name, size in (("wheels", 3), ("dag_wheels", 2), ("spacy_wheels", 5), ("dag", 4), ("data", 1)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "part").write_bytes(b"x" * size * 1000)
    (tmp_path / "commit.txt").write_text("0" * 40 + "\n")
    assert bundle.default_call(tmp_path) == ["commit.txt", "data", "wheels"]
    monkeypatch.setattr(bundle, "MAX_BYTES", 6000)
    assert dag_prepare.check_calls(tmp_path) == {"A": 5041, "A2": 5041, "B": 4041}
    (tmp_path / "spacy_wheels" / "more").write_bytes(b"x" * 1000)
    with pytest.raises(SystemExit, match=r"call A2 \(spacy_wheels, commit.txt\) is 0.0 MiB, over 0"):
        dag_prepare.check_calls(tmp_path)


@pytest.mark.skipif(not (REPO.parent / "shared" / "data").is_dir(), reason="the shared data mirror is absent")
def test_dag_carries_the_mirror_files_the_zeroshot_stage_reads(tiny_data, monkeypatch) -> None:
    """The zero-shot stage, run against the shared mirror's splits (its rows made up: synthetic), reads the splits
    dag_prepare carries whole; every other split travels as an empty stand-in."""
    from types import SimpleNamespace

    from bench.gpu.dag_prepare import zeroshot_splits
    from gpt1.data.rows import load_examples
    from gpt1.data.tokenizer import GPT1Tokenizer
    from gpt1.evaluation.probes import TASK_ORDER
    from gpt1.stages import zeroshot

    mirror, read = REPO.parent / "shared" / "data", {}

    def load(cfg, name: str, split: str):
        read.setdefault(name, set()).add(split)
        return load_examples(name, split, None, max_examples=8, synthetic=True)

    monkeypatch.setattr(zeroshot, "_load", load)
    tokenizer = GPT1Tokenizer.load(tiny_data.tokenizer)
    for name in TASK_ORDER:
        zeroshot.prepare_task(SimpleNamespace(data_mirror=mirror, synthetic=False), tokenizer, name, 16)
    assert read == zeroshot_splits(mirror)
    assert read["race"] == {"validation"} and read["cola"] == {"train", "validation"}


@pytest.mark.skipif(not (REPO.parent / "shared" / "data").is_dir(), reason="the shared data mirror is absent")
def test_dag_unpacks_a_mirror_holding_the_shared_mirrors_splits_and_checks_every_file(tmp_path: Path) -> None:
    """A profile that reads the mirror: what dag carries holds each split the shared mirror holds (what fine-tuning
    compares), whole where the zero-shot stage reads it, else an empty stand-in; a file unlike the manifest stops."""
    import time

    from bench.gpu import dag, dag_prepare
    from bench.gpu.env import Context
    from gpt1.data.rows import mirror_splits
    from gpt1.data.tasks import get_task

    mirror, results = REPO.parent / "shared" / "data", fake_results(tmp_path / "results")
    present = mirror_splits(get_task("rte"), mirror)  # as encode_task records it
    (results / "tasks" / "rte" / "encoded.json").write_text(json.dumps({"settings": {"source": {"present": present}}}))
    sets = ["finetune_tasks=[rte]", "ablation_tasks=[rte]", "layer_transfer_tasks=[]"]
    manifest = dag_prepare.make_dag(tmp_path / "bundle" / "dag", results, "default", sets, 2)
    ctx = Context(out=tmp_path / "out", work=tmp_path / "work", bundle=tmp_path / "bundle", device="cpu", tiny=True,
                  started=time.time(), budget_s=60.0)
    carried = dag.unpack(ctx, manifest, tmp_path / "repo")
    assert sorted(p.name for p in (tmp_path / "repo" / "results" / "default").iterdir()) == sorted(dag.DATA)
    for name in ("rte", "cola", "sst2", "race", "dprd"):
        assert mirror_splits(get_task(name), carried) == mirror_splits(get_task(name), mirror)
    high, wikitext = Path("ehovy", "race", "high"), Path("Salesforce", "wikitext", "wikitext-2-raw-v1")
    assert (carried / high / "validation.parquet").read_bytes() == (mirror / high / "validation.parquet").read_bytes()
    held_out = wikitext / "validation.parquet"  # the zero-shot stage's held-out perplexity
    assert (carried / held_out).read_bytes() == (mirror / held_out).read_bytes()
    assert (carried / high / "train.parquet").stat().st_size == 0 and (mirror / high / "train.parquet").stat().st_size
    manifest["files"]["tasks/rte/made.json"]["sha256"] = "0" * 64
    with pytest.raises(RuntimeError, match=r"tar\.xz: tasks/rte/made\.json is [0-9a-f]{64}, the manifest says 0+"):
        dag.unpack(ctx, manifest, tmp_path / "repo2")


def test_dag_without_its_bundle_is_skipped_saying_what_to_prepare(tmp_path: Path) -> None:
    """`--sections all` names dag too: where no dag/ was carried it is skipped, and the run still succeeds."""
    done = run_script(str(tmp_path / "out"), "--device", "cpu", "--sections", "dag", "--bundle", str(tmp_path),
                      "--work", str(tmp_path / "work"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    record = json.loads((tmp_path / "out" / "results.json").read_text())["sections"]["dag"]
    assert record["status"] == "skipped" and record["summary"].startswith("no dag/ in the bundle: prepare --dag-")


def test_install_without_wheels_says_what_to_run_first(tmp_path: Path) -> None:
    done = run_script("--install", "--bundle", str(tmp_path), env={"GPT1_GPU_SITE": str(tmp_path / "site")})
    assert done.returncode == 2 and not (tmp_path / "site").exists()
    assert done.stderr.strip().startswith(f"gpu_check: no wheels in {tmp_path}/wheels, {tmp_path}/dag_wheels or "
                                          f"{tmp_path}/spacy_wheels; run bash bench/gpu_check.sh --prepare here first")


def test_dag_follows_snakemakes_progress_from_its_job_table_then_its_steps() -> None:
    from bench.gpu.dag import progress

    table = "Job stats:\njob        count\n---------  -------\npretrain   2\nall        1\ntotal      3\n"
    assert progress("Building DAG of jobs...\n") == {"done": 0, "planned": None, "failed": {}}
    assert progress(table) == {"done": 0, "planned": 3, "failed": {}}
    steps = table + "1 of 3 steps (33%) done\n[...]\n2 of 3 steps (67%) done\n"
    assert progress(steps) == {"done": 2, "planned": 3, "failed": {}}
    # the first DAG on an H100 (2026-11-27): jobs of one rule failed; with --keep-going the others go on
    errors = "".join(f"Error in rule ablation_lstm:\n    message: None\n    jobid: {n}\n" for n in (44, 54, 56))
    assert progress(steps + errors)["failed"] == {"ablation_lstm": 3}


def running(pid: int) -> bool:
    """Whether a process runs (a zombie, killed but not yet reaped, does not)."""
    status = Path(f"/proc/{pid}/status")
    return status.is_file() and "\nState:\tZ" not in status.read_text()


def test_dag_stops_snakemake_with_its_jobs(tmp_path: Path, monkeypatch) -> None:
    """At the section's deadline Snakemake's whole process group goes: its jobs too, even one that ignores SIGTERM."""
    import time

    from bench.gpu import dag

    monkeypatch.setattr(dag, "STOP_WAIT_S", 1.0)
    pid_file = tmp_path / "job.pid"
    child = subprocess.Popen(["sh", "-c", f"sh -c 'trap \"\" TERM; echo $$ > {pid_file}; sleep 60' & wait"],
                             start_new_session=True)
    deadline = time.monotonic() + 60
    while not pid_file.is_file() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline, "the job never wrote its pid"
        time.sleep(0.05)
    job = int(pid_file.read_text())
    dag.stop(child)
    deadline = time.monotonic() + 5  # SIGKILL lands at once, its delivery is the kernel's
    while running(job) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert child.returncode is not None and not running(job)


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


def section_function(name: str):
    """A section's function, imported as gpu_check.RUNS names it: a renamed or broken section raises here."""
    import importlib

    from bench import gpu_check

    module, function = gpu_check.RUNS[name].split(":")
    return getattr(importlib.import_module(module), function)


# Sections whose rehearsal is a test of its own (the host probe's three, dropout's, dag's below), left out of the
# whole run
REHEARSED_ALONE = ("host_probe", "dropout", "dag")


@pytest.mark.slow
def test_cpu_rehearsal_runs_every_section_and_prints_the_table(tmp_path: Path, tiny_data) -> None:
    """Every section in one run, but those their own tests above rehearse alone (REHEARSED_ALONE: CI time)."""
    import shutil

    from bench.gpu.report import DAG_TAR, OUT_FILES, TITLES

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
    names = [name for name in SECTIONS if name not in REHEARSED_ALONE]
    assert all(callable(section_function(name)) for name in names)  # never a section silently left out
    done = run_script(str(out), "--device", "cpu", "--work", str(tmp_path / "work"), "--bundle", str(bundle),
                      "--sections", ",".join(names))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]

    # What comes back from the GPU machine: at most 8 files, every one written but section dag's (not run here)
    assert sorted(p.name for p in out.iterdir()) == sorted(set(OUT_FILES) - {DAG_TAR}) and len(OUT_FILES) <= 8
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


# Section dag's rehearsal: the smoke profile with one task and one ablation task; no layer runs (the schema allows
# only mnli and race there, each also to be fine-tuned: [] is the smallest set that plans)
DAG_LISTS = {"finetune_tasks": ["rte"], "ablation_tasks": ["rte"], "layer_transfer_tasks": []}
LONG_AGO = 946684800  # 2000-01-01: the data older than the code, as on the GPU machine, whose copy of the tree is new


@pytest.mark.slow
def test_dag_rehearsal_runs_the_whole_dag_through_snakemake_with_the_data_stages_carried(tmp_path: Path) -> None:
    """The data stages made here by Snakemake, prepared as a bundle and run by section dag through the script as the
    GPU machine runs it: the data stages only touched, every model job run, DVC clean, MLflow's runs finished, the
    archive back. PuLP is hidden (the GPU machine has none): a site first on PYTHONPATH whose `pulp` fails."""
    import tarfile

    from pipeline_repo import SNAKEMAKE, run, smoke_checkout, user_env

    from bench.gpu import checkout, env
    from bench.gpu.dag_prepare import default_jobs
    from gpt1.pipeline.plan import Plan

    made = smoke_checkout(tmp_path / "made", user_env(), **DAG_LISTS)
    run([*SNAKEMAKE, "--cores", "2", "--until", "encode", "encode_task"], made, user_env())
    results = made / "results" / "smoke"
    for path in results.rglob("*"):
        os.utime(path, (LONG_AGO, LONG_AGO))
    bundle, out, site = tmp_path / "bundle", tmp_path / "out", tmp_path / "site"
    sets = [f"--dag-set={key}={json.dumps(value)}" for key, value in DAG_LISTS.items()]
    prepared = run_script("--prepare", "--no-wheels", "--bundle", str(bundle), "--dag-results", str(results),
                          "--dag-profile", "smoke", *sets)
    assert prepared.returncode == 0, prepared.stdout[-2000:] + prepared.stderr[-2000:]
    site.mkdir()
    (site / "pulp.py").write_text("raise ImportError('no PuLP on the GPU machine')\n")
    done = run_script(str(out), "--device", "cpu", "--sections", "dag", "--bundle", str(bundle), "--work",
                      str(tmp_path / "work"), env={"GPT1_GPU_SITE": str(site)})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]

    record = json.loads((out / "results.json").read_text())["sections"]["dag"]
    data = record["data"]
    assert record["status"] == "ok", record
    # `snakemake --touch` with the data's files as targets: their five jobs marked done, none run
    assert data["touched"] == {"fetch": 1, "clean": 1, "bpe": 1, "encode": 1, "encode_task": 1}
    plan = Plan.from_params(checkout.params("smoke", top=DAG_LISTS))
    model_jobs = len(plan.finetune_runs()) + len(plan.layer_runs()) + 2 * len(plan.pretrain_models)  # zero-shot's too
    assert data["snakemake"]["done"] == data["snakemake"]["planned"] == model_jobs + 3  # report, dvc_commit, all
    assert data["rules"]["finetune"]["jobs"] == 2 and data["rules"]["dvc_commit"]["jobs"] == 1
    assert not {"fetch", "clean", "bpe", "encode", "encode_task"} & set(data["rules"])
    assert data["dvc_status"] == {} and data["jobs"] == default_jobs() and data["git"] is True
    runs = data["mlflow"]["runs"]
    assert {"pretrain-gpt", "pretrain-lstm", "finetune", "zeroshot", "report"} <= set(runs)
    assert {s for statuses in runs.values() for s in statuses} == {"FINISHED"} and len(runs["finetune"]) == 4
    times = data["mlflow"]["times"]  # where a job's time went: its training within the job, the job within the run
    assert set(times) == set(runs) and times["finetune"]["runs"] == 4
    assert 0 < times["finetune"]["train_s"] <= times["finetune"]["wall_s"] and times["finetune"]["run_s"] > 0
    # and each fine-tuning process's phases, from the OS's start of it to its run's last metrics (medians: their sum
    # need not be the process's, but each is within it)
    phases = times["finetune"]["phases"]
    assert list(phases) == ["start", "setup", "load", "open", "train", "evaluate", "write", "log", "process"]
    assert all(0 <= phases[p] <= phases["process"] for p in phases) and phases["train"] > 0
    assert "where a job's time went" in record["markdown"] and "finetune (4 runs): run " in record["markdown"]
    assert ", process: start " in record["markdown"] or "(process: start " in record["markdown"]

    with tarfile.open(out / "dag.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"results/smoke/tables/table2.md", "results/smoke/tables/table5.md", "results/smoke/metrics.json",
            "dvc.lock", "params.yaml", "pipeline_times.md", "results/smoke/finetune/rte/pretrained/0/predictions.jsonl",
            "results/smoke/pretrain/gpt/model.json"} <= names  # predictions: `gpt1 compare` tests a run paired
    assert not [n for n in names if n.endswith((".safetensors", ".pt")) or "/snapshots" in n]
    header = (out / "report.md").read_text().split("## ")[0]
    assert f"CPU {env.cpu_model()}" in header and f"commit: {env.git_commit()} (as prepared)" in header
