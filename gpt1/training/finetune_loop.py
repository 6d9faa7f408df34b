"""The fine-tuning loop (paper §3.2-3.3), a library: a `Trainer` takes one job's `FinetuneModel` and training
examples and minimises L3 = L2 + λ·L1 per update (`heads.compute_losses`: the task loss plus λ times the next-token
loss over the real tokens of every task sequence) with AdamW, decoupled weight decay on matrices only, at the
`Recipe`'s rate: linear warm-up over the first `warmup_fraction` of the updates, then linear decay to 0
(`linear_lr_factor`); no early stopping. Each epoch's batches are shuffled by a generator of the job's seed,
optionally formed by length within runs of `length_group_batches` batches so that they pad less (`epoch_batches`),
and each update adds a row to the curves (step, epoch, lr, L3, L2, L1). Given a selection slice (Story Cloze, whose
slice `taskdata.carve_selection` takes from its training cut), the weights of the epoch scoring best on it are kept.
`predict` and `score` give a model's outputs and metrics on a part, in its order.

On CUDA (finetune.cuda_graphs, default auto: CUDA only; `fast_path`), the same loop without its fixed cost per
update (`GraphedUpdates`): batches padded to a bounded set of lengths (`bucket_length`), the loss
(`heads.static_losses`) through torch.compile's CUDA graphs, a capturable fused AdamW whose lr is a device tensor
the schedule fills, and the losses kept on the device until the epoch's curves are written. finetune.cuda_graphs:
capture takes the same batches through `CapturedUpdates` instead: each bucket's whole update (forward, backward,
AdamW) recorded as one CUDA graph by torch.cuda.graph, with no compiler. On the CPU, under auto and false, the loop
is the one it always was, bit for bit; true and capture force their fast path there too (without graphs: for tests).

It reads no params.yaml (`Recipe.from_section` takes the profile's finetune section), writes no file and opens no
MLflow run: `gpt1.training.finetuning` runs a job's training through it.
"""

from __future__ import annotations

import abc
import contextlib
import copy
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from gpt1.data.rows import DATA_SEED, SELECTION_FRACTION, Example
from gpt1.data.taskdata import Part
from gpt1.data.tasks import TaskSpec
from gpt1.evaluation import metrics as metric_lib
from gpt1.modeling.heads import Batch, Decoded, FinetuneModel, collate, compute_losses, decode, static_losses
from gpt1.modeling.model import GPT
from gpt1.pipeline.errors import FinetuneError
from gpt1.training.runtime import adamw, attention_kernels, autocast, resolve_compile, resolve_precision

# Adam's moments as in the paper's pre-training and OpenAI's fine-tuning code (params.yaml has no finetune keys).
ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8
CURVE_FIELDS = ("step", "epoch", "lr", "loss", "clf_loss", "lm_loss")  # an update's row: curves.csv's columns

# ----------------------------------------------------------------------------------------------------------------
# Schedule, training, prediction


@contextlib.contextmanager
def forward_context(device: torch.device, dtype: torch.dtype | None, cache: bool = True) -> Iterator[None]:
    """Where every fine-tuning forward runs: autocast in `dtype` and, on CUDA, the attention kernels whose dropout
    is p in fine-tuning's order (`attention_kernels(..., varying=True)`); `cache=False` inside a CUDA graph."""
    with autocast(device, dtype, cache), attention_kernels(device, varying=True):
        yield


def linear_lr_factor(update: int, warmup: int, total: int) -> float:
    """Multiplier of the peak lr for update `update` (0-based) of `total`: linear warm-up to 1 over the first
    `warmup` updates (the first update already moves: (u + 1) / warmup), then linear decay to 0 after the last."""
    if update < warmup:
        return (update + 1) / warmup
    return max(0.0, (total - update) / max(1, total - warmup))


def chunks(order: Sequence[int], size: int) -> list[list[int]]:
    """`order` cut into consecutive batches of `size` positions (the last may be smaller)."""
    return [list(order[start : start + size]) for start in range(0, len(order), size)]


def longest_sequence(part: Part, position: int) -> int:
    """Tokens in an example's longest sequence: its padded width in a batch (every sequence pads to the longest)."""
    return max(len(s) for s in part.transformed[position].sequences)


