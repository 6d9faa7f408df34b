"""gpt1.training.runtime on the CPU: the device, seeding, a single-process runtime, precision and kernels that change
nothing. The CUDA side of each decision is forced in tests/test_cuda_paths.py."""

from __future__ import annotations

import contextlib
import random

import numpy as np
import pytest
import torch

from gpt1.modeling.model import GPT, GPTConfig
from gpt1.training.pretraining import make_optimizer
from gpt1.training.runtime import (
    Runtime,
    adamw,
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


def test_every_training_stage_takes_the_fused_adamw_on_the_cpu() -> None:
    """Pre-training and both fine-tuning paths build their optimizer here: fused where torch has the kernels."""
    params = [torch.nn.Parameter(torch.zeros(3))]
    assert adamw(params, torch.device("cpu"), lr=1e-3, betas=(0.9, 0.999), eps=1e-8).defaults["fused"]
    assert adamw(params, torch.device("meta"), lr=1e-3, betas=(0.9, 0.999), eps=1e-8).defaults["fused"] is None
    assert make_optimizer(GPT(GPTConfig(vocab_size=50, n_ctx=8, n_embd=16, n_layer=1, n_head=2)),
                          {"weight_decay": 0.01, "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8},
                          torch.device("cpu")).defaults["fused"]


def test_the_adamw_update_takes_the_exact_square_root() -> None:
    """With no momentum, no epsilon and a step of 1 the update is -g / sqrt(g * g): its bits show which square root
    the kernel took. numpy's is IEEE-exact on every x86-64; torch.sqrt goes to MKL's vector math, whose last bit
    depends on the processor (issue 42), so a stage built on it would make the pinned bytes the vendor's."""
    grad = torch.randn(262_147, generator=torch.Generator().manual_seed(0)) * 3.7
    weights = torch.zeros_like(grad, requires_grad=True)
    optimizer = adamw([weights], torch.device("cpu"), lr=1.0, betas=(0.0, 0.0), eps=0.0)
    optimizer.param_groups[0]["weight_decay"] = 0.0
    weights.grad = grad.clone()
    optimizer.step()
    g = grad.numpy()
    np.testing.assert_array_equal(weights.detach().numpy(), -(g / np.sqrt(g * g)))
