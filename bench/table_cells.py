"""Two runs' Tables 2-5 cell by cell, from their report's tables/table*.csv: each of our cells with a standard error,
B minus A and z = difference / sqrt(se_a^2 + se_b^2) (unpaired, so conservative where both runs scored the same
examples); and Table 5's paired tests (the full model against no pre-training, no auxiliary LM, the LSTM): the
verdicts (p < ALPHA, and the sign) that agree and those that do not. For runs whose predictions are both at hand,
`gpt1 compare A B` tests each cell paired instead.

    .venv/bin/python -m bench.table_cells docs/results/tables RUN/results/default/tables \
        --names "CPU (pinned)" "H100" > cells.md
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

TABLES = ("table2", "table3", "table4", "table5")
ALPHA = 0.05
BEYOND = 1.96  # |z| past this: a difference beyond the two cells' noise at the 5% level

Cells = dict[tuple[str, str, str], tuple[float, float | None]]  # (table, method, column) -> (value, se)
Tests = dict[tuple[str, str], tuple[float, float]]  # (comparison, column) -> (difference, p)


def read_rows(tables: Path) -> list[dict[str, str]]:
    rows = []
    for name in TABLES:
        path = tables / f"{name}.csv"
        if not path.is_file():
            raise SystemExit(f"table_cells: no {path}; give the tables/ folder of a finished report")
        with path.open(newline="") as handle:
            rows += list(csv.DictReader(handle))
    return rows


def number(row: dict[str, str]) -> float:
    return float(row.get("value_exact") or row["value"])


def cells(rows: list[dict[str, str]]) -> Cells:
    return {(r["table"], r["method"], r["label"]): (number(r), float(r["se"]) if r["se"] else None)
            for r in rows if r["source"] == "ours" and r["value"]}


def tests(rows: list[dict[str, str]]) -> Tests:
    return {(r["method"], r["label"]): (number(r), float(r["p_value"]))
            for r in rows if r["source"] == "paired_test" and r["p_value"]}


def z_score(a: tuple[float, float | None], b: tuple[float, float | None]) -> float | None:
    spread = math.hypot(a[1] or 0.0, b[1] or 0.0)
    return (b[0] - a[0]) / spread if spread > 0 else None


def cell_text(value: float, se: float | None) -> str:
    return f"{value:.1f}" + (f" ± {se:.1f}" if se is not None else "")


def verdict(difference: float, p: float) -> str:
    return ("+" if difference > 0 else "-") if p < ALPHA else "n.s."


def render(a_rows: list[dict[str, str]], b_rows: list[dict[str, str]], names: tuple[str, str]) -> str:
    a_cells, b_cells = cells(a_rows), cells(b_rows)
    shared = [key for key in a_cells if key in b_cells]
    lines = [f"| table | row | column | {names[0]} | {names[1]} | difference | z |",
             "|---|---|---|---:|---:|---:|---:|"]
    zs = []
    for key in shared:
        (va, sa), (vb, sb) = a_cells[key], b_cells[key]
        z = z_score(a_cells[key], b_cells[key])
        zs += [z] if z is not None else []
        lines.append(f"| {' | '.join(key)} | {cell_text(va, sa)} | {cell_text(vb, sb)} | {vb - va:+.1f} | "
                     + (f"{z:+.2f}" if z is not None else "-") + " |")
    beyond = [z for z in zs if abs(z) > BEYOND]
    rms = math.sqrt(sum(z * z for z in zs) / len(zs)) if zs else float("nan")
    head = [f"{len(shared)} cells in both; {len(zs)} with a standard error: **{len(beyond)} beyond {BEYOND} of "
            f"them**, root mean square of z {rms:.2f}, the largest |z| {max(map(abs, zs), default=0):.2f}."]
    a_tests, b_tests = tests(a_rows), tests(b_rows)
    pairs = [(key, a_tests[key], b_tests[key]) for key in a_tests if key in b_tests]
    agree = [key for key, ta, tb in pairs if verdict(*ta) == verdict(*tb)]
    head.append(f"Table 5's paired tests (p < {ALPHA}, and the sign): **{len(agree)} of {len(pairs)} verdicts agree**"
                + ("; those that do not: " + "; ".join(
                    f"{c} {col} ({verdict(*ta)}, p {ta[1]:.3f} → {verdict(*tb)}, p {tb[1]:.3f})"
                    for (c, col), ta, tb in pairs if (c, col) not in agree) if len(agree) < len(pairs) else "") + ".")
    return "\n\n".join([*head, "\n".join(lines)]) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, help="run A's tables/ folder (the reference)")
    parser.add_argument("b", type=Path, help="run B's tables/ folder")
    parser.add_argument("--names", nargs=2, default=("A", "B"), metavar=("A", "B"), help="the runs' column names")
    args = parser.parse_args(argv)
    print(render(read_rows(args.a), read_rows(args.b), tuple(args.names)), end="")


if __name__ == "__main__":
    main()