def epoch_batches(part: Part, size: int, generator: torch.Generator, group_batches: int = 1) -> list[list[int]]:
    """One epoch's batches of positions, drawn with `generator`. group_batches == 1: consecutive slices of a random
    permutation. Above 1: the examples of each run of that many batches of the permutation are sorted by length and
    cut again, so a batch holds examples of similar length and pads little (Hugging Face's `group_by_length`, which
    groups 50 batches); then the batches are shuffled, so that lengths do not saw-tooth through the epoch."""
    order = torch.randperm(len(part.examples), generator=generator).tolist()
    if group_batches <= 1:
        return chunks(order, size)
    span = size * group_batches
    grouped = [batch for start in range(0, len(order), span)
               for batch in chunks(sorted(order[start : start + span], key=lambda i: -longest_sequence(part, i)), size)]
    return [grouped[i] for i in torch.randperm(len(grouped), generator=generator).tolist()]


def bucket_length(longest: int, n_ctx: int) -> int:
    """The length a batch whose longest sequence has `longest` tokens pads to on the CUDA fast path: rounded up to
    a multiple of an eighth of the power of two below it (at least 8), at most n_ctx. A CUDA graph is recorded per
    shape, so the shapes must be few: 32 lengths up to 512 (8, 16, ..., 64, 72, ..., 128, 144, ..., 256, 288, ...,
    512), each at most 12.5% above the longest sequence beyond 64 tokens and at most 7 tokens above it below."""
    step = max(8, (1 << max(0, (longest - 1).bit_length() - 1)) // 8)
    return max(longest, min(n_ctx, -(-longest // step) * step))


def batches(part: Part, groups: Sequence[Sequence[int]], regression: bool,
            n_ctx: int | None = None) -> Iterator[tuple[list[int], Batch]]:
    """(positions, padded batch) per group of positions, made one at a time (a whole padded dataset would not
    fit); with `n_ctx`, each padded to its `bucket_length`."""
    for group in groups:
        chosen = list(group)
        labels = [part.examples[i].label for i in chosen]
        width = None if n_ctx is None else bucket_length(max(longest_sequence(part, i) for i in chosen), n_ctx)
        yield chosen, collate([part.transformed[i] for i in chosen], labels, regression, width=width)


@torch.no_grad()
def predict(model: FinetuneModel, part: Part, batch_size: int, precision: str = "auto") -> np.ndarray:
    """Task outputs for every example of `part`, in its order; batched by length so padding costs little."""
    was_training = model.training
    model.eval()
    order = sorted(range(len(part.examples)), key=lambda i: longest_sequence(part, i))
    rows: dict[int, np.ndarray] = {}
    device = next(model.parameters()).device
    for chosen, batch in batches(part, chunks(order, batch_size), model.regression):
        with forward_context(device, resolve_precision(precision, device)):
            outputs = model(batch.to(device))
        for i, row in zip(chosen, outputs.float().cpu().numpy(), strict=True):
            rows[i] = row
    model.train(was_training)
    return np.stack([rows[i] for i in range(len(part.examples))])


def score(spec: TaskSpec, examples: Sequence[Example], decoded: Decoded) -> dict[str, float]:
    labels = np.array([e.label for e in examples])
    return metric_lib.compute(spec.metrics, labels, decoded.predictions)


@dataclass
class Recipe:
    lr: float
    batch_size: int
    epochs: int
    warmup_fraction: float
    lm_weight: float
    weight_decay: float
    eval_batch_size: int
    precision: str = "auto"  # auto: bf16 autocast on CUDA, fp32 on CPU (as pre-training)
    length_group_batches: int = 1  # training batches formed by length within runs of this many (epoch_batches)

    @classmethod
    def from_section(cls, finetune: dict[str, Any], task: str, lm_weight: float | None) -> Recipe:
        """The recipe `task` trains with: the section's, its own lr where lr_by_task names it, λ from the variant."""
        lr = (finetune.get("lr_by_task") or {}).get(task, finetune["lr"])
        return cls(lr, finetune["batch_size"], finetune["epochs"], finetune["warmup_fraction"],
                   finetune["lm_weight"] if lm_weight is None else lm_weight, finetune["weight_decay"],
                   finetune["eval_batch_size"], finetune["precision"], finetune["length_group_batches"])


@dataclass
class Trained:
    curves: list[dict[str, float]]
    updates: int
    warmup: int
    tokens: int
    train_seconds: float
    selection: dict[str, Any] | None


def fast_path(setting: bool | str, device: torch.device) -> str | None:
    """The fast path a job trains through, by finetune.cuda_graphs: `compile` (`GraphedUpdates`) for auto on CUDA
    and for true anywhere, `capture` (`CapturedUpdates`) for capture anywhere, None (the plain loop) for false and for
    auto on a CPU, so that a CPU run keeps its bits. Forced on a CPU, a fast path runs its steps without graphs."""
    if setting == "capture":
        return "capture"
    return "compile" if resolve_compile(setting, device) else None


def _curve_row(step: int, epoch: int, lr: float, loss: float, clf: float, lm: float) -> dict[str, float]:
    """One update's row of the curves: update `step` and `epoch`, both counted from 1, its lr, and its L3, L2, L1."""
    return dict(zip(CURVE_FIELDS, (step, epoch, lr, loss, clf, lm), strict=True))


def _check_finite(step: int, loss: float) -> None:
    """Refuse update `step` (counted from 1) whose L3 is `loss` when that is not finite: the lr is too high."""
    if not math.isfinite(loss):
        raise FinetuneError(f"update {step}: the loss is {loss}; lower finetune.lr")


class Trainer:
    """The fine-tuning loop: shuffled (optionally length-grouped) batches per epoch, AdamW + warm-up/linear decay, L3
    per update; on CUDA by default through `GraphedUpdates` (`graphs`: True, False, auto or capture, see
    `fast_path`)."""

    def __init__(self, model: FinetuneModel, recipe: Recipe, train: Part, seed: int,
                 log: Callable[[list[dict[str, float]]], None] | None = None, graphs: bool | str = "auto") -> None:
        self.model, self.recipe, self.train, self.log = model, recipe, train, log
        self.steps_per_epoch = math.ceil(len(train.examples) / recipe.batch_size)
        self.total = recipe.epochs * self.steps_per_epoch
        self.warmup = round(recipe.warmup_fraction * self.total)
        self.device = next(model.parameters()).device
        path = fast_path(graphs, self.device)
        self.fast = None if path is None else FAST_PATHS[path](model, recipe, self.device)
        if self.fast is not None:
            self.optimizer, self.scheduler = self.fast.optimizer, None  # the fast path sets its lr tensor itself
        else:
            self.optimizer = adamw(model.param_groups(recipe.weight_decay), self.device, lr=recipe.lr,
                                   betas=ADAM_BETAS, eps=ADAM_EPS)
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(
                self.optimizer, lambda u: linear_lr_factor(u, self.warmup, self.total))
        self.order = torch.Generator().manual_seed(seed)  # batch order: the job's seed, independent of dropout

    def _progress(self, items: Iterable[tuple[list[int], Batch]], total: int, epoch: int, label: str) -> tqdm:
        """Epoch `epoch`'s (0-based) progress bar over its `total` batches."""
        return tqdm(items, unit="batch", total=total,
                    desc=f"finetune {label} epoch {epoch + 1}/{self.recipe.epochs}", dynamic_ncols=True)

    def epoch(self, epoch: int, step: int, label: str) -> tuple[list[dict[str, float]], int, int]:
        """One pass over the training examples; returns (curve rows, updates done so far, real tokens seen)."""
        if self.fast is not None:
            return self.fast_epoch(epoch, step, label)
        self.model.train()
        groups = epoch_batches(self.train, self.recipe.batch_size, self.order, self.recipe.length_group_batches)
        rows, tokens = [], 0
        bar = self._progress(batches(self.train, groups, self.model.regression), self.steps_per_epoch, epoch, label)
        for _, cpu_batch in bar:
            tick = time.perf_counter()
            batch = cpu_batch.to(self.device)
            lr = self.scheduler.get_last_lr()[0]
            with forward_context(self.device, resolve_precision(self.recipe.precision, self.device)):
                losses, _ = compute_losses(self.model, batch, self.recipe.lm_weight)
            _check_finite(step + 1, losses.total.item())
            losses.total.backward()
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            step += 1
            tokens += batch.real_tokens
            rows.append(_curve_row(step, epoch + 1, lr, losses.total.item(), losses.clf.item(), losses.lm.item()))
            speed = batch.real_tokens / max(time.perf_counter() - tick, 1e-9)
            bar.set_postfix(loss=f"{rows[-1]['loss']:.3f}", tok_s=f"{speed:,.0f}", refresh=False)
        bar.close()
        if self.log is not None:
            self.log(rows)
        return rows, step, tokens

    def fast_epoch(self, epoch: int, step: int, label: str) -> tuple[list[dict[str, float]], int, int]:
        """`epoch` through the fast path (`self.fast`: `GraphedUpdates` or `CapturedUpdates`): the same batches, the
        same schedule, the same curve rows, but the losses stay on the device until the epoch ends (one read, not
        three per update)."""
        assert self.fast is not None
        self.model.train()
        groups = epoch_batches(self.train, self.recipe.batch_size, self.order, self.recipe.length_group_batches)
        trace = torch.zeros((len(groups), 3), device=self.device)  # per update: L3, L2, L1
        rates, tokens, first = [], 0, step
        bar = self._progress(batches(self.train, groups, self.model.regression, self.model.lm.config.n_ctx),
                             len(groups), epoch, label)
        for i, (positions, cpu_batch) in enumerate(bar):
            # The rate LambdaLR would give: base lr x factor of the update's 0-based index
            rates.append(self.recipe.lr * linear_lr_factor(step, self.warmup, self.total))
            self.fast.update(cpu_batch, rates[-1], trace[i], full=len(positions) == self.recipe.batch_size)
            step += 1
            tokens += cpu_batch.real_tokens  # counted on the host copy: the device's would be a sync
        bar.close()
        rows = [_curve_row(first + i + 1, epoch + 1, lr, total, clf, lm)
                for i, (lr, (total, clf, lm)) in enumerate(zip(rates, trace.tolist(), strict=True))]
        for row in rows:
            _check_finite(row["step"], row["loss"])
        if self.log is not None:
            self.log(rows)
        return rows, step, tokens

    def run(self, label: str, select_on: Part | None, spec: TaskSpec) -> Trained:
        """All epochs; with `select_on`, keep the weights of the epoch scoring best on it (accuracy; the first of
        equals) and load them at the end."""
        curves, step, tokens, started = [], 0, 0, time.perf_counter()
        best: tuple[float, int, dict[str, torch.Tensor]] | None = None
        scores = []
        for epoch in range(self.recipe.epochs):
            rows, step, seen = self.epoch(epoch, step, label)
            curves += rows
            tokens += seen
            if select_on is not None:
                outputs = predict(self.model, select_on, self.recipe.eval_batch_size, self.recipe.precision)
                value = score(spec, select_on.examples, decode(spec, outputs))[spec.paper_metric]
                scores.append(value)
                if best is None or value > best[0]:
                    best = (value, epoch + 1, copy.deepcopy(self.model.state_dict()))
        if self.fast is not None:
            self.fast.close()
        selection = None
        if best is not None:
            self.model.load_state_dict(best[2])
            protocol = f"best epoch by {spec.paper_metric} on a validation slice of the training examples"
            selection = {"protocol": protocol,
                         "slice_examples": len(select_on.examples), "slice_fraction": SELECTION_FRACTION,
                         "slice_seed": DATA_SEED, "epoch_scores": scores, "best_epoch": best[1]}
        return Trained(curves, step, self.warmup, tokens, time.perf_counter() - started, selection)


# ----------------------------------------------------------------------------------------------------------------
# The CUDA fast path: static shapes, CUDA graphs, no host sync per update

def compile_options(device: torch.device) -> dict[str, Any]:
    """torch.compile's arguments for the fast path: on CUDA Inductor with CUDA graphs (reduce-overhead); elsewhere
    (a test forcing the path on a CPU) dynamo's eager backend, which traces the same code without generating any."""
    return {"mode": "reduce-overhead"} if device.type == "cuda" else {"backend": "eager"}


def to_device(batch: Batch, device: torch.device) -> Batch:
    """The batch on `device` without waiting: from pageable memory a copy to the GPU first drains the stream (a
    host sync per update); from pinned memory it is queued like a kernel."""
    if device.type != "cuda":
        return batch.to(device)
    tokens, lengths, labels = (t.pin_memory().to(device, non_blocking=True)
                               for t in (batch.tokens, batch.lengths, batch.labels))
    return Batch(tokens, lengths, labels, batch.per_example)


class FastUpdates(abc.ABC):
    """What both fast paths share: the autocast dtype, a fused AdamW over every parameter, capturable on CUDA, whose
    lr is a device tensor filled in place (a kernel, no sync), and nothing read back per update. `update` runs one
    update and copies its L3, L2 and L1 into a device tensor; `close` frees what the path holds once training ends."""

    def __init__(self, model: FinetuneModel, recipe: Recipe, device: torch.device) -> None:
        self.model, self.recipe, self.device = model, recipe, device
        self.dtype = resolve_precision(recipe.precision, device)
        self.lr = torch.tensor(recipe.lr, dtype=torch.float32, device=device)
        self.optimizer = adamw(model.param_groups(recipe.weight_decay), device, lr=self.lr, betas=ADAM_BETAS,
                               eps=ADAM_EPS, capturable=device.type == "cuda")

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"].fill_(lr)  # the groups may share the one tensor

    def eager_losses(self, batch: Batch, cache: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """L3, L2, L1 of a batch of any shape (an epoch's last, smaller batch), without a graph."""
        with forward_context(self.device, self.dtype, cache):
            return compute_losses(self.model, batch, self.recipe.lm_weight)[0].parts()

    def static_losses(self, batch: Batch, cache: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """L3, L2, L1 of a batch of the batch size through `heads.static_losses`, whose shapes a graph can replay."""
        with forward_context(self.device, self.dtype, cache):
            return static_losses(self.model, batch, self.recipe.lm_weight).parts()

    @abc.abstractmethod
    def update(self, cpu_batch: Batch, lr: float, into: torch.Tensor, full: bool) -> None:
        """One update at rate `lr` (`full`: a batch of the batch size); its L3, L2 and L1 copied into `into`."""

    @abc.abstractmethod
    def close(self) -> None:
        """Free what the path holds (graphs, compiled code, their memory) once training ends."""


class GraphedUpdates(FastUpdates):
    """Fine-tuning updates without their fixed cost (eager, an update of the paper's model paid ~30 ms of kernel
    launches, host syncs and optimizer work whatever its size): the loss compiled (`static_losses`; on CUDA
    Inductor's kernels replayed as CUDA graphs, one recorded per bucket length), a fused AdamW over every parameter
    in a few kernels, capturable with its lr a device tensor filled in place, and nothing read back per update.
    A batch smaller than the batch size (an epoch's last) takes the eager update: one shape fewer to record.
    The LSTM's loss is not compiled (dynamo leaves recurrent modules out of its graphs; its update launches few
    kernels, cuDNN's recurrence among them): it keeps the rest, the updates without a host sync."""

    def __init__(self, model: FinetuneModel, recipe: Recipe, device: torch.device) -> None:
        super().__init__(model, recipe, device)
        compiled = isinstance(model.lm, GPT)
        self.losses = torch.compile(self.graph_losses, **compile_options(device)) if compiled else self.graph_losses
        self.cudagraphs = compiled and device.type == "cuda"

    def graph_losses(self, tokens: torch.Tensor, lengths: torch.Tensor, labels: torch.Tensor,
                     per_example: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`static_losses` as dynamo traces it: autocast inside, the attention kernels' order around the call
        (`update`), which the trace takes its kernel from."""
        with autocast(self.device, self.dtype):
            return static_losses(self.model, Batch(tokens, lengths, labels, per_example), self.recipe.lm_weight).parts()

    def update(self, cpu_batch: Batch, lr: float, into: torch.Tensor, full: bool) -> None:
        """One update at rate `lr`; its L3, L2 and L1 copied into `into` on the device."""
        self.set_lr(lr)
        batch = to_device(cpu_batch, self.device)
        if full:
            if self.cudagraphs:
                torch.compiler.cudagraph_mark_step_begin()
            # One compile for every bucket length (dynamic), then one CUDA graph recorded per length
            torch._dynamo.maybe_mark_dynamic(batch.tokens, 1)
            with attention_kernels(self.device, varying=True):  # traced with the kernels it selects
                total, clf, lm = self.losses(batch.tokens, batch.lengths, batch.labels, batch.per_example)
        else:
            total, clf, lm = self.eager_losses(batch)
        # Copied before the backward: a graph's outputs are overwritten when it replays next
        into.copy_(torch.stack((total.detach(), clf.detach(), lm.detach())))
        total.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def close(self) -> None:
        """Drop the compiled code and its CUDA graphs (and their memory) once training ends: the layers stage runs 13
        jobs in one process, whose graphs would otherwise pile up, each job recompiling (its guards name its own
        model) until dynamo's limit of recompiles sends the rest to the eager loop."""
        torch._dynamo.reset()


# Eager updates on a side stream before an update is recorded (torch.cuda.graph's recipe: lazy initialisation, cuBLAS
# and cuDNN workspaces and the optimizer's state all happen before the capture, not in it)
CAPTURE_WARMUP_UPDATES = 3


@dataclass
class Recorded:
    """One batch shape's update as recorded: its inputs' fixed tensors, the replay, and where its L3, L2, L1 land."""
    inputs: Batch
    replay: Callable[[], None]
    losses: torch.Tensor


class CapturedUpdates(FastUpdates):
    """Fine-tuning updates recorded whole, without a compiler (finetune.cuda_graphs: capture): per bucket shape, the
    forward, the backward and the fused AdamW step in one CUDA graph (`torch.cuda.graph`), replayed after the batch
    is copied into its fixed input tensors. Against `GraphedUpdates`: no Inductor compile (tens of seconds a job
    at the paper's size), a few eager updates and a capture per shape instead, and one launch an update, the
    optimizer's included; the kernels are eager ones (unfused).

    What a replay may touch must keep its address: the parameters and AdamW's state (updated in place), one set of
    gradients shared by every shape (zeroed and accumulated into inside the graph), the lr tensor. The shapes'
    graphs share one memory pool and replay in any order: nothing allocated inside a capture is read after its
    replay (the losses and the gradients live outside it). The warm-up updates before a capture really train, so
    the parameters, AdamW's state and the RNG are put back after them: training sees every batch once. The LSTM's
    updates are not recorded (cuDNN's recurrence under capture is not relied on): they, and an epoch's last smaller
    batch, run the same steps eagerly. On a CPU (a test) nothing is recorded and a replay runs the steps eagerly,
    warm-up and restore included."""

    def __init__(self, model: FinetuneModel, recipe: Recipe, device: torch.device,
                 warmup: int = CAPTURE_WARMUP_UPDATES) -> None:
        super().__init__(model, recipe, device)
        self.warmup, self.cuda = warmup, device.type == "cuda"
        if self.cuda and warmup < 1:  # AdamW would make its state inside the capture: each replay would reset it
            raise ValueError(f"warmup={warmup}: a capture needs at least one warm-up update before it")
        self.records = isinstance(model.lm, GPT)
        self.params = [p for p in model.parameters() if p.requires_grad]
        for p in self.params:  # the gradients every graph accumulates into
            p.grad = torch.zeros_like(p)
        self.grads = [p.grad for p in self.params]
        self.recorded: dict[tuple[Any, ...], Recorded] = {}
        self.pool = torch.cuda.graph_pool_handle() if self.cuda else None  # one memory pool for every shape's graph

    def step(self, batch: Batch, into: torch.Tensor, full: bool) -> None:
        """One update's work, as recorded and as run eagerly: gradients zeroed, L3 (its parts copied into `into`
        before the backward), backward, AdamW."""
        for param, grad in zip(self.params, self.grads, strict=True):
            param.grad = grad  # again: whoever set it to None (another loop on the same model) must not move it
        torch._foreach_zero_(self.grads)
        losses = self.static_losses if full else self.eager_losses
        total, clf, lm = losses(batch, cache=False)
        into.copy_(torch.stack((total.detach(), clf.detach(), lm.detach())))
        total.backward()
        self.optimizer.step()

    def state(self) -> list[torch.Tensor]:
        """Every tensor an update changes but the gradients: the parameters and AdamW's state."""
        return [*self.params, *(t for s in self.optimizer.state.values() for t in s.values()
                                if isinstance(t, torch.Tensor))]

    def warm_up(self, inputs: Batch, losses: torch.Tensor) -> None:
        """`self.warmup` updates on `inputs` (on a side stream on CUDA), then the parameters, AdamW's state and the
        RNG as before them; AdamW's state made by them is zeroed, as a first step finds it."""
        kept = self.state()
        before = [t.detach().clone() for t in kept]
        side = torch.cuda.Stream(self.device) if self.cuda else None
        with torch.random.fork_rng(devices=[self.device] if self.cuda else []):
            if side is not None:
                side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
                for _ in range(self.warmup):
                    self.step(inputs, losses, full=True)
            if side is not None:
                torch.cuda.current_stream(self.device).wait_stream(side)
        existed = set(map(id, kept))
        with torch.no_grad():
            for tensor, value in zip(kept, before, strict=True):
                tensor.copy_(value)
            for tensor in self.state():
                if id(tensor) not in existed:
                    tensor.zero_()

    def record(self, batch: Batch) -> Recorded:
        """`batch`'s shape recorded: its fixed inputs (a copy of `batch`), the warm-up, then the capture."""
        inputs = Batch(batch.tokens.clone(), batch.lengths.clone(), batch.labels.clone(), batch.per_example)
        losses = torch.zeros(3, device=self.device)
        self.warm_up(inputs, losses)
        if not self.cuda:
            return Recorded(inputs, lambda: self.step(inputs, losses, full=True), losses)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self.step(inputs, losses, full=True)
        return Recorded(inputs, graph.replay, losses)

    def update(self, cpu_batch: Batch, lr: float, into: torch.Tensor, full: bool) -> None:
        """One update at rate `lr`; its L3, L2 and L1 copied into `into` on the device."""
        self.set_lr(lr)
        batch = to_device(cpu_batch, self.device)
        if not (full and self.records):
            self.step(batch, into, full)
            return
        key = (tuple(batch.tokens.shape), tuple(batch.labels.shape), batch.labels.dtype, batch.per_example)
        if key not in self.recorded:
            self.recorded[key] = self.record(batch)
        recorded = self.recorded[key]
        for fixed, now in zip((recorded.inputs.tokens, recorded.inputs.lengths, recorded.inputs.labels),
                              (batch.tokens, batch.lengths, batch.labels), strict=True):
            fixed.copy_(now)
        recorded.replay()
        into.copy_(recorded.losses)  # before the next replay overwrites them

    def close(self) -> None:
        """Free the graphs, their memory pool and the shared gradients once training ends: all graphs together,
        never one alone (their captures share the capture stream's cuBLAS workspace, which destroying one graph
        clears under the others: pytorch/pytorch#193402)."""
        self.recorded.clear()
        for p in self.params:
            p.grad = None


FAST_PATHS: dict[str, type[FastUpdates]] = {"compile": GraphedUpdates, "capture": CapturedUpdates}


__all__ = [
    "ADAM_BETAS",
    "ADAM_EPS",
    "CAPTURE_WARMUP_UPDATES",
    "FAST_PATHS",
    "CapturedUpdates",
    "FastUpdates",
    "GraphedUpdates",
    "Recipe",
    "Recorded",
    "Trained",
    "Trainer",
    "batches",
    "bucket_length",
    "chunks",
    "compile_options",
    "epoch_batches",
    "fast_path",
    "linear_lr_factor",
    "longest_sequence",
    "predict",
    "score",
    "to_device",
]
