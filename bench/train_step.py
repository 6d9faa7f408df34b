"""Tokens per second of one pre-training step (forward + backward + AdamW step): our GPT vs transformers'
OpenAIGPTLMHeadModel of the same shape, batch and weights.

CPU (default: the default profile's model, n_layer 4, n_embd 256, n_head 4, n_ctx 128, vocab 8400, batch 32):
    python -m bench.train_step
  fp32 ours vs HF, measured interleaved (A B A B ...) so drift of the machine's speed hits both alike; plus ours
  under bf16 autocast and ours under torch.compile (its first steps compile, 20-35 s here: excluded as warm-up).

CUDA (default: the paper's model, n_ctx 512, batch 64, vocab 40478):
    python -m bench.train_step --device cuda
  bf16 autocast, fused AdamW, TF32, cuDNN attention, the LM head's vocabulary padded to 64 and masked, as
  gpt1.stages.pretrain trains; ours compiled and eager vs HF eager. Reports tokens/s, MFU = (6N + 6 n_layer n_ctx
  n_embd) FLOPs per token (the real vocabulary's, padded or not) x tokens/s over a MEASURED bf16 matmul peak (the
  table's column; --peak-tflops reuses one measured before), and over the datasheet's 989 TFLOP/s (a note below the
  table), and peak memory. Extra variant: hf-compile (HF under torch.compile).
  bench/gpu_check.py runs it so, at the gpu profile's micro-batch (32):
    python -m bench.train_step --device cuda --batch 32 --json b.json --profile-table step.txt

Levers (issue 43, bench/gpu/levers.py): "ours" followed by "+LEVER"s, each against "ours" in the same run:
    python -m bench.train_step --device cuda --batch 32 --variants ours,ours+mb64,ours+pad1,ours+chunkce
  mbN: micro-batch N; padN: the LM head's vocabulary padded to a multiple of N, the padding's logits -inf before the
  loss (`GPT.logits_multiple`: the loss is the unpadded one; pad1: no padding, ours before 2026-11-29); chunkce: the
  LM head and cross-entropy in chunks of --ce-rows positions whose gradients are made in the forward pass, so the
  [positions, vocabulary] logits never exist whole; autotune:
  torch.compile(mode="max-autotune-no-cudagraphs"). Several combine: ours+mb64+pad1. A variant whose warm-up
  (compile) fails is reported as failed; the others are still timed.

Prints Markdown: a header and one row per model variant, with machine, torch version and date. --json also writes
every figure; --profile-table writes a torch.profiler table of one step of the first variant (top operators by
their own device time) when its MFU is under --profile-below, or not measured (the CPU).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import functools
import json
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gpt1.modeling.hf import to_hf_model
from gpt1.modeling.model import GPT, GPTConfig, flops_per_token, mask_padding, pad_rows
from gpt1.training import runtime
from gpt1.training.runtime import attention_kernels, autocast, configure_device, resolve_compile, resolve_precision

CPU_SHAPE = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_ctx": 128, "vocab": 8400, "batch": 32}
CUDA_SHAPE = {"n_layer": 12, "n_embd": 768, "n_head": 12, "n_ctx": 512, "vocab": 40478, "batch": 64}
DATASHEET_TFLOPS = 989.0  # H100 SXM, dense bf16
PROFILE_ROWS = 25
AUTOTUNE_MODE = "max-autotune-no-cudagraphs"  # the kernels' choice alone: a ~40 ms step hides launch overhead
# Dynamo keeps one compiled entry per variant and shape on GPT.forward's code (shared by all instances): past its
# default limit of 8 a variant would silently run eager and time wrong.
RECOMPILE_LIMIT = 64


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    for key in CPU_SHAPE:
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, default=None,
                            help=f"default: {CPU_SHAPE[key]} on cpu, {CUDA_SHAPE[key]} on cuda")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per variant (medians are reported)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per variant first (compile happens here)")
    parser.add_argument("--variants", default=None,
                        help="comma list of ours,hf,bf16,compile (cpu default: all) or ours,ours-eager,hf (cuda); "
                        "also hf-compile and levers: ours+mb64+pad1+chunkce+autotune (see above)")
    parser.add_argument("--dropout", type=float, default=GPTConfig.embd_pdrop,
                        help="every dropout of the model (default: the paper's, GPTConfig's)")
    parser.add_argument("--ce-rows", type=int, default=4096, help="positions per chunk of the chunkce lever")
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
    """A model, its optimizer, the loss of one step (a function of the inputs and targets: compiled or not), the
    context (autocast) the step runs in and its micro-batch. `error`: why its warm-up failed (it is then not timed)."""

    def __init__(self, name: str, model: torch.nn.Module, loss: Callable, autocast: torch.dtype | None,
                 device: torch.device, batch: int = 0, key: str = "") -> None:
        self.name, self.model, self.loss, self.device = name, model, loss, device
        self.dtype, self.batch, self.key = autocast, batch, key or name
        fused = device.type == "cuda"
        # Same decay split as pre-training (irrelevant to speed, but the same optimizer work).
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=fused or None)
        self.samples: list[float] = []
        self.peak_bytes = 0
        self.warmup_s: float | None = None
        self.error: str | None = None

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        ctx = torch.autocast(self.device.type, dtype=self.dtype) if self.dtype else contextlib.nullcontext()
        with ctx, attention_kernels(self.device):
            loss = self.loss(x, y)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


# ----------------------------------------------------------------------------------------------------------------
# The losses of one step: the model's own, and those of the levers


IGNORE = -100  # the targets' ignored position, as gpt1.modeling.model's loss has it


def ours_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return model(x, y)[1]


def hf_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # HF shifts labels itself: labels = inputs gives the same next-token loss over n_ctx - 1 positions.
    return model(input_ids=x, labels=x).loss


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """The mean cross-entropy of (hidden @ weight.T)[:, :vocab] against targets, `rows` positions at a time. The
    gradients of hidden and weight are made chunk by chunk in the forward pass (softmax minus one-hot is all the
    backward pass needs), so one chunk's logits exist at a time instead of the whole [positions, vocabulary] tensor
    and its gradient; the FLOPs are the plain LM head's. `dtype`: the matmuls' (autocast's bf16); None: the inputs'."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, vocab: int,
                rows: int, dtype: torch.dtype | None) -> torch.Tensor:
        dtype = dtype or hidden.dtype
        wide = torch.promote_types(dtype, torch.float32)  # the softmax's: as autocast's cross_entropy, fp32 at least
        w = weight.to(dtype)
        kept = targets != IGNORE
        scale = 1.0 / kept.sum().clamp(min=1).to(wide)
        grad_hidden, grad_weight = torch.empty_like(hidden), torch.zeros_like(weight)
        total = hidden.new_zeros((), dtype=wide)
        for start in range(0, hidden.size(0), rows):
            h, keep = hidden[start : start + rows].to(dtype), kept[start : start + rows]
            target = targets[start : start + rows].masked_fill(~keep, 0)[:, None]
            logits = mask_padding((h @ w.t()).to(wide), vocab)
            lse = torch.logsumexp(logits, dim=-1)
            total = total + ((lse - logits.gather(1, target).squeeze(1)) * keep).sum()
            # d loss / d logits = (softmax - one-hot) / kept positions, zero at an ignored position
            grad = torch.exp(logits - lse[:, None]).scatter_add(1, target, torch.full_like(target, -1.0,
                                                                                           dtype=logits.dtype))
            grad = (grad * (keep[:, None] * scale)).to(dtype)
            grad_hidden[start : start + rows] = grad @ w
            grad_weight += grad.t() @ h
        ctx.save_for_backward(grad_hidden, grad_weight)
        return total * scale

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grad_hidden, grad_weight = ctx.saved_tensors
        return grad_hidden * grad_loss, grad_weight * grad_loss, None, None, None, None


