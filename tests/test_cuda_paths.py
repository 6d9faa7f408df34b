"""Every place that branches on CUDA, with its decision forced on a machine without one.

No GPU has run this code yet (docs/operations.md, "What has run on a GPU"). These tests keep the CUDA side of each
branch from rotting unseen: they hand the decision a CUDA device, or make `torch.cuda.is_available()` say yes and
record what the code then asks of torch (the process-group backend, the device to pin, the copy to make, the RNG
state to restore), and check it is what a GPU run needs.

| branch | where | tests (words of their names) |
| --- | --- | --- |
| device cuda:LOCAL_RANK, set_device, DDP backend nccl or gloo | runtime.init_runtime, ddp_backend | init_runtime |
| DDP device_ids | pretraining.wrap | ddp_wraps |
| torch.compile | runtime.resolve_compile, pretraining.wrap | compile, compiled_model |
| autocast dtype | runtime.resolve_precision, autocast | precision, autocast |
| TF32 | runtime.configure_device | configure_device |
| attention kernels whose dropout is p (two orders) | runtime.attention_backends, attention_kernels | attention |
| the LM head's vocabulary padded to 64, masked | runtime.logits_multiple, pretraining.build_job | prepare_on_cuda |
| fused AdamW, and all of the above wired together | pretrain.prepare | prepare_on_cuda |
| pinned memory, non_blocking copy | ids.read_windows | read_windows |
| CUDA RNG state in checkpoints | resume.rng_states, set_rng_states | checkpoint_rng |
| the fine-tuning and zero-shot device | runtime.default_device | default_device |
| params.yaml's `device`: cpu hides the GPUs, cuda without one refused | cores.prepare_process | device_setting |
| the GPU benchmark: variants, fused AdamW, sync, peak memory, MFU | bench/train_step.py | bench |
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from gpt1.data import ids
from gpt1.stages import pretrain
from gpt1.training import pretraining, resume, runtime
from gpt1.training.runtime import Runtime

CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")
BF16 = torch.bfloat16


@pytest.fixture
def float32_settings() -> Iterator[None]:
    """configure_device changes process-wide matmul settings: put them back for the tests that follow."""
    precision, cudnn_tf32 = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    yield
    torch.set_float32_matmul_precision(precision)
    torch.backends.cudnn.allow_tf32 = cudnn_tf32


def pretend_cuda(monkeypatch: pytest.MonkeyPatch, **calls: Callable[..., Any]) -> None:
    """torch.cuda.is_available() says yes; `calls` replace other torch.cuda functions."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for name, function in calls.items():
        monkeypatch.setattr(torch.cuda, name, function)


# ------------------------------------------------------------------------------------------- runtime decisions


@pytest.mark.parametrize(("setting", "device", "dtype"), [
    ("auto", CUDA, BF16), ("auto", CPU, None), ("bf16", CUDA, BF16), ("bf16", CPU, BF16),
    ("fp32", CUDA, None), ("fp32", CPU, None),
])  # fmt: skip
def test_precision_auto_is_bf16_on_cuda_and_fp32_on_cpu(setting: str, device: torch.device, dtype) -> None:
    assert runtime.resolve_precision(setting, device) == dtype


def test_autocast_on_cuda_is_a_bf16_cuda_autocast() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a CPU-only torch warns that it disables CUDA autocast
        context = runtime.autocast(CUDA, BF16)
    assert isinstance(context, torch.autocast)
    assert (context.device, context.fast_dtype) == ("cuda", BF16)
    assert isinstance(runtime.autocast(CUDA, None), contextlib.nullcontext)


@pytest.mark.parametrize(("setting", "device", "compiled"), [
    ("auto", CUDA, True), ("auto", CPU, False), (True, CPU, True), (False, CUDA, False),
])  # fmt: skip
def test_compile_auto_is_on_for_cuda_only(setting: bool | str, device: torch.device, compiled: bool) -> None:
    assert runtime.resolve_compile(setting, device) is compiled


def test_configure_device_turns_tf32_on_for_cuda_only(float32_settings: None) -> None:
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    runtime.configure_device(CPU)
    assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32) == ("highest", False)
    runtime.configure_device(CUDA)
    assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32) == ("high", True)


def test_attention_prefers_the_kernels_whose_dropout_is_p_on_cuda() -> None:
    """cuDNN, then memory-efficient, then flash (its dropout is 26/256 for p = 0.1), then math."""
    from torch.nn.attention import SDPBackend

    assert runtime.attention_backends(CUDA) == [SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                                                 SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]
    assert runtime.attention_backends(CPU) == []
    assert isinstance(runtime.attention_kernels(CPU), contextlib.nullcontext)


