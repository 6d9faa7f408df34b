"""bench/table_cells.py: two runs' Tables 2-5 cell by cell (z of each difference) and Table 5's verdicts."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from bench.table_cells import TABLES, main

FIELDS = ["table", "method", "source", "variant", "column", "label", "value", "se", "value_exact", "p_value"]


def write_tables(folder: Path, rows: list[dict[str, str]]) -> Path:
    folder.mkdir(parents=True)
    for name in TABLES:
        with (folder / f"{name}.csv").open("w", newline="") as handle:
            writer = csv.DictWriter(handle, FIELDS)
            writer.writeheader()
            writer.writerows(row for row in rows if row["table"] == name)
    return folder


def cell(table: str, label: str, value: float, se: float | None, source: str = "ours",
         method: str = "ours (pretrained)", p: float | None = None) -> dict[str, str]:
    return {"table": table, "method": method, "source": source, "variant": "pretrained", "column": label.lower(),
            "label": label, "value": f"{value:.1f}", "se": "" if se is None else str(se),
            "value_exact": f"{value:.4f}", "p_value": "" if p is None else str(p)}


def test_cells_and_verdicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_tables(tmp_path / "a", [cell("table2", "RTE", 50.0, 3.0), cell("table4", "CoLA", 10.0, 1.5),
                                      cell("table5", "SST2", 2.0, None, "paired_test", "full vs scratch", 0.01),
                                      cell("table5", "RTE", 1.0, None, "paired_test", "full vs scratch", 0.5)])
    b = write_tables(tmp_path / "b", [cell("table2", "RTE", 54.0, 4.0), cell("table4", "CoLA", 16.0, 2.0),
                                      cell("table5", "SST2", 3.0, None, "paired_test", "full vs scratch", 0.02),
                                      cell("table5", "RTE", 4.0, None, "paired_test", "full vs scratch", 0.01)])
    main([str(a), str(b), "--names", "CPU", "GPU"])
    out = capsys.readouterr().out
    assert "2 cells in both; 2 with a standard error: **1 beyond 1.96 of them**" in out  # z 0.80 and 2.40
    assert "| table2 | ours (pretrained) | RTE | 50.0 ± 3.0 | 54.0 ± 4.0 | +4.0 | +0.80 |" in out
    assert "| table4 | ours (pretrained) | CoLA | 10.0 ± 1.5 | 16.0 ± 2.0 | +6.0 | +2.40 |" in out
    assert "**1 of 2 verdicts agree**; those that do not: full vs scratch RTE (n.s., p 0.500 → +, p 0.010)" in out


def test_a_folder_without_tables_is_named(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=f"no {tmp_path}/table2.csv; give the tables/ folder of a finished report"):
        main([str(tmp_path), str(tmp_path)])
