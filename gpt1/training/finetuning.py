"""Fine-tuning jobs (paper §3.2-3.3), a library: the finetune and layers stages both run their jobs through it. It
reads no params.yaml file, opens no MLflow run and knows no results path: a job gets the profile's fine-tuning
settings as `config.FinetuneSettings` and returns its metrics, prediction lines and curves in memory
(`FinetuneResult`); the stages write and log them.

One job = one task x one variant x one seed. The pieces, in the order a job runs them:

* Variants (`gpt1.modeling.backbones`): where the weights and the tokenizer come from -- our pre-trained GPT
  (`pretrained`), the same architecture randomly initialised (`scratch`), our GPT without the auxiliary LM loss
  (`no_aux`), our LSTM (`lstm`), or the released GPT-1 (`released`). `transfer_layers=k` keeps the embeddings and the
  first k blocks and re-initialises the rest (Figure 2, left).
* Model (`gpt1.modeling.heads`): the start/delimiter/extract tokens are appended to the embedding (N(0, 0.02)); a head
  reads the last layer's state at the extract token. classification/entailment: dropout + Linear(C, labels);
  similarity: the two orders' states summed, then dropout + Linear (2 classes, or 1 output with MSE for STS-B);
  multiple choice: one score per (context, answer) sequence, softmax over the answers.
* Data (which rows: `gpt1.data.rows`; with their token sequences: `gpt1.data.taskdata`): the task's train split or its
  declared cut; every report is scored on `rows.evaluation_split`, and on the complement of the training cut when
  that is the same split, so no example is both trained and scored on. The pipeline encodes each task once (the
  encode_task stage) and its jobs read that. Story Cloze keeps a slice of its training examples aside to select its
  best epoch on.
* Training (`gpt1.training.finetune_loop`, params.yaml `finetune`): L3 = L2 + λ·L1, AdamW, linear warm-up then linear
  decay; on CUDA by default through its fast path (finetune.cuda_graphs).
* Records: every report's metrics and prediction lines (`evaluate_reports`), the final model's metrics on its own
  training examples (`train_metrics`), and the job's metrics.json (`build_metrics`).

The job's seed decides initialisation, dropout and batch order; which examples it sees does not depend on it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpt1.data.rows import (
    DATA_SEED,
    SELECTION_FRACTION,
    Cut,
    DataSource,
    cap_positions,
    data_settings,
    data_source,
    eval_cap,
    report_examples,
    train_cut,
)
from gpt1.data.taskdata import EvalPart, Part, TaskData, carve_selection, narrow, plan_task_data, read_encoded
from gpt1.data.tasks import ReportSpec, TaskSpec, finetune_task
from gpt1.data.tokenizer import GPT1Tokenizer
from gpt1.modeling.backbones import Variant, check_pair, get_variant, load_backbone, load_tokenizer
from gpt1.modeling.heads import Decoded, FinetuneModel, Transfer, add_specials, decode, transfer_init
from gpt1.modeling.model import set_dropout
from gpt1.pipeline.errors import FinetuneError
from gpt1.training.finetune_loop import Recipe, Trained, Trainer, predict, score
from gpt1.training.runtime import default_device, seed_everything

if TYPE_CHECKING:
    from gpt1.pipeline.config import FinetuneSettings

# finetune.cuda_graphs where a profile does not set it: the fast path on CUDA only (a CPU run keeps its bits)
CUDA_GRAPHS_DEFAULT = "auto"


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


def prediction_records(report: ReportSpec, part: Part, positions: Sequence[int],
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
    return {"rows_read": part.loaded.rows_read, "unlabelled_dropped": part.loaded.unlabelled_dropped,
            "capped": part.loaded.capped, "truncated": sum(part.transformed[i].truncated for i in positions)}


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
                "counts": {"train": len(job.train.examples), "eval": len(positions), **_counts(part, positions)},
                "description": part.loaded.describe(),
            }
            lines += prediction_records(report, part, positions, decoded)
    return reports, lines


def train_metrics(job: FinetuneJob, cap: int | None) -> tuple[dict[str, float], int]:
    """The final model on (a seeded subset of at most `cap` of) its own training examples: Figure 2 (left) draws
    train accuracy beside dev accuracy."""
    positions = cap_positions(np.arange(len(job.train.examples)), cap, DATA_SEED).tolist()
    part = job.train.subset(positions)
    outputs = predict(job.model, part, job.recipe.eval_batch_size, job.recipe.precision)
    return score(job.spec, part.examples, decode(job.spec, outputs)), len(positions)


def _model_block(job: FinetuneJob) -> dict[str, Any]:
    config = dataclasses.asdict(job.model.lm.config)
    return {"kind": job.meta.get("kind"), "init": job.variant.init, "config": config, "source": job.meta.get("source"),
            "pretrain_step": job.meta.get("step"), "pretrain_tokens": job.meta.get("tokens"),
            "parameters": sum(p.numel() for p in job.model.parameters())}


def _selection_block(job: FinetuneJob, trained: Trained) -> dict[str, Any] | None:
    """How the kept epoch was chosen (Story Cloze), or None where the last epoch's weights are the result."""
    if job.selection is None or trained.best_epoch is None:
        return None
    return {"protocol": f"best epoch by {job.spec.paper_metric} on a validation slice of the training examples",
            "slice_examples": len(job.selection.examples), "slice_fraction": SELECTION_FRACTION,
            "slice_seed": DATA_SEED, "epoch_scores": trained.epoch_scores, "best_epoch": trained.best_epoch}


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
        "selection": _selection_block(job, trained),
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


