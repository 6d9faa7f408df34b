"""Fine-tuning (paper §3.2-3.3), a library: variants, the loop (L3 = L2 + λ·L1), evaluation records; the finetune
and layers stages both run their jobs through it. It reads no params.yaml file, opens no MLflow run and knows no
results path: a job gets the profile's fine-tuning settings as `config.FinetuneSettings` and returns its metrics,
prediction lines and curves in memory (`FinetuneResult`); the stages write and log them.

One job = one task x one variant x one seed. The pieces, in the order a job runs them:

* Variants (`gpt1.modeling.backbones`): where the weights and the tokenizer come from -- our pre-trained GPT
  (`pretrained`), the same architecture randomly initialised (`scratch`), our GPT without the auxiliary LM loss
  (`no_aux`), our LSTM (`lstm`), or the released GPT-1 (`released`). `transfer_layers=k` keeps the embeddings and the
  first k blocks and re-initialises the rest (Figure 2, left).
* Model (`gpt1.modeling.heads`): the start/delimiter/extract tokens are appended to the embedding (N(0, 0.02)); a head
  reads the last layer's state at the extract token. classification/entailment: dropout + Linear(C, labels);
  similarity: the two orders' states summed, then dropout + Linear (2 classes, or 1 output with MSE for STS-B);
  multiple choice: one score per (context, answer) sequence, softmax over the answers.
* Objective (`gpt1.modeling.heads`): L3 = L2 + λ·L1, L1 the next-token loss over the real tokens of every task sequence
  (padding ignored).
* Recipe (params.yaml `finetune`): AdamW with decoupled weight decay on matrices only, linear warm-up then linear
  decay to 0, no early stopping; each epoch's batches shuffled, optionally formed by length within runs of
  `length_group_batches` batches so that they pad less (`epoch_batches`). Story Cloze alone selects its best epoch
  on a slice of its training cut (below).
* On CUDA (finetune.cuda_graphs, default auto: CUDA only), the same loop without its fixed cost per update:
  batches padded to a bounded set of lengths (`bucket_length`), the loss through torch.compile's CUDA graphs, a
  capturable fused AdamW whose lr is a device tensor the schedule fills, and the losses kept on the device until
  the epoch's curves are written (`GraphedUpdates`). On the CPU the loop is the one it always was, bit for bit.
* Data (which rows: `gpt1.data.rows`; with their token sequences: `gpt1.data.taskdata`): the task's train split or its
  declared cut; every report is scored on `rows.evaluation_split`, and on the complement of the training cut when
  that is the same split, so no example is both trained and scored on. The pipeline encodes each task once (the
  encode_task stage) and its jobs read that.

The job's seed decides initialisation, dropout and batch order; which examples it sees does not depend on it.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from gpt1.data.rows import (
    DATA_SEED,
    SELECTION_FRACTION,
    Cut,
    DataSource,
    Example,
    data_settings,
    data_source,
    eval_cap,
    report_examples,
    train_cut,
)
from gpt1.data.taskdata import EvalPart, Part, TaskData, carve_selection, narrow, plan_task_data, read_encoded
from gpt1.data.tasks import ReportSpec, TaskSpec, finetune_task
from gpt1.data.tokenizer import GPT1Tokenizer
from gpt1.evaluation import metrics as metric_lib
from gpt1.modeling.backbones import Variant, check_pair, get_variant, load_backbone, load_tokenizer
from gpt1.modeling.heads import (
    IGNORE,
    Batch,
    Decoded,
    FinetuneModel,
    Losses,
    Transfer,
    _lm_logits,
    add_specials,
    collate,
    compute_losses,
    decode,
    lm_targets,
    task_loss,
    transfer_init,
)
from gpt1.modeling.model import GPT, set_dropout
from gpt1.pipeline.config import FinetuneSettings
from gpt1.pipeline.errors import FinetuneError
from gpt1.training.runtime import (
    adamw,
    autocast,
    default_device,
    resolve_compile,
    resolve_precision,
    seed_everything,
)

# Adam's moments as in the paper's pre-training and OpenAI's fine-tuning code (params.yaml has no finetune keys).
ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8
# finetune.cuda_graphs where a profile does not set it: the fast path on CUDA only (a CPU run keeps its bits)
CUDA_GRAPHS_DEFAULT = "auto"
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
        with autocast(device, resolve_precision(precision, device)):
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


def uses_graphs(setting: bool | str, device: torch.device) -> bool:
    """Whether a job trains through `GraphedUpdates`: finetune.cuda_graphs (auto: on CUDA only, so that a CPU run
    keeps its bits)."""
    return resolve_compile(setting, device)


class Trainer:
    """The fine-tuning loop: shuffled (optionally length-grouped) batches per epoch, AdamW + warm-up/linear decay, L3
    per update; on CUDA by default through `GraphedUpdates` (`graphs`: True, False or auto, see `uses_graphs`)."""

    def __init__(self, model: FinetuneModel, recipe: Recipe, train: Part, seed: int,
                 log: Callable[[list[dict[str, float]]], None] | None = None, graphs: bool | str = "auto") -> None:
        self.model, self.recipe, self.train, self.log = model, recipe, train, log
        self.steps_per_epoch = math.ceil(len(train.examples) / recipe.batch_size)
        self.total = recipe.epochs * self.steps_per_epoch
        self.warmup = round(recipe.warmup_fraction * self.total)
        self.device = next(model.parameters()).device
        self.fast = GraphedUpdates(model, recipe, self.device) if uses_graphs(graphs, self.device) else None
        if self.fast is not None:
            self.optimizer, self.scheduler = self.fast.optimizer, None  # the fast path sets its lr tensor itself
        else:
            self.optimizer = adamw(model.param_groups(recipe.weight_decay), self.device, lr=recipe.lr,
                                   betas=ADAM_BETAS, eps=ADAM_EPS)
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(
                self.optimizer, lambda u: linear_lr_factor(u, self.warmup, self.total))
        self.order = torch.Generator().manual_seed(seed)  # batch order: the job's seed, independent of dropout

    def epoch(self, epoch: int, step: int, label: str) -> tuple[list[dict[str, float]], int, int]:
        """One pass over the training examples; returns (curve rows, updates done so far, real tokens seen)."""
        if self.fast is not None:
            return self.fast_epoch(epoch, step, label)
        self.model.train()
        groups = epoch_batches(self.train, self.recipe.batch_size, self.order, self.recipe.length_group_batches)
        rows, tokens = [], 0
        bar = tqdm(batches(self.train, groups, self.model.regression), unit="batch",
                   total=self.steps_per_epoch, desc=f"finetune {label} epoch {epoch + 1}/{self.recipe.epochs}",
                   dynamic_ncols=True)
        for _, cpu_batch in bar:
            tick = time.perf_counter()
            batch = cpu_batch.to(self.device)
            lr = self.scheduler.get_last_lr()[0]
            with autocast(self.device, resolve_precision(self.recipe.precision, self.device)):
                losses, _ = compute_losses(self.model, batch, self.recipe.lm_weight)
            if not math.isfinite(losses.total.item()):
                raise FinetuneError(f"update {step + 1}: the loss is {losses.total.item()}; lower finetune.lr")
            losses.total.backward()
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            step += 1
            tokens += batch.real_tokens
            rows.append({"step": step, "epoch": epoch + 1, "lr": lr, "loss": losses.total.item(),
                         "clf_loss": losses.clf.item(), "lm_loss": losses.lm.item()})
            speed = batch.real_tokens / max(time.perf_counter() - tick, 1e-9)
            bar.set_postfix(loss=f"{rows[-1]['loss']:.3f}", tok_s=f"{speed:,.0f}", refresh=False)
        bar.close()
        if self.log is not None:
            self.log(rows)
        return rows, step, tokens

    def fast_epoch(self, epoch: int, step: int, label: str) -> tuple[list[dict[str, float]], int, int]:
        """`epoch` through `GraphedUpdates`: the same batches, the same schedule, the same curve rows, but the
        losses stay on the device until the epoch ends (one read, not three per update)."""
        assert self.fast is not None
        self.model.train()
        groups = epoch_batches(self.train, self.recipe.batch_size, self.order, self.recipe.length_group_batches)
        trace = torch.zeros((len(groups), 3), device=self.device)  # per update: L3, L2, L1
        rates, tokens, first = [], 0, step
        bar = tqdm(batches(self.train, groups, self.model.regression, self.model.lm.config.n_ctx), unit="batch",
                   total=len(groups), desc=f"finetune {label} epoch {epoch + 1}/{self.recipe.epochs}",
                   dynamic_ncols=True)
        for i, (positions, cpu_batch) in enumerate(bar):
            # The rate LambdaLR would give: base lr x factor of the update's 0-based index
            rates.append(self.recipe.lr * linear_lr_factor(step, self.warmup, self.total))
            self.fast.update(cpu_batch, rates[-1], trace[i], full=len(positions) == self.recipe.batch_size)
            step += 1
            tokens += cpu_batch.real_tokens  # counted on the host copy: the device's would be a sync
        bar.close()
        rows = [{"step": first + i + 1, "epoch": epoch + 1, "lr": lr, "loss": total, "clf_loss": clf, "lm_loss": lm}
                for i, (lr, (total, clf, lm)) in enumerate(zip(rates, trace.tolist(), strict=True))]
        for row in rows:
            if not math.isfinite(row["loss"]):
                raise FinetuneError(f"update {row['step']}: the loss is {row['loss']}; lower finetune.lr")
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


def static_losses(model: FinetuneModel, batch: Batch, lm_weight: float) -> Losses:
    """`compute_losses` without a shape that depends on the data, so that a CUDA graph can replay it: L1 over every
    position, padding ignored through its targets (the mean over the same real tokens as `FinetuneModel.lm_loss`,
    whose boolean indexing would give each batch a shape of its own, and cost a host sync)."""
    states = model.states(batch)
    clf = task_loss(model, model.task_outputs(states, batch), batch.labels)
    targets = lm_targets(batch.tokens, batch.lengths).flatten()
    # The LM's logits as heads' L1 reads them (the LSTM's own dropout first), at every position
    if lm_weight:
        lm = F.cross_entropy(_lm_logits(model.lm, states).flatten(0, 1), targets, ignore_index=IGNORE)
        return Losses(clf + lm_weight * lm, clf, lm)
    with torch.no_grad():  # λ = 0: L1 measured for the curves, without a graph
        lm = F.cross_entropy(_lm_logits(model.lm, states.detach()).flatten(0, 1), targets, ignore_index=IGNORE)
    return Losses(clf, clf, lm)


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


class GraphedUpdates:
    """Fine-tuning updates without their fixed cost (eager, an update of the paper's model paid ~30 ms of kernel
    launches, host syncs and optimizer work whatever its size): the loss compiled (`static_losses`; on CUDA
    Inductor's kernels replayed as CUDA graphs, one recorded per bucket length), a fused AdamW over every parameter
    in a few kernels, capturable with its lr a device tensor filled in place, and nothing read back per update.
    A batch smaller than the batch size (an epoch's last) takes the eager update: one shape fewer to record.
    The LSTM's loss is not compiled (dynamo leaves recurrent modules out of its graphs; its update launches few
    kernels, cuDNN's recurrence among them): it keeps the rest, the updates without a host sync."""

    def __init__(self, model: FinetuneModel, recipe: Recipe, device: torch.device) -> None:
        self.model, self.recipe, self.device = model, recipe, device
        self.dtype = resolve_precision(recipe.precision, device)
        self.lr = torch.tensor(recipe.lr, dtype=torch.float32, device=device)
        self.optimizer = adamw(model.param_groups(recipe.weight_decay), device, lr=self.lr, betas=ADAM_BETAS,
                               eps=ADAM_EPS, capturable=device.type == "cuda")
        compiled = isinstance(model.lm, GPT)
        self.losses = torch.compile(self.graph_losses, **compile_options(device)) if compiled else self.graph_losses
        self.cudagraphs = compiled and device.type == "cuda"

    def graph_losses(self, tokens: torch.Tensor, lengths: torch.Tensor, labels: torch.Tensor,
                     per_example: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with autocast(self.device, self.dtype):
            losses = static_losses(self.model, Batch(tokens, lengths, labels, per_example), self.recipe.lm_weight)
        return losses.total, losses.clf, losses.lm

    def update(self, cpu_batch: Batch, lr: float, into: torch.Tensor, full: bool) -> None:
        """One update at rate `lr`; its L3, L2 and L1 copied into `into` on the device."""
        for group in self.optimizer.param_groups:
            group["lr"].fill_(lr)  # a kernel, no sync (the groups may share the one tensor)
        batch = to_device(cpu_batch, self.device)
        if full:
            if self.cudagraphs:
                torch.compiler.cudagraph_mark_step_begin()
            # One compile for every bucket length (dynamic), then one CUDA graph recorded per length
            torch._dynamo.maybe_mark_dynamic(batch.tokens, 1)
            total, clf, lm = self.losses(batch.tokens, batch.lengths, batch.labels, batch.per_example)
        else:
            with autocast(self.device, self.dtype):
                losses, _ = compute_losses(self.model, batch, self.recipe.lm_weight)
            total, clf, lm = losses.total, losses.clf, losses.lm
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


# ----------------------------------------------------------------------------------------------------------------
# A job: everything checked and loaded before training


@dataclass
class FinetuneJob:
    spec: TaskSpec
    variant: Variant
    seed: int
    transfer_layers: int | None
    recipe: Recipe
    model: FinetuneModel
    tokenizer: GPT1Tokenizer
    tokenizer_source: str
    meta: dict[str, Any]
    transfer: Transfer | None
    cut: Cut | None
    train: Part  # what the optimiser sees (Story Cloze: without the selection slice)
    selection: Part | None  # Story Cloze's validation slice
    evals: list[EvalPart]
    source: DataSource
    train_score_cap: int | None  # train metrics on at most this many training examples (finetune.max_eval_examples)
    started: float  # perf_counter at the start of prepare_job: wall_seconds covers loading too
    graphs: bool | str = "auto"  # finetune.cuda_graphs: the CUDA fast path (Trainer); not in the record


def prepare_job(settings: FinetuneSettings, task: str, variant: str, seed: int, pretrained_dir: str | Path,
                tokenizer_dir: str | Path | None, *, transfer_layers: int | None = None,
                present: Sequence[str] | None = None, examples_dir: str | Path | None = None,
                max_train_examples: int | None = None, max_eval_examples: int | None = None) -> FinetuneJob:
    """Check and load every input -- task, variant, weights, tokenizer, data -- before any training.

    The data: the task's encoded examples in `examples_dir` (the encode_task stage), else loaded and transformed
    here; `max_train_examples` / `max_eval_examples` narrow them further (the layer runs). `present` overrides the
    splits the data source is taken to hold (default: what the source has)."""
    started = time.perf_counter()
    spec, chosen = finetune_task(task), get_variant(variant)
    finetune = settings.finetune
    if transfer_layers is not None and (chosen.init == "random" or chosen.model_kind == "lstm"):
        raise FinetuneError(f"transfer_layers applies to a pre-trained GPT, not to variant {chosen.name}")
    cut = train_cut(spec, finetune)
    pretrained = str(pretrained_dir)
    tok_dir = Path(tokenizer_dir) if tokenizer_dir is not None else None
    tokenizer, tok_source = load_tokenizer(chosen, pretrained, tok_dir)
    seed_everything(seed)  # scratch init, transfer re-init, new token rows and the head all draw from it
    lm, meta = load_backbone(chosen, pretrained)
    if finetune.get("dropout") is not None:  # else the dropout the model was pre-trained with
        set_dropout(lm, finetune["dropout"])
    where = meta.get("source") or pretrained
    check_pair(lm, meta, tokenizer, where, tok_source)
    transfer = transfer_init(lm, transfer_layers) if transfer_layers is not None else None
    add_specials(lm, tokenizer)
    model = FinetuneModel(lm, spec, finetune["clf_dropout"]).to(default_device())

    source = data_source(settings.mirror, settings.synthetic, spec, present)
    n_ctx = lm.config.n_ctx
    if examples_dir is not None:
        data = read_encoded(Path(examples_dir), spec, tokenizer.fingerprint(), n_ctx,
                            data_settings(spec, finetune, source))
    else:
        data = plan_task_data(spec, finetune, source, tokenizer, n_ctx)
    data = TaskData(narrow(data.train, max_train_examples), [narrow(p, max_eval_examples) for p in data.evals])
    train, selection = carve_selection(spec, data.train)
    recipe = Recipe.from_section(finetune, spec.name, chosen.lm_weight)
    return FinetuneJob(spec, chosen, seed, transfer_layers, recipe, model, tokenizer, tok_source, meta, transfer, cut,
                       train, selection, data.evals, source, eval_cap(finetune, max_eval_examples), started,
                       finetune.get("cuda_graphs", CUDA_GRAPHS_DEFAULT))


# ----------------------------------------------------------------------------------------------------------------
# Running and reporting


@dataclass
class FinetuneResult:
    metrics: dict[str, Any]
    predictions: list[dict[str, Any]]
    curves: list[dict[str, float]]


def _round(value: Any) -> Any:
    return round(float(value), 6)


def prediction_records(spec: TaskSpec, report: ReportSpec, part: Part, positions: Sequence[int],
                       decoded: Decoded) -> list[dict[str, Any]]:
    out = []
    for i in positions:
        example = part.examples[i]
        record: dict[str, Any] = {"report": report.name, "split": part.name, "index": example.index,
                                  "label": example.label}
        if example.config is not None:
            record["config"] = example.config
        if decoded.probabilities is None:
            record["prediction"] = _round(decoded.predictions[i])
            record["output"] = _round(decoded.outputs[i][0])
        else:
            record["prediction"] = int(decoded.predictions[i])
            record["probabilities"] = [_round(p) for p in decoded.probabilities[i]]
        out.append(record)
    return out


def _counts(part: Part, positions: Sequence[int]) -> dict[str, int]:
    return {"examples": len(positions), "rows_read": part.loaded.rows_read,
            "unlabelled_dropped": part.loaded.unlabelled_dropped, "capped": part.loaded.capped,
            "truncated": sum(part.transformed[i].truncated for i in positions)}


def evaluate_reports(job: FinetuneJob) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Score every report of the task on its evaluation part; (reports block of metrics.json, prediction lines)."""
    reports, lines = {}, []
    for part in job.evals:
        decoded = decode(job.spec, predict(job.model, part, job.recipe.eval_batch_size, job.recipe.precision))
        for report in part.reports:
            positions = report_examples(job.spec, report, part.examples)
            subset = dataclasses.replace(decoded, predictions=decoded.predictions[positions],
                                         probabilities=None if decoded.probabilities is None else
                                         decoded.probabilities[positions], outputs=decoded.outputs[positions])
            reports[report.name] = {
                "metrics": score(job.spec, [part.examples[i] for i in positions], subset),
                "paper_metric": job.spec.paper_metric,
                "split": part.split,
                "evaluated_on": part.name,
                "complement_of_train_cut": part.cut is not None,
                "paper_split": report.test,
                "is_paper_split": part.split == report.test,
                "configs": list(report.configs or job.spec.configs),
                "counts": {"train": len(job.train.examples), "eval": len(positions),
                           **{k: v for k, v in _counts(part, positions).items() if k != "examples"}},
                "description": part.loaded.describe(),
            }
            lines += prediction_records(job.spec, report, part, positions, decoded)
    return reports, lines


def train_metrics(job: FinetuneJob, cap: int | None) -> tuple[dict[str, float], int]:
    """The final model on (a seeded subset of at most `cap` of) its own training examples: Figure 2 (left) draws
    train accuracy beside dev accuracy."""
    n = len(job.train.examples)
    positions = list(range(n))
    if cap is not None and n > cap:
        positions = sorted(np.random.default_rng(DATA_SEED).choice(n, size=cap, replace=False).tolist())
    part = job.train.subset(positions)
    outputs = predict(job.model, part, job.recipe.eval_batch_size, job.recipe.precision)
    return score(job.spec, part.examples, decode(job.spec, outputs)), \
        len(positions)


def _model_block(job: FinetuneJob) -> dict[str, Any]:
    config = dataclasses.asdict(job.model.lm.config)
    return {"kind": job.meta.get("kind"), "init": job.variant.init, "config": config, "source": job.meta.get("source"),
            "pretrain_step": job.meta.get("step"), "pretrain_tokens": job.meta.get("tokens"),
            "parameters": sum(p.numel() for p in job.model.parameters())}


def build_metrics(job: FinetuneJob, trained: Trained, reports: dict[str, Any], train_scores: dict[str, float],
                  train_scored: int, wall: float) -> dict[str, Any]:
    cut = job.cut
    return {
        "task": job.spec.name,
        "kind": job.spec.kind,
        "variant": job.variant.name,
        "seed": job.seed,
        "transfer_layers": job.transfer_layers,
        "reports": reports,
        "train": {
            "split": job.train.split,
            "cut": None if cut is None else {"split": cut.split, "fraction": cut.end_fraction, "seed": cut.seed,
                                             "description": str(cut)},
            "examples": len(job.train.examples),
            "rows_read": job.train.loaded.rows_read,
            "unlabelled_dropped": job.train.loaded.unlabelled_dropped,
            "capped": job.train.loaded.capped,
            "truncated": job.train.truncated,
            "selection_slice": 0 if job.selection is None else len(job.selection.examples),
            "description": job.train.loaded.describe(),
        },
        "train_metrics": train_scores,
        "train_metrics_examples": train_scored,
        "train_accuracy": train_scores.get("accuracy"),
        "selection": trained.selection,
        "epochs": job.recipe.epochs,
        "updates": trained.updates,
        "warmup_updates": trained.warmup,
        "lm_weight": job.recipe.lm_weight,
        "recipe": dataclasses.asdict(job.recipe),
        "final_loss": trained.curves[-1]["loss"] if trained.curves else None,
        "tokens": trained.tokens,
        "train_seconds": trained.train_seconds,
        "tokens_per_second": trained.tokens / max(trained.train_seconds, 1e-9),
        "wall_seconds": wall,
        "model": _model_block(job),
        "transfer": None if job.transfer is None else dataclasses.asdict(job.transfer),
        "tokenizer": {"source": job.tokenizer_source, "sha256": job.tokenizer.fingerprint(),
                      "n_ctx": job.model.lm.config.n_ctx},
        "data": {"source": job.train.loaded.description.get("source"), "data_seed": DATA_SEED},
    }


def finetune_job(job: FinetuneJob, log: Callable[[list[dict[str, float]]], None] | None = None) -> FinetuneResult:
    """Train, (Story Cloze: select the best epoch), evaluate every report; nothing is written to disk."""
    total = len(job.train.examples)
    print(f"finetune {job.spec.name}/{job.variant.name}/seed {job.seed}: {job.train.truncated} of {total} training "
          f"examples and {sum(p.truncated for p in job.evals)} of {sum(len(p.examples) for p in job.evals)} "
          f"evaluation examples truncated to n_ctx={job.model.lm.config.n_ctx}")
    seed_everything(job.seed)  # dropout masks depend on the seed only, not on what loading drew before
    trainer = Trainer(job.model, job.recipe, job.train, job.seed, log, job.graphs)
    trained = trainer.run(f"{job.spec.name}/{job.variant.name}", job.selection, job.spec)
    print(f"finetune: {trained.updates} updates, {trained.tokens:,} tokens in {trained.train_seconds:.1f} s "
          f"({trained.tokens / max(trained.train_seconds, 1e-9):,.0f} tokens/s)")
    reports, lines = evaluate_reports(job)
    for name, block in reports.items():
        values = ", ".join(f"{k} {v:.4f}" for k, v in block["metrics"].items())
        print(f"finetune: {name} on {block['evaluated_on']} ({block['counts']['eval']} examples): {values}")
    scores, scored = train_metrics(job, job.train_score_cap)
    metrics = build_metrics(job, trained, reports, scores, scored, time.perf_counter() - job.started)
    return FinetuneResult(metrics, lines, trained.curves)


def finetune_run(settings: FinetuneSettings, task: str, variant: str, seed: int, pretrained_dir: str | Path,
                 tokenizer_dir: str | Path | None, *, transfer_layers: int | None = None,
                 present: Sequence[str] | None = None, examples_dir: str | Path | None = None,
                 max_train_examples: int | None = None, max_eval_examples: int | None = None,
                 log: Callable[[list[dict[str, float]]], None] | None = None) -> FinetuneResult:
    """One fine-tuning job in memory: prepare (every check before training), train, evaluate."""
    job = prepare_job(settings, task, variant, seed, pretrained_dir, tokenizer_dir, transfer_layers=transfer_layers,
                      present=present, examples_dir=examples_dir, max_train_examples=max_train_examples,
                      max_eval_examples=max_eval_examples)
    return finetune_job(job, log)


__all__ = [
    "FinetuneJob",
    "FinetuneResult",
    "GraphedUpdates",
    "bucket_length",
    "finetune_job",
    "finetune_run",
    "linear_lr_factor",
    "prepare_job",
    "static_losses",
]