def chunked_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, vocab: int,
                          rows: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """F.cross_entropy(mask_padding(hidden @ weight.T, vocab), targets) without the whole logits: see
    ChunkedLinearCrossEntropy. hidden [positions, n_embd], weight [padded vocabulary, n_embd], targets [positions]."""
    return ChunkedLinearCrossEntropy.apply(hidden, weight, targets, vocab, rows, dtype)


def chunked_loss(model: GPT, x: torch.Tensor, y: torch.Tensor, vocab: int, rows: int,
                 dtype: torch.dtype | None) -> torch.Tensor:
    """The next-token loss of a GPT through its tied LM head in chunks of `rows` positions, the head's rows padded
    as its forward pads them (`logits_multiple`)."""
    hidden, weight = model.transformer(x), pad_rows(model.lm_head.weight, model.logits_multiple)
    return chunked_cross_entropy(hidden.reshape(-1, hidden.size(-1)), weight, y.reshape(-1), vocab, rows, dtype)


# ----------------------------------------------------------------------------------------------------------------
# The variants


@dataclass(frozen=True)
class Recipe:
    """How one variant trains: which model, compiled or not, under which autocast dtype (None: fp32)."""

    label: str
    model: str  # "ours" or "hf"
    compiled: bool
    autocast: torch.dtype | None
    logits_multiple: int = 1  # ours: its LM head's vocabulary padded to a multiple of this, masked (GPT's own)
    batch: int | None = None  # its micro-batch (None: --batch)
    loss: str = "model"  # "model": GPT.forward's own; "chunked": chunked_loss
    compile_mode: str | None = None  # torch.compile's mode (None: its default, as pre-training compiles)


