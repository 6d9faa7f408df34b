"""Two runs' Tables 2-5 cell by cell, in units of their bootstrap standard errors, and which of Table 5's paired
tests keep their verdict.

    .venv/bin/python -m experiments.run_to_run 46e30b8:docs/results/tables 5316568:docs/results/tables \
        --names "9c99bff (OpenBLAS)" "f2e432c (fused AdamW)"          # two committed runs' tables
    .venv/bin/python -m experiments.run_to_run docs/results/tables RUN/results/default/tables   # a run's folder
    .venv/bin/python -m experiments.run_to_run b3e08eb~1:docs/results/tables/table5.csv docs/results/tables/table5.csv

Why: with one seed a cell's ± is a bootstrap over the evaluation examples; it leaves out the noise of training
(initialisation, dropout, batch order) and of the machine (kernels that sum in another order). Two runs that differ
only in something that should not matter (how batches are formed, the host, the device) show how large that noise
is. Each argument is a table CSV the report wrote, or a folder of them (table2-5.csv), as a path or as
`<git revision>:<path>`. Prints (Markdown) every cell of our rows found in both, averages left out: the difference,
the difference in units of run A's own SE, and z = difference / sqrt(se_a² + se_b²) (unpaired, so conservative where
both runs scored the same examples), with how many |z| pass 1.96 and their root mean square (about 1 if the cells
move by their bootstrap noise alone). Then Table 5's paired tests in both runs: each verdict (p < 0.05, and the
sign), the ones that agree, and each comparison's count of significant gains. For runs whose predictions are both at
hand, `gpt1 compare A B` tests each cell paired instead.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import subprocess
from pathlib import Path

TABLES = ("table2.csv", "table3.csv", "table4.csv", "table5.csv")
ALPHA = 0.05
BEYOND = 1.96  # |z| past this: a difference beyond the two cells' noise at the 5% level

Cell = tuple[float, float | None]  # value, standard error
Cells = dict[tuple[str, str, str], Cell]  # (table, method, column label) -> cell
Tests = dict[tuple[str, str], tuple[float, float]]  # (comparison, column label) -> (difference, p)


def _text(source: str) -> str:
    """A file's text; `rev:path` is read from git (a path that exists wins, so a folder named `a:b` still works)."""
    if ":" in source and not Path(source).exists():
        done = subprocess.run(["git", "show", source], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"run_to_run: git show {source}: {done.stderr.strip()}; give <revision>:<path> of a "
                             "table CSV or of a tables/ folder")
        return done.stdout
    if not Path(source).is_file():
        raise SystemExit(f"run_to_run: no {source}; give a table CSV or the tables/ folder of a finished report")
    return Path(source).read_text()


def read_rows(source: str) -> list[dict[str, str]]:
    """The rows of one table CSV, or of every table CSV in a folder (`rev:folder` too)."""
    if source.endswith(".csv"):
        return list(csv.DictReader(io.StringIO(_text(source))))
    return [row for name in TABLES for row in csv.DictReader(io.StringIO(_text(f"{source.rstrip('/')}/{name}")))]


def _value(row: dict[str, str]) -> float:
    return float(row.get("value_exact") or row["value"])


def _label(row: dict[str, str]) -> str:
    return row.get("label") or row["column"]


def cells(rows: list[dict[str, str]]) -> Cells:
    """Our cells (not the paper's, not the averages) that hold a number."""
    return {(row["table"], row["method"], _label(row)): (_value(row), float(row["se"]) if row.get("se") else None)
            for row in rows if row["source"] == "ours" and (row.get("value_exact") or row.get("value"))
            and row["column"] != "avg"}


def tests(rows: list[dict[str, str]]) -> Tests:
    """Table 5's paired tests: the difference and its p."""
    return {(row["method"], _label(row)): (_value(row), float(row["p_value"]))
            for row in rows if row["source"] == "paired_test" and row.get("p_value")}


def z_score(a: Cell, b: Cell) -> float | None:
    spread = math.hypot(a[1], b[1]) if a[1] and b[1] else 0.0
    return (b[0] - a[0]) / spread if spread > 0 else None


