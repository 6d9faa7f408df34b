"""Section g (issue 43 item 2): the paper's dropout (p = 0.1) as pre-training runs it on CUDA, measured.

1. Which scaled_dot_product_attention backend runs in a training step as pre-training takes it (the model compiled,
   bf16 autocast, gpt1.training.runtime.attention_kernels' order): torch.profiler's op and kernel names of one compiled
   forward and backward of a one-block GPT at the paper's width (768, 12 heads, context 512); and the call as
   fine-tuning makes it (attention_kernels' fine-tuning order), its backend and rate.
2. Each backend's effective attention-dropout rate, read from its outputs: with q = k = 0 every causal attention row
   is uniform, 1/(i+1), and with v[j] = e_j (the j-th unit vector, j < head dim) the output's element (i, d) IS the
   dropped-out weight of key d for query i: 0 where dropped, 1/((i+1)(1-p)) where kept. Zeros over all revealed
   elements and draws give the rate (binomial standard error); the kept values give the scale's p. Each backend
   alone (torch.nn.attention.sdpa_kernel: one that refuses the call says so), eager, and the call as trained
   (compiled, in attention_kernels' order), with each backend's forward and backward time.
3. The embedding and residual dropouts (nn.Dropout after a sum and after a Linear) compiled by Inductor: zeros of
   positive inputs over many elements.

On the CPU (the rehearsal): the same measurements at a tiny shape, eager and fp32 as the CPU pre-training runs;
the math backend must give 0.1 within 3 standard errors.
"""

from __future__ import annotations

import math
import re
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench.gpu.env import Context
from bench.gpu.report import Record, md_table
from gpt1.modeling.model import GPT
from gpt1.training.runtime import attention_kernels, autocast

P = 0.1  # the paper's attention, residual and embedding dropout
# batch, heads, sequence, head dim: the paper's model (12 x 64 = 768, context 512) on CUDA
SHAPE = {"cuda": (8, 12, 512, 64), "cpu": (2, 2, 64, 16)}
DRAWS = {"cuda": 8, "cpu": 40}  # ~24 M revealed weights on CUDA: a standard error of ~6e-5
DROPOUT_INPUT = {"cuda": (8, 512, 768), "cpu": (4, 64, 64)}  # batch, sequence, width
DROPOUT_DRAWS = {"cuda": 10, "cpu": 40}
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
# The op names torch.profiler records for each backend (a compiled graph calls the same aten ops)
OPS = {"flash": "_scaled_dot_product_flash_attention", "efficient": "_scaled_dot_product_efficient_attention",
       "cudnn": "_scaled_dot_product_cudnn_attention", "math": "_scaled_dot_product_attention_math"}
TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)")  # the C++ source lines of torch's warnings
KERNEL_NAMES = re.compile(r"flash|fmha|cudnn|sdpa|attention|attn", re.IGNORECASE)
PR_NOTE = ("pytorch/pytorch pull request 174245 ('[cuDNN][SDPA] Don't route to cuDNN SDPA when dropout probability "
           "is not a multiple of 1/16': some cuDNN SDPA kernels resolve p only in steps of 1/16) was merged on "
           "2026-02-26 (its thread); the first release that contains it: not found (PyTorch 2.11 came out on "
           "2026-03-23). The cuDNN row above says what this torch does with p = 0.1.")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def trained(device: torch.device) -> tuple[torch.dtype | None, bool]:
    """(autocast dtype, compiled) as pre-training takes them: bf16 and compiled on CUDA, fp32 eager on the CPU."""
    return (torch.bfloat16, True) if device.type == "cuda" else (None, False)


# ----------------------------------------------------------------------------------------------------------------
# Attention dropout, read from the outputs