def test_fine_tuning_attention_prefers_the_memory_efficient_kernel_on_cuda() -> None:
    """Fine-tuning's many shapes: the memory-efficient kernel (p exact, no cuDNN plan per length), then cuDNN; flash
    still never before them."""
    from torch.nn.attention import SDPBackend

    assert runtime.attention_backends(CUDA, varying=True) == [SDPBackend.EFFICIENT_ATTENTION,
                                                               SDPBackend.CUDNN_ATTENTION,
                                                               SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]
    assert runtime.attention_backends(CPU, varying=True) == []


@pytest.mark.parametrize("varying", [False, True])
def test_attention_kernels_on_cuda_set_that_priority_while_inside(varying: bool) -> None:
    get_order = getattr(torch._C, "_get_sdp_priority_order", None)
    if get_order is None:
        pytest.skip("this torch cannot report the SDPA priority order")
    wanted = [int(b) for b in runtime.attention_backends(CUDA, varying)]
    before = get_order()
    with runtime.attention_kernels(CUDA, varying):
        assert get_order()[: len(wanted)] == wanted
    assert get_order() == before


def test_ddp_backend_is_nccl_on_gpus_and_gloo_on_cpus() -> None:
    assert runtime.ddp_backend(torch.device("cuda", 3)) == "nccl"
    assert runtime.ddp_backend(CPU) == "gloo"


def torchrun_env(monkeypatch: pytest.MonkeyPatch, calls: dict[str, Any]) -> None:
    """Rank 1 of 2 on its node's second GPU slot, with a process group that records what it was asked for."""
    for key, value in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(runtime.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(runtime.dist, "init_process_group", lambda backend, **kw: calls.update(backend=backend, **kw))


def test_init_runtime_on_cuda_takes_the_local_gpu_and_asks_for_nccl(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, Any] = {}
    torchrun_env(monkeypatch, calls)
    pretend_cuda(monkeypatch, set_device=lambda device: calls.update(set_device=device))
    rt = runtime.init_runtime()
    assert rt == Runtime(rank=1, world_size=2, local_rank=1, device=torch.device("cuda", 1), distributed=True)
    assert calls == {"set_device": torch.device("cuda", 1), "backend": "nccl", "device_id": torch.device("cuda", 1)}


def test_init_runtime_without_cuda_asks_for_gloo_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, Any] = {}
    torchrun_env(monkeypatch, calls)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rt = runtime.init_runtime()
    assert (rt.device, rt.distributed) == (CPU, True)
    assert calls == {"backend": "gloo", "device_id": None}


