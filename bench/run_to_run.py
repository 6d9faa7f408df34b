"""How far the cells of a results table move between two runs, in units of their bootstrap standard errors.

    .venv/bin/python bench/run_to_run.py b3e08eb~1:docs/results/tables/table5.csv docs/results/tables/table5.csv

Why: with one seed a cell's ± is a bootstrap over the evaluation examples; it leaves out the noise of training
(initialisation, dropout, batch order). Two runs that differ only in something that should not matter (how batches
are formed) show how large that noise is. Each argument is a table CSV the report wrote, as a path or as
`<git revision>:<path>`. Prints every cell of our rows found in both, the difference, z = difference / sqrt(se_a² +
se_b²) where both have an SE, and the root mean square of z (about 1 if the cells move by their bootstrap noise alone;
the two runs score the same examples, so that noise is if anything smaller and a larger z means training noise).
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import subprocess


def read_table(source: str) -> dict[tuple[str, str], tuple[float, float | None]]:
    """(method, column) -> (value, se) for the rows of our runs (not the paper's), averages left out."""
    if ":" in source:
        text = subprocess.run(["git", "show", source], capture_output=True, text=True, check=True).stdout
    else:
        with open(source) as handle:
            text = handle.read()
    return {(row["method"], row["column"]): (float(row["value_exact"]), float(row["se"]) if row["se"] else None)
            for row in csv.DictReader(io.StringIO(text))
            if row["method"].startswith("ours") and row["value_exact"] and row["column"] != "avg"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before")
    parser.add_argument("after")
    args = parser.parse_args()
    before, after = read_table(args.before), read_table(args.after)
    print("| row | column | before | after | difference | z |\n| --- | --- | ---: | ---: | ---: | ---: |")
    zs = []
    for key in sorted(before.keys() & after.keys()):
        (a, sa), (b, sb) = before[key], after[key]
        se = math.hypot(sa, sb) if sa and sb else None
        z = (b - a) / se if se else None
        if z is not None:
            zs.append(z)
        print(f"| {key[0]} | {key[1]} | {a:.1f} | {b:.1f} | {b - a:+.1f} | {'' if z is None else f'{z:+.2f}'} |")
    if zs:
        print(f"\n{len(zs)} cells with an SE in both runs: root mean square z = "
              f"{math.sqrt(sum(z * z for z in zs) / len(zs)):.2f}; largest |z| = {max(map(abs, zs)):.2f}")


if __name__ == "__main__":
    main()
