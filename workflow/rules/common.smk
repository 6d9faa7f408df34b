# Validation, the profile, and path helpers every rule file uses.
import datetime
import os
import sys

import yaml
from snakemake.settings.types import DeploymentMethod

sys.path.insert(0, str(Path(workflow.basedir).parent))  # the gpt1 package, importable without installing
from gpt1.pipeline import layout  # noqa: E402
from gpt1.pipeline.codedeps import stage_code  # noqa: E402
from gpt1.pipeline.plan import Plan  # noqa: E402
from gpt1.pipeline.rerun import resolve as resolve_settings  # noqa: E402
from gpt1.pipeline.config import (
    LAYER_TRANSFER_TASKS,
    makes_its_own_data,
    validate as validate_params,
    yaml12_floats,
)  # noqa: E402
from gpt1.pipeline.errors import ConfigError, Gpt1Error  # noqa: E402

# `configfile:` reads YAML 1.1, where `lr: 1e-3` is the string '1e-3'; params.yaml means YAML 1.2 (as DVC and the
# gpt1 CLI read it). Then the same checks and one-line messages as the CLI: ../schemas/params.schema.yaml and the
# cross-field rules JSON Schema cannot say.
config.update(yaml12_floats(dict(config)))
try:
    validate_params(config)
except ConfigError as err:
    given = " ".join(f"{key}={value}" for key, value in workflow.config_settings.config.items())
    raise WorkflowError(f"params.yaml{f' with --config {given}' if given else ''}: {err}") from None

# One id for all the MLflow runs of this invocation: the report stage makes them children of its run. Kept if
# already set (a cluster job re-reads this file with the submitting process's environment).
os.environ.setdefault("GPT1_PIPELINE_RUN", f"snakemake-{datetime.datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}")


envvars:
    "GPT1_PIPELINE_RUN",


# Stage commands are `sh workflow/scripts/gpt1.sh <stage> ...` (in dvc.yaml too): it runs `python -m gpt1` with
# $GPT1_PYTHON, set here to the Python running Snakemake, so `.venv/bin/snakemake --cores all` works from a shell
# where nothing is activated; with --use-conda, to the rule's env's `python`. `dvc` (the dvc_commit rule) is the one
# beside that Python: its folder goes first on PATH. (Both are set for the jobs, not required from the user, so
# neither is an `envvars:` entry.)
USE_CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
os.environ.update(GPT1_PYTHON="python" if USE_CONDA else sys.executable)
PYTHON_BIN = os.path.dirname(sys.executable)
if os.environ.get("PATH", "").split(os.pathsep)[0] != PYTHON_BIN:
    os.environ.update(PATH=os.pathsep.join([PYTHON_BIN, os.environ.get("PATH", "")]))


PROFILE = config["profile"]
SETTINGS = config["profiles"][PROFILE]

