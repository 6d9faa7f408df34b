"""Pre-training recipes compared on the same token ids and the same validation windows, one factor at a time.

Every arm runs the pipeline's own pre-training loop (`gpt1.training.pretraining`) on the default profile's encoded
corpus (results/default/ids, made by `snakemake results/default/ids/train.bin`), with a few `--set`-style overrides
of params.yaml. Validation windows come from pretrain.seed, so every arm is scored on the same 640 windows, and a
run's perplexity does not depend on the machine's speed: only the wall times do. Arms run as separate processes,
`--jobs` at a time with `--threads` torch threads each.

    .venv/bin/python -m experiments.lm_recipe --arms baseline,lr1e-3,lr2e-3+clip+nodrop+fp32 --jobs 2 --threads 1
    .venv/bin/python -m experiments.lm_recipe --arms plain-bf16+nodrop,plain-bf16+nodrop+b16 \\
        --set pretrain.max_steps=600 --set pretrain.warmup_steps=200     # an @steps arm needs both

Prints one Markdown row per arm: validation perplexity and loss, updates, tokens, wall time, tokens/s, and the
perplexity ratio to the first arm. Raw results go to experiments/results/lm_recipe.jsonl (one line per run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO, machine

# Each arm: overrides of the default profile (dotted keys, as `gpt1 <stage> --set`).
ARMS: dict[str, list[str]] = {
    "baseline": [],  # the default profile as committed before this benchmark: lr 6e-4, no clipping, dropout 0.1
    # One factor at a time, each arm adding one change to the one before it:
    "lr1e-3": ["pretrain.lr=1.0e-3"],
    "lr1e-3+clip": ["pretrain.lr=1.0e-3", "pretrain.grad_clip=1.0"],
    "lr2e-3+clip": ["pretrain.lr=2.0e-3", "pretrain.grad_clip=1.0"],
    "lr2e-3+clip+nodrop": ["pretrain.lr=2.0e-3", "pretrain.grad_clip=1.0", "model.dropout=0.0"],
    # ... and beside the path: half the batch for twice the updates (the same tokens), fp32 instead of bf16.
    "lr2e-3+clip+nodrop+b16": ["pretrain.lr=2.0e-3", "pretrain.grad_clip=1.0", "model.dropout=0.0",
                               "pretrain.batch_size=16", "pretrain.micro_batch_size=16", "@steps=2"],
    "lr2e-3+clip+nodrop+fp32": ["pretrain.lr=2.0e-3", "pretrain.grad_clip=1.0", "model.dropout=0.0",
                                "pretrain.precision=fp32"],
    # The plain script's recipe (lr 1e-3, 200 warm-up then cosine, clip 1.0, fp32) on our model and data, and the
    # same in bf16 autocast (1.24-1.66x the tokens per second on this CPU, see "Pre-training step" above).
    "plain": ["pretrain.lr=1.0e-3", "pretrain.warmup_steps=200", "pretrain.grad_clip=1.0", "pretrain.precision=fp32"],
    "plain-bf16": ["pretrain.lr=1.0e-3", "pretrain.warmup_steps=200", "pretrain.grad_clip=1.0"],
    # ... and from it, one factor more: no dropout (one pass over 2.5M tokens: nothing to regularise against).
    "plain-bf16+nodrop": ["pretrain.lr=1.0e-3", "pretrain.warmup_steps=200", "pretrain.grad_clip=1.0",
                          "model.dropout=0.0"],
    # ... and half the batch for twice the updates and warm-up (the same tokens; eval_batches doubled so the arm is
    # scored on the same 640 validation windows).
    # Run it with --set pretrain.max_steps=600 --set pretrain.warmup_steps=200, which @steps doubles.
    "plain-bf16+nodrop+b16": ["pretrain.lr=1.0e-3", "pretrain.grad_clip=1.0",
                              "model.dropout=0.0", "pretrain.batch_size=16", "pretrain.micro_batch_size=16",
                              "pretrain.eval_batches=40", "pretrain.eval_every=200", "@steps=2"],
    # ... the same with dropout 0.1, and a quarter of the batch for four times the updates (the same tokens).
    "plain-bf16+b16": ["pretrain.lr=1.0e-3", "pretrain.grad_clip=1.0", "pretrain.batch_size=16",
                       "pretrain.micro_batch_size=16", "pretrain.eval_batches=40", "pretrain.eval_every=200",
                       "@steps=2"],
    "plain-bf16+b8": ["pretrain.lr=1.0e-3", "pretrain.grad_clip=1.0", "pretrain.batch_size=8",
                      "pretrain.micro_batch_size=8", "pretrain.eval_batches=80", "pretrain.eval_every=400",
                      "@steps=4"],
    "plain-bf16+nodrop+b8": ["pretrain.lr=1.0e-3", "pretrain.grad_clip=1.0", "model.dropout=0.0",
                             "pretrain.batch_size=8", "pretrain.micro_batch_size=8", "pretrain.eval_batches=80",
                             "pretrain.eval_every=400", "@steps=4"],
}
RESULTS = Path(__file__).with_name("results") / "lm_recipe.jsonl"


def steps_factor(arm: list[str]) -> int:
    """K of the arm's '@steps=K' (1 without one)."""
    return next((int(o.split("=")[1]) for o in arm if o.startswith("@steps=")), 1)


