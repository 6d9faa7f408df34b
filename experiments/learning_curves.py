"""Fine-tuning learning curves for planning the default profile: training examples x epochs -> score ± SE, and cost.

    .venv/bin/python -m experiments.learning_curves --tasks sst2,rte,cola --sizes 200,400,1600 --epochs 1,3

Each point fine-tunes the default profile's pre-trained GPT (results/default/pretrain/gpt) and, with
`--variants pretrained,scratch`, the same architecture from scratch, through the pipeline's own `prepare_job` and
`finetune_job`. Nothing is scored on a split the tables report: the training data comes from the first 80% of a
seeded shuffle of the task's training data (its training split, or the cut of another split it declares in
`finetune.train_cuts`), and every point is scored on the same held-out 20% of it (at most `--holdout` examples).
The score is the task's paper metric with a bootstrap standard error over those examples, and the wall time of the
job (loading, training, scoring) is its cost. Prints one Markdown row per point and appends raw results to
experiments/results/learning_curves.jsonl.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

from bench.common import REPO, machine

HOLDOUT_FRACTION = 0.2
RESULTS = Path(__file__).with_name("results") / "learning_curves.jsonl"


def training_data(task: str) -> tuple[str, float, int]:
    """(split, end fraction, seed) of what the default profile trains the task on: its training split whole, or
    the cut it declares (finetune.train_cuts, e.g. QNLI's validation[0%:80%]), whose complement the tables report."""
    from gpt1.pipeline.config import load_config

    declared = load_config(REPO / "params.yaml", "default").section("finetune")["train_cuts"].get(task)
    return (declared["split"], declared["fraction"], declared["seed"]) if declared else ("train", 1.0, 0)


def holdout_overrides(task: str, train_cut: tuple[str, float, int], size: int, epochs: int, holdout: int,
                      extra: list[str]) -> list[str]:
    """The default profile's settings for one held-out job: `size` training examples of `train_cut` (split, end
    fraction, seed: the first 80% of the task's training data), `epochs`, `holdout` scored; `extra` last. An lr in
    `extra` is every task's, over its own entry in finetune.lr_by_task."""
    split, held, cut_seed = train_cut
    overrides = [f"finetune.max_train_examples={size}", "finetune.train_examples_by_task={}",
                 f"finetune.epochs={epochs}", f"finetune.max_eval_examples={holdout}",
                 f"finetune.train_cuts.{task}={{split: {split}, fraction: {held}, seed: {cut_seed}}}"]
    if any(e.startswith("finetune.lr=") for e in extra):
        overrides.append("finetune.lr_by_task={}")
    return overrides + list(extra)


def holdout_job(task: str, variant: str, size: int, epochs: int, holdout: int, seed: int, extra: list[str],
                pretrained: Path | None = None, transfer_layers: int | None = None):
    """A fine-tuning job trained on `size` examples of the first 80% of the task's training data, evaluated on the
    rest of it instead of the task's reported split (train[0%:80%] and train[80%:100%]; for a declared cut such as
    validation[0%:80%], validation[0%:64%] and validation[64%:80%]); `extra`: params overrides applied last;
    `pretrained`: the pre-trained folder (default: the default profile's GPT); `transfer_layers`: the embeddings and
    this many blocks transferred, the rest re-initialised (the layers stage's k; None: everything)."""
    from gpt1.data.rows import Cut, PartPlan, data_source
    from gpt1.data.taskdata import load_part
    from gpt1.data.tasks import get_task
    from gpt1.pipeline.config import finetune_settings, load_config
    from gpt1.training.finetuning import prepare_job

    spec = get_task(task)
    split, end, cut_seed = training_data(task)
    held = end * (1 - HOLDOUT_FRACTION)
    overrides = holdout_overrides(task, (split, held, cut_seed), size, epochs, holdout, extra)
    cfg = load_config(REPO / "params.yaml", "default", overrides)
    results = REPO / "results" / "default"
    job = prepare_job(finetune_settings(cfg), task, variant, seed, pretrained or results / "pretrain" / "gpt",
                      results / "tokenizer", transfer_layers=transfer_layers)
    rest = Cut(split, held, end, cut_seed)
    reports = [spec.reports[-1]]  # one report over every configuration (RACE: both), scored on the held-out part
    part = load_part(spec, PartPlan("train", "train", rest, holdout, reports),
                     data_source(cfg.data_mirror, False, spec), job.tokenizer, job.model.lm.config.n_ctx)
    job.evals = [part]  # an EvalPart: its plan names the report
    return job, reports[0].name


def run_point(task: str, variant: str, size: int, epochs: int, holdout: int, seed: int, extra: list[str]) -> dict:
    from gpt1.data.tasks import get_task
    from gpt1.evaluation.metrics import bootstrap_se
    from gpt1.training.finetuning import finetune_job

    start = time.perf_counter()
    job, report = holdout_job(task, variant, size, epochs, holdout, seed, extra)
    result = finetune_job(job)
    seconds = time.perf_counter() - start
    spec = get_task(task)
    lines = [p for p in result.predictions if p["report"] == report]
    se = bootstrap_se(spec.paper_metric, [p["label"] for p in lines], [p["prediction"] for p in lines])
    score = result.metrics["reports"][report]["metrics"][spec.paper_metric]
    return {"task": task, "variant": variant, "train_examples": len(job.train.examples), "epochs": epochs,
            "seed": seed, "metric": spec.paper_metric, "score": score, "se": se, "holdout_examples": len(lines),
            "updates": result.metrics["updates"], "seconds": seconds,
            "threads": int(os.environ.get("OMP_NUM_THREADS", "0")), "machine": machine(),
            "recipe": dataclasses.asdict(job.recipe), "overrides": extra}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="sst2,rte,cola")
    parser.add_argument("--variants", default="pretrained,scratch")
    parser.add_argument("--sizes", default="200,400,1600", help="training examples (a seeded subset)")
    parser.add_argument("--epochs", default="3")
    parser.add_argument("--holdout", type=int, default=1000, help="held-out training examples scored, at most")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a params override for every point, e.g. finetune.lr=1e-3 (repeatable)")
    args = parser.parse_args(argv)
    print(f"{machine()}; held-out {HOLDOUT_FRACTION:.0%} of each training split (at most {args.holdout} examples); "
          f"overrides: {args.set or 'none'}")
    print("| task | variant | train examples | epochs | score ± SE | updates | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    RESULTS.parent.mkdir(exist_ok=True)
    for task in args.tasks.split(","):
        for variant in args.variants.split(","):
            for epochs in map(int, args.epochs.split(",")):
                for size in map(int, args.sizes.split(",")):
                    point = run_point(task, variant, size, epochs, args.holdout, args.seed, args.set)
                    with open(RESULTS, "a") as handle:
                        handle.write(json.dumps(point) + "\n")
                    print(f"| {task} | {variant} | {point['train_examples']} | {epochs} | "
                          f"{100 * point['score']:.1f} ± {100 * point['se']:.1f} | {point['updates']} | "
                          f"{point['seconds']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
