"""The DAG is declared once in each engine; this proves Snakemake's and DVC's are the same graph:
the same stages, each with the same command, inputs and outputs, for every profile."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pipeline_repo import free_port

from gpt1.pipeline import layout
from gpt1.pipeline.plan import ABLATION_VARIANTS, Plan
from gpt1.pipeline.rerun import RERUN_SETTINGS, dvc_key, resolve

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE_ONLY = {"all", "dvc_commit"}  # the default target and the rule that records outputs in DVC
PROFILES = list(yaml.safe_load((REPO / "params.yaml").read_text())["profiles"])


def workspace(tmp_path: Path, profile: str) -> Path:
    """A copy of what both engines read, with params.yaml selecting `profile` (dvc.yaml interpolates it)."""
    for name in ("workflow", "gpt1"):
        shutil.copytree(REPO / name, tmp_path / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", "environment.yml"):
        shutil.copy(REPO / name, tmp_path / name)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["profile"] = profile
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return tmp_path


def snakemake_stages(root: Path, profile: str, mirror: str | None = None) -> dict[str, dict]:
    """The jobs Snakemake plans, by dvc.yaml's stage names; GPT1_DATA_MIRROR set to `mirror` (unset for None)."""
    env = {k: v for k, v in os.environ.items() if k != "GPT1_DATA_MIRROR"} | ({"GPT1_DATA_MIRROR": mirror} if mirror
                                                                              else {})
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("snakemake_jobs.py")), str(root), profile],
                         cwd=root, capture_output=True, text=True, check=True, env=env)
    jobs = json.loads(out.stdout[out.stdout.index("JOBS ") + 5:])
    stages: dict[str, dict] = {}
    for job in jobs:
        if job["rule"] in SNAKEMAKE_ONLY:
            continue
        # A rule with wildcards is a foreach/matrix stage in dvc.yaml: name@value1-value2 (in wildcard order).
        name = job["rule"] + ("@" + "-".join(job["wildcards"]) if job["wildcards"] else "")
        assert name not in stages
        # The log redirection is Snakemake's own addition: DVC keeps no logs.
        cmd = job["shell"].strip()
        for log in job["log"]:
            cmd = cmd.removesuffix(f" 2>&1 | tee {log}")
        stages[name] = {"cmd": " ".join(cmd.split()), "deps": set(job["input"]), "outs": set(job["output"]),
                        "settings": job["settings"]}
    return stages


def dvc_stages(root: Path) -> dict[str, dict]:
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    Repo.init(str(root), no_scm=True)
    with Repo(str(root)) as repo:
        return {
            stage.name: {
                "cmd": " ".join(stage.cmd.split()),
                "deps": {d.def_path for d in stage.deps if not isinstance(d, ParamsDependency)},
                "outs": {o.def_path for o in stage.outs},
                "params": {key for d in stage.deps if isinstance(d, ParamsDependency) for key in d.params},
            }
            for stage in repo.index.stages
        }


def covers(dep: str, path: str) -> bool:
    return path == dep or path.startswith(dep.rstrip("/") + "/")


def producers(deps: set[str], stages: dict[str, dict]) -> set[str]:
    """The stages whose outputs a set of dependencies reads (a folder dependency reads what is inside it)."""
    return {name for name, stage in stages.items() for out in stage["outs"] for dep in deps
            if covers(dep, out) or covers(out, dep)}


def layout_outputs(profile: str) -> dict[str, set[str]]:
    """Every stage's outputs as gpt1.pipeline.layout names them, for params.yaml's fan-out lists, by dvc.yaml's stage
    names (foreach: name@item; matrix: name@value1-value2 in the matrix's key order)."""
    plan = Plan.from_params(yaml.safe_load((REPO / "params.yaml").read_text()))
    runs = plan.finetune_runs()
    fanout = {
        "pretrain": [(m,) for m in plan.pretrain_models],
        "zeroshot": [(m,) for m in plan.pretrain_models],
        "encode_task": [(t,) for t in plan.finetune_tasks],
        "finetune": [(t, v, s) for t, v, s in runs if v not in ABLATION_VARIANTS],
        **{f"ablation_{a}": [(t, s) for t, v, s in runs if v == a] for a in ABLATION_VARIANTS},
        "layers": plan.layer_runs(),
    }
    assert set(fanout) <= set(layout.OUTPUTS)
    stages = {}
    for stage, outputs in layout.OUTPUTS.items():
        for args in fanout.get(stage, [()]):
            name = stage + ("@" + "-".join(map(str, args)) if args else "")
            stages[name] = {f"results/{profile}/{path}" for path in outputs(*args)}
    return stages


