"""Tokens per second of one pre-training step (forward + backward + AdamW step): our GPT vs transformers'
OpenAIGPTLMHeadModel of the same shape, batch and weights.

CPU (default: the default profile's model, n_layer 4, n_embd 256, n_head 4, n_ctx 128, vocab 8400, batch 32):
    python bench/train_step.py
  fp32 ours vs HF, measured interleaved (A B A B ...) so drift of the machine's speed hits both alike; plus ours
  under bf16 autocast and ours under torch.compile (its first steps compile, 20-35 s here: excluded as warm-up).

CUDA (default: the paper's model, n_ctx 512, batch 64, vocab 40478):
    python bench/train_step.py --device cuda
  bf16 autocast, fused AdamW, TF32, flash attention, as gpt1.pretrain trains; ours compiled and eager vs HF eager.
  Reports tokens/s, MFU = (6N + 6 n_layer n_ctx n_embd) FLOPs per token x tokens/s over a MEASURED bf16 matmul peak
  (not the datasheet's), and peak memory.

Prints Markdown: a header and one row per model variant, with machine, torch version and date.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere without installing the package

from gpt1.hf import to_hf_model
from gpt1.model import GPT, GPTConfig, flops_per_token
from gpt1.runtime import attention_kernels, configure_device, resolve_compile, resolve_precision

CPU_SHAPE = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_ctx": 128, "vocab": 8400, "batch": 32}
CUDA_SHAPE = {"n_layer": 12, "n_embd": 768, "n_head": 12, "n_ctx": 512, "vocab": 40478, "batch": 64}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    for key in CPU_SHAPE:
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, default=None,
                            help=f"default: {CPU_SHAPE[key]} on cpu, {CUDA_SHAPE[key]} on cuda")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per variant (medians are reported)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per variant first (compile happens here)")
    parser.add_argument("--variants", default=None,
                        help="comma list of ours,hf,bf16,compile (cpu default: all) or ours,ours-eager,hf (cuda)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args(argv)
    shape = CUDA_SHAPE if args.device == "cuda" else CPU_SHAPE
    for key, value in shape.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.variants is None:
        args.variants = "ours,ours-eager,hf" if args.device == "cuda" else "ours,hf,bf16,compile"
    args.variants = args.variants.split(",")
    return args


# ----------------------------------------------------------------------------------------------------------------
# One training step per variant


class Variant:
    """A model, its optimizer and the context (autocast) one timed step runs in."""

    def __init__(self, name: str, model: torch.nn.Module, loss: Callable, autocast: torch.dtype | None,
                 device: torch.device) -> None:
        self.name, self.model, self.loss, self.device = name, model, loss, device
        self.dtype = autocast
        fused = device.type == "cuda"
        # Same decay split as pre-training (irrelevant to speed, but the same optimizer work).
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=fused or None)
        self.samples: list[float] = []
        self.peak_bytes = 0

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        ctx = torch.autocast(self.device.type, dtype=self.dtype) if self.dtype else contextlib.nullcontext()
        with ctx, attention_kernels(self.device):
            loss = self.loss(self.model, x, y)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def ours_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return model(x, y)[1]


def hf_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # HF shifts labels itself: labels = inputs gives the same next-token loss over n_ctx - 1 positions.
    return model(input_ids=x, labels=x).loss


@dataclass(frozen=True)
class Recipe:
    """How one variant trains: which model, compiled or not, under which autocast dtype (None: fp32)."""

    label: str
    model: str  # "ours" or "hf"
    compiled: bool
    autocast: torch.dtype | None


def recipes(device: torch.device) -> dict[str, Recipe]:
    """The variants --variants can name on `device`. "ours" is what gpt1.pretrain trains with there (its `auto`
    precision and compile settings: bf16 autocast + torch.compile on CUDA, fp32 eager on the CPU); HF runs eager,
    under the same autocast as "ours"."""
    bf16, cuda = torch.bfloat16, device.type == "cuda"
    dtype, compiled = resolve_precision("auto", device), resolve_compile("auto", device)
    label = "ours, " + " + ".join(["bf16" if dtype else "fp32", *(["compile"] if compiled else [])])
    made = {"ours": Recipe(label, "ours", compiled, dtype), "hf": Recipe("HF OpenAIGPT", "hf", False, dtype)}
    if cuda:
        made["ours-eager"] = Recipe("ours, bf16 eager", "ours", False, bf16)
    else:
        made["bf16"] = Recipe("ours, bf16 autocast", "ours", False, bf16)
        made["compile"] = Recipe("ours, torch.compile", "ours", True, None)
    return made


def build_variants(args: argparse.Namespace, device: torch.device) -> list[Variant]:
    cfg = GPTConfig(vocab_size=args.vocab, n_ctx=args.n_ctx, n_embd=args.n_embd, n_layer=args.n_layer,
                    n_head=args.n_head)
    torch.manual_seed(0)
    base = GPT(cfg)
    made = recipes(device)
    unknown = [v for v in args.variants if v not in made]
    if unknown:
        raise SystemExit(f"--variants: unknown {unknown}; valid: {', '.join(made)}")

    def build(recipe: Recipe) -> Variant:
        if recipe.model == "hf":
            return Variant(recipe.label, to_hf_model(base).to(device).train(), hf_loss, recipe.autocast, device)
        model = GPT(cfg)
        model.load_state_dict(base.state_dict())
        model = model.to(device).train()
        return Variant(recipe.label, torch.compile(model) if recipe.compiled else model, ours_loss, recipe.autocast,
                       device)

    return [build(made[name]) for name in args.variants]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> int:
    """Bytes of the largest allocation since reset_peak_memory (CUDA); 0 elsewhere (not measured)."""
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0


def measure(variants: list[Variant], args: argparse.Namespace, device: torch.device) -> None:
    """Warm-up every variant, then time them interleaved, rotating the order: A B C, B C A, C A B, ..."""
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, args.vocab, (args.batch, args.n_ctx + 1), generator=g).to(device)
    inputs, targets = x[:, :-1].contiguous(), x[:, 1:].contiguous()
    for v in variants:
        start = time.perf_counter()
        for _ in range(args.warmup):
            v.step(inputs, targets)
        sync(device)
        print(f"# warm-up {v.name}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    for r in range(args.repeats):
        for v in variants[r % len(variants) :] + variants[: r % len(variants)]:  # rotate: no variant always first
            reset_peak_memory(device)
            sync(device)
            start = time.perf_counter()
            v.step(inputs, targets)
            sync(device)
            v.samples.append(args.batch * args.n_ctx / (time.perf_counter() - start))
            v.peak_bytes = max(v.peak_bytes, peak_memory(device))


def matmul_peak(device: torch.device, n: int = 8192, iters: int = 20) -> float:
    """The bf16 matmul FLOP/s this GPU actually reaches (best of a few timings), the denominator of MFU."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    best = 0.0
    for _ in range(5):
        sync(device)
        start = time.perf_counter()
        for _ in range(iters):
            a @ b
        sync(device)
        best = max(best, 2 * n**3 * iters / (time.perf_counter() - start))
    return best


