"""Two results trees, the same fine-tuning jobs: each cell per seed, its mean across seeds, and the paired test.

    .venv/bin/python -m experiments.compare_runs results/default <other>/results/default --tasks rte,cola,mrpc \\
        --variant pretrained --seeds 0,1,2

For each task, reads finetune/<task>/<variant>/<seed>/ of both trees (metrics.json and predictions.jsonl, verified
against each other as the report does). Prints per seed the task's paper metric with its bootstrap SE over the
evaluation examples; then per tree the mean ± its SE across seeds (sd / sqrt(seeds)); then the second tree minus
the first, by the report's paired bootstrap (`gpt1.evaluation.significance.column_test`): each tree the mean of
its seeds, the evaluation examples drawn once for all seeds. Use it where a setting that Table 5 does not vary
(another pre-trained model, say) was run on the same jobs: the choice is made elsewhere (held-out data); this
measures what it buys on the reported split.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from bench.common import machine
from gpt1.evaluation.significance import column_test, report_se
from gpt1.pipeline import layout
from gpt1.report.inputs import verified_predictions
from gpt1.report.numbers import mean_sd, mean_se


def job(results: Path, task: str, variant: str, seed: int) -> tuple[dict, dict] | None:
    """(reports of metrics.json, predictions) of one job; None when it has not run."""
    folder = results / layout.finetune_dir(task, variant, seed)
    if not (folder / layout.FINETUNE_METRICS).is_file():
        return None
    reports = json.loads((folder / layout.FINETUNE_METRICS).read_text())["reports"]
    return reports, verified_predictions(folder / layout.PREDICTIONS)


def cell(reports: dict, predictions: dict) -> tuple[float, float]:
    """The paper metric in percent, averaged over the task's reports (MNLI's two), and its bootstrap SE."""
    value = mean_sd([100 * r["metrics"][r["paper_metric"]] for r in reports.values()])[0]
    return value, mean_se([100 * report_se(predictions, name, r["paper_metric"]) for name, r in reports.items()])


def across(values: list[float]) -> str:
    """Mean ± its standard error across seeds (sd / sqrt(seeds))."""
    if not values:
        return "-"
    mean, sd = mean_sd(values)
    return f"{mean:.1f}" if sd is None else f"{mean:.1f} ± {sd / math.sqrt(len(values)):.1f}"


def compare_task(trees: list[Path], task: str, variant: str, seeds: list[int]) -> str:
    runs = [{s: r for s in seeds if (r := job(tree, task, variant, s))} for tree in trees]
    cells = [{s: cell(*r) for s, r in tree_runs.items()} for tree_runs in runs]
    per_seed = ["; ".join(f"{s}: {v:.1f} ± {se:.1f}" for s, (v, se) in c.items()) or "-" for c in cells]
    common = sorted(set(runs[0]) & set(runs[1]))
    test = None
    if common:
        reports = runs[0][common[0]][0]
        metric = next(iter(reports.values()))["paper_metric"]
        test = column_test(variant, task, metric, list(reports),
                           {s: runs[1][s][1] for s in common}, {s: runs[0][s][1] for s in common})
    versus = "-" if test is None else f"{test.difference:+.1f} (p {test.p_value:.3f}, {test.examples} examples)"
    return (f"| {task} | {per_seed[0]} | {across([v for v, _ in cells[0].values()])} | {per_seed[1]} | "
            f"{across([v for v, _ in cells[1].values()])} | {versus} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path, help="a results tree, e.g. results/default")
    parser.add_argument("second", type=Path, help="another results tree with some of the same jobs")
    parser.add_argument("--tasks", default="rte,cola,mrpc", help="tasks, comma-separated")
    parser.add_argument("--variant", default="pretrained")
    parser.add_argument("--seeds", default="0,1,2", help="seeds, comma-separated")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"{machine()}; first: {args.first}; second: {args.second}; variant {args.variant}")
    print("| task | first, per seed (± bootstrap SE) | first, mean ± SE across seeds | second, per seed | "
          "second, mean ± SE | second − first, seeds pooled (paired bootstrap) |")
    print("| --- | --- | ---: | --- | ---: | ---: |")
    for task in args.tasks.split(","):
        print(compare_task([args.first, args.second], task, args.variant, seeds), flush=True)


if __name__ == "__main__":
    main()