def test_layout_names_each_file_once():
    stages = layout_outputs("default")
    files = [path for outs in stages.values() for path in outs]
    assert len(files) == len(set(files))
    assert not any(covers(a, b) for a in files for b in files if a != b)  # no output inside another
    source = (REPO / "gpt1" / "pipeline" / "layout.py").read_text()
    assert "import gpt1" not in source and "from gpt1" not in source  # a leaf: every module may read it


def test_the_report_writes_what_layout_names(tmp_path):
    from gpt1.pipeline import layout
    from gpt1.report.figures import FIGURES
    from gpt1.report.renderers import TABLE_FORMATS
    from gpt1.report.stage import declared_outputs

    assert (layout.REPORT_TABLES, FIGURES) == (layout.REPORT_TABLES, layout.REPORT_FIGURES)
    assert (TABLE_FORMATS, layout.FIGURE_FORMATS) == (layout.TABLE_FORMATS, layout.FIGURE_FORMATS)
    assert declared_outputs(tmp_path) == [tmp_path / path for path in layout.report_outputs()]


@pytest.mark.parametrize("profile", PROFILES)
def test_snakemake_and_dvc_declare_the_same_graph(tmp_path, profile):
    root = workspace(tmp_path, profile)
    snake, dvc = snakemake_stages(root, profile), dvc_stages(root)
    assert sorted(snake) == sorted(dvc)
    # ... and the outputs gpt1.pipeline.layout names: a file declared in one place and not the other fails here.
    expected = layout_outputs(profile)
    assert sorted(dvc) == sorted(expected)
    for name in dvc:
        assert dvc[name]["outs"] == expected[name], name
        assert snake[name]["outs"] == expected[name], name
        assert (snake[name]["cmd"], snake[name]["outs"]) == (dvc[name]["cmd"], dvc[name]["outs"]), name
        # Where DVC cannot list a product of files, it depends on their folder (the report stage): every
        # Snakemake input must lie under one of the stage's DVC dependencies and every DVC dependency must be used.
        assert all(any(covers(d, s) for d in dvc[name]["deps"]) for s in snake[name]["deps"]), name
        assert all(any(covers(d, s) for s in snake[name]["deps"]) for d in dvc[name]["deps"]), name
        assert producers(snake[name]["deps"], snake) == producers(dvc[name]["deps"], dvc), name
    assert any(f"results/{profile}/" in path for stage in dvc.values() for path in stage["outs"])
    exact = [n for n in dvc if n != "report"]
    assert all(snake[n]["deps"] == dvc[n]["deps"] for n in exact)


@pytest.mark.parametrize("profile", ["smoke", "default"])
def test_both_engines_rerun_on_the_settings_gpt1_rerun_declares(tmp_path, profile):
    """gpt1.pipeline.rerun's table is the one declaration of which settings rerun which stage: every dvc.yaml stage
    lists exactly its keys in `params:`, and every Snakemake job carries exactly their values (its `settings` param),
    the data mirror resolved as the stages resolve it (none for a profile that makes its own data)."""
    root = workspace(tmp_path, profile)
    snake, dvc = snakemake_stages(root, profile), dvc_stages(root)
    params = yaml.safe_load((root / "params.yaml").read_text())
    mirror = None if params["profiles"][profile]["corpus"]["source"] == "synthetic" else params["data_mirror"]
    assert {name.partition("@")[0] for name in dvc} == set(RERUN_SETTINGS)
    for name in dvc:
        stage = name.partition("@")[0]
        wanted = {dvc_key(key).replace("${profile}", profile) for key in RERUN_SETTINGS[stage]}
        assert dvc[name]["params"] == wanted, name
        assert snake[name]["settings"] == json.loads(json.dumps(resolve(stage, params, profile, mirror))), name


