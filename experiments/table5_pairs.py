"""Table 5's Avg between every two of its rows, by the report's own paired test (the report tests the full model
against each ablation; the README also compares two ablations, e.g. the LSTM against no pre-training).

    .venv/bin/python -m experiments.table5_pairs results/default [--profile default]

For each pair of rows (variants), A - B in percent points on the Avg and the paired bootstrap's p
(`gpt1.evaluation.significance.average_test`: the mean of the 8 columns' differences, each report's examples drawn on
its own), over the seeds both rows have in every column. A pair with nothing to pair says so.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

from bench.common import REPO
from gpt1.evaluation.significance import PairedTest, average_test
from gpt1.pipeline.config import load_config
from gpt1.pipeline.plan import Plan
from gpt1.report.inputs import collect_finetune
from gpt1.report.tables import (
    AVERAGE_COLUMN,
    finetune_pairs,
    load_paper,
    make_columns,
    paired_runs,
    task_columns,
    variant_runs,
)


def pair_tests(results: Path, plan: Plan) -> list[tuple[str, str, PairedTest | None]]:
    """(row A, row B, the Avg test of A - B) for every two rows of Table 5, in the paper's row order."""
    paper = load_paper()
    spec = paper["tables"]["table5"]
    finetuned = collect_finetune(results, plan, finetune_pairs(paper))
    columns = task_columns(make_columns("table5", spec))
    runs = {row["variant"]: variant_runs(results, finetuned, columns, row["variant"]) for row in spec["rows"]}
    methods = {row["variant"]: row["method"] for row in spec["rows"]}
    out = []
    for a, b in itertools.combinations(runs, 2):
        out.append((methods[a], methods[b], average_test(b, AVERAGE_COLUMN, paired_runs(columns, runs[a], runs[b]))))
    return out


def table(tests: list[tuple[str, str, PairedTest | None]]) -> str:
    lines = ["| A | B | Avg A − B (points) | p | examples | seeds |", "| --- | --- | ---: | ---: | ---: | --- |"]
    for a, b, test in tests:
        if test is None:
            lines.append(f"| {a} | {b} | not tested: a column has nothing to pair | | | |")
        else:
            seeds = " ".join(map(str, test.seeds))
            lines.append(f"| {a} | {b} | {test.difference:+.2f} | {test.p_value:.3f} | {test.examples} | {seeds} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="a profile's results tree, e.g. results/default")
    parser.add_argument("--profile", default="default", help="the params.yaml profile that made it (its seeds)")
    args = parser.parse_args(argv)
    plan = Plan.from_params(load_config(REPO / "params.yaml", args.profile).root)
    print(table(pair_tests(args.results, plan)))


if __name__ == "__main__":
    main()
