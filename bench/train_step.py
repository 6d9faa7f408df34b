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
  (the table's column; --peak-tflops reuses one measured before), and over the datasheet's 989 TFLOP/s (a note
  below the table), and peak memory. Extra variants: hf-compile (HF under torch.compile) and ours-pad64 (ours
  compiled with the vocabulary padded to a multiple of 64 for the matrix units; a speed measurement only: the
  padding's logits are not masked here, and MFU counts the real vocabulary's FLOPs).
  bench/gpu_check.py runs it so, at the gpu profile's micro-batch (32):
    python bench/train_step.py --device cuda --batch 32 --json b.json --profile-table step.txt

Prints Markdown: a header and one row per model variant, with machine, torch version and date. --json also writes
every figure; --profile-table writes a torch.profiler table of one step of the first variant (top operators by
their own device time) when its MFU is under --profile-below, or not measured (the CPU).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
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
DATASHEET_TFLOPS = 989.0  # H100 SXM, dense bf16
PROFILE_ROWS = 25


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
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="a bf16 matmul peak measured before (default: measure it here, on CUDA)")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    parser.add_argument("--profile-table", type=Path, default=None,
                        help="write a torch.profiler table of one step of the first variant here ...")
    parser.add_argument("--profile-below", type=float, default=0.55, help="... when its MFU is under this")
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
    vocab_multiple: int = 1  # ours with the embedding (and so the tied LM head) padded to a multiple of this


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


def extra_recipes(device: torch.device) -> dict[str, Recipe]:
    """Variants to name on purpose (--variants): HF compiled, and ours compiled with the vocabulary padded to a
    multiple of 64 (the matrix units' tile: one lever towards the MFU target)."""
    dtype = resolve_precision("auto", device)
    return {"hf-compile": Recipe("HF OpenAIGPT, compile", "hf", True, dtype),
            "ours-pad64": Recipe("ours, compile, vocab padded to 64", "ours", True, dtype, vocab_multiple=64)}


def padded_copy(base: GPT, multiple: int) -> GPT:
    """`base` with its token embedding grown to a multiple of `multiple` rows (the new rows never appear in the
    inputs or the targets)."""
    model = GPT(base.config)
    model.load_state_dict(base.state_dict())
    rows = base.config.vocab_size
    if rows % multiple:
        model.resize_token_embeddings(-(-rows // multiple) * multiple)
    return model


def build_variants(args: argparse.Namespace, device: torch.device) -> list[Variant]:
    cfg = GPTConfig(vocab_size=args.vocab, n_ctx=args.n_ctx, n_embd=args.n_embd, n_layer=args.n_layer,
                    n_head=args.n_head)
    torch.manual_seed(0)
    base = GPT(cfg)
    made = {**recipes(device), **extra_recipes(device)}
    unknown = [v for v in args.variants if v not in made]
    if unknown:
        raise SystemExit(f"--variants: unknown {unknown}; valid: {', '.join(made)}")

    def build(recipe: Recipe) -> Variant:
        if recipe.model == "hf":
            hf = to_hf_model(base).to(device).train()
            return Variant(recipe.label, torch.compile(hf) if recipe.compiled else hf, hf_loss, recipe.autocast,
                           device)
        model = padded_copy(base, recipe.vocab_multiple).to(device).train()
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
        notes.append(f"measured bf16 matmul peak {peak / 1e12:.0f} TFLOP/s (the MFU column's denominator); MFU over "
                     f"the datasheet's {DATASHEET_TFLOPS:g} TFLOP/s: " + ", ".join(
                         f"{v.name} {per_token * statistics.median(v.samples) / (DATASHEET_TFLOPS * 1e12):.1%}"
                         for v in variants))
    spread = {v.name: f"{min(v.samples):,.0f}-{max(v.samples):,.0f}" for v in variants}
    notes.append("tokens/s range: " + "; ".join(f"{k} {r}" for k, r in spread.items()))
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in notes)


def figures(variants: list[Variant], args: argparse.Namespace, peak: float | None) -> dict:
    """Every figure of the table, for --json: tokens/s, MFU over the measured peak and over the datasheet's, peak
    memory, speed against HF (paired median and best against best)."""
    cfg = GPTConfig(vocab_size=args.vocab, n_ctx=args.n_ctx, n_embd=args.n_embd, n_layer=args.n_layer,
                    n_head=args.n_head)
    per_token = flops_per_token(GPT(cfg))
    hf = next((v for v in variants if v.name == "HF OpenAIGPT"), None)
    rows = []
    for v in variants:
        median = statistics.median(v.samples)
        rows.append({
            "name": v.name, "tokens_s_median": median, "tokens_s_best": max(v.samples), "samples": v.samples,
            "mfu": per_token * median / peak if peak else None,
            "mfu_datasheet": per_token * median / (DATASHEET_TFLOPS * 1e12) if peak else None,
            "peak_memory_gib": v.peak_bytes / 2**30 if peak else None,
            "vs_hf_paired": paired_ratio(v, hf) if hf else None,
            "vs_hf_best": max(v.samples) / max(hf.samples) if hf else None,
        })  # fmt: skip
    shape = {k: getattr(args, k) for k in CPU_SHAPE}
    return {"machine": machine(), "shape": shape, "flops_per_token": per_token, "repeats": args.repeats,
            "warmup": args.warmup, "peak_tflops": peak / 1e12 if peak else None, "datasheet_tflops": DATASHEET_TFLOPS,
            "variants": rows}


def profile_step(v: Variant, inputs: torch.Tensor, targets: torch.Tensor, device: torch.device, path: Path) -> dict:
    """One step of `v` under torch.profiler: the table of the top operators by their own device time (CPU time on
    the CPU) to `path`; returns the step's total and the attention kernels seen (flash or not)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync(device)
    with profile(activities=activities) as prof:
        v.step(inputs, targets)
        sync(device)
    events = prof.key_averages()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    # On CUDA the kernels (device events) hold the device time; the operators that launch them repeat it.
    counted = [e for e in events if e.device_type != DeviceType.CPU] if cuda else list(events)
    total = sum(getattr(e, key) for e in counted)
    top = sorted(counted, key=lambda e: getattr(e, key), reverse=True)
    header = (f"# one step of {v.name}: torch.profiler, top {PROFILE_ROWS} operators and kernels by {key} "
              f"(step total {total / 1e3:,.1f} ms)\n")
    path.write_text(header + events.table(sort_by=key, row_limit=PROFILE_ROWS))
    attention = sorted({e.key for e in events if any(w in e.key.lower() for w in ("flash", "fmha", "attention"))})
    return {"variant": v.name, "sorted_by": key, "total_ms": total / 1e3, "attention_ops": attention,
            "top": [{"op": e.key, "ms": getattr(e, key) / 1e3, "share": getattr(e, key) / total if total else 0.0}
                    for e in top[:10]]}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device")
    configure_device(device)  # TF32 on CUDA, as pre-training sets it
    variants = build_variants(args, device)
    peak = None
    if device.type == "cuda":
        peak = args.peak_tflops * 1e12 if args.peak_tflops else matmul_peak(device)
    measure(variants, args, device)
    print(report(variants, args, device, peak))
    found = figures(variants, args, peak)
    first = found["variants"][0]
    if args.profile_table and (first["mfu"] is None or first["mfu"] < args.profile_below):
        g = torch.Generator().manual_seed(1)
        x = torch.randint(0, args.vocab, (args.batch, args.n_ctx + 1), generator=g).to(device)
        found["profile"] = profile_step(variants[0], x[:, :-1].contiguous(), x[:, 1:].contiguous(), device,
                                        args.profile_table)
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
