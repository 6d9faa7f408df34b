"""The pre-training stage (`gpt1 pretrain`): one run of `gpt1.training.pretraining` (the plan, schedule, loop and
evaluation) for one model kind, with the profile's settings (`config.pretrain_settings`); its outputs written together
when the run ends (temp files, then renames: `declared_outputs`), its per-update metrics to MLflow from a background
thread, the finished model logged and, for the GPT, registered. Resumes an interrupted run (gpt1.training.resume); under
`torchrun` every process runs it and only rank 0 writes files and logs.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpt1.modeling.checkpoints import save_weights, snapshot_name
from gpt1.modeling.model import flops_per_token
from gpt1.pipeline import layout, records
from gpt1.pipeline.clock import PROCESS
from gpt1.pipeline.config import pretrain_settings
from gpt1.pipeline.files import (
    file_record,
    staged_outputs,
    without_timings,
    write_csv,
    write_json,
)
from gpt1.training.pretraining import PretrainJob, build_job, train
from gpt1.training.runtime import Runtime, init_runtime, shutdown_runtime

if TYPE_CHECKING:
    from gpt1.pipeline.config import Config
    from gpt1.pipeline.tracking import StageRun

CURVE_FIELDS = ("step", "tokens", "lr", "train_loss", "val_loss", "val_perplexity")


# ----------------------------------------------------------------------------------------------------------------
# Outputs


def declared_outputs(out_dir: str | Path, snapshots: int) -> list[Path]:
    """Every file a finished run leaves in out_dir (the resume folder is not one of them)."""
    out = Path(out_dir)
    files = [out / name for name in (layout.MODEL_WEIGHTS, layout.MODEL_JSON, layout.PRETRAIN_METRICS,
                                     layout.PRETRAIN_CURVES)]
    files += [out / layout.SNAPSHOTS / snapshot_name(i) for i in range(snapshots)]
    return [*files, out / layout.SNAPSHOTS / layout.SNAPSHOT_INDEX]


def remove_stale_outputs(out_dir: Path, snapshots: int) -> None:
    """After the new outputs are in place: weights an earlier run left that this one did not write (a different
    snapshot count), and temp files of killed runs. Finished outputs are replaced only by the final renames, so a
    run that fails, bad input, NaN, kill or full disk, leaves the previous ones as they were."""
    declared = set(declared_outputs(out_dir, snapshots))
    for folder in (out_dir, out_dir / layout.SNAPSHOTS):
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
# The stage


def prepare(cfg: Config, kind: str, ids_dir: Path, tokenizer_dir: Path, out_dir: Path, rt: Runtime) -> PretrainJob:
    """The profile's run for model `kind`: every input checked and the job built (or restored) before training."""
    return build_job(kind, cfg.section("model"), pretrain_settings(cfg, kind), Path(ids_dir), Path(tokenizer_dir),
                     Path(out_dir), rt)


def run_training(job: PretrainJob, run: StageRun | None = None) -> dict[str, Any]:
    """Train (per-update metrics to MLflow `run` from a background thread); on the main process write the outputs
    and return the final metrics."""
    from gpt1.pipeline.tracking import MetricSink

    sink = MetricSink(run)
    try:
        train(job, sink.log, PROCESS.lap)
    finally:
        sink.close()
    if not job.rt.is_main:
        return {}
    metrics = finish(job, run)
    PROCESS.lap("write")  # the queued metrics, the outputs, their logs
    return metrics