def recipes(device: torch.device) -> dict[str, Recipe]:
    """The variants --variants can name on `device`. "ours" is what gpt1.stages.pretrain trains with there (its `auto`
    precision and compile settings: bf16 autocast + torch.compile on CUDA, fp32 eager on the CPU; its LM head's
    padding, runtime.logits_multiple); HF runs eager, under the same autocast as "ours"."""
    bf16, cuda = torch.bfloat16, device.type == "cuda"
    dtype, compiled = resolve_precision("auto", device), resolve_compile("auto", device)
    multiple = runtime.logits_multiple(device)
    padding = f", vocab padded to {multiple}" if multiple > 1 else ""
    label = "ours, " + " + ".join(["bf16" if dtype else "fp32", *(["compile"] if compiled else [])]) + padding
    made = {"ours": Recipe(label, "ours", compiled, dtype, multiple), "hf": Recipe("HF OpenAIGPT", "hf", False, dtype)}
    if cuda:
        made["ours-eager"] = Recipe(f"ours, bf16 eager{padding}", "ours", False, bf16, multiple)
    else:
        made["bf16"] = Recipe("ours, bf16 autocast", "ours", False, bf16)
        made["compile"] = Recipe("ours, torch.compile", "ours", True, None)
    return made


def extra_recipes(device: torch.device) -> dict[str, Recipe]:
    """Variants to name on purpose (--variants): HF compiled."""
    return {"hf-compile": Recipe("HF OpenAIGPT, compile", "hf", True, resolve_precision("auto", device))}


def lever(recipe: Recipe, token: str) -> Recipe:
    """`recipe` with one lever of a variant's name (ours+mb64+pad1+chunkce+autotune) applied."""
    replace = functools.partial(dataclasses.replace, recipe)
    if match := re.fullmatch(r"mb(\d+)", token):
        return replace(batch=int(match[1]), label=f"{recipe.label}, micro-batch {match[1]}")
    if match := re.fullmatch(r"pad(\d+)", token):
        multiple = int(match[1])
        base = re.sub(r", vocab (padded to \d+|unpadded)", "", recipe.label)  # the other levers' words stay
        padding = f"vocab padded to {multiple}" if multiple > 1 else "vocab unpadded"
        return replace(logits_multiple=multiple, label=f"{base}, {padding}")
    if token == "chunkce":
        return replace(loss="chunked", label=f"{recipe.label}, chunked LM head + CE")
    if token == "autotune":
        where = "" if recipe.compiled else " (not compiled here: a rehearsal)"
        return replace(compile_mode=AUTOTUNE_MODE, label=f"{recipe.label}, max-autotune{where}")
    raise SystemExit(f"--variants: unknown lever {token!r}; valid: mbN, padN, chunkce, autotune")


def chosen_recipes(args: argparse.Namespace, device: torch.device) -> dict[str, Recipe]:
    """--variants' recipes by name: a named one, or "ours" (or another variant of ours) followed by +levers."""
    made = {**recipes(device), **extra_recipes(device)}
    chosen = {}
    for name in args.variants:
        base, *levers = name.split("+")
        if base not in made or (levers and made[base].model != "ours"):
            raise SystemExit(f"--variants: unknown {[name]}; valid: {', '.join(made)}, or ours+LEVER...")
        chosen[name] = functools.reduce(lever, levers, made[base])
    return chosen


def model_config(args: argparse.Namespace) -> GPTConfig:
    p = args.dropout
    return GPTConfig(vocab_size=args.vocab, n_ctx=args.n_ctx, n_embd=args.n_embd, n_layer=args.n_layer,
                     n_head=args.n_head, embd_pdrop=p, attn_pdrop=p, resid_pdrop=p)


def padded_copy(base: GPT, multiple: int) -> GPT:
    """A copy of `base` (its weights) whose LM head pads the vocabulary to a multiple of `multiple`, masked."""
    model = GPT(base.config)
    model.load_state_dict(base.state_dict())
    model.logits_multiple = multiple
    return model


def compiled_if(fn: Callable, recipe: Recipe) -> Callable:
    """torch.compile'd `fn` when the recipe compiles. dynamic=False: each variant gets the static graph that
    pre-training's one shape gets; else a second variant's other shape (batch, vocabulary) on the same code would
    make dynamo compile a dynamic-shape graph for it."""
    return torch.compile(fn, mode=recipe.compile_mode, dynamic=False) if recipe.compiled else fn


