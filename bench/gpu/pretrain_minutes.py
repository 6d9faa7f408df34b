"""Section f: the `gpu` profile's own pre-training (the paper's 12 x 768 model, 64 x 512 tokens an update, its
learning-rate schedule) for a few minutes on the mirror's novels, and its loss curve.

The novels' ids and the profile's 40,000-merge tokenizer are made here, on the CPU, by the profile's own stages
(`bash bench/gpu_check.sh --prepare --gpu-profile`: fetch, clean, bpe, encode; ~35 min on 2 cores) and travel in
the bundle (bench/gpu_bundle/gpu_profile/, ~26 MB). The run is `python -m gpt1 pretrain --profile gpu`, unchanged
but for evaluating every EVAL_EVERY updates on fewer windows; it is stopped with SIGTERM at its time limit (the
schedule is the profile's 30,000 updates: a few minutes see its warm-up). The curve is read back from MLflow, where
the stage logs every update (train loss, learning rate, tokens/s) and every evaluation, into OUT/pretrain_curve.csv.
"""

from __future__ import annotations

import csv
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.gpu.env import PARAMS, Context, start
from bench.gpu.report import CURVE_CSV, Record, md_table

GPU_PROFILE = "gpu_profile"  # folder of the bundle: ids/ and tokenizer/ of the gpu profile
EVAL_EVERY, EVAL_BATCHES = 250, 10
TRAIN_SECONDS = {"cuda": 200.0, "cpu": 20.0}  # after the start-up (imports, data, compile)
# The CPU rehearsal shrinks the model and the batch (the data and the command stay the gpu profile's)
TINY = ("model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.n_ctx=32", "pretrain.batch_size=4",
        "pretrain.micro_batch_size=4", "pretrain.compile=false")  # fmt: skip
METRICS = ("train_loss", "lr", "tokens_per_second", "val_loss")


def command(ctx: Context, out: Path) -> list[str]:
    data = ctx.bundle / GPU_PROFILE
    sets = [f"pretrain.eval_every={EVAL_EVERY if ctx.cuda else 5}", f"pretrain.eval_batches={EVAL_BATCHES}",
            "pretrain.checkpoint_every=1000000", *(() if ctx.cuda else TINY)]
    return [sys.executable, "-m", "gpt1", "pretrain", "--params", str(PARAMS), "--profile", "gpu",
            *[f"--set={s}" for s in sets], "--model", "gpt", "--ids", str(data / "ids"), "--tokenizer",
            str(data / "tokenizer"), "--out", str(out)]


def train_for(ctx: Context, seconds: float, limit: float) -> tuple[float, Path]:
    """Start the pre-training; SIGTERM it `seconds` after its first update is logged (or at `limit`)."""
    child, log, tick = start(ctx, "pretrain-gpu-profile", command(ctx, ctx.work / "gpu_profile_pretrain"))
    first, deadline = None, time.monotonic() + limit
    try:
        while child.poll() is None and time.monotonic() < deadline:
            text = log.read_text(errors="replace") if first is None else ""
            if first is None and "pretrain gpt: " in text:  # the progress line of a rank that trains
                first = time.monotonic()
            if first is not None and time.monotonic() - first > seconds:
                break
            time.sleep(0.5)
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)  # the stage's `killable`: a clean stop, MLflow's run ended as killed
            child.wait(timeout=60)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    return time.perf_counter() - tick, log


def curve(ctx: Context) -> list[dict[str, Any]]:
    """Per update, from the pretrain run's MLflow metric history."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{ctx.work / 'mlflow.db'}")
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])
            if r.data.tags.get("gpt1.stage") == "pretrain-gpt" and r.data.tags.get("gpt1.profile") == "gpu"]
    if not runs:
        raise RuntimeError("no MLflow run of the gpu profile's pre-training")
    rows: dict[int, dict[str, Any]] = {}
    for name in METRICS:
        for m in client.get_metric_history(runs[0].info.run_id, name):
            rows.setdefault(m.step, {"step": m.step})[name] = m.value
    return [rows[s] for s in sorted(rows)]


def write_curve(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["step", *METRICS])
        writer.writeheader()
        writer.writerows(rows)


def run(ctx: Context) -> None:
    record = Record(ctx, "pretrain_minutes")
    data = ctx.bundle / GPU_PROFILE
    if not (data / "ids" / "train.bin").is_file():
        record.save("skipped", summary=f"no {data}/ids: bash bench/gpu_check.sh --prepare --gpu-profile makes it")
        return
    seconds = min(TRAIN_SECONDS[ctx.device], ctx.remaining() - 60)  # start-up and compile come first
    if seconds < TRAIN_SECONDS[ctx.device] / 4:
        record.save("skipped", summary=f"{ctx.remaining():.0f} s of the budget left; run it alone: --sections "
                                       f"pretrain_minutes --budget-s 360")
        return
    wall, log = train_for(ctx, seconds, ctx.remaining() - 20)
    rows = curve(ctx)
    write_curve(ctx.out / CURVE_CSV, rows)
    trained = [r for r in rows if "train_loss" in r]
    evals = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
    if not trained:
        raise RuntimeError(f"no update logged in {wall:.0f} s: {log.read_text(errors='replace')[-1500:]}")
    speed = statistics.median(r["tokens_per_second"] for r in trained[len(trained) // 2:])
    record.update(updates=len(trained), wall_s=round(wall, 1), tokens_per_second=speed, evaluations=evals,
                  first_loss=trained[0]["train_loss"], last_loss=trained[-1]["train_loss"])
    table = md_table(["step", "validation loss"], [[s, f"{v:.3f}"] for s, v in evals])
    record.save("ok", summary=f"{len(trained)} updates in {wall:.0f} s, {speed:,.0f} tok/s; train loss "
                              f"{trained[0]['train_loss']:.2f} -> {trained[-1]['train_loss']:.2f}"
                              + (f"; val loss {evals[-1][1]:.3f} at {evals[-1][0]}" if evals else ""),
                markdown=f"{table}\n\n- the curve, per update: {CURVE_CSV}; the run's log: its last lines below\n\n"
                         f"```\n{log.read_text(errors='replace')[-600:]}\n```")
