"""What decides the bits of a CPU run, pinned so that x86-64 hosts with AVX2 and FMA compute the same bytes whatever
their vendor: shown for every operation the pipeline runs on two AMD EPYCs (Zen 3 and Zen 5) and an Intel Xeon
(`tools/numerics_probe.py`, issue 42; BENCHMARKS.md "GPU", 2026-11-27 run 3), the Xeon after AdamW went fused in
every training stage (`gpt1.training.runtime.adamw`: torch's single-tensor AdamW takes torch.sqrt, MKL's vector math,
whose last bit is the vendor's).

Measured (`bench/pinning.py`, BENCHMARKS.md "Pinned kernels"): the same training step gives other bits when the
instruction set of ATen's kernels, of MKL's matrix products or of oneDNN changes, and when the number of threads
changes (ATen splits a long sum across its threads, MKL its blocks). The pinned mode fixes all of them:

- Every matrix product through numpy's OpenBLAS at its Haswell kernels on one thread (`gpt1.training.cpu_matmul`), not
  torch's MKL: MKL chooses its kernels by the processor's vendor (on AMD it ignores `MKL_CBWR=AVX2` and takes its
  AUTO branch), OpenBLAS takes the core type it is told on any x86-64 with AVX2 and FMA.
- ATen's own kernels (elementwise, reductions, softmax, embedding, dropout) at AVX2 (`ATEN_CPU_CAPABILITY`), numpy's
  dispatch at x86-64-v3, and MKL, should anything still reach it, on its COMPATIBLE branch, the one every vendor
  takes. Each library reads its variable once, when it loads, so `pin_environment` runs before torch is imported
  (`gpt1.cli.main` calls it first thing for the model stages).
- oneDNN off: torch sends bf16 matrix products and the LSTM to oneDNN by the host's own CPU flags, not by the caps,
  so the same call takes other kernels on an AVX-512 host than on an AVX2 one. (bf16 has no fast AVX2 kernel at
  all: a pinned profile computes in fp32, `gpt1.pipeline.config` refuses bf16 with it.)
- torch computes with the profile's `cpu.threads` threads, whatever the machine's cores, `--cores` or
  OMP_NUM_THREADS.

Outputs record `Numerics` (the pinned settings and the torch version: the same on every host); MLflow records
`machine_tags` (the processor, its instruction sets, the kernels and threads in use), which differ by host.

A library module: it knows no params.yaml key (the stage passes `pinned` and `threads`), no MLflow, no results path.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from dataclasses import asdict, dataclass
from typing import Any

from gpt1.pipeline.errors import NumericsError

PINNED_ISA = "avx2"
# Read by each library when it loads (ATen and MKL at the first kernel, numpy and OpenBLAS at import).
PINNED_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",
    # no product goes to MKL (gpt1.training.cpu_matmul); its one vendor-independent branch if any did
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN is off in the pinned mode; this caps it should anything still reach it
    "NPY_ENABLE_CPU_FEATURES": "X86_V3",
    "OPENBLAS_CORETYPE": "Haswell",  # the kernels of every matrix product (gpt1.training.cpu_matmul)
    "OPENBLAS_NUM_THREADS": "1",  # the products on one thread, whatever cpu.threads gives ATen
}


@dataclass(frozen=True)
class Numerics:
    """What decides a run's bits, as its outputs record it: the device, the pinned instruction set and threads
    (None: the host's own, so the bytes are the host's), torch's version and, pinned, the matrix products' library
    and kernels (None in records made before products left MKL)."""

    device: str
    isa: str | None
    threads: int | None
    torch: str
    matmul: str | None = None

    @property
    def pinned(self) -> bool:
        return self.device == "cpu" and self.isa is not None and self.threads is not None

    def describe(self) -> str:
        if self.device != "cpu":
            return f"{self.device}, torch {self.torch}"
        if not self.pinned:
            return f"cpu unpinned (the host's kernels and threads), torch {self.torch}"
        products = f", products by {self.matmul}" if self.matmul else ""
        return (f"cpu pinned to {self.isa} with {self.threads} thread{'s' * (self.threads != 1)}{products}, "
                f"torch {self.torch}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Any, where: str) -> Numerics | None:
        """The record of an output, or None for an output made before runs recorded it."""
        if value is None:
            return None
        try:
            return cls(device=str(value["device"]), isa=value["isa"], threads=value["threads"],
                       torch=str(value["torch"]), matmul=value.get("matmul"))
        except (KeyError, TypeError) as err:
            raise NumericsError(f"{where}: its numerics record {value!r} lacks {err}; rerun the stage that wrote "
                                f"it") from err


def torch_version() -> str:
    return importlib.metadata.version("torch").split("+")[0]


def pin_environment() -> None:
    """Set the pinned kernels' variables for this process and its children. Before torch loads: a library that has
    already read its variable keeps what it read, so a process that imported torch first cannot be pinned."""
    if "torch" in sys.modules and any(os.environ.get(k) != v for k, v in PINNED_ENV.items()):
        raise NumericsError("cpu.pinned: torch was imported before the kernels could be pinned; start the stage "
                            "with `gpt1 <stage>` (or set " + " ".join(f"{k}={v}" for k, v in PINNED_ENV.items())
                            + " before Python starts)")
    os.environ.update(PINNED_ENV)


def environment_pinned() -> bool:
    return all(os.environ.get(k) == v for k, v in PINNED_ENV.items())


def apply(pinned: bool, threads: int | None) -> None:
    """After `pin_environment`, in the stage's process: oneDNN off, the matrix products through OpenBLAS and the
    pinned threads (pinned), else the threads asked for (None: torch's own choice)."""
    import torch

    if pinned:
        from gpt1.training import cpu_matmul

        torch.backends.mkldnn.enabled = False
        cpu_matmul.enable()
    if threads is not None:
        torch.set_num_threads(threads)


def in_effect(device_type: str) -> Numerics:
    """The numerics this process computes with, read from the libraries, not from the settings: pinned only when
    every pin holds (a stage called in a process started otherwise records itself unpinned)."""
    import torch

    version = torch_version()
    if device_type != "cpu":
        return Numerics(device_type, None, None, version)
    from gpt1.training import cpu_matmul

    pinned = (environment_pinned() and not torch.backends.mkldnn.enabled and cpu_matmul.enabled()
              and torch.backends.cpu.get_cpu_capability().lower() == PINNED_ISA)
    if not pinned:
        return Numerics("cpu", None, None, version)
    products = f"{cpu_matmul.blas()} {PINNED_ENV['OPENBLAS_CORETYPE']}"
    return Numerics("cpu", PINNED_ISA, torch.get_num_threads(), version, products)


def upstream_note(own: Numerics, upstream: Numerics | None, what: str) -> str | None:
    """One line when `what` (an input of this stage) was made under other numerics than this run's, else None."""
    if upstream == own:
        return None
    made = "an older run that recorded no numerics" if upstream is None else upstream.describe()
    return (f"note: {what} was made with {made}; this run computes with {own.describe()}, so its bytes are those "
            f"of neither host alone (rerun the upstream stage in this mode to match)")


def note_upstream(own: Numerics, record: Any, what: str) -> None:
    """Say in one line (on stdout, with the stage's progress: it is no error) when `what` (an input's numerics
    record, as its output holds it) differs from this run's numerics."""
    note = upstream_note(own, Numerics.from_json(record, what), what)
    if note is not None:
        print(note)


# ----------------------------------------------------------------------------------------------------------------
# The machine, for MLflow (never for output files: a processor's name in an output would break its bytes)

HOST_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def _cpu_fields() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (Linux), else none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            fields = dict(line.split(":", 1) for line in handle.read().split("\n\n")[0].splitlines() if ":" in line)
    except OSError:
        return {}
    return {k.strip(): v.strip() for k, v in fields.items()}


def _cpuinfo() -> tuple[str, set[str]]:
    """The processor's model name and flags (Linux), else the platform's name and no flags."""
    import platform

    fields = _cpu_fields()
    if not fields:
        return platform.processor() or platform.machine(), set()
    return fields.get("model name", platform.machine()), set(fields.get("flags", "").split())


def vendor() -> str:
    """The processor's vendor as the CPU names itself (GenuineIntel, AuthenticAMD), or "unknown"."""
    return _cpu_fields().get("vendor_id", "unknown")


def processor() -> str:
    """The processor's model name (/proc/cpuinfo), as the numerics probe and MLflow's tags name a host."""
    return _cpuinfo()[0]


def machine_tags() -> dict[str, str]:
    """The processor, the instruction sets it has, the kernels and threads this process uses, and torch: MLflow tags
    of every stage run (torch's own settings only where the stage has loaded torch)."""
    processor, flags = _cpuinfo()
    tags = {"gpt1.machine.processor": processor, "gpt1.machine.cores": str(os.cpu_count()),
            "gpt1.machine.isa": " ".join(f for f in HOST_FLAGS if f in flags) or "unknown",
            "gpt1.machine.pinned_env": str(environment_pinned()).lower()}
    torch = sys.modules.get("torch")
    if torch is not None:
        tags.update({"gpt1.machine.torch": torch.__version__,
                     "gpt1.machine.kernels": torch.backends.cpu.get_cpu_capability(),
                     "gpt1.machine.onednn": str(torch.backends.mkldnn.enabled).lower(),
                     "gpt1.machine.threads": str(torch.get_num_threads())})
    return tags


__all__ = [
    "HOST_FLAGS",
    "PINNED_ENV",
    "PINNED_ISA",
    "Numerics",
    "NumericsError",
    "apply",
    "environment_pinned",
    "in_effect",
    "machine_tags",
    "note_upstream",
    "pin_environment",
    "processor",
    "torch_version",
    "upstream_note",
    "vendor",
]