def verdict(difference: float, p: float) -> str:
    return ("+" if difference > 0 else "-") if p < ALPHA else "n.s."


def _cell_text(cell: Cell) -> str:
    return f"{cell[0]:.1f}" + (f" ± {cell[1]:.1f}" if cell[1] is not None else "")


def cell_lines(a: Cells, b: Cells, names: tuple[str, str]) -> tuple[str, list[str]]:
    """The summary sentence and the table of every cell in both runs."""
    shared = [key for key in a if key in b]
    lines = [f"| table | row | column | {names[0]} | {names[1]} | difference | in {names[0]}'s SE | z |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    zs = []
    for key in shared:
        z = z_score(a[key], b[key])
        zs += [] if z is None else [z]
        difference = b[key][0] - a[key][0]
        own = f"{difference / a[key][1]:+.2f}" if a[key][1] else ""
        lines.append(f"| {' | '.join(key)} | {_cell_text(a[key])} | {_cell_text(b[key])} | {difference:+.1f} | "
                     f"{own} | {'' if z is None else f'{z:+.2f}'} |")
    beyond = sum(abs(z) > BEYOND for z in zs)
    rms = math.sqrt(sum(z * z for z in zs) / len(zs)) if zs else float("nan")
    head = (f"{len(shared)} cells in both; {len(zs)} with a standard error: **{beyond} beyond {BEYOND} of them**, "
            f"root mean square of z {rms:.2f}, the largest |z| {max(map(abs, zs), default=0.0):.2f}.")
    return head, lines


def test_lines(a: Tests, b: Tests, names: tuple[str, str]) -> tuple[str, list[str]]:
    """The verdicts' agreement, each paired test in both runs, and each comparison's count of significant gains."""
    pairs = [(key, a[key], b[key]) for key in a if key in b]
    differ = [f"{c} {column} ({verdict(*ta)}, p {ta[1]:.3f} → {verdict(*tb)}, p {tb[1]:.3f})"
              for (c, column), ta, tb in pairs if verdict(*ta) != verdict(*tb)]
    head = (f"Table 5's paired tests (p < {ALPHA}, and the sign): **{len(pairs) - len(differ)} of {len(pairs)} "
            "verdicts agree**" + ("; those that do not: " + "; ".join(differ) if differ else "") + ".")
    lines = [f"| paired test | column | {names[0]}: Δ (p) | {names[1]}: Δ (p) | verdict |",
             "| --- | --- | ---: | ---: | --- |"]
    lines += [f"| {c} | {column} | {ta[0]:+.1f} ({ta[1]:.3f}) | {tb[0]:+.1f} ({tb[1]:.3f}) | "
              f"{verdict(*ta)} → {verdict(*tb)} |" for (c, column), ta, tb in pairs]
    for comparison in dict.fromkeys(c for (c, _), _, _ in pairs):
        gains = [sum(1 for (c, _), (d, p) in side.items() if c == comparison and p < ALPHA and d > 0)
                 for side in (a, b)]
        lines.append(f"\n{comparison}: significant gains (p < {ALPHA}) on {gains[0]} columns in {names[0]}, "
                     f"{gains[1]} in {names[1]}")
    return head, lines


def render(a_rows: list[dict[str, str]], b_rows: list[dict[str, str]], names: tuple[str, str] = ("A", "B")) -> str:
    cell_head, cell_table = cell_lines(cells(a_rows), cells(b_rows), names)
    a_tests, b_tests = tests(a_rows), tests(b_rows)
    if not (a_tests.keys() & b_tests.keys()):
        return "\n\n".join([cell_head, "\n".join(cell_table)]) + "\n"
    test_head, test_table = test_lines(a_tests, b_tests, names)
    return "\n\n".join([cell_head, test_head, "\n".join(cell_table), "\n".join(test_table)]) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", help="run A's tables (the reference): a folder, a CSV, or <revision>:<path>")
    parser.add_argument("b", help="run B's tables, as A's")
    parser.add_argument("--names", nargs=2, default=("A", "B"), metavar=("A", "B"), help="the runs' column names")
    args = parser.parse_args(argv)
    print(render(read_rows(args.a), read_rows(args.b), tuple(args.names)), end="")


if __name__ == "__main__":
    main()
