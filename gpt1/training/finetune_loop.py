"""The fine-tuning loop (paper §3.2-3.3), a library: a `Trainer` takes one job's `FinetuneModel` and training
examples and minimises L3 = L2 + λ·L1 per update (`heads.compute_losses`: the task loss plus λ times the next-token
loss over the real tokens of every task sequence) with AdamW, decoupled weight decay on matrices only, at the
`Recipe`'s rate: linear warm-up over the first `warmup_fraction` of the updates, then linear decay to 0
(`linear_lr_factor`); no early stopping. Each epoch's batches are shuffled by a generator of the job's seed,
optionally formed by length within runs of `length_group_batches` batches so that they pad less (`epoch_batches`),
and each update adds a row to the curves (step, epoch, lr, L3, L2, L1). Given a selection slice (Story Cloze, whose
slice `taskdata.carve_selection` takes from its training cut), the weights of the epoch scoring best on it are kept.
`predict` and `score` give a model's outputs and metrics on a part, in its order.

On CUDA (finetune.cuda_graphs, default auto: CUDA only; `finetune_graphs.fast_path`), the same loop without its
fixed cost per update (`gpt1.training.finetune_graphs`): the same batches padded to a bounded set of lengths, each
update through CUDA graphs, and the losses kept on the device until the epoch's curves are written. On the CPU,
under auto and false, the loop is the one it always was, bit for bit; true and capture force their fast path there
too (without graphs: for tests).

It reads no params.yaml (`Recipe.from_section` takes the profile's finetune section), writes no file and opens no
MLflow run: `gpt1.training.finetuning` runs a job's training through it.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from gpt1.data.rows import Example
from gpt1.data.taskdata import Part
from gpt1.data.tasks import TaskSpec
from gpt1.evaluation import metrics as metric_lib
from gpt1.modeling.heads import Batch, Decoded, FinetuneModel, collate, compute_losses, decode
from gpt1.pipeline.errors import FinetuneError
from gpt1.training.finetune_graphs import FAST_PATHS, bucket_length, fast_path, finetune_adamw, forward_context
from gpt1.training.runtime import resolve_precision

CURVE_FIELDS = ("step", "epoch", "lr", "loss", "clf_loss", "lm_loss")  # an update's row: curves.csv's columns

# ----------------------------------------------------------------------------------------------------------------
# Schedule, training, prediction


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
    epoch_scores: list[float] = field(default_factory=list)  # on the selection slice, when one was given
    best_epoch: int | None = None  # counted from 1: the epoch whose weights were kept


def _curve_row(step: int, epoch: int, lr: float, loss: float, clf: float, lm: float) -> dict[str, float]:
    """One update's row of the curves: update `step` and `epoch`, both counted from 1, its lr, and its L3, L2, L1."""
    return dict(zip(CURVE_FIELDS, (step, epoch, lr, loss, clf, lm), strict=True))


def _check_finite(step: int, loss: float) -> None:
    """Refuse update `step` (counted from 1) whose L3 is `loss` when that is not finite: the lr is too high."""
    if not math.isfinite(loss):
        raise FinetuneError(f"update {step}: the loss is {loss}; lower finetune.lr")