def resolve(arm: list[str], extra: list[str]) -> list[str]:
    """The arm's overrides after the shared ones; '@steps=K' scales the shared max_steps and warmup_steps by K (a
    smaller batch gets more updates for the same tokens: pass both with --set)."""
    factor = steps_factor(arm)
    scaled = [f"{k}={int(v) * factor}" if k in ("pretrain.max_steps", "pretrain.warmup_steps") else f"{k}={v}"
              for k, v in (o.split("=", 1) for o in extra)]
    return scaled + [o for o in arm if not o.startswith("@")]


def steps_keys_missing(names: list[str], extra: list[str]) -> list[str]:
    """The arms with '@steps=K' that would not get the same tokens: --set lacks max_steps or warmup_steps."""
    given = {o.split("=", 1)[0] for o in extra}
    if {"pretrain.max_steps", "pretrain.warmup_steps"} <= given:
        return []
    return [name for name in names if steps_factor(ARMS[name]) != 1]


def run_arm(name: str, extra: list[str], out: Path) -> dict:
    """One arm in this process: the pipeline's pre-training (plan, schedule, loop, validation) with the arm's
    overrides; its last validation is the arm's result."""
    from gpt1.pipeline.config import load_config, pretrain_settings
    from gpt1.training.pretraining import build_job, train
    from gpt1.training.runtime import init_runtime

    cfg = load_config(REPO / "params.yaml", "default", resolve(ARMS[name], extra))
    ids, tokenizer = REPO / "results/default/ids", REPO / "results/default/tokenizer"
    start = time.perf_counter()
    job = build_job("gpt", cfg.section("model"), pretrain_settings(cfg, "gpt"), ids, tokenizer, out, init_runtime())
    progress = train(job)
    last, tokens = progress.curves[-1], job.plan.total_steps * job.plan.tokens_per_step
    return {"arm": name, "overrides": resolve(ARMS[name], extra), "val_perplexity": last["val_perplexity"],
            "val_loss": last["val_loss"], "steps": job.plan.total_steps, "tokens": tokens,
            "wall_seconds": time.perf_counter() - start, "tokens_per_second": tokens / max(progress.wall_seconds, 1e-9),
            "threads": int(os.environ.get("OMP_NUM_THREADS", "0")), "machine": machine()}


def launch(name: str, extra: list[str], threads: int, scratch: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads),
           "MLFLOW_TRACKING_URI": f"sqlite:///{scratch / 'mlflow.db'}"}
    command = [sys.executable, "-m", "experiments.lm_recipe", "--one", name, "--scratch", str(scratch)]
    command += [x for o in extra for x in ("--set", o)]
    return subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def run_all(names: list[str], extra: list[str], jobs: int, threads: int) -> list[dict]:
    results, running, queue = [], [], list(names)
    with tempfile.TemporaryDirectory() as scratch:
        while queue or running:
            while queue and len(running) < jobs:
                name = queue.pop(0)
                running.append((name, launch(name, extra, threads, Path(scratch))))
            time.sleep(2)
            for name, proc in list(running):
                if proc.poll() is None:
                    continue
                running.remove((name, proc))
                out = proc.stdout.read() if proc.stdout else ""
                if proc.returncode:
                    print(f"| {name} | failed (exit {proc.returncode}) |", flush=True)
                    continue
                result = json.loads(out.strip().splitlines()[-1])
                results.append(result)
                RESULTS.parent.mkdir(exist_ok=True)
                with open(RESULTS, "a") as handle:
                    handle.write(json.dumps(result) + "\n")
                print(row(result, results[0]), flush=True)
    return results


def row(result: dict, first: dict) -> str:
    return (f"| {result['arm']} | {result['val_perplexity']:.1f} | {result['val_loss']:.4f} | {result['steps']} | "
            f"{result['tokens']:,} | {result['wall_seconds'] / 60:.1f} min | {result['tokens_per_second']:,.0f} | "
            f"{result['val_perplexity'] / first['val_perplexity']:.3f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", default=",".join(ARMS),
                        help=f"comma list of: {', '.join(ARMS)}")
    parser.add_argument("--set", action="append", default=[], dest="extra",
                        help="an override applied to every arm, e.g. --set pretrain.max_steps=300")
    parser.add_argument("--jobs", type=int, default=1, help="arms run side by side")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per arm")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        with tempfile.TemporaryDirectory(dir=args.scratch) as out:
            print(json.dumps(run_arm(args.one, args.extra, Path(out) / "pretrain")))
        return
    names = args.arms.split(",")
    unknown = [n for n in names if n not in ARMS]
    if unknown:
        parser.error(f"unknown arm {unknown[0]!r}; valid: {', '.join(ARMS)}")
    missing = steps_keys_missing(names, args.extra)
    if missing:
        parser.error(f"arm {missing[0]!r} scales pretrain.max_steps and pretrain.warmup_steps (@steps): pass both "
                     f"with --set, or it trains on fewer tokens than the others")
    print(f"{machine()}; {args.jobs} arm(s) at a time, {args.threads} thread(s) each; extra: {args.extra or 'none'}")
    print("| arm | val ppl | val loss | updates | tokens | wall | tokens/s | ppl vs first |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    run_all(names, args.extra, args.jobs, args.threads)


if __name__ == "__main__":
    main()
