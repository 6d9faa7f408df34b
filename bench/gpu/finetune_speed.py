"""Section e: the time of one fine-tuning update at the gpu profile's real shapes, through gpt1.finetuning's own
loop (`Trainer.epoch`: collation, the copy to the device, bf16 autocast, L3, fused AdamW, the schedule), on the
paper's model: MNLI (batch 32, one sequence each), QQP (both orders: two sequences each), RACE (4 answers x 512
tokens each), and a near-empty update (one 8-token sequence: the fixed cost, mostly AdamW over 117M parameters).
Sequence lengths are each task's mean padded length in a shuffled batch (bench/gpu_budget.py's counts on the
mirror, carried in the bundle's lengths.json). From them: the fixed cost per update and fine-tuning's MFU, which
bench/gpu_budget.py then divides by (with the peak of section a and pre-training's MFU of section b) to recompute
the gpu profile's GPU-hours, each figure marked measured or assumed.

On the CPU: the tiny model and tiny shapes, the same code; the figures are no GPU's."""

from __future__ import annotations

import datetime as dt
import json
import random
import sys
import time
from typing import Any

import torch

from gpt1.config import load_config
from gpt1.finetuning import Recipe, Trainer
from gpt1.heads import FinetuneModel
from gpt1.model import GPT, GPTConfig
from gpt1.taskdata import Part
from gpt1.tasks import Example, LoadedSplit, Transformed, get_task
from gpt1.tokenizer import FINETUNE_SPECIALS
from gpu.env import REPO, Context, run_one, write_json
from gpu.report import Record, md_table

PAPER = GPTConfig(vocab_size=40478, n_ctx=512, n_embd=768, n_layer=12, n_head=12)
TINY = GPTConfig(vocab_size=512, n_ctx=64, n_embd=64, n_layer=2, n_head=2)
SEQUENCES = {"mnli": 1, "qqp": 2, "race": 4}  # per example: entailment, similarity (both orders), 4 choices
ASSUMED_LENGTHS = {"mnli": 48, "qqp": 32, "race": 512}  # when the bundle has no lengths.json


def shapes(ctx: Context, cfg: GPTConfig, batch: int) -> dict[str, tuple[int, int, int]]:
    """task -> (examples per batch, sequences per example, tokens per sequence); 'fixed' is the near-empty update."""
    path = ctx.bundle / "lengths.json"
    lengths = {t: x["padded"] / x["sequences"] for t, x in json.loads(path.read_text())["tasks"].items()
               if t in SEQUENCES} if path.is_file() else ASSUMED_LENGTHS
    scale = cfg.n_ctx / PAPER.n_ctx  # the tiny model: the same shapes, shrunk to its context
    found = {t: (batch, s, max(8, min(cfg.n_ctx, round(lengths[t] * scale)))) for t, s in SEQUENCES.items()}
    return {"fixed": (1, 1, 8), **found}


def part(task: str, examples: int, sequences: int, length: int, vocab: int) -> Part:
    """`examples` examples of random ids, each `sequences` sequences of `length` tokens (no padding)."""
    rng = random.Random(0)
    spec = get_task(task)
    labels = spec.num_labels if spec.kind != "multiple_choice" else sequences
    items = [Example(("x",), rng.randrange(labels), None, i) for i in range(examples)]
    transformed = [Transformed([[rng.randrange(vocab) for _ in range(length)] for _ in range(sequences)], False)
                   for _ in range(examples)]
    return Part(LoadedSplit(items, examples, 0, 0), transformed, "train", None)


def update_seconds(model: FinetuneModel, recipe: Recipe, data: Part, batches: int, device: torch.device) -> float:
    """Seconds per update over `batches` updates of one epoch of the real loop, after a warm-up epoch."""
    trainer = Trainer(model, recipe, data, seed=0)
    trainer.epoch(0, 0, "warm-up")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    tick = time.perf_counter()
    _, updates, _ = trainer.epoch(1, 0, "timed")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - tick) / updates if updates == batches else float("nan")


def flops_per_update(cfg: GPTConfig, examples: int, sequences: int, length: int, lm_weight: float) -> float:
    """bench/gpu_budget.py's count: blocks and attention at every position, the LM head on the real tokens."""
    from gpu_budget import Costs, Lengths

    costs = Costs.of(GPT(cfg), mfu=1.0)
    tokens = sequences * length
    each = Lengths(sequences, tokens, sequences * length**2, tokens, sequences * length**2)
    return examples * costs.train(each, lm_weight)


