"""Section c: every CUDA path of the stages, for real, at a small size, through the gpt1 CLI (`python -m gpt1`), on
the bundle's CPU-stage outputs (bench/gpu_bundle/data: tokenizer, ids, encoded tasks):

* pre-training (bf16 autocast, torch.compile, SDPA with cuDNN first, fused AdamW on CUDA: the profile's `auto`),
  killed with SIGKILL after its first resumable checkpoint, then the same command again, which resumes;
* fine-tuning through each of the four input transformations (sst2, rte, stsb, story_cloze), zero-shot scoring
  and the export to transformers, side by side;
* every output verified as the pipeline verifies it: the declared files, sealed JSON and sha256 records (the
  package's own readers: gpt1.modeling.checkpoints.load_pretrained, gpt1.pipeline.records.read and
  gpt1.pipeline.files.verify_file, gpt1.report.inputs' readers of fine-tuning and zero-shot outputs), finite
  metrics, the device each output says it was computed on; the export against ours; the MLflow runs every stage logged.
"""

from __future__ import annotations

import json
import math
import os
import signal
import tarfile
import time
from pathlib import Path
from typing import Any

from bench.gpu.env import PRETRAIN, SMALL, TASKS, Context, Finished, gpt1_args, run_all, run_one, start
from bench.gpu.report import STAGES_TAR, Record, md_table

FIRST_CHECKPOINT_S = 240  # compile on a cold cache comes first
SNAPSHOTS = int(dict(o.split("=") for o in PRETRAIN)["pretrain.snapshots"])
TAR_LIMIT = 15 * 2**20


def pretrain_args(ctx: Context, out: Path) -> list[str]:
    return gpt1_args("pretrain", "--model", "gpt", "--ids", str(ctx.data("ids")), "--tokenizer",
                     str(ctx.data("tokenizer")), "--out", str(out), overrides=ctx.pretrain())


def kill_after_first_checkpoint(ctx: Context, out: Path) -> dict[str, Any]:
    """Start pre-training, SIGKILL it once its first resumable checkpoint is on disk; what the checkpoint holds."""
    from gpt1.pipeline import layout
    from gpt1.training.resume import LATEST

    child, log, tick = start(ctx, "pretrain-killed", pretrain_args(ctx, out))
    pointer, deadline = out / layout.RESUME / LATEST, time.monotonic() + FIRST_CHECKPOINT_S
    try:
        while not pointer.exists():
            if child.poll() is not None:
                raise RuntimeError(f"pre-training ended before its first checkpoint: {log.read_text()[-1500:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no checkpoint within {FIRST_CHECKPOINT_S} s: {log.read_text()[-1500:]}")
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    if child.returncode != -signal.SIGKILL:
        raise RuntimeError(f"pre-training was not killed mid-run (exit {child.returncode})")
    if (out / "model.safetensors").exists():
        raise RuntimeError("a killed run left a finished model.safetensors")
    return {"killed_after_s": round(time.perf_counter() - tick, 1), **checkpoint_state(out / layout.RESUME)}


def checkpoint_state(resume: Path) -> dict[str, Any]:
    """The step of the newest checkpoint and the CUDA generators its state holds (one per GPU)."""
    import torch

    from gpt1.training.resume import read_pointer

    pointer = read_pointer(resume)
    state = torch.load(resume / pointer["state"]["name"], map_location="cpu", weights_only=True)
    return {"checkpoint_step": pointer["step"], "cuda_rng_states": len(state["rng"]["cuda"]),
            "checkpoint_device": pointer["settings"]["numerics"]["device"]}


def resumed_from(done: Finished) -> int | None:
    marker = "resuming from the checkpoint at step "
    text = done.log.read_text(errors="replace")
    return int(text.split(marker)[1].split()[0]) if marker in text else None


# ----------------------------------------------------------------------------------------------------------------
# Verification: the package's own readers


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def pretrain_files(out: Path, snapshots: int) -> set[Path]:
    """Every file a finished pre-training leaves in `out`, as the stage declares them: layout's files of the folder
    and its snapshots folder, `snapshots` weights files (checkpoints' names) and their index."""
    from gpt1.modeling.checkpoints import snapshot_name
    from gpt1.pipeline import layout

    names = (layout.MODEL_WEIGHTS, layout.MODEL_JSON, layout.PRETRAIN_METRICS, layout.PRETRAIN_CURVES)
    snapshots_dir = out / layout.SNAPSHOTS
    return {*(out / name for name in names), *(snapshots_dir / snapshot_name(i) for i in range(snapshots)),
            snapshots_dir / layout.SNAPSHOT_INDEX}


