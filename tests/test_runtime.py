"""gpt1.training.runtime on the CPU: the device, seeding, a single-process runtime, precision and kernels that change
nothing. The CUDA side of each decision is forced in tests/test_cuda_paths.py."""

from __future__ import annotations

import contextlib
import random

import numpy as np
import pytest
import torch

from gpt1.training.runtime import (
    Runtime,
    attention_kernels,
    autocast,
    default_device,
    init_runtime,
    resolve_compile,
    resolve_precision,
    seed_everything,
    shutdown_runtime,
)

CPU = torch.device("cpu")


def draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.rand()), float(torch.rand(()))


def test_seed_everything_seeds_python_numpy_and_torch() -> None:
    seed_everything(7)
    first = draws()
    seed_everything(7)
    assert draws() == first
    seed_everything(8)
    assert draws() != first


def test_default_device_is_the_cpu_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_device() == CPU and default_device(1) == CPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_device() == torch.device("cuda") and default_device(1) == torch.device("cuda", 1)


def test_one_process_without_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rt = init_runtime()
    assert rt == Runtime(rank=0, world_size=1, local_rank=0, device=CPU, distributed=False) and rt.is_main
    shutdown_runtime(rt)  # nothing to shut down


def test_cpu_runs_in_exact_fp32_with_pytorchs_own_kernels() -> None:
    assert resolve_precision("auto", CPU) is None and resolve_compile("auto", CPU) is False
    assert isinstance(autocast(CPU, None), contextlib.nullcontext)
    assert isinstance(attention_kernels(CPU), contextlib.nullcontext)
    with autocast(CPU, torch.bfloat16):
        assert torch.is_autocast_enabled("cpu")