# ----------------------------------------------------------------------------------------------------------------
# Report


def machine() -> str:
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, {gpu}, torch {torch.__version__}"


def paired_ratio(a: Variant, b: Variant) -> float:
    """Median over rounds of a's speed / b's speed in the same round: the machine's speed drifts 2-3x over
    minutes here, and neighbouring steps share the drift, so paired ratios are far steadier than ratios of medians."""
    return statistics.median(x / y for x, y in zip(a.samples, b.samples, strict=True))


def ratios(a: Variant, b: Variant) -> str:
    """'best / paired': the ratio of the fastest steps (least disturbed by other load) and paired_ratio."""
    return f"{max(a.samples) / max(b.samples):.2f}x / {paired_ratio(a, b):.2f}x"


def report(variants: list[Variant], args: argparse.Namespace, device: torch.device, peak: float | None) -> str:
    cfg = GPTConfig(vocab_size=args.vocab, n_ctx=args.n_ctx, n_embd=args.n_embd, n_layer=args.n_layer,
                    n_head=args.n_head)
    per_token = flops_per_token(GPT(cfg))
    shape = f"L{args.n_layer} d{args.n_embd} h{args.n_head} T{args.n_ctx} V{args.vocab} B{args.batch}"
    head = ["date", "machine", "shape", "variant", "tokens/s median", "tokens/s best", "vs first", "vs HF"]
    if peak:
        head += ["MFU", "peak memory GiB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    hf = next((v for v in variants if v.name == "HF OpenAIGPT"), None)
    today = dt.date.today().isoformat()
    for v in variants:
        m, best = statistics.median(v.samples), max(v.samples)
        row = [today, machine(), shape, v.name, f"{m:,.0f}", f"{best:,.0f}", ratios(v, variants[0]),
               ratios(v, hf) if hf else "-"]
        if peak:
            row += [f"{per_token * m / peak:.1%}", f"{v.peak_bytes / 2**30:.2f}"]
        lines.append("| " + " | ".join(row) + " |")
    notes = [f"repeats {args.repeats}, interleaved in rotating order; ratios: best vs best / median of the "
             f"per-round ratios; warm-up {args.warmup} steps untimed, threads "
             f"{torch.get_num_threads()}, FLOPs/token {per_token:,}"]
    if peak:
        notes.append(f"measured bf16 matmul peak {peak / 1e12:.0f} TFLOP/s")
    spread = {v.name: f"{min(v.samples):,.0f}-{max(v.samples):,.0f}" for v in variants}
    notes.append("tokens/s range: " + "; ".join(f"{k} {r}" for k, r in spread.items()))
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in notes)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device")
    configure_device(device)  # TF32 on CUDA, as pre-training sets it
    variants = build_variants(args, device)
    peak = matmul_peak(device) if device.type == "cuda" else None
    measure(variants, args, device)
    print(report(variants, args, device, peak))


if __name__ == "__main__":
    main()
