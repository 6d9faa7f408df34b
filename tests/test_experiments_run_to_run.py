"""experiments/run_to_run.py: how far two runs' table cells move in their standard errors, and which of Table 5's paired
tests keep their verdict, on hand-made table CSVs whose answer is known."""

from __future__ import annotations

import csv
import re
import subprocess
from pathlib import Path

import pytest

from experiments.run_to_run import TABLES, cells, main, read_rows

FIELDS = ["table", "method", "source", "variant", "column", "label", "value", "se", "value_exact", "p_value"]


def write_tables(folder: Path, rows: list[dict[str, str]]) -> Path:
    """table2-5.csv as the report writes them (the columns this script reads)."""
    folder.mkdir(parents=True)
    for name in TABLES:
        with (folder / name).open("w", newline="") as handle:
            writer = csv.DictWriter(handle, FIELDS)
            writer.writeheader()
            writer.writerows(row for row in rows if f"{row['table']}.csv" == name)
    return folder


def cell(table: str, label: str, value: float, se: float | None, source: str = "ours",
         method: str = "ours (pretrained)", p: float | None = None, column: str | None = None) -> dict[str, str]:
    return {"table": table, "method": method, "source": source, "variant": "pretrained",
            "column": column or label.lower(), "label": label, "value": f"{value:.1f}",
            "se": "" if se is None else str(se), "value_exact": f"{value:.4f}", "p_value": "" if p is None else str(p)}


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
    assert "| table2 | ours (pretrained) | RTE | 50.0 ± 3.0 | 54.0 ± 4.0 | +4.0 | +1.33 | +0.80 |" in out  # 4 / 3
    assert "| table4 | ours (pretrained) | CoLA | 10.0 ± 1.5 | 16.0 ± 2.0 | +6.0 | +4.00 | +2.40 |" in out
    assert "**1 of 2 verdicts agree**; those that do not: full vs scratch RTE (n.s., p 0.500 → +, p 0.010)" in out
    assert "| full vs scratch | RTE | +1.0 (0.500) | +4.0 (0.010) | n.s. → + |" in out
    assert "full vs scratch: significant gains (p < 0.05) on 1 columns in CPU, 2 in GPU" in out


def test_only_our_cells_count_not_the_papers_nor_the_averages(tmp_path: Path) -> None:
    folder = write_tables(tmp_path / "t", [cell("table5", "CoLA (mc)", 8.0, 2.0, method="ours: full", column="cola"),
                                           cell("table5", "Avg", 40.0, 1.0, method="ours: full", column="avg"),
                                           cell("table5", "CoLA (mc)", 45.4, None, "paper", "paper: full",
                                                column="cola")])
    assert cells(read_rows(str(folder))) == {("table5", "ours: full", "CoLA (mc)"): (8.0, 2.0)}


def test_tables_are_read_from_a_git_revision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], check=True)
    write_tables(tmp_path / "tables", [cell("table2", "RTE", 50.0, 3.0)])
    subprocess.run([*git, "add", "tables"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    (tmp_path / "tables" / "table2.csv").unlink()
    write_tables(tmp_path / "b", [cell("table2", "RTE", 47.0, 3.0)])
    main(["HEAD:tables", "b/table2.csv"])
    out = capsys.readouterr().out
    assert "| table2 | ours (pretrained) | RTE | 50.0 ± 3.0 | 47.0 ± 3.0 | -3.0 | -1.00 | -0.71 |" in out


def test_a_folder_without_tables_is_named(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=re.escape(f"no {tmp_path}/table2.csv; give a table CSV or the tables/")):
        main([str(tmp_path), str(tmp_path)])
    with pytest.raises(SystemExit, match=r"git show nothere:tables/table2\.csv: .*; give <revision>:<path>"):
        main(["nothere:tables", str(tmp_path)])
