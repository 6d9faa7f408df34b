"""The fine-tuning stage (`gpt1 finetune`): one job of `gpt1.training.finetuning` (task x variant x seed) from the
profile's settings, its outputs written together (atomically): metrics.json, predictions.jsonl, curves.csv; one MLflow
run with the fine-tuned model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpt1.data.taskdata import part_sha256, part_source
from gpt1.pipeline import layout, records
from gpt1.pipeline.clock import PROCESS
from gpt1.pipeline.config import finetune_settings
from gpt1.pipeline.files import (
    file_record,
    staged_outputs,
    without_timings,
    write_csv,
    write_jsonl_line,
)
from gpt1.training.finetune_loop import CURVE_FIELDS
from gpt1.training.finetuning import FinetuneJob, FinetuneResult, finetune_job, prepare_job
from gpt1.training.numerics import Numerics, in_effect, note_upstream

if TYPE_CHECKING:
    from gpt1.pipeline.config import Config
    from gpt1.pipeline.tracking import StageRun

# ----------------------------------------------------------------------------------------------------------------
# The stage


def declared_outputs(out_dir: str | Path) -> list[Path]:
    return [Path(out_dir) / name for name in layout.FINETUNE_FILES]


def write_outputs(out_dir: Path, result: FinetuneResult, numerics: Numerics) -> None:
    """metrics.json (with the numerics the job computed with), predictions.jsonl, curves.csv: temp names, renamed
    together at the end (of the block, or of the stage's `publication()`)."""
    with staged_outputs(*declared_outputs(out_dir)) as (metrics, predictions, curves):
        with open(predictions, "w", encoding="utf-8") as handle:
            for line in result.predictions:
                write_jsonl_line(handle, line)
        write_csv(curves, CURVE_FIELDS, result.curves)
        files = {layout.PREDICTIONS: file_record(predictions), layout.FINETUNE_CURVES: file_record(curves)}
        records.write("finetune_metrics", metrics,
                      {**without_timings(result.metrics), "numerics": numerics.to_json(), "files": files})


def _mlflow_curves(run: StageRun) -> Callable[[list[dict[str, float]]], None]:
    """Per-update losses to MLflow, one batched write per epoch."""

    def log(rows: list[dict[str, float]]) -> None:
        run.log_steps(({k: row[k] for k in ("loss", "clf_loss", "lm_loss", "lr")}, int(row["step"])) for row in rows)

    return log


def _final_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    flat = {f"{report}.{name}": value for report, block in metrics["reports"].items()
            for name, value in block["metrics"].items()}
    flat.update({f"train.{name}": value for name, value in metrics["train_metrics"].items()})
    flat.update({"train_truncated": metrics["train"]["truncated"], "updates": metrics["updates"],
                 "tokens": metrics["tokens"], "wall_seconds": metrics["wall_seconds"],
                 "tokens_per_second": metrics["tokens_per_second"]})
    flat.update({f"{r}.truncated": b["counts"]["truncated"] for r, b in metrics["reports"].items()})
    return flat


def _params(job: FinetuneJob, cfg: Config) -> dict[str, Any]:
    return {"task": job.spec.name, "variant": job.variant.name, "seed": job.seed,
            "transfer_layers": job.transfer_layers, "finetune": cfg.section("finetune"),
            "recipe": dataclasses.asdict(job.recipe), "model": dataclasses.asdict(job.model.lm.config),
            "pretrained": job.meta.get("source"), "tokenizer": job.tokenizer_source}


def finetune_stage(cfg: Config, task: str, variant: str, seed: int, pretrained_dir: str | Path,
                   tokenizer_dir: str | Path | None, out_dir: str | Path, *,
                   transfer_layers: int | None = None, examples_dir: str | Path | None = None) -> dict[str, Any]:
    """`gpt1 finetune`: fine-tune one task (variant, seed) and evaluate it; write OUT/metrics.json,
    predictions.jsonl and curves.csv together, log an MLflow run. Every input is checked before training; a
    failure, MLflow's logging included, leaves an earlier run's outputs as they were (they are replaced only by the
    publication's renames, after everything else)."""
    from gpt1.pipeline.tracking import published_run

    out = Path(out_dir)
    job = prepare_job(finetune_settings(cfg), task, variant, seed, pretrained_dir, tokenizer_dir,
                      transfer_layers=transfer_layers, examples_dir=examples_dir)
    PROCESS.lap("load")  # this module's imports, the weights on the device, the tokenizer and the examples
    numerics = job_numerics(job)
    with published_run("finetune", cfg, _params(job, cfg), name=run_name(job)) as run:
        splits = ",".join(p.name for p in job.evals)
        run.set_tags({"gpt1.task": job.spec.name, "gpt1.variant": job.variant.name, "gpt1.seed": seed,
                      "gpt1.split": splits, "gpt1.transfer_layers": transfer_layers,
                      "gpt1.tokenizer_sha256": job.tokenizer.fingerprint()})
        _log_inputs(run, job)
        PROCESS.lap("open")  # the store checked, the run opened, its params, tags and inputs logged
        result = finetune_job(job, _mlflow_curves(run), PROCESS.lap)
        write_outputs(out, result, numerics)
        PROCESS.lap("write")
        run.log_metrics(_final_metrics(result.metrics), result.metrics["updates"])
        for path in declared_outputs(out):
            run.log_output(path)
        _log_model(run, job, cfg, result.metrics["updates"])
        run.log_times("log")  # the metrics, the outputs and the model to MLflow
    return result.metrics


def job_numerics(job: FinetuneJob) -> Numerics:
    """The numerics this job computes with; one line on stderr when the weights it starts from were computed with
    others (a checkpoint variant: scratch takes only the config, released weights record none)."""
    numerics = in_effect(next(job.model.parameters()).device.type)
    if job.variant.init == "checkpoint":
        note_upstream(numerics, job.meta.get("numerics"), str(job.meta.get("source")))
    return numerics


def run_name(job: FinetuneJob) -> str:
    """What the run is, for mlflow ui: 'finetune sst2 pretrained seed0' (+ 'k2' with 2 blocks transferred)."""
    layers = "" if job.transfer_layers is None else f" k{job.transfer_layers}"
    return f"finetune {job.spec.name} {job.variant.name} seed{job.seed}{layers}"


def _log_inputs(run: StageRun, job: FinetuneJob) -> None:
    """The task data trained and evaluated on, as run inputs: source (hub id, mirror or project-made) and hash."""
    parts = [("train", job.train), *(("selection", p) for p in [job.selection] if p is not None),
             *(("eval", p) for p in job.evals)]
    for context, part in parts:
        run.log_dataset(f"{job.spec.name}/{part.name}", part_source(job.spec, part), part_sha256(part), context)


def _log_model(run: StageRun, job: FinetuneJob, cfg: Config, updates: int) -> None:
    from gpt1.pipeline.mlflow_task_model import log_task_model

    tokenizer_dir = Path(job.tokenizer_source)
    # The released model's BPE (vocab.json, merges.txt) is not ours.
    if not (tokenizer_dir / layout.TOKENIZER_META).is_file():
        print(f"finetune: model not logged to MLflow: {job.tokenizer_source} is not a gpt1 bpe folder")
        return
    clf_dropout = cfg.section("finetune")["clf_dropout"]
    log_task_model(run, job.model, job.spec, job.variant.name, clf_dropout, tokenizer_dir, updates)


__all__ = ["CURVE_FIELDS", "declared_outputs", "finetune_stage", "job_numerics", "run_name",
           "write_outputs"]
