"""Section d: GPU numerics. The same weights and batch on the CPU in fp32 (the reference) and on the GPU in fp32
(TF32 off), TF32 (what gpt1.training.runtime.configure_device turns on) and bf16 autocast with flash attention first
(what pre-training and fine-tuning compute in): max and mean |delta logits| and delta loss, for the paper's shape
(random N(0, 0.02) weights) and for section c's pre-trained model on its validation windows. Then two identical short
pre-trainings through the CLI (section c's command, uninterrupted): bit-identical, or by how much they differ after
their updates; and section c's killed-and-resumed run against them.

On the CPU the "device" arms run on the CPU too: fp32 against itself (0 by construction), bf16 autocast; TF32 is
skipped (CUDA only)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from bench.gpu.env import Context, run_one
from bench.gpu.report import Record, md_table
from bench.gpu.stages import pretrain_args, twins
from gpt1.modeling.model import GPT, GPTConfig
from gpt1.training.runtime import attention_kernels, autocast, configure_device

PAPER = GPTConfig(vocab_size=40478, n_ctx=512, n_embd=768, n_layer=12, n_head=12)
TINY = GPTConfig(vocab_size=512, n_ctx=64, n_embd=64, n_layer=2, n_head=2)
ARMS = ("fp32", "tf32", "bf16")


@contextlib.contextmanager
def arm(name: str, device: torch.device) -> Iterator[None]:
    """fp32: TF32 off; tf32: TF32 matmuls (configure_device's setting); bf16: that plus bf16 autocast and the
    attention kernels pre-training asks for. Restores the matmul settings after."""
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    try:
        if name == "fp32":
            yield
        else:
            configure_device(device)
            context = autocast(device, torch.bfloat16 if name == "bf16" else None)
            with context, attention_kernels(device):
                yield
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32 = before[1]


@torch.no_grad()
def logits_and_loss(model: GPT, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, float]:
    logits, loss = model(x, y)
    return logits.float().cpu(), loss.float().item()


def compare(model: GPT, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> list[dict[str, Any]]:
    """Each arm on `device` against fp32 on the CPU, the same weights and batch."""
    reference, ref_loss = logits_and_loss(model.cpu().eval(), x, y)
    model = model.to(device)
    found = []
    for name in ARMS:
        if name == "tf32" and device.type != "cuda":
            found.append({"arm": name, "skipped": "CUDA only"})
            continue
        with arm(name, device):
            logits, loss = logits_and_loss(model, x.to(device), y.to(device))
        delta = (logits - reference).abs()
        found.append({"arm": name, "max_abs_logit_delta": delta.max().item(), "mean_abs_logit_delta":
                      delta.mean().item(), "loss": loss, "loss_delta": loss - ref_loss, "reference_loss": ref_loss,
                      "max_abs_logit": reference.abs().max().item()})
    model.cpu()
    return found


def random_batch(cfg: GPTConfig, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, cfg.vocab_size, (batch, cfg.n_ctx + 1), generator=torch.Generator().manual_seed(1))
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def validation_batch(ctx: Context, cfg: GPTConfig, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    from gpt1.data.ids import load_ids, read_windows, validation_offsets

    folder = ctx.data("ids")
    ids = load_ids(folder / "validation.bin", folder / "validation.json")
    offsets = validation_offsets(len(ids), cfg.n_ctx, batch, 0)
    return read_windows(ids.ids, offsets, cfg.n_ctx, torch.device("cpu"))


def logit_rows(ctx: Context) -> list[dict[str, Any]]:
    from gpt1.modeling.checkpoints import load_pretrained

    device = torch.device(ctx.device)
    cfg = TINY if ctx.tiny or not ctx.cuda else PAPER
    torch.manual_seed(0)
    shape = "the paper's shape" if cfg == PAPER else "a tiny shape"
    rows = [{"model": f"{shape}, N(0, 0.02) init ({cfg.n_layer}x{cfg.n_embd}, V {cfg.vocab_size})", **r}
            for r in compare(GPT(cfg), *random_batch(cfg, 2), device)]
    trained = ctx.work / "stages" / "pretrain"
    if (trained / "model.json").is_file():
        model, meta = load_pretrained(trained)
        x, y = validation_batch(ctx, model.config, 16)
        rows += [{"model": f"section c's pre-trained model, {meta['step']} updates", **r}
                 for r in compare(model, x, y, device)]
    return rows


# ----------------------------------------------------------------------------------------------------------------
# Two identical pre-trainings


def weight_delta(a: Path, b: Path) -> dict[str, Any]:
    from gpt1.modeling.checkpoints import read_weights

    wa, wb = read_weights(a)[0], read_weights(b)[0]
    deltas = {k: (wa[k].float() - wb[k].float()).abs().max().item() for k in wa}
    return {"identical": all(torch.equal(wa[k], wb[k]) for k in wa), "max_abs_weight_delta": max(deltas.values()),
            "tensors_differing": sum(1 for d in deltas.values() if d > 0), "tensors": len(deltas)}


def val_loss(out: Path) -> float:
    from gpt1.pipeline import records

    return records.read("pretrain_metrics", out / "metrics.json")["val_loss"]


def twin_runs(ctx: Context, record: Record) -> dict[str, Any]:
    """Section c ran them beside its later jobs; run here what it did not finish."""
    outs = list(twins(ctx).values())
    for name, out in twins(ctx).items():
        if not (out / "model.json").is_file():
            run_one(ctx, name, pretrain_args(ctx, out), max(60.0, ctx.remaining() - 10)).check()
        record.update(**{f"{name}_val_loss": val_loss(out)})
    weights = [out / "model.safetensors" for out in outs]
    found = {"updates": ctx.pretrain_steps, **weight_delta(*weights),
             "val_loss_delta": val_loss(outs[1]) - val_loss(outs[0])}
    resumed = ctx.work / "stages" / "pretrain" / "model.safetensors"
    if resumed.is_file():
        found["resumed_vs_run1"] = weight_delta(resumed, outs[0] / "model.safetensors")
    return found


def run(ctx: Context) -> None:
    record = Record(ctx, "precision")
    rows = logit_rows(ctx)
    record.update(logits=rows)
    table = [[r["model"], r["arm"], "skipped: " + r["skipped"], "", "", ""] if "skipped" in r else
             [r["model"], r["arm"], f"{r['max_abs_logit_delta']:.3g}", f"{r['mean_abs_logit_delta']:.3g}",
              f"{r['loss_delta']:+.3g}", f"{r['reference_loss']:.4f}"] for r in rows]
    markdown = md_table(["weights", f"{ctx.device} arm", "max abs d logits", "mean abs d logits", "d loss",
                         "CPU fp32 loss"], table)
    record.save(markdown=markdown)
    twins = twin_runs(ctx, record)
    record.update(twins=twins)
    same = "bit-identical" if twins["identical"] else (
        f"differ: max abs d w {twins['max_abs_weight_delta']:.3g} in {twins['tensors_differing']}/{twins['tensors']} "
        f"tensors, d val loss {twins['val_loss_delta']:+.3g}")
    resumed = twins.get("resumed_vs_run1")
    notes = [f"two identical pre-trainings ({twins['updates']} updates, section c's command): {same}"]
    if resumed:
        notes.append("killed-and-resumed (section c) against run 1: " + ("bit-identical" if resumed["identical"] else
                     f"max abs d w {resumed['max_abs_weight_delta']:.3g}"))
    bf16 = next((r for r in rows if r["arm"] == "bf16" and "skipped" not in r), None)
    summary = (f"bf16 vs CPU fp32: max abs d logits {bf16['max_abs_logit_delta']:.3g}, d loss "
               f"{bf16['loss_delta']:+.2g}; twin runs {same}") if bf16 else f"twin runs {same}"
    record.save("ok", summary=summary, markdown=markdown + "\n\n" + "\n".join(f"- {n}" for n in notes))