def test_ddp_wraps_the_local_gpu_on_cuda_only(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[list[int] | None] = []

    class RecordingDDP(nn.Module):
        """Stands in for DistributedDataParallel (which needs a process group): keeps what it was given."""

        def __init__(self, module: nn.Module, device_ids: list[int] | None = None) -> None:
            super().__init__()
            self.module = module
            made.append(device_ids)

    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", RecordingDDP)
    for device in (torch.device("cuda", 1), CPU):
        job = SimpleNamespace(raw=nn.Linear(2, 2), compiled=False, rt=Runtime(1, 2, 1, device, True))
        model, evaluator = pretraining.wrap(job)
        assert isinstance(model, RecordingDDP) and model.module is job.raw and evaluator is job.raw
    assert made == [[1], None]


def test_compiled_model_is_what_trains_and_evaluates(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[nn.Module] = []
    monkeypatch.setattr(torch, "compile", lambda module: compiled.append(module) or nn.Sequential(module))
    job = SimpleNamespace(raw=nn.Linear(2, 2), compiled=runtime.resolve_compile("auto", CUDA),
                          rt=Runtime(0, 1, 0, CUDA, False))
    model, evaluator = pretraining.wrap(job)
    assert compiled == [job.raw] and model is evaluator and model[0] is job.raw


# ------------------------------------------------------------------------------------------- wired together


def test_prepare_on_cuda_asks_for_fused_adamw_bf16_compile_and_tf32(
    monkeypatch: pytest.MonkeyPatch, make_config: Callable, tiny_data: Any, tmp_path: Path, float32_settings: None
) -> None:
    real_build = pretraining.build_model

    def build_here(kind: str, config: Any) -> nn.Module:
        model = real_build(kind, config)
        model.to = lambda *args, **kwargs: model  # no CUDA in this torch: the weights stay where they are
        return model

    monkeypatch.setattr(pretraining, "build_model", build_here)
    torch.set_float32_matmul_precision("highest")
    on_gpu = Runtime(0, 1, 0, CUDA, False)
    job = pretrain.prepare(make_config(), "gpt", tiny_data.ids, tiny_data.tokenizer, tmp_path / "gpu", on_gpu)
    assert job.optimizer.defaults["fused"] is True
    assert (job.dtype, job.compiled) == (BF16, True)
    assert job.raw.logits_multiple == 64  # the LM head pads the vocabulary for the matrix units, masked
    assert torch.get_float32_matmul_precision() == "high"

    on_cpu = Runtime(0, 1, 0, CPU, False)
    job = pretrain.prepare(make_config(), "gpt", tiny_data.ids, tiny_data.tokenizer, tmp_path / "cpu", on_cpu)
    assert job.optimizer.defaults["fused"] is True  # the CPU's fused kernels too: their sqrt is exact (issue 42)
    assert (job.dtype, job.compiled) == (None, False)
    assert job.raw.logits_multiple == 1  # the CPU's bits: no padding


def test_read_windows_pins_then_copies_asynchronously_to_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[Any] = []
    real_to = torch.Tensor.to

    def pin_memory(self: torch.Tensor) -> torch.Tensor:
        events.append("pin_memory")
        return self

    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if args and isinstance(args[0], torch.device) and args[0].type == "cuda":
            events.append(("to", args[0], kwargs.get("non_blocking", False)))
            return self
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    monkeypatch.setattr(torch.Tensor, "to", to)
    tokens = np.arange(40, dtype=np.uint16)
    offsets = torch.tensor([0, 20])
    x, y = ids.read_windows(tokens, offsets, 4, CPU)
    assert events == []
    x, y = ids.read_windows(tokens, offsets, 4, CUDA)
    assert events == ["pin_memory", ("to", CUDA, True)]
    assert x.tolist() == [[0, 1, 2, 3], [20, 21, 22, 23]] and y.tolist() == [[1, 2, 3, 4], [21, 22, 23, 24]]
    assert x.dtype == torch.int64 and x.is_contiguous() and y.is_contiguous()


def test_checkpoint_rng_keeps_the_cuda_generators_and_restores_them_on_the_same_gpu_count(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    gpu_states = [torch.arange(16, dtype=torch.uint8), torch.arange(16, 32, dtype=torch.uint8)]
    restored: list[list[torch.Tensor]] = []
    pretend_cuda(monkeypatch, get_rng_state_all=lambda: gpu_states, set_rng_state_all=restored.append,
                 device_count=lambda: 2)
    torch.save({"rng": resume.rng_states()}, tmp_path / "state.pt")
    states = torch.load(tmp_path / "state.pt", map_location="cpu", weights_only=True)["rng"]  # as load_checkpoint
    resume.set_rng_states(states)
    assert len(restored) == 1 and all(torch.equal(a, b) for a, b in zip(restored[0], gpu_states, strict=True))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # resumed on another number of GPUs
    resume.set_rng_states(states)
    assert len(restored) == 1  # the CUDA generators keep the seed each micro-batch sets anyway


def test_checkpoint_rng_without_cuda_stores_no_cuda_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resume.rng_states()["cuda"] == []


def test_the_default_device_is_cuda_when_there_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert runtime.default_device() == CPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert runtime.default_device().type == "cuda"


# ------------------------------------------------------------------------------------------- bench/train_step.py


@pytest.fixture(scope="module")
def train_step() -> ModuleType:
    return importlib.import_module("bench.train_step")


def test_bench_cuda_defaults_are_the_paper_model_and_the_gpu_variants(train_step: ModuleType) -> None:
    args = train_step.parse_args(["--device", "cuda"])
    assert (args.n_layer, args.n_embd, args.n_head, args.n_ctx, args.vocab, args.batch) == (12, 768, 12, 512, 40478, 64)
    assert args.variants == ["ours", "ours-eager", "hf"]
    assert train_step.parse_args([]).variants == ["ours", "hf", "bf16", "compile"]


def test_bench_ours_trains_as_pretraining_does_on_each_device(train_step: ModuleType) -> None:
    gpu, cpu = train_step.recipes(CUDA), train_step.recipes(CPU)
    ours, eager = gpu["ours"], gpu["ours-eager"]
    assert (ours.compiled, ours.autocast, ours.label) == (True, BF16, "ours, bf16 + compile, vocab padded to 64")
    assert (eager.compiled, eager.autocast, eager.logits_multiple) == (False, BF16, 64)
    assert (gpu["hf"].compiled, gpu["hf"].autocast) == (False, BF16)
    assert set(gpu) == {"ours", "ours-eager", "hf"}
    assert (cpu["ours"].compiled, cpu["ours"].autocast, cpu["ours"].label) == (False, None, "ours, fp32")
    assert cpu["ours"].logits_multiple == 1
    assert cpu["hf"].autocast is None and set(cpu) == {"ours", "hf", "bf16", "compile"}


def test_bench_uses_fused_adamw_on_cuda_only(train_step: ModuleType) -> None:
    loss = train_step.ours_loss
    assert train_step.Variant("gpu", nn.Linear(2, 2), loss, BF16, CUDA).optimizer.defaults["fused"] is True
    assert train_step.Variant("cpu", nn.Linear(2, 2), loss, None, CPU).optimizer.defaults["fused"] is None


def test_bench_synchronises_and_tracks_peak_memory_on_cuda_only(
    train_step: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Any] = []
    pretend_cuda(monkeypatch, synchronize=lambda device: calls.append(("synchronize", device)),
                 reset_peak_memory_stats=lambda device: calls.append(("reset", device)),
                 max_memory_allocated=lambda device: 3 * 2**30)
    for device in (CPU, CUDA):
        train_step.sync(device)
        train_step.reset_peak_memory(device)
    assert calls == [("synchronize", CUDA), ("reset", CUDA)]
    assert (train_step.peak_memory(CUDA), train_step.peak_memory(CPU)) == (3 * 2**30, 0)


def test_bench_refuses_cuda_without_a_gpu(train_step: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="no CUDA device"):
        train_step.main(["--device", "cuda"])


def test_bench_report_on_cuda_has_mfu_over_the_measured_peak_and_names_the_gpu(
    train_step: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    pretend_cuda(monkeypatch, get_device_name=lambda *args: "NVIDIA H100 80GB HBM3")
    args = train_step.parse_args(["--device", "cuda", "--n-layer", "1", "--n-embd", "16", "--n-head", "2",
                                  "--n-ctx", "8", "--vocab", "50", "--batch", "2"])
    ours = SimpleNamespace(name="ours, bf16 + compile", samples=[1000.0, 3000.0, 2000.0], peak_bytes=2**30)
    hf = SimpleNamespace(name="HF OpenAIGPT", samples=[500.0, 1000.0, 1000.0], peak_bytes=2**31)
    peak = 1e9
    text = train_step.report([ours, hf], args, CUDA, peak)
    per_token = train_step.flops_per_token(train_step.GPT(train_step.GPTConfig(
        vocab_size=50, n_ctx=8, n_embd=16, n_layer=1, n_head=2)))
    header, _, row, hf_row = text.splitlines()[:4]
    assert header.endswith("| MFU | peak memory GiB |") and "NVIDIA H100 80GB HBM3" in row
    assert row.endswith(f"| {per_token * 2000 / peak:.1%} | 1.00 |") and hf_row.endswith("| 2.00 |")
    assert row.count("| 3.00x / 2.00x |") == 1  # vs HF: best 3000 / 1000, median of the paired 2, 3, 2
    assert "measured bf16 matmul peak" in text


@pytest.mark.usefixtures("products_on_torch")
def test_bench_matmul_peak_counts_two_n_cubed_flops_per_product(
    train_step: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = itertools.count(step=0.5)  # every timed window lasts 0.5 s
    monkeypatch.setattr(train_step.time, "perf_counter", lambda: next(clock))
    assert train_step.matmul_peak(CPU, n=32, iters=2) == 2 * 32**3 * 2 / 0.5


def test_device_setting_cpu_hides_the_gpus_from_model_stages_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpt1.training import cores

    cpu = {"pinned": True, "threads": 1}
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cores.prepare_process("clean", cpu, 1, "cpu")  # a data stage: nothing to hide
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    cores.prepare_process("finetune", cpu, None, "cpu")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    cores.prepare_process("finetune", cpu, None, "auto")
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_device_setting_cuda_without_a_gpu_is_one_line_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpt1.pipeline.errors import ConfigError
    from gpt1.training import cores

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"^device: cuda, but torch .* sees no CUDA device.*set device: auto or cpu"):
        cores.prepare_process("pretrain", {"pinned": True, "threads": 1}, None, "cuda")
    pretend_cuda(monkeypatch)
    cores.prepare_process("pretrain", {"pinned": True, "threads": 1}, None, "cuda")  # a GPU: no complaint