def measure(ctx: Context, record: Record) -> dict[str, Any]:
    device = torch.device(ctx.device)
    cfg = TINY if ctx.tiny or not ctx.cuda else PAPER
    finetune = load_config(REPO / "params.yaml", "gpu").section("finetune")
    batches = 4 if ctx.cuda else 2
    found = {}
    for task, (examples, sequences, length) in shapes(ctx, cfg, finetune["batch_size"]).items():
        torch.manual_seed(0)
        lm = GPT(cfg)
        lm.resize_token_embeddings(cfg.vocab_size + len(FINETUNE_SPECIALS))
        spec = get_task("mnli" if task == "fixed" else task)
        model = FinetuneModel(lm, spec, finetune["clf_dropout"]).to(device)
        recipe = Recipe.from_section({**finetune, "batch_size": examples}, spec.name, None)
        seconds = update_seconds(model, recipe, part(spec.name, examples * batches, sequences, length,
                                                     cfg.vocab_size), batches, device)
        flops = flops_per_update(cfg, examples, sequences, length, recipe.lm_weight)
        found[task] = {"examples": examples, "sequences": sequences, "length": length, "ms": seconds * 1e3,
                       "tflop": flops / 1e12}
        record.update(updates=found)
        del model, lm
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return found


def fit(found: dict[str, Any], peak_tflops: float) -> dict[str, float]:
    """The fixed cost (the near-empty update) and fine-tuning's MFU: each shape's FLOPs over its time beyond the
    fixed cost, weighted by FLOPs."""
    fixed = found["fixed"]["ms"]
    shaped = [x for t, x in found.items() if t != "fixed"]
    busy = sum(max(x["ms"] - fixed, 1e-6) for x in shaped) / 1e3
    mfu = sum(x["tflop"] for x in shaped) / (busy * peak_tflops)
    return {"update_ms": fixed, "finetune_mfu": mfu}


def budget(ctx: Context, measured: dict[str, Any]) -> str:
    """bench/gpu_budget.py on the gpu profile with these speeds (and the bundle's token counts)."""
    path = ctx.work / "measured.json"
    write_json(path, measured)
    lengths = ctx.bundle / "lengths.json"
    if not lengths.is_file():
        return "skipped: the bundle has no lengths.json (made by --prepare where the data mirror is)"
    args = [sys.executable, str(REPO / "bench" / "gpu_budget.py"), "--profile", "gpu", "--lengths", str(lengths),
            "--measured", str(path)]
    done = run_one(ctx, "gpu_budget", args, max(30.0, ctx.remaining())).check()
    return done.log.read_text()


def run(ctx: Context) -> None:
    record = Record(ctx, "finetune_speed")
    found = measure(ctx, record)
    hardware = (ctx.read_record("hardware") or {}).get("data", {})
    speed = (ctx.read_record("speed") or {}).get("data", {})
    peak = hardware.get("matmul_peak_tflops") or 1.0
    fitted = fit(found, peak)
    ours = next((v for v in speed.get("variants", []) if v["name"].startswith("ours")), {})
    when = dt.date.today().isoformat()
    source = f"{hardware.get('gpu', 'CPU rehearsal, not a GPU figure')}, {when}"
    measured = {"source": source, "peak_tflops": hardware.get("matmul_peak_tflops") if ctx.cuda else None,
                "mfu": ours.get("mfu") if ctx.cuda and not ctx.tiny else None, **fitted}
    if not ctx.cuda or ctx.tiny:  # no GPU figure may reach the estimate as measured
        measured.update(finetune_mfu=None, update_ms=None)
    record.update(fit=fitted, measured=measured)
    text = budget(ctx, measured)
    rows = [[t, x["examples"], x["sequences"], x["length"], f"{x['tflop']:.3f}", f"{x['ms']:.1f}",
             f"{x['tflop'] / max(x['ms'] / 1e3, 1e-9) / peak:.1%}"] for t, x in found.items()]
    table = md_table(["shape", "examples", "sequences each", "tokens each", "TFLOP", "ms per update",
                      "MFU (measured peak)"], rows)
    total = next((line for line in text.splitlines() if line.startswith("| **total**")), "")
    hours = total.split("**")[-2] if total.count("**") >= 4 else "?"
    record.update(budget=text)
    summary = (f"fixed {fitted['update_ms']:.1f} ms/update, fine-tuning MFU {fitted['finetune_mfu']:.1%}; "
               f"gpu profile {hours} GPU-hours" + ("" if ctx.cuda and not ctx.tiny else " (assumed speeds: rehearsal)"))
    record.save("ok", summary=summary, markdown=f"{table}\n\nbench/gpu_budget.py --profile gpu --measured:\n\n{text}")