def test_a_changed_mirror_reruns_zeroshot_in_both_engines(tmp_path, monkeypatch):
    """The data mirror decides zero-shot's task data: a new mirror changes zeroshot's settings in Snakemake's plan
    (GPT1_DATA_MIRROR, which Snakemake sees), and `dvc status` names zeroshot's changed param after params.yaml's
    data_mirror changes (DVC sees params.yaml only)."""
    from dvc.repo import Repo

    root = workspace(tmp_path, "default")
    before, after = snakemake_stages(root, "default", "/data/a"), snakemake_stages(root, "default", "/data/b")
    changed = {name.partition("@")[0] for name in before if before[name]["settings"] != after[name]["settings"]}
    assert changed == {"fetch", "encode_task", "zeroshot"}
    dvc_stages(root)  # dvc init
    monkeypatch.chdir(root)  # DVC resolves a stage's paths from the working directory
    with Repo(str(root)) as repo:  # record zeroshot@gpt as if it had run with this params.yaml
        for stage in repo.index.stages:
            for path in [*(d.def_path for d in stage.deps), *(o.def_path for o in stage.outs)]:
                if not path.endswith((".yaml", ".py")) and not (root / path).exists():
                    (root / path).parent.mkdir(parents=True, exist_ok=True)
                    (root / path).write_text("stand-in\n")
        repo.commit("zeroshot@gpt", force=True)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["data_mirror"] = "/data/b"
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    with Repo(str(root)) as repo:
        status = repo.status(targets=["zeroshot@gpt"])
    assert status == {"zeroshot@gpt": [{"changed deps": {"params.yaml": {"data_mirror": "modified"}}}]}


@pytest.mark.parametrize(("profile", "env", "said"), [
    ("smoke", {"MLFLOW_TRACKING_URI": "http://127.0.0.1:{port}"},
     "MLflow server http://127.0.0.1:{port} is unreachable"),
    ("default", {"GPT1_DATA_MIRROR": "{root}/no-mirror"}, "data mirror {root}/no-mirror does not exist; fix "
                                                          "GPT1_DATA_MIRROR"),
])  # fmt: skip
def test_what_every_job_needs_is_checked_before_snakemake_removes_an_output(tmp_path, profile, env, said):
    """Snakemake removes a job's outputs before running it: a store that is down or a missing mirror stops the
    workflow in its onstart check, so the previous fetch outputs stay as they were."""
    root = workspace(tmp_path, profile)
    corpus = root / layout.profile_dir(profile) / layout.CORPUS
    corpus.mkdir(parents=True)
    finished = {corpus / layout.RAW: b'{"id": "finished"}\n', corpus / layout.RAW_MANIFEST: b"{}\n"}
    for path, data in finished.items():
        path.write_bytes(data)
    fill = {"port": free_port(), "root": root}
    environ = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{root}/mlflow.db"}
    environ |= {key: value.format(**fill) for key, value in env.items()}
    command = [sys.executable, "-m", "snakemake", "--cores", "1", "--forcerun", "fetch", "--until", "fetch"]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, env=environ, timeout=300)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert said.format(**fill) in done.stderr
    assert "rule fetch:" not in done.stderr + done.stdout  # no job started
    assert {path: path.read_bytes() for path in finished} == finished


def job_counts(dry_run_output: str) -> dict[str, int]:
    """Snakemake's "Job stats" table (rule, count) from a dry run's output."""
    table = dry_run_output[dry_run_output.index("Job stats:"):].splitlines()[3:]
    counts = {}
    for line in table:
        if not line.strip():
            break
        rule, count = line.split()
        counts[rule] = int(count)
    return counts