def verify_pretrain(out: Path, tokenizer: Path, snapshots: int) -> dict[str, Any]:
    from gpt1.data.tokenizer import GPT1Tokenizer
    from gpt1.modeling.checkpoints import iter_snapshots, load_pretrained
    from gpt1.pipeline import records
    from gpt1.pipeline.files import verify_file

    files = {p for p in out.rglob("*") if p.is_file()}
    if files != pretrain_files(out, snapshots):
        raise RuntimeError(f"{out}: files differ from the declared outputs: {sorted(map(str, files))}")
    _, meta = load_pretrained(out)  # checks model.safetensors against model.json's size and sha256
    for _, path in iter_snapshots(out):
        load_pretrained(path)  # each snapshot against the index's record
    metrics = records.read("pretrain_metrics", out / "metrics.json")  # sealed and as declared
    verify_file(out / "curves.csv", metrics["files"]["curves.csv"], "pretrain", out / "metrics.json")
    if meta["tokenizer_sha256"] != GPT1Tokenizer.load(tokenizer).fingerprint():
        raise RuntimeError(f"{out}: made with another tokenizer")
    if not all(finite(metrics[k]) for k in ("val_loss", "train_loss", "val_perplexity")):
        raise RuntimeError(f"{out}/metrics.json: a loss is not finite: {metrics}")
    return {"val_loss": metrics["val_loss"], "steps": metrics["steps"], "device": meta["numerics"]["device"]}


def verify_finetune(out: Path, task: str) -> dict[str, Any]:
    from gpt1.pipeline import records
    from gpt1.pipeline.files import verify_file
    from gpt1.report.inputs import read_finetune_metrics, verified_predictions

    run = read_finetune_metrics(out / "metrics.json", task, "pretrained", 0)  # sealed, every field the tables read
    predictions = verified_predictions(out / "predictions.jsonl")  # against metrics.json's sha256 record
    data = records.read("finetune_metrics", out / "metrics.json")
    verify_file(out / "curves.csv", data["files"]["curves.csv"], "finetune", out / "metrics.json")
    scores = {f"{name}.{m}": v for name, s in run.scores.items() for m, v in s.metrics.items()}
    if not scores or not all(finite(v) for v in scores.values()):
        raise RuntimeError(f"{out}/metrics.json: a metric is not finite: {scores}")
    return {"scores": scores, "predictions": len(predictions), "device": data["numerics"]["device"],
            "updates": data["updates"]}


def verify_zeroshot(out: Path) -> dict[str, Any]:
    from gpt1.pipeline import records
    from gpt1.pipeline.files import verify_file
    from gpt1.report.inputs import ZEROSHOT_FIELDS, read_csv_rows

    data = records.read("zeroshot", out / "zeroshot.json")
    verify_file(out / "zeroshot.csv", data["files"]["zeroshot.csv"], "zeroshot", out / "zeroshot.json")
    rows = read_csv_rows(out / "zeroshot.csv", ZEROSHOT_FIELDS)
    if not rows or not all(finite(r["raw"]) for r in rows):
        raise RuntimeError(f"{out}/zeroshot.csv: a score is not finite")
    last = data["snapshots"][-1]["tasks"]
    return {"rows": len(rows), "points": len(data["snapshots"]), "device": data["numerics"]["device"],
            "last": {t: r["raw"] for t, r in last.items()}}


