"""How many cores a stage computes with, and the process set up for it before the stage loads: `--workers`
processes for the stages that fan text out to a pool (clean, bpe, encode), torch threads for the stages that run a
model; GPT1_WORKERS, else OMP_NUM_THREADS (which Snakemake sets to a job's `threads`) when `--workers` is not given;
a pinned profile's model stages compute with its `cpu.threads` whatever was asked (gpt1.training.numerics). The rest run
one process on one core and take no --workers. Called by the CLI; a library (it reads the `cpu` section it is given).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from gpt1.pipeline.errors import ConfigError, UsageError
from gpt1.training import numerics

POOL_STAGES = frozenset({"clean", "bpe", "encode"})
TORCH_STAGES = frozenset({"pretrain", "finetune", "layers", "zeroshot", "report"})  # report: its page of samples
TORCH_TOOLS = frozenset({"sample"})  # gpt1.cli.commands: no stage, but a model run as one is (pinned, threads)
WORKERS_ENV = ("GPT1_WORKERS", "OMP_NUM_THREADS")  # Snakemake sets OMP_NUM_THREADS to a job's threads


def env_workers() -> int | None:
    """GPT1_WORKERS, else OMP_NUM_THREADS (so a Snakemake job's `threads` hold), else None."""
    for name in WORKERS_ENV:
        value = os.environ.get(name, "").split(",")[0].strip()  # OpenMP's nested form "4,2": the outer level
        if value:
            if not value.isdigit() or int(value) < 1:
                raise ConfigError(f"{name}={value!r}: expected a number of cores to use, at least 1")
            return int(value)
    return None


def default_workers(command: str) -> int | None:
    """--workers when not given: the environment's (above), else every core for a pool and torch's own default for
    a model (None: leave it, torch picks)."""
    workers = env_workers()
    if workers is None and command in POOL_STAGES:
        return len(os.sched_getaffinity(0))
    return workers


def model_threads(cpu: dict[str, Any], workers: int | None, explicit: bool) -> int | None:
    """A model stage's torch threads: the profile's cpu.threads when pinned (the bytes depend on it, so neither
    --cores nor the machine may change it), else --workers / GPT1_WORKERS / OMP_NUM_THREADS, else torch's own."""
    if not cpu["pinned"]:
        return workers
    if explicit and workers != cpu["threads"]:
        raise UsageError(f"--workers {workers}: the profile pins every model job to cpu.threads={cpu['threads']} "
                         f"(cpu.pinned: true, the same bytes on every host); use --set cpu.threads={workers} "
                         f"(other bytes, as reproducible) or --set cpu.pinned=false (the host's speed)")
    if workers is not None and workers != cpu["threads"]:
        print(f"gpt1: computing with cpu.threads={cpu['threads']} torch threads (pinned), not the "
              f"{workers} of the environment", file=sys.stderr)
    return cpu["threads"]


def prepare_process(command: str, cpu: dict[str, Any], workers: int | None, device: str = "auto") -> int | None:
    """Before the stage module (and torch) loads: pin the numerics of a pinned profile, hide the GPUs from a model
    stage with `device: cpu` (torch reads CUDA_VISIBLE_DEVICES once), then the workers of a pool stage or the torch
    threads of a model stage (returned; None: torch's own choice); `device: cuda` without a GPU is refused."""
    if cpu["pinned"]:
        numerics.pin_environment()  # the libraries read it once, when they load
    if device == "cpu" and command in TORCH_STAGES | TORCH_TOOLS:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    explicit = workers is not None
    if workers is None and command in POOL_STAGES | TORCH_STAGES | TORCH_TOOLS:
        workers = default_workers(command)
    if command in TORCH_STAGES | TORCH_TOOLS:
        workers = model_threads(cpu, workers, explicit)
        numerics.apply(cpu["pinned"], workers)
        if device == "cuda":
            require_cuda()
    return workers


def require_cuda() -> None:
    """`device: cuda` where torch sees no GPU: one line naming the setting, before any work."""
    import torch

    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        hidden = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        raise ConfigError(f"device: cuda, but torch {torch.__version__} sees no CUDA device{hidden}; set device: "
                          f"auto or cpu in params.yaml (snakemake --config device=cpu, dvc exp run -S device=cpu)")


__all__ = ["POOL_STAGES", "TORCH_STAGES", "TORCH_TOOLS", "WORKERS_ENV", "default_workers", "env_workers",
           "model_threads", "prepare_process", "require_cuda"]