class Trainer:
    """The fine-tuning loop: shuffled (optionally length-grouped) batches per epoch, AdamW + warm-up/linear decay, L3
    per update; on CUDA by default through `finetune_graphs.GraphedUpdates` (`graphs`: True, False, auto or
    capture, see `finetune_graphs.fast_path`)."""

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
            self.optimizer = finetune_adamw(model, recipe.weight_decay, self.device, recipe.lr)
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(
                self.optimizer, lambda u: linear_lr_factor(u, self.warmup, self.total))
        self.order = torch.Generator().manual_seed(seed)  # batch order: the job's seed, independent of dropout

    def _progress(self, items: Iterable[tuple[list[int], Batch]], total: int, epoch: int, label: str) -> tqdm:
        """Epoch `epoch`'s (0-based) progress bar over its `total` batches."""
        return tqdm(items, unit="batch", total=total,
                    desc=f"finetune {label} epoch {epoch + 1}/{self.recipe.epochs}", dynamic_ncols=True)

    def epoch(self, epoch: int, step: int, label: str) -> tuple[list[dict[str, float]], int, int]:
        """One pass over the training examples; returns (curve rows, updates done so far, real tokens seen)."""
        self.model.train()
        groups = epoch_batches(self.train, self.recipe.batch_size, self.order, self.recipe.length_group_batches)
        updates = self._plain_updates if self.fast is None else self._fast_updates
        rows, tokens = updates(groups, epoch, step, label)
        if self.log is not None:
            self.log(rows)
        return rows, step + len(rows), tokens

    def _plain_updates(self, groups: list[list[int]], epoch: int, step: int,
                       label: str) -> tuple[list[dict[str, float]], int]:
        """The epoch's updates, eager, each loss read back as it is made: (curve rows, real tokens seen)."""
        rows, tokens = [], 0
        bar = self._progress(batches(self.train, groups, self.model.regression), self.steps_per_epoch, epoch, label)
        for _, cpu_batch in bar:
            tick = time.perf_counter()
            batch = cpu_batch.to(self.device)
            lr = self.scheduler.get_last_lr()[0]
            with forward_context(self.device, resolve_precision(self.recipe.precision, self.device)):
                losses, _ = compute_losses(self.model, batch, self.recipe.lm_weight)
            total = losses.total.item()
            _check_finite(step + 1, total)
            losses.total.backward()
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            step += 1
            tokens += batch.real_tokens
            rows.append(_curve_row(step, epoch + 1, lr, total, losses.clf.item(), losses.lm.item()))
            speed = batch.real_tokens / max(time.perf_counter() - tick, 1e-9)
            bar.set_postfix(loss=f"{total:.3f}", tok_s=f"{speed:,.0f}", refresh=False)
        bar.close()
        return rows, tokens

    def _fast_updates(self, groups: list[list[int]], epoch: int, step: int,
                      label: str) -> tuple[list[dict[str, float]], int]:
        """The epoch's updates through the fast path (`self.fast`, a `finetune_graphs.FastUpdates`): the same
        batches, the same schedule, the same curve rows, but the losses stay on the device until the epoch ends (one
        read, not three per update)."""
        assert self.fast is not None
        trace = torch.zeros((len(groups), 3), device=self.device)  # per update: L3, L2, L1
        rates, tokens = [], 0
        bar = self._progress(batches(self.train, groups, self.model.regression, self.model.lm.config.n_ctx),
                             len(groups), epoch, label)
        for i, (positions, cpu_batch) in enumerate(bar):
            # The rate LambdaLR would give: base lr x factor of the update's 0-based index
            rates.append(self.recipe.lr * linear_lr_factor(step + i, self.warmup, self.total))
            self.fast.update(cpu_batch, rates[-1], trace[i], full=len(positions) == self.recipe.batch_size)
            tokens += cpu_batch.real_tokens  # counted on the host copy: the device's would be a sync
        bar.close()
        rows = [_curve_row(step + i + 1, epoch + 1, lr, total, clf, lm)
                for i, (lr, (total, clf, lm)) in enumerate(zip(rates, trace.tolist(), strict=True))]
        for row in rows:
            _check_finite(row["step"], row["loss"])
        return rows, tokens

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
        if best is not None:
            self.model.load_state_dict(best[2])
        return Trained(curves, step, self.warmup, tokens, time.perf_counter() - started, scores,
                       None if best is None else best[1])


__all__ = [
    "CURVE_FIELDS",
    "Recipe",
    "Trained",
    "Trainer",
    "batches",
    "chunks",
    "epoch_batches",
    "linear_lr_factor",
    "longest_sequence",
    "predict",
    "score",
]