@pytest.mark.parametrize("profile", ["gpu", "gpu-minutes"])
def test_snakemake_dry_run_plans_the_whole_gpu_profile(tmp_path, profile):
    """`snakemake -n --config profile=<gpu profile>`, docs/operations.md's GPU commands without running them: every
    stage planned."""
    root = workspace(tmp_path, "default")  # params.yaml names another profile: --config alone picks the GPU one
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--config", f"profile={profile}"],
                         cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    seeds, ablations = len(params["seeds"]), len(params["ablation_tasks"])
    expected = {
        "fetch": 1, "clean": 1, "bpe": 1, "encode": 1, "pretrain": len(params["pretrain_models"]),
        "encode_task": len(params["finetune_tasks"]),
        "finetune": len(params["finetune_tasks"]) * len(params["finetune_variants"]) * seeds,
        "ablation_no_aux": ablations * seeds, "ablation_lstm": ablations * seeds,
        "layers": len(params["layer_transfer_tasks"]) * seeds, "zeroshot": len(params["pretrain_models"]),
        "report": 1, "all": 1,
    }  # fmt: skip
    counts = job_counts(out.stdout)
    assert counts.pop("total") == sum(expected.values())
    assert counts == expected
    assert f"sh workflow/scripts/gpt1.sh --per-gpu pretrain --profile {profile} --model gpt" in out.stdout
    assert "results/default" not in out.stdout


def test_the_gpu_workflow_profile_gives_each_model_job_one_gpu_slot_and_the_data_stages_none(tmp_path):
    """`snakemake --profile workflow/profiles/gpu` (device: cuda, K slots of the `gpu` resource, 2 `gpu_mem_units`):
    every model job of the default DAG holds one slot, no data job any, and the jobs that need much of the device's
    memory hold units; with the default device none holds either."""
    root = workspace(tmp_path, "default")
    slots, units, out_gpu = {}, {}, ""
    for name, args in {"gpu": ["--profile", "workflow/profiles/gpu"], "auto": ["--cores", "2"]}.items():
        out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", *args], cwd=root, capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        out_gpu = out_gpu or out.stdout
        slots[name] = job_gpu_slots(out.stdout)
        units[name] = job_resource(out.stdout, "gpu_mem_units")
    model = {"pretrain", "finetune", "ablation_no_aux", "ablation_lstm", "layers", "zeroshot", "report"}
    assert {rule for rule, gpu in slots["gpu"].items() if gpu == {1}} == model
    assert all(gpu == {0} for rule, gpu in slots["gpu"].items() if rule not in model | {"all", "dvc_commit"})
    assert all(gpu <= {0} for gpu in slots["auto"].values())
    # memory: a pre-training holds 1 of the profile's 2 gpu_mem_units, a RACE job both, every other job none
    assert units["gpu"]["pretrain"] == {1} and units["gpu"]["finetune"] == {0, 2} and units["gpu"]["layers"] == {0, 2}
    assert {rule for rule, held in units["gpu"].items() if held - {0}} == {"pretrain", "finetune", "layers"}
    assert all(held <= {0} for held in units["auto"].values())
    race = re.findall(r"rule finetune:\n(?:[^\n]+\n)*?\s+wildcards: task=(\w+)[^\n]*\n\s+resources:[^\n]*"
                      r"\bgpu_mem_units=(\d+)", out_gpu)
    assert race and all((task == "race") == (held == "2") for task, held in race)


def job_resource(dry_run_output: str, name: str) -> dict[str, set[int]]:
    """rule -> the values of resource `name` its planned jobs hold (0 where a job names none)."""
    found: dict[str, set[int]] = {}
    for block in dry_run_output.split("\nrule ")[1:]:
        rule = block.split(":", 1)[0].strip()
        match = re.search(rf"resources:[^\n]*\b{name}=(\d+)", block)
        found.setdefault(rule, set()).add(int(match.group(1)) if match else 0)
    return found


def job_gpu_slots(dry_run_output: str) -> dict[str, set[int]]:
    """rule -> the `gpu` resource values its planned jobs hold (0 where a job names none)."""
    return job_resource(dry_run_output, "gpu")
