"""How far the cells of the results tables move between two runs, in units of their bootstrap standard errors.

    .venv/bin/python -m experiments.run_to_run b3e08eb~1:docs/results/tables/table5.csv docs/results/tables/table5.csv
    .venv/bin/python -m experiments.run_to_run f200b40:docs/results/tables docs/results/tables     # every table

Why: with one seed a cell's ± is a bootstrap over the evaluation examples; it leaves out the noise of training
(initialisation, dropout, batch order) and of the machine (kernels that sum in another order). Two runs that differ
only in something that should not matter (how batches are formed, the host's instruction set) show how large that
noise is. Each argument is a table CSV the report wrote, or a folder of them (table2-5.csv), as a path or as
`<git revision>:<path>`. Prints every cell of our rows found in both: the difference, the difference in units of the
first run's own SE, and z = difference / sqrt(se_a² + se_b²) where both have an SE, with the root mean square of z
(about 1 if the cells move by their bootstrap noise alone; the two runs score the same examples, so that noise is if
anything smaller and a larger z means training noise). Then Table 5's paired tests in both runs: which of its
"significant" verdicts (p < 0.05) hold.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import subprocess

TABLES = ("table2.csv", "table3.csv", "table4.csv", "table5.csv")
ALPHA = 0.05


def _text(source: str) -> str:
    if ":" in source:
        return subprocess.run(["git", "show", source], capture_output=True, text=True, check=True).stdout
    with open(source) as handle:
        return handle.read()


def _rows(source: str) -> list[dict[str, str]]:
    """The rows of one table CSV, or of every table CSV in a folder (`rev:folder` too)."""
    if source.endswith(".csv"):
        return list(csv.DictReader(io.StringIO(_text(source))))
    return [row for name in TABLES for row in csv.DictReader(io.StringIO(_text(f"{source.rstrip('/')}/{name}")))]


def read_table(source: str) -> dict[tuple[str, str, str], tuple[float, float | None]]:
    """(table, method, column) -> (value, se) for the rows of our runs (not the paper's), averages left out."""
    return {(row["table"], row["method"], row["column"]): (float(row["value_exact"]),
                                                           float(row["se"]) if row["se"] else None)
            for row in _rows(source)
            if row["method"].startswith("ours") and row["value_exact"] and row["column"] != "avg"}


def read_tests(source: str) -> dict[tuple[str, str], tuple[float, float]]:
    """(comparison, column) -> (difference, p) of Table 5's paired tests."""
    return {(row["method"], row["column"]): (float(row["value_exact"]), float(row["p_value"]))
            for row in _rows(source) if row["source"] == "paired_test" and row["p_value"]}


def cells(before: dict, after: dict) -> list[float]:
    print("| table | row | column | before | after | difference | in its SE | z |\n"
          "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    zs = []
    for key in sorted(before.keys() & after.keys()):
        (a, sa), (b, sb) = before[key], after[key]
        se = math.hypot(sa, sb) if sa and sb else None
        z = (b - a) / se if se else None
        own = f"{(b - a) / sa:+.2f}" if sa else ""
        if z is not None:
            zs.append(z)
        print(f"| {key[0]} | {key[1]} | {key[2]} | {a:.1f} | {b:.1f} | {b - a:+.1f} | {own} | "
              f"{'' if z is None else f'{z:+.2f}'} |")
    return zs


def tests(before: dict, after: dict) -> None:
    print("\n| paired test | column | before: Δ (p) | after: Δ (p) | significant, before → after |\n"
          "| --- | --- | ---: | ---: | --- |")
    for key in sorted(before.keys() & after.keys()):
        (da, pa), (db, pb) = before[key], after[key]
        verdict = f"{'yes' if pa < ALPHA else 'no'} → {'yes' if pb < ALPHA else 'no'}"
        print(f"| {key[0]} | {key[1]} | {da:+.1f} ({pa:.3f}) | {db:+.1f} ({pb:.3f}) | {verdict} |")
    for comparison in sorted({k[0] for k in before} & {k[0] for k in after}):
        counts = [sum(1 for (c, _), (d, p) in side.items() if c == comparison and p < ALPHA and d > 0)
                  for side in (before, after)]
        print(f"\n{comparison}: significant gains (p < {ALPHA}) on {counts[0]} columns before, {counts[1]} after")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before")
    parser.add_argument("after")
    args = parser.parse_args()
    zs = cells(read_table(args.before), read_table(args.after))
    if zs:
        print(f"\n{len(zs)} cells with an SE in both runs: root mean square z = "
              f"{math.sqrt(sum(z * z for z in zs) / len(zs)):.2f}; largest |z| = {max(map(abs, zs)):.2f}")
    before_tests, after_tests = read_tests(args.before), read_tests(args.after)
    if before_tests and after_tests:
        tests(before_tests, after_tests)


if __name__ == "__main__":
    main()
