"""Section a: the GPU, its driver, torch and CUDA; the bf16 matrix-product peak this GPU reaches (the denominator of
section b's MFU) and its device-to-device copy bandwidth. On the CPU the same code runs at a toy size: its figures
say nothing of a GPU and are marked so."""

from __future__ import annotations

import os
import platform
import time
from importlib.metadata import PackageNotFoundError, version

import torch

from bench.gpu.env import Context, command_output, provenance
from bench.gpu.report import Record, md_table
from bench.train_step import matmul_peak, sync


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def machine(ctx: Context, device: torch.device) -> dict[str, object]:
    info: dict[str, object] = {
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
        "transformers": _version("transformers"), "mlflow": _version("mlflow-skinny"), "datasets": _version("datasets"),
        "cpus": os.cpu_count(),
    }  # fmt: skip
    info.update(provenance(ctx))  # the commit (the bundle's where no .git travelled), CPU model, host name
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, memory_gib=round(props.total_memory / 2**30, 1), sms=props.multi_processor_count,
                    capability=f"{props.major}.{props.minor}", cudnn=torch.backends.cudnn.version(),
                    driver=command_output("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"))
    return info


def copy_bandwidth(device: torch.device, mib: int, iters: int) -> float:
    """Bytes per second of a device-to-device copy, counting what is read and what is written (best of 3)."""
    source = torch.empty(mib * 2**20, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    target.copy_(source)
    best = 0.0
    for _ in range(3):
        sync(device)
        tick = time.perf_counter()
        for _ in range(iters):
            target.copy_(source)
        sync(device)
        best = max(best, 2 * source.numel() * iters / (time.perf_counter() - tick))
    return best


def run(ctx: Context) -> None:
    record = Record(ctx, "hardware")
    device = torch.device(ctx.device)
    record.update(**machine(ctx, device))
    n, iters, mib = (8192, 20, 1024) if ctx.cuda else (256, 2, 16)
    peak = matmul_peak(device, n=n, iters=iters)
    bandwidth = copy_bandwidth(device, mib, iters=10 if ctx.cuda else 2)
    record.update(matmul_peak_tflops=round(peak / 1e12, 1), matmul_n=n, copy_gb_s=round(bandwidth / 1e9, 1),
                  copy_mib=mib)
    what = record.data["gpu"] if ctx.cuda else f"{record.data['cpu']} (a toy size: not a GPU figure)"
    rows = [["device", what], ["driver", record.data.get("driver", "-")],
            ["torch / CUDA", f"{torch.__version__} / {torch.version.cuda}"],
            [f"bf16 matmul {n}x{n}x{n}, best of 5 x {iters}", f"{peak / 1e12:,.1f} TFLOP/s"],
            [f"device copy, {mib} MiB, read + write", f"{bandwidth / 1e9:,.1f} GB/s"]]
    record.save("ok", summary=f"{what}; bf16 matmul {peak / 1e12:,.0f} TFLOP/s; copy {bandwidth / 1e9:,.0f} GB/s",
                markdown=md_table(["what", "measured"], rows))
