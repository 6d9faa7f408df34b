"""Pre-training, the library: random windows of the token ids, AdamW with warm-up + cosine, checkpoints, resume, DDP.

The paper (Section 4.1): Adam, max learning rate 2.5e-4, "increased linearly from zero over the first 2000 updates
and annealed to 0 using a cosine schedule", 100 epochs of minibatches of 64 randomly sampled, contiguous sequences
of 512 tokens, dropout 0.1, modified L2 regularisation w = 0.01 on all non bias or gain weights.

How the pieces fit (all of it is the same on 1 process and under `torchrun`):

* Sampling. Every update draws the offsets of its whole global batch (`batch_size` windows of n_ctx + 1 tokens)
  from ONE generator seeded with pretrain.seed, identical on every rank; rank r takes its slice of the batch and
  cuts it into micro-batches. So the set of windows an update sees does not depend on the number of processes
  (a 2-process run equals a 1-process run with the same global batch, up to float summation order), and the
  generator's state is the whole "data-sampler state" a checkpoint needs.
* Dropout. Before every micro-batch the torch RNG is seeded from (seed, update, index of the micro-batch in the
  global batch), so dropout masks too are independent of the process count and of where a run was resumed.
* Validation. A fixed set of eval_batches x batch_size windows of the validation ids (their own seeded stream),
  evaluated every eval_every updates, at every snapshot and at the end: mean loss and perplexity.
* The LM head on CUDA pads the vocabulary to a multiple of 64 for the matrix units and masks the padding
  (`GPT.logits_multiple`, `runtime.logits_multiple`): the same loss; the weights keep their rows.
* Resume. out_dir/resume/ holds the last checkpoint (weights, optimizer, scheduler, sampler, RNG states, progress,
  snapshots written so far) and a pointer file naming it, written last. Re-running the same command continues from
  it; on CPU the final weights equal those of an uninterrupted run bit for bit.

The weights format and `load_pretrained` live in gpt1.modeling.checkpoints, the checkpoint of a resumable run in
gpt1.training.resume, device, precision and DDP in gpt1.training.runtime. This module is the update plan, the schedule,
the loop and the evaluation: a library (no MLflow, no results path; the model and pretrain sections come in as
mappings). The stage that wires it to params.yaml, the outputs and MLflow is gpt1.stages.pretrain.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from tqdm import tqdm

from gpt1.data.ids import TokenIds, WindowSampler, load_ids, read_windows, validation_offsets
from gpt1.data.tokenizer import GPT1Tokenizer
from gpt1.modeling.checkpoints import (
    MODEL_KINDS,
    build_model,
    model_config,
    save_weights,
    snapshot_name,
    weights_metadata,
)
from gpt1.modeling.model import GPT, GPTConfig, LSTMConfig
from gpt1.pipeline import layout
from gpt1.pipeline.errors import PretrainError
from gpt1.pipeline.files import file_record
from gpt1.training.numerics import Numerics, in_effect
from gpt1.training.resume import Progress, atomic_write, load_checkpoint, run_settings, save_checkpoint
from gpt1.training.runtime import (
    Runtime,
    adamw,
    attention_kernels,
    autocast,
    configure_device,
    logits_multiple,
    resolve_compile,
    resolve_precision,
)

# ----------------------------------------------------------------------------------------------------------------
# Schedule and plan


def cosine_lr_factor(step: int, warmup: int, total: int) -> float:
    """Multiplier of the peak lr for the update that follows `step` completed updates (0-based): linear from 0 over
    `warmup` updates, then half a cosine down to 0 at `total` (as transformers' get_cosine_schedule_with_warmup)."""
    if step < warmup:
        return step / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))))


def snapshot_steps(total: int, count: int) -> list[int]:
    """`count` unique increasing update counts, log-spaced from 1 to `total` (the last is `total`).

    Rounded geometric points collide at the small end; push duplicates up, then pull the tail under `total`."""
    if not 1 <= count <= total:
        raise ValueError(f"need 1 <= count <= total, got count={count}, total={total}")
    if count == 1:
        return [total]
    steps = [round(total ** (k / (count - 1))) for k in range(count)]
    for k in range(1, count):
        steps[k] = max(steps[k], steps[k - 1] + 1)
    for k in range(count - 1, -1, -1):
        steps[k] = min(steps[k], total - (count - 1 - k))
    return steps


