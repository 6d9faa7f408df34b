"""Two values of one fine-tuning setting, A against B: held-out score (paired) and training time, interleaved.

    GPT1_DATA_MIRROR=../shared/data OMP_NUM_THREADS=1 .venv/bin/python -m experiments.finetune_ab \\
        --key finetune.dropout --arms 0.1,0.0 --tasks sst2:3200,stsb:400,rte:400 --rounds 1

Each point is a fine-tuning job of the default profile's pre-trained GPT through learning_curves.py's held-out design:
it trains on a seeded subset of the first 80% of the task's training data and is scored on the held-out
rest, never on a split the tables report. `--key transfer_layers` compares two values of the layers stage's k
(the embeddings and the first k blocks transferred, Figure 2 left) instead of a params key; `--key train_examples`
two training sizes (seeded subsets of the same training part; the size in --tasks is then ignored). Otherwise both
arms train on the same examples from the same seed. They run interleaved (A B, B A, ...) so that the machine's
drift hits them alike. Printed per task: the median training seconds of each arm, their ratio, each arm's
held-out score ± bootstrap SE (first round), and their difference with the p of a paired bootstrap over the
held-out examples. Raw points are appended to experiments/results/finetune_ab.jsonl.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import machine
from experiments.learning_curves import RESULTS, holdout_job

TRANSFER_LAYERS = "transfer_layers"  # not a params key: the layers stage's k
TRAIN_EXAMPLES = "train_examples"  # not a params key either: the training subset's size


def holdout_point(task: str, size: int, seed: int, variant: str = "pretrained", extra: Sequence[str] = (),
                  pretrained: Path | None = None, transfer_layers: int | None = None) -> dict[str, Any]:
    """One held-out fine-tuning job (3 epochs, at most 1,000 held-out examples): its time, and its held-out labels
    and predictions."""
    from gpt1.data.tasks import get_task
    from gpt1.training.finetuning import finetune_job

    job, report = holdout_job(task, variant, size, 3, 1000, seed, list(extra), pretrained, transfer_layers)
    started = time.perf_counter()
    result = finetune_job(job)
    lines = [p for p in result.predictions if p["report"] == report]
    return {"task": task, "train_examples": size, "seed": seed, "metric": get_task(task).paper_metric,
            "train_seconds": result.metrics["train_seconds"], "job_seconds": time.perf_counter() - started,
            "labels": [p["label"] for p in lines], "predictions": [p["prediction"] for p in lines]}


def run(task: str, size: int, key: str, value: str, seed: int = 0) -> dict[str, Any]:
    """One held-out fine-tuning job of the pre-trained GPT with `key=value` (or k = value layers transferred)."""
    if key == TRANSFER_LAYERS:
        return {"key": key, "value": value} | holdout_point(task, size, seed, transfer_layers=int(value))
    if key == TRAIN_EXAMPLES:
        return {"key": key, "value": value} | holdout_point(task, int(value), seed)
    return {"key": key, "value": value} | holdout_point(task, size, seed, extra=[f"{key}={value}"])


def compare(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, float, float, float, float, float]:
    """(score a, se a, score b, se b, b - a, p of b - a by a paired bootstrap over the held-out examples)."""
    from gpt1.evaluation.metrics import bootstrap_se, metric_function, paired_bootstrap

    metric, labels = a["metric"], a["labels"]
    score = metric_function(metric)
    test = paired_bootstrap(metric, labels, b["predictions"], a["predictions"])
    return (score(labels, a["predictions"]), bootstrap_se(metric, labels, a["predictions"]),
            score(labels, b["predictions"]), bootstrap_se(metric, labels, b["predictions"]), test.difference,
            test.p_value)


LOG = RESULTS.with_name("finetune_ab.jsonl")


def ab(key: str, arms: tuple[str, str], tasks: str, rounds: int, log: Path = LOG, seed: int = 0) -> None:
    """Run both arms on every task:size of `tasks`, interleaved, and print one Markdown row per task."""
    a, b = arms
    print(f"{machine()}; arms: {key}={a} (A) and {key}={b} (B), {rounds} round(s) each, seed {seed}")
    print("| task | train examples | A train s (median) | B train s (median) | B / A | A score ± SE | B score ± SE "
          "| B - A (paired p) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for item in tasks.split(","):
        task, size = item.split(":")
        points: dict[str, list[dict[str, Any]]] = {a: [], b: []}
        for r in range(rounds):
            for value in (a, b) if r % 2 == 0 else (b, a):
                points[value].append(run(task, int(size), key, value, seed))
        with open(log, "a") as handle:
            for runs in points.values():
                for p in runs:
                    handle.write(json.dumps({k: v for k, v in p.items() if k not in ("labels", "predictions")}
                                            | {"machine": machine()}) + "\n")
        ta, tb = (statistics.median(p["train_seconds"] for p in points[v]) for v in (a, b))
        sa, ea, sb, eb, diff, p = compare(points[a][0], points[b][0])
        print(f"| {task} | {size} | {ta:.1f} | {tb:.1f} | {tb / ta:.2f} | {100 * sa:.1f} ± {100 * ea:.1f} | "
              f"{100 * sb:.1f} ± {100 * eb:.1f} | {100 * diff:+.1f} (p {p:.2f}) |", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--key", required=True,
                        help=f"a params key of the profile, e.g. finetune.dropout, or {TRANSFER_LAYERS} (the layers "
                             f"stage's k), or {TRAIN_EXAMPLES} (two training sizes)")
    parser.add_argument("--arms", required=True,
                        help=f"its two values, A,B (as --set would take them; for {TRANSFER_LAYERS}, two k; for "
                             f"{TRAIN_EXAMPLES}, two sizes)")
    parser.add_argument("--tasks", default="sst2:3200,qnli:400,stsb:400", help="task:training examples, ...")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="the fine-tuning seed of both arms (subset, order, init)")
    args = parser.parse_args(argv)
    arms = args.arms.split(",")
    if len(arms) != 2:
        parser.error(f"--arms {args.arms!r}: give exactly two values, A,B")
    ab(args.key, (arms[0], arms[1]), args.tasks, args.rounds, seed=args.seed)


if __name__ == "__main__":
    main()
