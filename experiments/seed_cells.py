"""Table 5's cells seed by seed, and Figure 2 left's all-layers-minus-none per seed, from a run with several seeds.

    .venv/bin/python -m experiments.seed_cells [RESULTS_DIR] [--seeds 0,1,2]

Reads each fine-tuning job's metrics.json (the task's paper metric, averaged over its reports as Table 5 does for
MNLI) and each layers.csv under RESULTS_DIR (default: results/default), and prints a Markdown table: one row per
task and variant, one column per seed, then the mean ± its standard error across the seeds (sd / sqrt(seeds));
then, per layer-transfer task, dev accuracy with all layers minus with none, per seed and as mean ± SE. The report
prints the means; this shows the seed-to-seed spread behind them.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
from pathlib import Path

from bench.common import REPO
from gpt1.pipeline.config import LAYER_TRANSFER_TASKS

TASKS = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]
VARIANTS = ["pretrained", "scratch", "no_aux", "lstm"]
LAYER_TASKS = list(LAYER_TRANSFER_TASKS)


def cell(results: Path, task: str, variant: str, seed: int) -> float | None:
    """The job's paper metric in percent (the mean over its reports), None when the job has not run."""
    path = results / "finetune" / task / variant / str(seed) / "metrics.json"
    if not path.is_file():
        return None
    reports = json.loads(path.read_text())["reports"].values()
    return 100 * statistics.mean(r["metrics"][r["paper_metric"]] for r in reports)


def all_minus_none(results: Path, task: str, seed: int) -> float | None:
    path = results / "analyses" / "layers" / task / str(seed) / "layers.csv"
    if not path.is_file():
        return None
    with open(path) as handle:
        dev = {int(r["layers"]): float(r["dev_accuracy"]) for r in csv.DictReader(handle)}
    return 100 * (dev[max(dev)] - dev[0])


def mean_se(values: list[float]) -> str:
    if not values:
        return "—"
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan
    return f"{statistics.mean(values):.2f} ± {se:.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", type=Path, default=REPO / "results" / "default")
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    print("| task | variant | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± SE |")
    print("| --- | --- | " + " | ".join("---:" for _ in seeds) + " | ---: |")
    for task in TASKS:
        for variant in VARIANTS:
            values = [cell(args.results, task, variant, s) for s in seeds]
            shown = " | ".join("—" if v is None else f"{v:.1f}" for v in values)
            print(f"| {task} | {variant} | {shown} | {mean_se([v for v in values if v is not None])} |")
    print()
    for task in LAYER_TASKS:
        diffs = [d for d in (all_minus_none(args.results, task, s) for s in seeds) if d is not None]
        print(f"Figure 2 left, {task}: dev accuracy, all layers minus none, per seed "
              f"{', '.join(f'{d:+.2f}' for d in diffs)}; mean ± SE {mean_se(diffs)}")


if __name__ == "__main__":
    main()
