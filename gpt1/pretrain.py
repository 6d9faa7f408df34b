"""Pre-training: random windows of the token ids, AdamW with warm-up + cosine, checkpoints, resume, DDP.

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
* Resume. out_dir/resume/ holds the last checkpoint (weights, optimizer, scheduler, sampler, RNG states, progress,
  snapshots written so far) and a pointer file naming it, written last. Re-running the same command continues from
  it; on CPU the final weights equal those of an uninterrupted run bit for bit.
* Outputs. `declared_outputs()` lists them; they appear together (temp files, then renames) when the run ends.

The weights format and `load_pretrained` live in gpt1.checkpoints, the checkpoint of a resumable run in gpt1.resume,
device, precision and DDP in gpt1.runtime: this module is the stage that wires them to params.yaml and MLflow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import queue
import shutil
import threading
import time
import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from tqdm import tqdm

from gpt1 import layout
from gpt1.checkpoints import (
    MODEL_FILE,
    MODEL_JSON,
    MODEL_KINDS,
    SNAPSHOT_DIR,
    SNAPSHOT_INDEX,
    build_model,
    model_config,
    save_weights,
    snapshot_name,
    weights_metadata,
)
from gpt1.config import pretrain_settings
from gpt1.errors import PretrainError
from gpt1.files import file_record, staged_outputs, without_timings, write_csv, write_json, write_sealed_json
from gpt1.ids import TokenIds, WindowSampler, load_ids, read_windows, validation_offsets
from gpt1.model import GPTConfig, LSTMConfig, flops_per_token
from gpt1.numerics import Numerics, in_effect
from gpt1.resume import RESUME_DIR, Progress, atomic_write, load_checkpoint, run_settings, save_checkpoint
from gpt1.runtime import (
    Runtime,
    attention_kernels,
    autocast,
    configure_device,
    init_runtime,
    resolve_compile,
    resolve_precision,
    shutdown_runtime,
)
from gpt1.tokenizer import GPT1Tokenizer

METRICS_FILE = layout.PRETRAIN_METRICS
CURVES_FILE = layout.PRETRAIN_CURVES
CURVE_FIELDS = ("step", "tokens", "lr", "train_loss", "val_loss", "val_perplexity")


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


def make_optimizer(model: nn.Module, pretrain: dict[str, Any], fused: bool) -> torch.optim.AdamW:
    """AdamW with decoupled weight decay on matrices only (param_groups: not biases, not LayerNorm gains)."""
    return torch.optim.AdamW(model.param_groups(pretrain["weight_decay"]), lr=pretrain["lr"],
                             betas=tuple(pretrain["betas"]), eps=pretrain["eps"], fused=fused or None)


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


class MetricSink:
    """Per-update metrics to MLflow from a background thread, so the training loop never waits for sqlite.

    One write costs ~20 ms, longer than a small update; the thread therefore sends everything queued since its last
    write as one batch (many steps, one transaction). Failures warn once and never stop training."""

    def __init__(self, run: Any | None) -> None:
        self.run = run
        self.queue: queue.Queue = queue.Queue()
        self.warned = False
        self.thread = threading.Thread(target=self._work, daemon=True) if run is not None else None
        if self.thread:
            self.thread.start()

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self.thread:
            self.queue.put((metrics, step))

    def _work(self) -> None:
        while True:
            items = [self.queue.get()]
            with contextlib.suppress(queue.Empty):
                while True:
                    items.append(self.queue.get_nowait())
            stop = items[-1] is None  # close() queues None last
            self._write([item for item in items if item is not None])
            if stop:
                return

    def _write(self, items: list[tuple[dict[str, float], int]]) -> None:
        try:
            self.run.log_steps(items)
        except Exception as err:
            if not self.warned:
                warnings.warn(f"MLflow logging failed, training goes on: {err}", stacklevel=1)
                self.warned = True

    def close(self) -> None:
        if self.thread:
            self.queue.put(None)
            self.thread.join()
            self.thread = None


# ----------------------------------------------------------------------------------------------------------------
# Outputs


def declared_outputs(out_dir: str | Path, snapshots: int) -> list[Path]:
    """Every file a finished run leaves in out_dir (the resume folder is not one of them)."""
    out = Path(out_dir)
    files = [out / MODEL_FILE, out / MODEL_JSON, out / METRICS_FILE, out / CURVES_FILE]
    files += [out / SNAPSHOT_DIR / snapshot_name(i) for i in range(snapshots)]
    return [*files, out / SNAPSHOT_DIR / SNAPSHOT_INDEX]


def remove_stale_outputs(out_dir: Path, snapshots: int) -> None:
    """After the new outputs are in place: weights an earlier run left that this one did not write (a different
    snapshot count), and temp files of killed runs. Finished outputs are replaced only by the final renames, so a
    run that fails, bad input, NaN, kill or full disk, leaves the previous ones as they were."""
    declared = set(declared_outputs(out_dir, snapshots))
    for folder in (out_dir, out_dir / SNAPSHOT_DIR):
        for path in [*folder.glob("*.safetensors"), *folder.glob(".*.tmp*")]:
            if path.is_file() and path not in declared:
                path.unlink()


def _write_curves(path: Path, rows: list[dict[str, float]]) -> None:
    write_csv(path, CURVE_FIELDS, rows)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


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
        return self.out_dir / RESUME_DIR

    def metadata(self, step: int) -> dict[str, str]:
        return weights_metadata(self.kind, self.config, self.tokenizer_sha256, step, step * self.plan.tokens_per_step,
                                self.numerics.to_json())


def prepare(cfg: Any, kind: str, ids_dir: Path, tokenizer_dir: Path, out_dir: Path, rt: Runtime) -> PretrainJob:
    """Check every input, build model/optimizer/schedule/sampler and restore a checkpoint, all before training."""
    pretrain, model = pretrain_settings(cfg, kind), cfg.section("model")
    if kind not in MODEL_KINDS:
        raise PretrainError(f"--model {kind!r}: valid kinds are {', '.join(MODEL_KINDS)}")
    tok = GPT1Tokenizer.load(tokenizer_dir)
    sha = tok.fingerprint()
    ids_dir, out_dir = Path(ids_dir), Path(out_dir)
    splits = {s: load_ids(ids_dir / f"{s}.bin", ids_dir / f"{s}.json", sha) for s in ("train", "validation")}
    config = model_config(kind, model, tok.base_vocab_size)
    for split, ids in splits.items():
        check_ids(ids, ids_dir / f"{split}.bin", config)
    plan = make_plan(pretrain, config.n_ctx, len(splits["train"]), rt.world_size)
    numerics = in_effect(rt.device.type)
    settings = run_settings(kind, config, pretrain, sha, {s: ids.header for s, ids in splits.items()},
                            numerics.to_json())

    configure_device(rt.device)
    torch.manual_seed(pretrain["seed"])  # the same initial weights on every process (DDP also broadcasts rank 0's)
    raw = build_model(kind, config).to(rt.device)
    optimizer = make_optimizer(raw, pretrain, fused=rt.device.type == "cuda")
    scheduler = make_scheduler(optimizer, pretrain["warmup_steps"], plan.total_steps)
    sampler = WindowSampler(len(splits["train"]), config.n_ctx, pretrain["seed"])
    progress = load_checkpoint(out_dir / RESUME_DIR, settings, plan.total_steps, raw, optimizer, scheduler, sampler)
    start = progress.step if progress else 0
    return PretrainJob(kind=kind, config=config, pretrain=pretrain, tokenizer_sha256=sha, train_ids=splits["train"],
                       val_ids=splits["validation"], out_dir=out_dir, plan=plan, rt=rt, settings=settings, raw=raw,
                       optimizer=optimizer, scheduler=scheduler, sampler=sampler, progress=progress or Progress(),
                       dtype=resolve_precision(pretrain["precision"], rt.device),
                       compiled=resolve_compile(pretrain["compile"], rt.device), numerics=numerics, resumed_from=start,
                       last_checkpoint=start)


def _wrap(job: PretrainJob) -> tuple[nn.Module, nn.Module]:
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


def run_training(job: PretrainJob, run: Any | None = None) -> dict[str, Any]:
    """Train from job.progress to plan.total_steps, evaluating, snapshotting and checkpointing on the way; on the
    main process write the outputs and return the final metrics."""
    plan, rt, p = job.plan, job.rt, job.pretrain
    model, evaluator = _wrap(job)
    model.train()
    val_offsets = validation_offsets(len(job.val_ids), plan.n_ctx, p["eval_batches"] * plan.batch_size, p["seed"])
    snapshot_index = {step: i for i, step in enumerate(plan.snapshots)}
    sink = MetricSink(run)
    bar = tqdm(total=plan.total_steps, initial=job.progress.step, desc=f"pretrain {job.kind}", unit="step",
               disable=not rt.is_main, dynamic_ncols=True)
    progress, started = job.progress, time.perf_counter()
    previous_wall = progress.wall_seconds
    try:
        for step in range(progress.step, plan.total_steps):
            lr = job.scheduler.get_last_lr()[0]
            tick = time.perf_counter()
            loss = train_update(job, model, step)
            seconds = time.perf_counter() - tick
            done = step + 1
            progress.step, progress.interval_loss, progress.interval_updates = (
                done, progress.interval_loss + loss, progress.interval_updates + 1)
            progress.wall_seconds = previous_wall + time.perf_counter() - started
            speed = plan.tokens_per_step / seconds
            sink.log({"train_loss": loss, "lr": lr, "tokens_per_second": speed}, done)
            bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{speed:,.0f}", refresh=False)
            bar.update(1)
            val_loss = None
            if done in snapshot_index or done % p["eval_every"] == 0 or done == plan.total_steps:
                val_loss = _validation(job, evaluator, val_offsets)
            if done in snapshot_index and rt.is_main:
                path = job.resume_dir / SNAPSHOT_DIR / snapshot_name(snapshot_index[done])
                atomic_write(path, lambda f, d=done: save_weights(job.raw, f, job.metadata(d)))
                progress.snapshots.append({"index": snapshot_index[done], "step": done,
                                           "tokens": done * plan.tokens_per_step, "val_loss": val_loss,
                                           **file_record(path)})
            if done % p["eval_every"] == 0 or done == plan.total_steps:
                row = {"step": done, "tokens": done * plan.tokens_per_step, "lr": lr,
                       "train_loss": progress.interval_loss / progress.interval_updates,
                       "val_loss": val_loss, "val_perplexity": math.exp(min(val_loss, 700.0))}
                progress.curves.append(row)
                progress.interval_loss, progress.interval_updates = 0.0, 0
                sink.log({"val_loss": val_loss, "val_perplexity": row["val_perplexity"]}, done)
            if done % p["checkpoint_every"] == 0 and done < plan.total_steps and rt.is_main:
                save_checkpoint(job.resume_dir, done, job.raw, job.optimizer, job.scheduler, job.sampler, progress,
                                job.settings, job.metadata(done))
                job.last_checkpoint = done
    finally:
        bar.close()
        sink.close()
    if not rt.is_main:
        return {}
    return finish(job, run)


def finish(job: PretrainJob, run: Any | None) -> dict[str, Any]:
    """Write every declared output (temp names, renamed together at the end), then drop the resume folder."""
    plan, progress = job.plan, job.progress
    tokens = plan.total_steps * plan.tokens_per_step
    last = progress.curves[-1]
    metrics = {
        "val_loss": last["val_loss"],
        "val_perplexity": last["val_perplexity"],
        "train_loss": last["train_loss"],
        "steps": plan.total_steps,
        "tokens": tokens,
        "flops": flops_per_token(job.raw) * tokens,
        "flops_per_token": flops_per_token(job.raw),
        "device_seconds": progress.wall_seconds * job.rt.world_size,
        "wall_seconds": progress.wall_seconds,
        "tokens_per_second": tokens / max(progress.wall_seconds, 1e-9),
        "parameters": sum(q.numel() for q in job.raw.parameters()),
        "world_size": job.rt.world_size,
    }
    model_meta = {"kind": job.kind, "config": dataclasses.asdict(job.config), "tokenizer_sha256": job.tokenizer_sha256,
                  "step": plan.total_steps, "tokens": tokens, "numerics": job.numerics.to_json()}
    paths = declared_outputs(job.out_dir, len(plan.snapshots))
    with staged_outputs(*paths) as temps:
        save_weights(job.raw, temps[0], job.metadata(plan.total_steps))
        write_json(temps[1], {**model_meta, "weights": file_record(temps[0])})
        _write_curves(temps[3], progress.curves)
        write_sealed_json(temps[2], {**without_timings(metrics), "files": {CURVES_FILE: file_record(temps[3])}})
        for i, temp in enumerate(temps[4:-1]):
            _link_or_copy(job.resume_dir / SNAPSHOT_DIR / snapshot_name(i), temp)
        write_json(temps[-1], sorted(progress.snapshots, key=lambda s: s["index"]))
    remove_stale_outputs(job.out_dir, len(plan.snapshots))
    shutil.rmtree(job.resume_dir, ignore_errors=True)
    if run is not None:
        run.log_metrics({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, plan.total_steps)
        run.log_artifact(job.out_dir / METRICS_FILE)
        run.log_artifact(job.out_dir / CURVES_FILE)
    return metrics


def _params(job: PretrainJob) -> dict[str, Any]:
    return {"kind": job.kind, "model": dataclasses.asdict(job.config), "pretrain": job.pretrain,
            "plan": {"total_steps": job.plan.total_steps, "accum_steps": job.plan.accum_steps,
                     "world_size": job.rt.world_size, "snapshots": list(job.plan.snapshots)},
            "device": str(job.rt.device), "autocast": str(job.dtype), "compiled": job.compiled,
            "numerics": job.numerics.describe()}


def _log_inputs(run: Any, job: PretrainJob, ids_dir: Path) -> None:
    """The token ids trained and validated on, as run inputs with their sha256."""
    for context, ids in (("train", job.train_ids), ("validation", job.val_ids)):
        name = f"{context}.bin"
        run.log_dataset(f"ids/{name}", f"gpt1 encode:{ids_dir / name}", ids.header["sha256"], context)


# What the registry shows beside a pre-trained model's version
REGISTRY_METRICS = ("val_loss", "val_perplexity", "train_loss", "steps", "tokens", "parameters")


def _log_model(run: Any, job: PretrainJob, tokenizer_dir: Path, metrics: dict[str, Any], registered_name: str) -> None:
    """The finished model as an MLflow model (with its tokenizer); the GPT also as a new version of
    `registered_name` in the model registry, tagged with its metrics."""
    from gpt1.mlflow_models import log_language_model

    model_uri = log_language_model(run, job.kind, job.raw, job.out_dir, tokenizer_dir, job.plan.total_steps)
    if job.kind == "gpt":
        tags = {f"metric.{key}": metrics[key] for key in REGISTRY_METRICS}
        version = run.register_model(model_uri, registered_name, {**tags, "gpt1.run_id": run.run_id})
        if version is not None:
            print(f"pretrain: registered {registered_name} version {version} ({model_uri})")


def pretrain_stage(cfg: Any, model_kind: str, ids_dir: Path, tokenizer_dir: Path, out_dir: Path) -> dict[str, Any]:
    """`gpt1 pretrain`: train (or resume) a language model on IDS/train.bin; write the declared outputs in OUT/.
    Under torchrun every process runs this; only rank 0 writes files and logs."""
    rt = init_runtime()
    try:
        job = prepare(cfg, model_kind, Path(ids_dir), Path(tokenizer_dir), Path(out_dir), rt)
        if not rt.is_main:
            return run_training(job)
        if job.resumed_from == 0:  # files of a run killed before its first checkpoint are not a checkpoint
            shutil.rmtree(job.resume_dir, ignore_errors=True)
        else:
            print(f"pretrain: resuming from the checkpoint at step {job.resumed_from} in {job.resume_dir}")
        from gpt1.tracking import stage_run

        experiment = cfg.root["mlflow"]["experiment"]
        with stage_run(f"pretrain-{model_kind}", cfg.profile, experiment, _params(job),
                       name=f"pretrain {model_kind}") as run:
            run.set_tags({"gpt1.tokenizer_sha256": job.tokenizer_sha256, "gpt1.resumed_from_step": job.resumed_from})
            _log_inputs(run, job, Path(ids_dir))
            metrics = run_training(job, run)
            _log_model(run, job, Path(tokenizer_dir), metrics, f"{experiment}-{cfg.profile}-{model_kind}")
            return metrics
    finally:
        shutdown_runtime(rt)


__all__ = [
    "PretrainError",
    "UpdatePlan",
    "WindowSampler",
    "cosine_lr_factor",
    "declared_outputs",
    "make_plan",
    "pretrain_stage",
    "snapshot_steps",
]