@dataclass(frozen=True)
class UpdatePlan:
    """How many updates, and how an update's global batch is split over processes and micro-batches."""

    total_steps: int
    batch_size: int  # sequences per update, all processes together
    micro_batch: int  # sequences per forward pass
    accum_steps: int  # micro-batches per update on each process
    world_size: int
    n_ctx: int
    snapshots: tuple[int, ...]

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.n_ctx

    @property
    def per_rank(self) -> int:
        return self.batch_size // self.world_size


def make_plan(pretrain: dict[str, Any], n_ctx: int, train_tokens: int, world_size: int) -> UpdatePlan:
    """total_steps = min(max_steps, floor(epochs * train_tokens / (batch_size * n_ctx))); errors name the keys."""
    batch = pretrain["batch_size"]
    if batch % world_size:
        raise PretrainError(
            f"pretrain.batch_size={batch} does not split evenly over {world_size} processes; use a multiple of "
            f"{world_size}, or another number of processes"
        )
    # micro_batch_size caps a forward pass; with more processes each one's share of the batch can be smaller.
    micro = min(pretrain["micro_batch_size"], batch // world_size)
    if (batch // world_size) % micro:
        raise PretrainError(
            f"pretrain.micro_batch_size={pretrain['micro_batch_size']} does not divide the {batch // world_size} "
            f"sequences each of {world_size} processes takes of pretrain.batch_size={batch}; gradient "
            f"accumulation needs whole micro-batches: use a divisor of {batch // world_size}"
        )
    from_epochs = math.floor(pretrain["epochs"] * train_tokens / (batch * n_ctx))
    total = min(from_epochs, pretrain["max_steps"] or from_epochs)
    if total < 1:
        raise PretrainError(
            f"pretrain.epochs={pretrain['epochs']} over {train_tokens} training tokens gives "
            f"floor({pretrain['epochs']} * {train_tokens} / (pretrain.batch_size={batch} * model.n_ctx={n_ctx})) = 0 "
            f"updates; raise epochs, lower batch_size or n_ctx, or add data"
        )
    if total < pretrain["snapshots"]:
        raise PretrainError(
            f"pretrain.snapshots={pretrain['snapshots']} needs at least that many updates, but the run has {total} "
            f"(pretrain.max_steps={pretrain['max_steps']}, pretrain.epochs={pretrain['epochs']}); "
            f"lower snapshots or train longer"
        )
    return UpdatePlan(total, batch, micro, batch // (micro * world_size), world_size, n_ctx,
                      tuple(snapshot_steps(total, pretrain["snapshots"])))


# ----------------------------------------------------------------------------------------------------------------
# Model, optimizer, schedule


def make_optimizer(model: nn.Module, pretrain: dict[str, Any], device: torch.device) -> torch.optim.AdamW:
    """AdamW with decoupled weight decay on matrices only (param_groups: not biases, not LayerNorm gains)."""
    return adamw(model.param_groups(pretrain["weight_decay"]), device, lr=pretrain["lr"],
                 betas=tuple(pretrain["betas"]), eps=pretrain["eps"])


def make_scheduler(optimizer: torch.optim.Optimizer, warmup: int, total: int) -> torch.optim.lr_scheduler.LambdaLR:
    # A partial (not a lambda) so the scheduler's state_dict stays plain data.
    return torch.optim.lr_scheduler.LambdaLR(optimizer, partial(cosine_lr_factor, warmup=warmup, total=total))


# ----------------------------------------------------------------------------------------------------------------
# Data


def check_ids(ids: TokenIds, path: Path, config: GPTConfig | LSTMConfig) -> None:
    """Refuse, before training, ids the model cannot read: a vocabulary larger than the embedding, or fewer tokens
    than one window."""
    if ids.header["vocab_size"] > config.vocab_size:
        raise PretrainError(
            f"{path}: header vocab_size {ids.header['vocab_size']} exceeds the model's {config.vocab_size} "
            f"(the tokenizer's base vocabulary); re-run gpt1 encode with this tokenizer"
        )
    top = int(ids.ids.max()) if len(ids) else 0  # one pass over the memmap: milliseconds, before any training
    if top >= config.vocab_size:
        raise PretrainError(
            f"{path}: holds token id {top}, but the vocabulary has {config.vocab_size} ids; the file is corrupt, "
            f"re-run gpt1 encode"
        )
    if len(ids) < config.n_ctx + 1:
        raise PretrainError(
            f"{path}: {len(ids)} tokens, fewer than one window of model.n_ctx + 1 = {config.n_ctx + 1}; "
            f"lower model.n_ctx or use more data"
        )


def micro_seed(seed: int, step: int, index: int) -> int:
    """The torch seed of micro-batch `index` (its place in the global batch) of update `step`: dropout masks then
    depend on neither the process count nor where the run was resumed."""
    return ((seed * 1_000_003 + step) * 65_537 + index) % 2**63


# ----------------------------------------------------------------------------------------------------------------
# Evaluation, logging


@torch.no_grad()
def evaluate(model: nn.Module, ids: np.ndarray, offsets: torch.Tensor, micro: int, n_ctx: int, rt: Runtime,
             dtype: torch.dtype | None) -> float:
    """Mean next-token loss over the fixed validation windows; the micro-batches are shared out over processes."""
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=rt.device)
    chunks = offsets.split(micro)
    for index in range(rt.rank, len(chunks), rt.world_size):
        x, y = read_windows(ids, chunks[index], n_ctx, rt.device)
        with autocast(rt.device, dtype), attention_kernels(rt.device):
            _, loss = model(x, y)
        total += loss.double() * len(chunks[index])
    if rt.distributed:
        dist.all_reduce(total)
    model.train(was_training)
    return (total / len(offsets)).item()


# ----------------------------------------------------------------------------------------------------------------
# The run


@dataclass
class PretrainJob:
    """A validated, ready-to-train run: inputs, plan, model and optimizer state (restored when resuming)."""

    kind: str
    config: GPTConfig | LSTMConfig
    pretrain: dict[str, Any]
    tokenizer_sha256: str
    train_ids: TokenIds
    val_ids: TokenIds
    out_dir: Path
    plan: UpdatePlan
    rt: Runtime
    settings: dict[str, Any]
    raw: nn.Module  # the model itself: what gets saved
    optimizer: torch.optim.AdamW
    scheduler: torch.optim.lr_scheduler.LambdaLR
    sampler: WindowSampler
    progress: Progress
    dtype: torch.dtype | None
    compiled: bool
    numerics: Numerics
    resumed_from: int = 0
    last_checkpoint: int = 0  # step of the newest checkpoint on disk (named when a NaN stops the run)

    @property
    def resume_dir(self) -> Path:
        return self.out_dir / layout.RESUME

    def metadata(self, step: int) -> dict[str, str]:
        return weights_metadata(self.kind, self.config, self.tokenizer_sha256, step, step * self.plan.tokens_per_step,
                                self.numerics.to_json())


def build_job(kind: str, model: dict[str, Any], pretrain: dict[str, Any], ids_dir: Path, tokenizer_dir: Path,
              out_dir: Path, rt: Runtime) -> PretrainJob:
    """Check every input, build model/optimizer/schedule/sampler and restore a checkpoint, all before training.
    `model` and `pretrain`: the profile's model section and its pretrain section as this model kind sees it."""
    if kind not in MODEL_KINDS:
        raise PretrainError(f"--model {kind!r}: valid kinds are {', '.join(MODEL_KINDS)}")
    tok = GPT1Tokenizer.load(tokenizer_dir)
    sha = tok.fingerprint()
    ids_dir, out_dir = Path(ids_dir), Path(out_dir)
    splits = {s: load_ids(ids_dir / layout.ids_bin(s), ids_dir / layout.ids_header(s), sha) for s in layout.SPLITS}
    config = model_config(kind, model, tok.base_vocab_size)
    for split, ids in splits.items():
        check_ids(ids, ids_dir / layout.ids_bin(split), config)
    plan = make_plan(pretrain, config.n_ctx, len(splits["train"]), rt.world_size)
    numerics = in_effect(rt.device.type)
    settings = run_settings(kind, config, pretrain, sha, {s: ids.header for s, ids in splits.items()},
                            numerics.to_json())

    configure_device(rt.device)
    torch.manual_seed(pretrain["seed"])  # the same initial weights on every process (DDP also broadcasts rank 0's)
    raw = build_model(kind, config).to(rt.device)
    if isinstance(raw, GPT):
        raw.logits_multiple = logits_multiple(rt.device)
    optimizer = make_optimizer(raw, pretrain, rt.device)
    scheduler = make_scheduler(optimizer, pretrain["warmup_steps"], plan.total_steps)
    sampler = WindowSampler(len(splits["train"]), config.n_ctx, pretrain["seed"])
    progress = load_checkpoint(out_dir / layout.RESUME, settings, plan.total_steps, raw, optimizer, scheduler, sampler)
    start = progress.step if progress else 0
    return PretrainJob(kind=kind, config=config, pretrain=pretrain, tokenizer_sha256=sha, train_ids=splits["train"],
                       val_ids=splits["validation"], out_dir=out_dir, plan=plan, rt=rt, settings=settings, raw=raw,
                       optimizer=optimizer, scheduler=scheduler, sampler=sampler, progress=progress or Progress(),
                       dtype=resolve_precision(pretrain["precision"], rt.device),
                       compiled=resolve_compile(pretrain["compile"], rt.device), numerics=numerics, resumed_from=start,
                       last_checkpoint=start)


def wrap(job: PretrainJob) -> tuple[nn.Module, nn.Module]:
    """(model to train: compiled and/or DDP-wrapped, model to evaluate: compiled, never DDP)."""
    model: nn.Module = job.raw
    if job.compiled:
        model = torch.compile(model)
    evaluator = model
    if job.rt.distributed:
        from torch.nn.parallel import DistributedDataParallel as DDP

        cuda = job.rt.device.type == "cuda"
        model = DDP(model, device_ids=[job.rt.local_rank] if cuda else None)
    return model, evaluator


def train_update(job: PretrainJob, model: nn.Module, step: int) -> float:
    """One optimizer update (0-based `step`): this process's share of the global batch in micro-batches, gradients
    synchronised on the last one only. Returns the mean loss over the global batch."""
    plan, rt = job.plan, job.rt
    offsets = job.sampler.draw(plan.batch_size)[rt.rank * plan.per_rank : (rt.rank + 1) * plan.per_rank]
    total = torch.zeros((), device=rt.device)
    for i in range(plan.accum_steps):
        torch.manual_seed(micro_seed(job.pretrain["seed"], step, rt.rank * plan.accum_steps + i))
        x, y = read_windows(job.train_ids.ids, offsets[i * plan.micro_batch : (i + 1) * plan.micro_batch],
                            plan.n_ctx, rt.device)
        last = i == plan.accum_steps - 1
        sync = contextlib.nullcontext() if last or not rt.distributed else model.no_sync()
        with sync:
            with autocast(rt.device, job.dtype), attention_kernels(rt.device):
                _, loss = model(x, y)
            (loss / plan.accum_steps).backward()
        total += loss.detach().float()
    if rt.distributed:
        dist.all_reduce(total)
    value = (total / (plan.accum_steps * rt.world_size)).item()
    if not math.isfinite(value):
        job.optimizer.zero_grad(set_to_none=True)
        kept = (f"the last good checkpoint (step {job.last_checkpoint}) is kept in {job.resume_dir}"
                if job.last_checkpoint else "no checkpoint had been written yet")
        raise PretrainError(f"step {step + 1}: the training loss is {value}; stopped, {kept}; "
                            f"lower pretrain.lr or set pretrain.grad_clip")
    if job.pretrain["grad_clip"]:
        torch.nn.utils.clip_grad_norm_(job.raw.parameters(), job.pretrain["grad_clip"])
    job.optimizer.step()
    job.scheduler.step()
    job.optimizer.zero_grad(set_to_none=True)
    return value


def _validation(job: PretrainJob, evaluator: nn.Module, offsets: torch.Tensor) -> float:
    return evaluate(evaluator, job.val_ids.ids, offsets, job.plan.micro_batch, job.plan.n_ctx, job.rt, job.dtype)


def train(job: PretrainJob, log: Callable[[dict[str, float], int], None] | None = None,
          mark: Callable[[str], None] = lambda phase: None) -> Progress:
    """Train from job.progress to plan.total_steps, evaluating, snapshotting (into the resume folder) and
    checkpointing on the way; `log(metrics, step)` receives every update's and evaluation's numbers, `mark(phase)`
    each phase as it ends (a stage's clock, gpt1.pipeline.clock): `first_update` (a compile's, on CUDA), `update`,
    `evaluate`, `save` (snapshots and checkpoints). Returns the progress, whose curves and snapshots the stage writes
    out."""
    plan, rt, p = job.plan, job.rt, job.pretrain
    model, evaluator = wrap(job)
    model.train()
    val_offsets = validation_offsets(len(job.val_ids), plan.n_ctx, p["eval_batches"] * plan.batch_size, p["seed"])
    snapshot_index = {step: i for i, step in enumerate(plan.snapshots)}
    log = log or (lambda metrics, step: None)
    bar = tqdm(total=plan.total_steps, initial=job.progress.step, desc=f"pretrain {job.kind}", unit="step",
               disable=not rt.is_main, dynamic_ncols=True)
    progress, started = job.progress, time.perf_counter()
    previous_wall, first = progress.wall_seconds, progress.step
    try:
        for step in range(progress.step, plan.total_steps):
            lr = job.scheduler.get_last_lr()[0]
            tick = time.perf_counter()
            loss = train_update(job, model, step)
            seconds = time.perf_counter() - tick
            mark("first_update" if step == first else "update")
            done = step + 1
            progress.step, progress.interval_loss, progress.interval_updates = (
                done, progress.interval_loss + loss, progress.interval_updates + 1)
            progress.wall_seconds = previous_wall + time.perf_counter() - started
            speed = plan.tokens_per_step / seconds
            log({"train_loss": loss, "lr": lr, "tokens_per_second": speed}, done)
            bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{speed:,.0f}", refresh=False)
            bar.update(1)
            val_loss = None
            if done in snapshot_index or done % p["eval_every"] == 0 or done == plan.total_steps:
                val_loss = _validation(job, evaluator, val_offsets)
                mark("evaluate")
            if done in snapshot_index and rt.is_main:
                path = job.resume_dir / layout.SNAPSHOTS / snapshot_name(snapshot_index[done])
                atomic_write(path, lambda f, d=done: save_weights(job.raw, f, job.metadata(d)))
                progress.snapshots.append({"index": snapshot_index[done], "step": done,
                                           "tokens": done * plan.tokens_per_step, "val_loss": val_loss,
                                           **file_record(path)})
                mark("save")
            if done % p["eval_every"] == 0 or done == plan.total_steps:
                row = {"step": done, "tokens": done * plan.tokens_per_step, "lr": lr,
                       "train_loss": progress.interval_loss / progress.interval_updates,
                       "val_loss": val_loss, "val_perplexity": math.exp(min(val_loss, 700.0))}
                progress.curves.append(row)
                progress.interval_loss, progress.interval_updates = 0.0, 0
                log({"val_loss": val_loss, "val_perplexity": row["val_perplexity"]}, done)
            if done % p["checkpoint_every"] == 0 and done < plan.total_steps and rt.is_main:
                save_checkpoint(job.resume_dir, done, job.raw, job.optimizer, job.scheduler, job.sampler, progress,
                                job.settings, job.metadata(done))
                job.last_checkpoint = done
                mark("save")
    finally:
        bar.close()
    return progress


__all__ = [
    "PretrainJob",
    "UpdatePlan",
    "build_job",
    "check_ids",
    "cosine_lr_factor",
    "evaluate",
    "make_optimizer",
    "make_plan",
    "make_scheduler",
    "micro_seed",
    "snapshot_steps",
    "train",
    "train_update",
    "wrap",
]