def finetune_job(job: FinetuneJob, log: Callable[[list[dict[str, float]]], None] | None = None,
                 mark: Callable[[str], None] = lambda phase: None) -> FinetuneResult:
    """Train, (Story Cloze: select the best epoch), evaluate every report; nothing is written to disk. `mark(phase)`
    is called as each phase ends: `train`, then `evaluate` (a stage's clock, gpt1.pipeline.clock)."""
    total = len(job.train.examples)
    print(f"finetune {job.spec.name}/{job.variant.name}/seed {job.seed}: {job.train.truncated} of {total} training "
          f"examples and {sum(p.truncated for p in job.evals)} of {sum(len(p.examples) for p in job.evals)} "
          f"evaluation examples truncated to n_ctx={job.model.lm.config.n_ctx}")
    seed_everything(job.seed)  # dropout masks depend on the seed only, not on what loading drew before
    trainer = Trainer(job.model, job.recipe, job.train, job.seed, log, job.graphs)
    trained = trainer.run(f"{job.spec.name}/{job.variant.name}", job.selection, job.spec)
    mark("train")
    print(f"finetune: {trained.updates} updates, {trained.tokens:,} tokens in {trained.train_seconds:.1f} s "
          f"({trained.tokens / max(trained.train_seconds, 1e-9):,.0f} tokens/s)")
    reports, lines = evaluate_reports(job)
    for name, block in reports.items():
        values = ", ".join(f"{k} {v:.4f}" for k, v in block["metrics"].items())
        print(f"finetune: {name} on {block['evaluated_on']} ({block['counts']['eval']} examples): {values}")
    scores, scored = train_metrics(job, job.train_score_cap)
    mark("evaluate")
    metrics = build_metrics(job, trained, reports, scores, scored, time.perf_counter() - job.started)
    return FinetuneResult(metrics, lines, trained.curves)


def finetune_run(settings: FinetuneSettings, task: str, variant: str, seed: int, pretrained_dir: str | Path,
                 tokenizer_dir: str | Path | None, *, transfer_layers: int | None = None,
                 present: Sequence[str] | None = None, examples_dir: str | Path | None = None,
                 max_train_examples: int | None = None, max_eval_examples: int | None = None,
                 log: Callable[[list[dict[str, float]]], None] | None = None,
                 mark: Callable[[str], None] = lambda phase: None) -> FinetuneResult:
    """One fine-tuning job in memory: prepare (every check before training), train, evaluate; `mark(phase)` as each
    phase ends: `load`, `train`, `evaluate`."""
    job = prepare_job(settings, task, variant, seed, pretrained_dir, tokenizer_dir, transfer_layers=transfer_layers,
                      present=present, examples_dir=examples_dir, max_train_examples=max_train_examples,
                      max_eval_examples=max_eval_examples)
    mark("load")
    return finetune_job(job, log, mark)


__all__ = [
    "FinetuneJob",
    "FinetuneResult",
    "finetune_job",
    "finetune_run",
    "prepare_job",
]
