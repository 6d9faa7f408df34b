"""Fine-tuning time and held-out score with plain shuffled batches against batches formed by length.

    GPT1_DATA_MIRROR=../shared/data OMP_NUM_THREADS=1 .venv/bin/python bench/length_grouping.py \\
        --tasks sst2:3200,stsb:400,rte:400,cola:1600 --groups 1,8 --rounds 2
    .venv/bin/python bench/length_grouping.py --padding --groups 1,4,8,16,50   (no training: padded tokens only)

Why: a fine-tuning batch pads every sequence to its longest, and with shuffled batches of GLUE's short, unequal
sentences 40-60% of the padded tokens are padding (SST-2: 62%). `finetune.length_group_batches` forms batches by
length within runs of that many shuffled batches (`gpt1.finetuning.epoch_batches`). Each point is a fine-tuning job of
the default profile's pre-trained GPT through bench/learning_curves.py's held-out design: it trains on a seeded
subset of the first 80% of the task's training data and is scored on the held-out rest, never on a split the tables
report. The arms run interleaved (A B, B A, ...) so the machine's drift hits them alike; printed per task: the median
training seconds of each arm, their ratio, each arm's held-out score ± bootstrap SE (first round), and their
difference with the p of a paired bootstrap. `--padding` instead counts, for the default run's encoded training
examples of every task (results/default/tasks), the share of real tokens among the padded tokens of 3 epochs of
batches of 16 at each grouping.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from common import REPO, machine
from learning_curves import RESULTS, holdout_job


def run(task: str, size: int, group: int) -> dict:
    from gpt1.finetuning import finetune_job
    from gpt1.tasks import get_task

    job, report = holdout_job(task, "pretrained", size, 3, 1000, 0, [f"finetune.length_group_batches={group}"])
    started = time.perf_counter()
    result = finetune_job(job)
    lines = [p for p in result.predictions if p["report"] == report]
    return {"task": task, "train_examples": size, "length_group_batches": group,
            "metric": get_task(task).paper_metric, "train_seconds": result.metrics["train_seconds"],
            "job_seconds": time.perf_counter() - started, "labels": [p["label"] for p in lines],
            "predictions": [p["prediction"] for p in lines]}


def compare(a: dict, b: dict) -> tuple[float, float, float, float, float, float]:
    """(score a, se a, score b, se b, b - a, p of b - a by a paired bootstrap over the held-out examples)."""
    from gpt1.metrics import bootstrap_se, metric_function, paired_bootstrap

    metric, labels = a["metric"], a["labels"]
    score = metric_function(metric)
    test = paired_bootstrap(metric, labels, b["predictions"], a["predictions"])
    return (score(labels, a["predictions"]), bootstrap_se(metric, labels, a["predictions"]),
            score(labels, b["predictions"]), bootstrap_se(metric, labels, b["predictions"]), test.difference,
            test.p_value)


def padding(groups: list[int], batch_size: int = 16, epochs: int = 3) -> None:
    """Real tokens / padded tokens of `epochs` epochs of each task's encoded training examples, per grouping."""
    import torch

    from gpt1.finetuning import epoch_batches, longest_sequence
    from gpt1.taskdata import Part
    from gpt1.tasks import Example, LoadedSplit, Transformed

    print("| task | training examples | " + " | ".join(f"real / padded, groups of {g}" for g in groups) + " |")
    print("| --- | ---: |" + " ---: |" * len(groups))
    for folder in sorted((REPO / "results" / "default" / "tasks").iterdir()):
        lines = [json.loads(line) for line in (folder / "examples.jsonl").read_text().splitlines()]
        train = [line for line in lines if line["part"] == 0]
        part = Part(LoadedSplit([Example(("",), 0, None, i) for i in range(len(train))], len(train), 0, 0),
                    [Transformed(line["sequences"], False) for line in train], "train", None)
        shares = []
        for group in groups:
            generator, real, padded = torch.Generator().manual_seed(0), 0, 0
            for _ in range(epochs):
                for batch in epoch_batches(part, batch_size, generator, group):
                    sequences = [s for i in batch for s in part.transformed[i].sequences]
                    real += sum(map(len, sequences))
                    padded += len(sequences) * max(longest_sequence(part, i) for i in batch)
            shares.append(real / padded)
        print(f"| {folder.name} | {len(train)} | " + " | ".join(f"{x:.2f}" for x in shares) + " |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="sst2:3200,qnli:400,stsb:400", help="task:training examples, ...")
    parser.add_argument("--groups", default="1,8", help="finetune.length_group_batches of the two arms")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--padding", action="store_true", help="only count padded tokens (no training)")
    args = parser.parse_args(argv)
    if args.padding:
        padding([int(g) for g in args.groups.split(",")])
        return
    a, b = map(int, args.groups.split(","))
    print(f"{machine()}; arms: length_group_batches {a} (A) and {b} (B), {args.rounds} rounds each")
    print("| task | train examples | A train s (median) | B train s (median) | B / A | A score ± SE | B score ± SE "
          "| B - A (paired p) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for item in args.tasks.split(","):
        task, size = item.split(":")
        points: dict[int, list[dict]] = {a: [], b: []}
        for r in range(args.rounds):
            for group in (a, b) if r % 2 == 0 else (b, a):
                points[group].append(run(task, int(size), group))
        with open(RESULTS.with_name("length_grouping.jsonl"), "a") as handle:
            for runs in points.values():
                for p in runs:
                    handle.write(json.dumps({k: v for k, v in p.items() if k not in ("labels", "predictions")}
                                            | {"machine": machine()}) + "\n")
        ta, tb = (statistics.median(p["train_seconds"] for p in points[g]) for g in (a, b))
        sa, ea, sb, eb, diff, p = compare(points[a][0], points[b][0])
        print(f"| {task} | {size} | {ta:.1f} | {tb:.1f} | {tb / ta:.2f} | {100 * sa:.1f} ± {100 * ea:.1f} | "
              f"{100 * sb:.1f} ± {100 * eb:.1f} | {100 * diff:+.1f} (p {p:.2f}) |", flush=True)


if __name__ == "__main__":
    main()