def revealing_inputs(shape: tuple[int, int, int, int], device: torch.device,
                     dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """q = k = 0 and v[j] = e_j, laid out as the model makes them (one [B, T, 3C] projection split, viewed and
    transposed: strides can decide the backend); they require grad, so that the call is a training call."""
    batch, heads, seq, dim = shape
    width = heads * dim
    qkv = torch.zeros(batch, seq, 3 * width, device=device, dtype=dtype)
    values = qkv[:, :, 2 * width:].view(batch, seq, heads, dim)
    for j in range(min(dim, seq)):
        values[:, j, :, j] = 1.0
    qkv.requires_grad_()
    return tuple(t.view(batch, seq, heads, dim).transpose(1, 2) for t in qkv.split(width, dim=2))


def revealed(seq: int, dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask of the output elements (i, d) that show a weight: d <= i, d < dim; the row's 1/(uniform weight))."""
    rows = torch.arange(seq, device=device)
    mask = rows[:, None] >= torch.arange(dim, device=device)[None, :]
    return mask, (rows + 1).float()[:, None].expand(seq, dim)


def count(out: torch.Tensor, mask: torch.Tensor, inverse: torch.Tensor) -> tuple[int, int, float]:
    """(dropped, revealed, sum over kept elements of weight x (i+1), i.e. of 1/(1-p))."""
    shown = out.detach().float()[..., mask]
    kept = shown != 0
    scaled = (out.detach().float() * inverse)[..., mask]
    return int((~kept).sum()), shown.numel(), float(scaled[kept].sum())


def rate(dropped: int, total: int, scale_sum: float | None = None) -> dict[str, Any]:
    """The measured rate, its binomial standard error and the verdict against P (and the scale's p)."""
    measured = dropped / total
    se = math.sqrt(max(measured * (1 - measured), 1e-12) / total)
    found = {"p": P, "measured": round(measured, 6), "se": round(se, 7), "elements": total,
             "within_3se": abs(measured - P) < 3 * se, "z": round((measured - P) / se, 1)}
    if scale_sum is not None and total > dropped:
        found["scale_p"] = round(1 - (total - dropped) / scale_sum, 5)  # kept values are 1/(1-p) of the weight
    return found


def attention_rate(call: Callable[..., torch.Tensor], shape: tuple[int, int, int, int], device: torch.device,
                   dtype: torch.dtype, draws: int) -> dict[str, Any]:
    q, k, v = revealing_inputs(shape, device, dtype)
    mask, inverse = revealed(shape[2], shape[3], device)
    dropped = total = 0
    scale_sum = 0.0
    for _ in range(draws):
        d, n, s = count(call(q, k, v), mask, inverse)
        dropped, total, scale_sum = dropped + d, total + n, scale_sum + s
    return rate(dropped, total, scale_sum)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The model's call (gpt1.modeling.model.CausalSelfAttention) in training."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=P)


def step_ms(call: Callable[..., torch.Tensor], shape: tuple[int, int, int, int], device: torch.device,
            dtype: torch.dtype) -> float:
    """Forward and backward of one attention call at `shape`, ms (median of 3 rounds of 10)."""
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(shape, device=device, dtype=dtype)
    call(q, k, v).backward(grad)
    rounds = []
    for _ in range(3):
        sync(device)
        tick = time.perf_counter()
        for _ in range(10):
            call(q, k, v).backward(grad)
        sync(device)
        rounds.append((time.perf_counter() - tick) / 10 * 1e3)
    return round(sorted(rounds)[1], 3)


def one_backend(name: str, ctx: Context, device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    """A backend alone, eager: whether it takes the training call, then its rate and time."""
    shape = SHAPE[ctx.device]
    with sdpa_kernel([BACKENDS[name]]), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # torch says why a backend is not used in warnings, the error says only no
        try:
            found = attention_rate(sdpa, shape, device, dtype, DRAWS[ctx.device])
        except RuntimeError as err:  # "No available kernel": this backend refuses the call
            why = dict.fromkeys(TRIGGERED.sub("", " ".join(str(w.message).split())) for w in caught)
            why = why or [str(err).strip()]
            return {"backend": name, "refused": "; ".join(why)[:400]}
        try:
            found["ms_fwd_bwd"] = step_ms(sdpa, shape, device, dtype)
        except RuntimeError as err:  # a forward without its backward is no training kernel either
            found["ms_fwd_bwd"] = f"backward refused: {str(err).strip().splitlines()[0][:200]}"
        return {"backend": name, **found}


def as_trained(ctx: Context, device: torch.device) -> dict[str, Any]:
    """The call as pre-training makes it: compiled (CUDA), under autocast and attention_kernels' order."""
    dtype, compiled = trained(device)
    call = torch.compile(sdpa) if compiled else sdpa
    inputs = dtype or torch.float32
    with autocast(device, dtype), attention_kernels(device):
        found = attention_rate(call, SHAPE[ctx.device], device, inputs, DRAWS[ctx.device])
        found["ms_fwd_bwd"] = step_ms(call, SHAPE[ctx.device], device, inputs)
    return {"backend": "as trained", **found}


def as_fine_tuned(ctx: Context, device: torch.device) -> dict[str, Any]:
    """The call as fine-tuning makes it (gpt1.training.finetune_graphs.forward_context): under autocast and
    attention_kernels' fine-tuning order (`varying`), eager as the captured update records it; the backend it ran,
    named by the op torch.profiler records for one call."""
    dtype = trained(device)[0]
    inputs = dtype or torch.float32
    with autocast(device, dtype), attention_kernels(device, varying=True):
        found = attention_rate(sdpa, SHAPE[ctx.device], device, inputs, DRAWS[ctx.device])
        found["ms_fwd_bwd"] = step_ms(sdpa, SHAPE[ctx.device], device, inputs)
        q, k, v = revealing_inputs(SHAPE[ctx.device], device, inputs)
        ran, _ = ran_ops(lambda: sdpa(q, k, v).sum().backward(), device)
    return {"backend": f"as fine-tuned ({'+'.join(ran)})", **found}


# ----------------------------------------------------------------------------------------------------------------
# Which backend a training step runs


def tiny_gpt(ctx: Context) -> GPT:
    _, heads, seq, dim = SHAPE[ctx.device]
    return GPT.from_config(n_layer=1, n_head=heads, n_embd=heads * dim, n_ctx=seq, vocab_size=512)


def profiled_step(ctx: Context, device: torch.device) -> dict[str, Any]:
    """One profiled forward and backward of a one-block GPT as pre-training runs it (after two to compile): the
    attention ops and kernels it ran, and the backend they name."""
    dtype, compiled = trained(device)
    model = tiny_gpt(ctx).to(device).train()
    step_model = torch.compile(model) if compiled else model
    idx = torch.randint(0, 512, (SHAPE[ctx.device][0], SHAPE[ctx.device][2]), device=device)

    def step() -> None:
        with autocast(device, dtype), attention_kernels(device):
            _, loss = step_model(idx, idx)
        loss.backward()

    for _ in range(2):
        step()
    ran, names = ran_ops(step, device)
    return {"ran": ran, "names": names, "compiled": compiled, "autocast": str(dtype)}


def ran_ops(step: Callable[[], None], device: torch.device) -> tuple[list[str], list[str]]:
    """One profiled `step`: (the backends its attention ops name, those ops' and kernels' names)."""
    sync(device)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        step()
        sync(device)
    names = sorted({e.key for e in prof.key_averages() if "scaled_dot_product" in e.key or KERNEL_NAMES.search(e.key)})
    ran = [name for name, op in OPS.items() if any(op in n for n in names)]
    return ran or ["math (no fused attention op)"], [n[:160] for n in names][:30]


# ----------------------------------------------------------------------------------------------------------------
# Embedding and residual dropout


class Dropouts(nn.Module):
    """The model's two other dropouts: after the embeddings' sum, and after a Linear (the residual branches)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.embd_drop, self.resid_drop = nn.Dropout(P), nn.Dropout(P)
        with torch.no_grad():  # positive weights on positive inputs: a zero out of either dropout is a dropped one
            self.proj.weight.uniform_(0.5, 1.0).div_(width)
            self.proj.bias.zero_()

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.embd_drop(tokens + positions), self.resid_drop(self.proj(hidden))


def other_dropouts(ctx: Context, device: torch.device) -> list[dict[str, Any]]:
    dtype, compiled = trained(device)
    module = Dropouts(DROPOUT_INPUT[ctx.device][-1]).to(device).train()
    call = torch.compile(module) if compiled else module
    counts = {"embedding": [0, 0], "residual": [0, 0]}
    for _ in range(DROPOUT_DRAWS[ctx.device]):
        tokens, positions, hidden = (torch.rand(DROPOUT_INPUT[ctx.device], device=device) + 1 for _ in range(3))
        with autocast(device, dtype):
            outs = call(tokens, positions, hidden)
        for name, out in zip(counts, outs, strict=True):
            counts[name][0] += int((out == 0).sum())
            counts[name][1] += out.numel()
    how = "compiled by Inductor, bf16 autocast" if compiled else "eager, fp32"
    return [{"backend": f"{name} dropout ({how})", **rate(*c)} for name, c in counts.items()]


# ----------------------------------------------------------------------------------------------------------------


def row(found: dict[str, Any]) -> list[Any]:
    if "refused" in found:
        return [found["backend"], P, "refused", "-", "-", "-", found["refused"][:200]]
    verdict = "yes" if found["within_3se"] else f"NO ({found['z']:+.0f} SE)"
    return [found["backend"], found["p"], f"{found['measured']:.5f}", f"{found['se']:.5f}", verdict,
            found.get("scale_p", "-"), found.get("ms_fwd_bwd", "-")]


def summary(step: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    measured = [r for r in rows if "refused" not in r]
    off = [f"{r['backend']} {r['measured']:.4f}" for r in measured if not r["within_3se"]]
    trained_rate = next(r for r in rows if r["backend"] == "as trained")
    tuned = next((r for r in measured if r["backend"].startswith("as fine-tuned")), None)
    tuned_text = f"; {tuned['backend']} {tuned['measured']:.4f} ± {tuned['se']:.4f}" if tuned else ""
    return (f"training runs {'+'.join(step['ran'])}; as trained p=0.1 measured {trained_rate['measured']:.4f} "
            f"± {trained_rate['se']:.4f}{tuned_text}; " + (f"OFF by > 3 SE: {', '.join(off)}" if off else
                                                           f"all {len(measured)} within 3 SE"))


def run(ctx: Context) -> None:
    record = Record(ctx, "dropout")
    device = torch.device(ctx.device)
    torch.manual_seed(0)
    dtype = trained(device)[0] or torch.float32
    batch, heads, seq, dim = SHAPE[ctx.device]
    record.update(shape={"batch": batch, "heads": heads, "seq": seq, "head_dim": dim, "dtype": str(dtype)},
                  torch=torch.__version__, cudnn=torch.backends.cudnn.version() if ctx.cuda else None)
    rows = []  # the eager measurements first: each is saved as it comes, and compiling takes the longest
    for name in BACKENDS:
        rows.append(one_backend(name, ctx, device, dtype))
        record.update(attention=rows)
    rows.append(as_trained(ctx, device))
    rows.append(as_fine_tuned(ctx, device))
    record.update(attention=rows, note=PR_NOTE)
    others = other_dropouts(ctx, device)
    record.update(other=others)
    step = profiled_step(ctx, device)
    record.update(training_step=step)
    head = ["what", "p", "measured", "SE", "within 3 SE", "p of the 1/(1-p) scale", "ms fwd+bwd"]
    markdown = "\n\n".join([
        f"Attention {batch} x {heads} heads x {seq} x {dim}, {dtype}; a training step ran: {', '.join(step['ran'])} "
        f"({'compiled' if step['compiled'] else 'eager'}); its attention ops and kernels: "
        f"{'; '.join(step['names'][:8]) or 'none named'}",
        md_table(head, [row(r) for r in [*rows, *others]]), PR_NOTE])
    record.save("ok", summary=summary(step, [*rows, *others]), markdown=markdown)