def verify_export(out: Path, pretrained: Path, device: str) -> dict[str, Any]:
    """transformers loads the folder, and its logits are ours on the same ids (fp32 on `device`)."""
    import torch
    from transformers import OpenAIGPTLMHeadModel

    from gpt1.modeling.checkpoints import load_pretrained
    from gpt1.modeling.hf import HF_EXPORT_FILES

    missing = [name for name in HF_EXPORT_FILES if not (out / name).is_file()]
    if missing:
        raise RuntimeError(f"{out}: no {', '.join(missing)}")
    hf = OpenAIGPTLMHeadModel.from_pretrained(out).to(device).eval()
    ours, _ = load_pretrained(pretrained)
    ours = ours.to(device).eval()
    idx = torch.randint(0, ours.config.vocab_size, (2, ours.config.n_ctx), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        delta = (hf(idx.to(device)).logits - ours(idx.to(device))[0]).abs().max().item()
    if not delta < 1e-3:
        raise RuntimeError(f"{out}: HF logits differ from ours by {delta}")
    return {"max_abs_logit_delta_vs_ours": delta}


def logged_runs(store: Path) -> tuple[Any, list[Any]]:
    """(an MlflowClient on the sqlite file `store`, every run of its gpt1 experiment)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{store}")
    experiment = client.get_experiment_by_name("gpt1")
    return client, client.search_runs([experiment.experiment_id], max_results=1000) if experiment else []


def mlflow_runs(store: Path) -> dict[str, Any]:
    """The runs the stages logged in the sqlite file `store` (stage -> statuses) and the registered model versions
    (section dag reads its checkout's store so too)."""
    return runs_by_stage(*logged_runs(store))


def runs_by_stage(client: Any, runs: list[Any]) -> dict[str, Any]:
    """`mlflow_runs` of runs already read."""
    stages: dict[str, list[str]] = {}
    for run in runs:
        stages.setdefault(run.data.tags.get("gpt1.stage", "?"), []).append(run.info.status)
    pretrain = next((r for r in runs if r.data.tags.get("gpt1.stage") == "pretrain-gpt"
                     and r.info.status == "FINISHED"), None)
    params = {k: pretrain.data.params.get(k) for k in ("device", "autocast", "compiled")} if pretrain else {}
    versions = len(client.search_model_versions())
    return {"runs": {k: sorted(v) for k, v in sorted(stages.items())}, "pretrain_params": params,
            "registered_versions": versions}


def archive(ctx: Context, folder: Path) -> int:
    """The stages' small outputs and the MLflow store into OUT/stages.tar.gz (no weights: they stay there)."""
    path = ctx.out / STAGES_TAR
    with tarfile.open(path, "w:gz") as tar:
        for file in sorted(folder.rglob("*")):
            if file.is_file() and file.suffix in (".json", ".jsonl", ".csv", ".log"):
                tar.add(file, arcname=str(file.relative_to(ctx.work)))
        for name in ("mlflow.db", "logs"):
            if (ctx.work / name).exists():
                tar.add(ctx.work / name, arcname=name)
    if path.stat().st_size > TAR_LIMIT:
        path.unlink()
        return 0
    return path.stat().st_size


# ----------------------------------------------------------------------------------------------------------------
# The section


def later_jobs(ctx: Context, folder: Path, pretrained: Path) -> dict[str, list[str]]:
    tokenizer = str(ctx.data("tokenizer"))
    jobs = {f"finetune-{task}": gpt1_args("finetune", "--task", task, "--variant", "pretrained", "--seed", "0",
                                          "--pretrained", str(pretrained), "--tokenizer", tokenizer, "--examples",
                                          str(ctx.data("tasks", task)), "--out", str(folder / "finetune" / task))
            for task in TASKS.values()}
    jobs["zeroshot"] = gpt1_args("zeroshot", "--model-dir", str(pretrained), "--tokenizer", tokenizer, "--out",
                                 str(folder / "zeroshot"))
    jobs["export"] = gpt1_args("export", "--model-dir", str(pretrained), "--out", str(folder / "hf"))
    for name, out in twins(ctx).items():  # section d's two identical runs, here to share the wait
        jobs[name] = pretrain_args(ctx, out)
    return jobs


def twins(ctx: Context) -> dict[str, Path]:
    """Two uninterrupted runs of the same pre-training (section d compares them)."""
    return {f"pretrain-twin{i}": ctx.work / "precision" / f"run{i}" for i in (1, 2)}


def checks(ctx: Context, folder: Path, pretrained: Path) -> dict[str, Any]:
    """How each later job's outputs are verified."""
    found: dict[str, Any] = {f"finetune-{t}": (lambda t=t: verify_finetune(folder / "finetune" / t, t))
                             for t in TASKS.values()}
    found["zeroshot"] = lambda: verify_zeroshot(folder / "zeroshot")
    found["export"] = lambda: verify_export(folder / "hf", pretrained, ctx.device)
    for name, out in twins(ctx).items():
        found[name] = lambda out=out: verify_pretrain(out, ctx.data("tokenizer"), SNAPSHOTS)
    return found


def verified(finished: Finished, check: Any) -> dict[str, Any]:
    """The job's verified figures, or why not: one job's failure must not hide the others' results."""
    try:
        finished.check()
        return {"seconds": round(finished.seconds, 1), "status": "verified", **check()}
    except Exception as err:
        return {"seconds": round(finished.seconds, 1), "status": "FAILED", "error": str(err)[-1500:]}


def short(found: dict[str, Any]) -> str:
    if "error" in found:
        return found["error"].splitlines()[0][:120]
    if "scores" in found:
        scores = ", ".join(f"{k} {v:.3f}" for k, v in found["scores"].items())
        return f"{scores}; {found['predictions']} predictions; {found['updates']} updates on {found['device']}"
    if "val_loss" in found:
        return f"{found['steps']} updates, val loss {found['val_loss']:.4f} on {found['device']} (for section d)"
    if "last" in found:
        return f"{found['points']} points, last: " + ", ".join(f"{k} {v:.3f}" for k, v in found["last"].items()) + \
            f"; on {found['device']}"
    shown = {k: v for k, v in found.items() if k not in ("seconds", "status")}
    return ", ".join(f"{k} {v:.2g}" if isinstance(v, float) else f"{k} {v}" for k, v in shown.items())


def check_bundle(ctx: Context) -> None:
    """The bundle's data was made with this script's settings (encode-task recorded them; finetune would refuse)."""
    manifest = ctx.bundle / "manifest.json"
    if not manifest.is_file():
        raise RuntimeError(f"{ctx.bundle}: no bundle; run bash bench/gpu_check.sh --prepare first")
    made = json.loads(manifest.read_text())
    if made.get("small") != list(SMALL) or made.get("tasks") != TASKS:
        raise RuntimeError(f"{manifest}: made with other settings than gpu/env.py's SMALL and TASKS; run bash "
                           f"bench/gpu_check.sh --prepare again")


def run(ctx: Context) -> None:
    check_bundle(ctx)
    record = Record(ctx, "stages")
    folder, pretrained = ctx.work / "stages", ctx.work / "stages" / "pretrain"
    record.update(killed=kill_after_first_checkpoint(ctx, pretrained))
    resumed = run_one(ctx, "pretrain-resumed", pretrain_args(ctx, pretrained), max(60.0, ctx.remaining())).check()
    record.update(resumed={"from_step": resumed_from(resumed), "seconds": round(resumed.seconds, 1),
                           **verify_pretrain(pretrained, ctx.data("tokenizer"), SNAPSHOTS)})
    done = run_all(ctx, later_jobs(ctx, folder, pretrained), max(60.0, ctx.remaining() - 20))
    how = checks(ctx, folder, pretrained)
    record.update(jobs={name: verified(finished, how[name]) for name, finished in done.items()})
    record.update(mlflow=mlflow_runs(ctx.work / "mlflow.db"), archive_bytes=archive(ctx, folder))
    kinds = {f"finetune-{t}": k for k, t in TASKS.items()} | {n: "uninterrupted" for n in twins(ctx)}
    rows = [[name, kinds.get(name, ""), f"{job['seconds']:.0f}", job["status"], short(job)]
            for name, job in record.data["jobs"].items()]
    failed = [r[0] for r in rows if r[3] != "verified"]
    res = record.data["resumed"]
    status = "failed" if failed or res["from_step"] is None else "ok"
    summary = (f"pretrain killed at step >= {record.data['killed']['checkpoint_step']} and resumed from "
               f"{res['from_step']}; {len(rows) - len(failed)}/{len(rows)} later jobs verified on {res['device']}"
               + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    record.save(status, summary=summary, markdown=markdown(record.data, rows))


def markdown(data: dict[str, Any], rows: list[list[str]]) -> str:
    killed, res, ml = data["killed"], data["resumed"], data["mlflow"]
    pretrain = [["pretrain (killed)", "", f"{killed['killed_after_s']:.0f}", "SIGKILL",
                 f"checkpoint at step {killed['checkpoint_step']}, CUDA RNG states in it: {killed['cuda_rng_states']}"],
                ["pretrain (resumed)", "", f"{res['seconds']:.0f}", "verified",
                 f"resumed from step {res['from_step']}; {res['steps']} updates, val loss {res['val_loss']:.3f} on "
                 f"{res['device']}"]]
    notes = [f"MLflow runs by stage: {ml['runs']}; registered model versions: {ml['registered_versions']}",
             f"pre-training's MLflow params: {ml['pretrain_params']} (fused AdamW follows the device: "
             f"gpt1.stages.pretrain.prepare; attention: SDPA under gpt1.training.runtime.attention_kernels, "
             f"cuDNN first; "
             f"section b's profile names the kernel)"]
    head = ["stage", "transformation", "seconds", "status", "outputs"]
    return md_table(head, [*pretrain, *rows]) + "\n\n" + "\n".join(f"- {n}" for n in notes)
