"""Where and how the tensors run: the device, data parallelism (DDP under torchrun), precision (autocast), compile,
attention kernels, the optimizer's kernels and seeding. Every stage that trains or scores asks here, so a GPU run and
a CPU run differ in these functions only.

A library module: it knows no params.yaml key, no MLflow and no results path (settings come in as arguments).
"""

from __future__ import annotations

import contextlib
import os
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist


def default_device(index: int | None = None) -> torch.device:
    """CUDA when there is one (GPU `index` of this node, or the current one), else the CPU (bit-reproducible for
    a given thread count)."""
    return torch.device("cuda", index) if torch.cuda.is_available() else torch.device("cpu")


def seed_everything(seed: int) -> None:
    """Python's, NumPy's and torch's global generators, for code that draws from any of them."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ----------------------------------------------------------------------------------------------------------------
# Data parallelism


@dataclass(frozen=True)
class Runtime:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    distributed: bool

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_runtime() -> Runtime:
    """One process, or one of WORLD_SIZE started by torchrun (RANK / WORLD_SIZE / LOCAL_RANK): NCCL on CUDA,
    gloo on CPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    device = default_device(local)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(ddp_backend(device), device_id=device if device.type == "cuda" else None)
    return Runtime(rank, world, local, device, world > 1)


def ddp_backend(device: torch.device) -> str:
    """The process-group backend: NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if device.type == "cuda" else "gloo"


def shutdown_runtime(rt: Runtime) -> None:
    if rt.distributed and dist.is_initialized():
        dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------------------------
# Precision, compile, kernels


def resolve_precision(setting: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, or None for plain fp32. auto: bf16 on CUDA, fp32 on CPU (see bench/train_step.py)."""
    if setting == "bf16" or (setting == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def resolve_compile(setting: bool | str, device: torch.device) -> bool:
    return device.type == "cuda" if setting == "auto" else bool(setting)


def configure_device(device: torch.device) -> None:
    """TF32 for the fp32 matmuls left under autocast (CUDA only; CPU stays exact fp32)."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True


def autocast(device: torch.device, dtype: torch.dtype | None, cache: bool = True) -> contextlib.AbstractContextManager:
    """Mixed precision in `dtype` (None: plain fp32). `cache=False` for work recorded into a CUDA graph: no cast
    weight kept from a capture (make_graphed_callables requires it; inside torch.cuda.graph it is the cautious
    choice)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype, cache_enabled=cache)


def logits_multiple(device: torch.device) -> int:
    """What the GPT's LM head pads the vocabulary to while pre-training (`GPT.logits_multiple`): 64 on CUDA, the
    matrix units' tile, 1 (no padding) elsewhere, so a CPU run keeps its bits. The padding's logits are masked, so the
    loss is the real vocabulary's. Measured on an H100 as a padded embedding (2026-11-27, bench/gpu/levers.py, runs
    2-3): the paper's pre-training step 1.076-1.087x as fast with the vocabulary padded from 40,478 to 40,512 and
    masked; this form (the padding inside the head's product) is not timed yet (section b2's ours+pad1)."""
    return 64 if device.type == "cuda" else 1


def attention_backends(device: torch.device, varying: bool = False) -> list[torch.nn.attention.SDPBackend]:
    """The scaled_dot_product_attention kernels to try, in order; empty on other devices than CUDA (PyTorch's own
    choice). Flash never comes before the others: its dropout keeps a weight when an 8-bit random number clears p, so
    p = 0.1 trains at 26/256 = 0.1016 (measured on an H100, 2026-11-27: 0.10152 +- 0.00006 over 25M weights,
    bench/gpu_check.sh section g), where cuDNN's (0.09987) and the memory-efficient kernel's (0.09995) are p within
    their error; PyTorch's own order tries flash first. Pre-training (one shape): cuDNN first, whose forward and
    backward take what flash's take (0.204 against 0.201 ms at the paper's shape), the memory-efficient kernel's 1.8
    times that. Fine-tuning (`varying`: a shape per batch length, replayed in CUDA graphs): the memory-efficient
    kernel first, as exact, with no cuDNN plan to build for each new length; attention is a small share of its
    short sequences' work."""
    if device.type != "cuda":
        return []
    from torch.nn.attention import SDPBackend

    cudnn, efficient = SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION
    return [*((efficient, cudnn) if varying else (cudnn, efficient)), SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]


def attention_kernels(device: torch.device, varying: bool = False) -> contextlib.AbstractContextManager:
    """On CUDA the scaled_dot_product_attention kernels in `attention_backends`' order (pre-training's, or with
    `varying` fine-tuning's), each falling back to the next."""
    order = attention_backends(device, varying)
    if not order:
        return contextlib.nullcontext()
    from torch.nn.attention import sdpa_kernel

    return sdpa_kernel(order, set_priority=True)


# Where torch has fused AdamW kernels: every training job takes them there, for the bits as much as the speed. torch's
# single-tensor AdamW takes its square root through torch.sqrt, which ATen hands to MKL's vector math, whose last
# bit depends on the processor even under MKL_CBWR=COMPATIBLE (an Intel Xeon and AMD EPYCs differ: issue 42); the
# fused kernel takes it with the sqrt instruction, IEEE-exact on every x86-64 (tests/test_runtime.py).
FUSED_ADAMW_DEVICES = ("cpu", "cuda")


def adamw(params: Any, device: torch.device, *, lr: float | torch.Tensor, betas: tuple[float, float], eps: float,
          capturable: bool = False) -> torch.optim.AdamW:
    """torch's AdamW with decoupled weight decay (per the param groups), fused where the device has the kernels."""
    return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, capturable=capturable,
                             fused=device.type in FUSED_ADAMW_DEVICES or None)


__all__ = [
    "FUSED_ADAMW_DEVICES",
    "Runtime",
    "adamw",
    "attention_backends",
    "attention_kernels",
    "autocast",
    "configure_device",
    "ddp_backend",
    "default_device",
    "init_runtime",
    "resolve_compile",
    "resolve_precision",
    "seed_everything",
    "shutdown_runtime",
]