def ours_step_loss(model: GPT, recipe: Recipe, args: argparse.Namespace) -> Callable:
    """The loss of one step of ours under `recipe`: the model compiled as pre-training compiles it, or a lever's
    loss compiled whole (the model's forward and the loss in one graph)."""
    if recipe.loss == "model":
        return functools.partial(ours_loss, compiled_if(model, recipe))
    return compiled_if(functools.partial(chunked_loss, model, vocab=args.vocab, rows=args.ce_rows,
                                         dtype=recipe.autocast), recipe)


def build_variants(args: argparse.Namespace, device: torch.device) -> list[Variant]:
    torch.manual_seed(0)
    base = GPT(model_config(args))

    def build(key: str, recipe: Recipe) -> Variant:
        if recipe.model == "hf":
            hf = to_hf_model(base).to(device).train()
            loss = functools.partial(hf_loss, torch.compile(hf) if recipe.compiled else hf)
            return Variant(recipe.label, hf, loss, recipe.autocast, device, args.batch, key)
        model = padded_copy(base, recipe.logits_multiple).to(device).train()
        return Variant(recipe.label, model, ours_step_loss(model, recipe, args), recipe.autocast, device,
                       recipe.batch or args.batch, key)

    return [build(key, recipe) for key, recipe in chosen_recipes(args, device).items()]


# bf16 logits may round differently in the padded matmul's kernel; padding 100 columns to 128 unmasked moves the loss
# by ~log(128 / 100) = 0.25
LOSS_TOLERANCE = 1e-2


def loss_check(device: torch.device, dtype: torch.dtype | None, multiple: int = 64) -> dict[str, float]:
    """|the padded and the chunked loss of a small GPT whose LM head pads its vocabulary - the plain loss of the same
    GPT unpadded| (eval: no dropout), on this device under this autocast: a lever must leave the loss as it was."""
    torch.manual_seed(0)
    vocab = 100
    base = GPT(GPTConfig(vocab_size=vocab, n_ctx=16, n_embd=32, n_layer=1, n_head=2)).to(device).eval()
    padded = padded_copy(base, multiple).to(device).eval()
    x = torch.randint(0, vocab, (4, 17), device=device)
    inputs, targets = x[:, :-1], x[:, 1:]
    with torch.no_grad(), autocast(device, dtype):
        plain = ours_loss(base, inputs, targets)
        found = {"padded": ours_loss(padded, inputs, targets),
                 "chunked": chunked_loss(padded, inputs, targets, vocab, rows=24, dtype=dtype)}
    gaps = {name: abs(loss - plain).item() for name, loss in found.items()}
    if max(gaps.values()) > LOSS_TOLERANCE:
        raise SystemExit(f"a lever changes the loss: |loss - plain loss| {gaps} over {LOSS_TOLERANCE}")
    return gaps


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> int:
    """Bytes of the largest allocation since reset_peak_memory (CUDA); 0 elsewhere (not measured)."""
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0


def batch_tensors(args: argparse.Namespace, batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of `batch` random windows; the same seed, so a smaller batch is a larger one's first rows."""
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, args.vocab, (batch, args.n_ctx + 1), generator=g).to(device)
    return x[:, :-1].contiguous(), x[:, 1:].contiguous()


def warm_up(v: Variant, inputs: torch.Tensor, targets: torch.Tensor, steps: int, device: torch.device) -> None:
    """`steps` untimed steps (compile happens in the first). A failure (a compile error, out of memory) is kept in
    v.error and its model let go: the other variants are still measured."""
    start = time.perf_counter()
    try:
        for _ in range(steps):
            v.step(inputs, targets)
        sync(device)
    except Exception as err:  # any failure of one variant's compile or step is that variant's alone
        v.error = f"{type(err).__name__}: {str(err).strip()[:400]}"
        v.model = v.optimizer = v.loss = None
        if device.type == "cuda":
            torch.cuda.empty_cache()
    v.warmup_s = time.perf_counter() - start
    status = f"FAILED: {v.error[:200]}" if v.error else "ok"
    print(f"# warm-up {v.name}: {v.warmup_s:.1f} s, {status}", file=sys.stderr, flush=True)