def finish(job: PretrainJob, run: StageRun | None) -> dict[str, Any]:
    """Write every declared output (temp names, renamed together at the end of the stage's publication) and log
    the final metrics and files to MLflow `run`; `clear_up` runs once they are in place."""
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
        records.write("pretrain_metrics", temps[2], {**without_timings(metrics),
                                                    "files": {layout.PRETRAIN_CURVES: file_record(temps[3])}})
        for i, temp in enumerate(temps[4:-1]):
            _link_or_copy(job.resume_dir / layout.SNAPSHOTS / snapshot_name(i), temp)
        write_json(temps[-1], sorted(progress.snapshots, key=lambda s: s["index"]))
    if run is not None:
        run.log_metrics({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, plan.total_steps)
        run.log_output(job.out_dir / layout.PRETRAIN_METRICS)
        run.log_output(job.out_dir / layout.PRETRAIN_CURVES)
    return metrics


def clear_up(job: PretrainJob) -> None:
    """Once the outputs are in place: drop what they replace and the resume folder (kept until then, so that a
    failure before, MLflow's logging included, leaves the run resumable)."""
    remove_stale_outputs(job.out_dir, len(job.plan.snapshots))
    shutil.rmtree(job.resume_dir, ignore_errors=True)


def _params(job: PretrainJob) -> dict[str, Any]:
    return {"kind": job.kind, "model": dataclasses.asdict(job.config), "pretrain": job.pretrain,
            "plan": {"total_steps": job.plan.total_steps, "accum_steps": job.plan.accum_steps,
                     "world_size": job.rt.world_size, "snapshots": list(job.plan.snapshots)},
            "device": str(job.rt.device), "autocast": str(job.dtype), "compiled": job.compiled,
            "numerics": job.numerics.describe()}


def _log_inputs(run: StageRun, job: PretrainJob, ids_dir: Path) -> None:
    """The token ids trained and validated on, as run inputs with their sha256."""
    for context, ids in (("train", job.train_ids), ("validation", job.val_ids)):
        name = f"{context}.bin"
        run.log_dataset(f"ids/{name}", f"gpt1 encode:{ids_dir / name}", ids.header["sha256"], context)


# What the registry shows beside a pre-trained model's version
REGISTRY_METRICS = ("val_loss", "val_perplexity", "train_loss", "steps", "tokens", "parameters")


def _log_model(run: StageRun, job: PretrainJob, tokenizer_dir: Path, metrics: dict[str, Any],
               registered_name: str) -> None:
    """The finished model as an MLflow model (with its tokenizer); the GPT also as a new version of
    `registered_name` in the model registry, tagged with its metrics."""
    from gpt1.pipeline.mlflow_models import log_language_model

    model_uri = log_language_model(run, job.kind, job.raw, job.out_dir, tokenizer_dir, job.plan.total_steps)
    if job.kind == "gpt":
        tags = {f"metric.{key}": metrics[key] for key in REGISTRY_METRICS}
        version = run.register_model(model_uri, registered_name, {**tags, "gpt1.run_id": run.run_id})
        if version is not None:
            print(f"pretrain: registered {registered_name} version {version} ({model_uri})")


def pretrain_stage(cfg: Config, model_kind: str, ids_dir: Path, tokenizer_dir: Path, out_dir: Path) -> dict[str, Any]:
    """`gpt1 pretrain`: train (or resume) a language model on IDS/train.bin; write the declared outputs in OUT/.
    Under torchrun every process runs this; only rank 0 writes files and logs."""
    rt = init_runtime()
    try:
        job = prepare(cfg, model_kind, Path(ids_dir), Path(tokenizer_dir), Path(out_dir), rt)
        PROCESS.lap("load")  # the ids, the model on the device, a checkpoint to resume from
        if not rt.is_main:
            return run_training(job)
        if job.resumed_from == 0:  # files of a run killed before its first checkpoint are not a checkpoint
            shutil.rmtree(job.resume_dir, ignore_errors=True)
        else:
            print(f"pretrain: resuming from the checkpoint at step {job.resumed_from} in {job.resume_dir}")
        from gpt1.pipeline.tracking import published_run

        with published_run(f"pretrain-{model_kind}", cfg, _params(job), name=f"pretrain {model_kind}") as run:
            run.set_tags({"gpt1.tokenizer_sha256": job.tokenizer_sha256, "gpt1.resumed_from_step": job.resumed_from})
            _log_inputs(run, job, Path(ids_dir))
            PROCESS.lap("open")  # the store checked, the run opened, its params, tags and inputs logged
            metrics = run_training(job, run)
            _log_model(run, job, Path(tokenizer_dir), metrics, f"{cfg.experiment}-{cfg.profile}-{model_kind}")
            run.log_times("log")  # the model to MLflow and its registry
        clear_up(job)
        return metrics
    finally:
        shutdown_runtime(rt)


__all__ = [
    "CURVE_FIELDS",
    "clear_up",
    "declared_outputs",
    "finish",
    "prepare",
    "pretrain_stage",
    "run_training",
]