# Cores per job (Snakemake hands a job's threads on as OMP_NUM_THREADS). A pinned profile (cpu.pinned) computes
# every model job with cpu.threads threads whatever the machine (the bytes depend on it), so each such job is given
# that many cores. Unpinned: the fine-tuning fan-out and the analyses are many small jobs, one core each runs them
# side by side, 1.47x the work of one job at a time on every core for fine-tuning, 1.23x for pre-training
# (bench/job_threads.py); the pre-trained models share the cores. Change with --set-threads RULE=N (unpinned).
CORES = workflow.cores or 1
PINNED_THREADS = SETTINGS["cpu"]["threads"] if SETTINGS["cpu"]["pinned"] else None
FANOUT_THREADS = PINNED_THREADS or 1
PRETRAIN_THREADS = PINNED_THREADS or max(1, CORES // len(config["pretrain_models"]))
ENV = "../envs/gpt1.yaml"
# The model rules' share of a GPU: with `device: cuda` each takes one slot of Snakemake's standard `gpu` resource, so
# `--resources gpu=K` (workflow/profiles/gpu: K = 8) lets K model jobs share one device while the data stages use
# the cores; with auto or cpu, none (a job on the CPU holds no GPU).
GPU_SLOTS = 1 if config["device"] == "cuda" else 0
# What K slots cannot say: a few jobs need much of the device's memory. Estimated (~34 * n_embd bytes of activations
# per token and layer under bf16 autocast, fp32 logits and their gradient for the auxiliary LM, 16 bytes a weight;
# docs/operations.md#the-whole-dag-on-one-gpu) at the paper's model: a RACE job, a batch of 32 x 4 answers whose
# contexts fill n_ctx = 512, ~49 GB; a pre-training, 64 x 512 tokens, ~25 GB (the GPT) and ~16 GB (the LSTM); every
# other task's batches a few GB. So they also hold units of the `gpu_mem_units` resource (workflow/profiles/gpu: 2):
# a pre-training 1, a RACE job 2, so that two RACE jobs, or one beside a pre-training, never share an 80 GB device.
GPU_MEM_UNITS_TASKS = ("race",)


def gpu_mem_units(wildcards):
    """A model job's units of the `gpu_mem_units` resource: 2 for a RACE job, 1 for a pre-training, else 0."""
    if not GPU_SLOTS:
        return 0
    task = getattr(wildcards, "task", None)
    return 2 if task in GPU_MEM_UNITS_TASKS else 1 if task is None and hasattr(wildcards, "model") else 0


def data_mirror():
    """The data mirror the profile reads (GPT1_DATA_MIRROR wins over params.yaml): a params value, so changing it
    reruns the data. None where the project makes the corpus and the task data itself (smoke): nothing to rerun."""
    if makes_its_own_data(SETTINGS):
        return None
    return os.environ.get("GPT1_DATA_MIRROR") or config["data_mirror"]


def check_before_any_job():
    """Snakemake removes a job's previous outputs before it runs the job, so what would fail every job is checked
    once, before any starts (onstart): a store that is down or a mirror that is not there removes no finished output.
    (Each stage checks them again, and all else, before its work; dvc.yaml's `dvc repro` has no such hook.)"""
    from gpt1.data.sources import check_mirror_folder
    from gpt1.pipeline.mlflow_store import check_store

    try:
        check_store()
        if (mirror := data_mirror()) is not None:
            check_mirror_folder(Path(mirror))
    except Gpt1Error as err:
        raise WorkflowError(str(err)) from None


def settings(stage):
    """The values of the settings whose change must rerun `stage` (gpt1.pipeline.rerun, the table dvc.yaml's `params:` follow
    too): one param of its rule, so that Snakemake replans the job when one changes."""
    return resolve_settings(stage, config, PROFILE, data_mirror())


def out(*parts):
    """A path under results/<profile>/ (the parts: gpt1.pipeline.layout's names)."""
    return os.path.join(layout.profile_dir(PROFILE), *parts)


def outs(paths):
    """gpt1.pipeline.layout's paths (relative to results/<profile>/) under results/<profile>/."""
    return [out(path) for path in paths]


def log_file(name):
    return out(layout.log(name))


def code(command):
    """The package files `gpt1 <command>` may run, derived from its imports (gpt1.pipeline.codedeps): a change to any of
    them reruns the rule. dvc.yaml lists the same files (tools/dvc_code_deps.py --write; tests/test_codedeps.py)."""
    return stage_code(command)


def folder_of_input(name):
    """A params function: the folder of a named input (the CLI takes folders; Snakemake tracks the files)."""
    return lambda wildcards, input: os.path.dirname(input[name])


def folder_of_output(name):
    return lambda wildcards, output: os.path.dirname(output[name])


def data_outputs():
    return rules.encode.output


def task_data_outputs():
    return [path for task in config["finetune_tasks"] for path in outs(layout.encode_task_outputs(task))]


PRETRAINED = config["pretrain_models"]


def pretrain_outputs():
    return [path for model in PRETRAINED for path in outs(layout.pretrain_outputs(model))]


# The fan-out: gpt1.pipeline.plan builds it once for the rules, the report and the tests.
PLAN = Plan.from_params(config)


def finetune_outputs():
    return [path for run in PLAN.finetune_runs() for path in outs(layout.finetune_outputs(*run))]


def analysis_outputs():
    zeroshot = [path for model in PRETRAINED for path in outs(layout.zeroshot_outputs(model))]
    layers = [path for run in PLAN.layer_runs() for path in outs(layout.layers_outputs(*run))]
    return zeroshot + layers


# dvc.yaml interpolates the profile that params.yaml names; Snakemake may run another one (--config profile=...),
# whose outputs DVC cannot describe, so outputs are recorded in DVC only when the two profiles agree.
with open("params.yaml") as handle:
    DVC_PROFILE = yaml.safe_load(handle)["profile"]


def dvc_commit_flag():
    if DVC_PROFILE == PROFILE:
        return out(layout.DVC_COMMIT_FLAG)
    print(
        f"Note: params.yaml selects profile {DVC_PROFILE!r}, this run {PROFILE!r}: not recorded in DVC.",
        file=sys.stderr,
    )
    return []