def measure(variants: list[Variant], args: argparse.Namespace, device: torch.device) -> None:
    """Warm-up every variant, then time those that warmed up interleaved, rotating the order: A B C, B C A, C A B,
    ...; each at its own micro-batch (the first rows of one batch)."""
    inputs, targets = batch_tensors(args, max(v.batch or args.batch for v in variants), device)
    for v in variants:
        v.batch = v.batch or args.batch
        warm_up(v, inputs[: v.batch], targets[: v.batch], args.warmup, device)
    if variants[0].error:
        raise SystemExit(f"the first variant, {variants[0].name}, the others' reference, failed: {variants[0].error}")
    timed = [v for v in variants if v.error is None]
    for r in range(args.repeats):
        for v in timed[r % len(timed) :] + timed[: r % len(timed)]:  # rotate: no variant always first
            reset_peak_memory(device)
            sync(device)
            start = time.perf_counter()
            v.step(inputs[: v.batch], targets[: v.batch])
            sync(device)
            v.samples.append(v.batch * args.n_ctx / (time.perf_counter() - start))
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


def paired_ratios(a: Variant, b: Variant) -> list[float]:
    """a's speed / b's speed in each round: the machine's speed drifts 2-3x over minutes here, and neighbouring
    steps share the drift, so paired ratios are far steadier than ratios of medians."""
    return [x / y for x, y in zip(a.samples, b.samples, strict=True)]


def paired_ratio(a: Variant, b: Variant) -> float:
    """The median over rounds of paired_ratios."""
    return statistics.median(paired_ratios(a, b))


def ratios(a: Variant, b: Variant) -> str:
    """'best / paired': the ratio of the fastest steps (least disturbed by other load) and paired_ratio."""
    return f"{max(a.samples) / max(b.samples):.2f}x / {paired_ratio(a, b):.2f}x"


def report(variants: list[Variant], args: argparse.Namespace, device: torch.device, peak: float | None) -> str:
    per_token = flops_per_token(GPT(model_config(args)))
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
    memory, speed against HF and against the first variant (paired median and its range over the rounds, best
    against best), the warm-up's seconds (compile included); the variants whose warm-up failed, with the error.
    MFU counts the FLOPs of --vocab, whatever a variant pads it to."""
    per_token = flops_per_token(GPT(model_config(args)))
    timed = [v for v in variants if v.error is None]
    hf = next((v for v in timed if v.name == "HF OpenAIGPT"), None)
    rows = []
    for v in timed:
        median, paired = statistics.median(v.samples), paired_ratios(v, timed[0])
        rows.append({
            "key": v.key, "name": v.name, "batch": v.batch, "warmup_s": v.warmup_s,
            "tokens_s_median": median, "tokens_s_best": max(v.samples), "samples": v.samples,
            "mfu": per_token * median / peak if peak else None,
            "mfu_datasheet": per_token * median / (DATASHEET_TFLOPS * 1e12) if peak else None,
            "peak_memory_gib": v.peak_bytes / 2**30 if peak else None,
            "vs_hf_paired": paired_ratio(v, hf) if hf else None,
            "vs_hf_best": max(v.samples) / max(hf.samples) if hf else None,
            "vs_first_paired": statistics.median(paired), "vs_first_range": [min(paired), max(paired)],
        })  # fmt: skip
    failed = [{"key": v.key, "name": v.name, "warmup_s": v.warmup_s, "error": v.error} for v in variants if v.error]
    shape = {k: getattr(args, k) for k in CPU_SHAPE}
    return {"machine": machine(), "shape": shape, "dropout": args.dropout, "flops_per_token": per_token,
            "repeats": args.repeats, "warmup": args.warmup, "peak_tflops": peak / 1e12 if peak else None,
            "datasheet_tflops": DATASHEET_TFLOPS, "variants": rows, "failed": failed}


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


def raise_recompile_limit() -> None:
    config = torch._dynamo.config
    setattr(config, "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit", RECOMPILE_LIMIT)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device")
    configure_device(device)  # TF32 on CUDA, as pre-training sets it
    raise_recompile_limit()
    chosen = chosen_recipes(args, device)
    checked = None
    if any(recipe.loss != "model" for recipe in chosen.values()):
        checked = loss_check(device, resolve_precision("auto", device))
    variants = build_variants(args, device)
    peak = None
    if device.type == "cuda":
        peak = args.peak_tflops * 1e12 if args.peak_tflops else matmul_peak(device)
    measure(variants, args, device)
    print(report([v for v in variants if v.error is None], args, device, peak))
    found = {**figures(variants, args, peak), "loss_check": checked}
    for failed in found["failed"]:
        print(f"- FAILED {failed['name']}: {failed['error']}")
    first = found["variants"][0]
    if args.profile_table and (first["mfu"] is None or first["mfu"] < args.profile_below):
        found["profile"] = profile_step(variants[0], *batch_tensors(args, args.batch, device), device,
                                        args.profile_table)
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
