"""experiments/run_to_run.py: how far two runs' table cells move in their standard errors, and which of Table 5's paired
tests keep their verdict, on hand-made table CSVs whose answer is known."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from experiments import run_to_run

FIELDS = ["table", "method", "source", "variant", "column", "value_exact", "se", "p_value"]


def write_tables(folder: Path, cola: float, se: float, p: float) -> Path:
    """table2-5.csv as the report writes them (the columns this script reads): one cell of ours, one of the paper,
    an average, and one paired test."""
    folder.mkdir()
    rows = {name: [] for name in run_to_run.TABLES}
    rows["table5.csv"] = [
        {"table": "table5", "method": "ours: full", "source": "ours", "column": "cola", "value_exact": cola, "se": se},
        {"table": "table5", "method": "ours: full", "source": "ours", "column": "avg", "value_exact": 40, "se": 1},
        {"table": "table5", "method": "paper: full", "source": "paper", "column": "cola", "value_exact": 45.4},
        {"table": "table5", "method": "full vs scratch", "source": "paired_test", "column": "cola",
         "value_exact": cola - 1, "p_value": p},
    ]
    for name, table in rows.items():
        with open(folder / name, "w", newline="") as handle:
            writer = csv.DictWriter(handle, FIELDS)
            writer.writeheader()
            writer.writerows(table)
    return folder


def test_cells_move_in_their_own_errors_and_verdicts_are_compared(tmp_path, capsys):
    before = write_tables(tmp_path / "a", cola=8.0, se=2.0, p=0.03)
    after = write_tables(tmp_path / "b", cola=11.0, se=2.0, p=0.2)
    cells_before = run_to_run.read_table(str(before))
    assert cells_before == {("table5", "ours: full", "cola"): (8.0, 2.0)}  # not the paper's, not the average
    sys.argv = ["run_to_run.py", str(before), str(after)]
    run_to_run.main()
    out = capsys.readouterr().out
    assert "| table5 | ours: full | cola | 8.0 | 11.0 | +3.0 | +1.50 | +1.06 |" in out  # 3 / 2; 3 / sqrt(8)
    assert "| full vs scratch | cola | +7.0 (0.030) | +10.0 (0.200) | yes → no |" in out
    assert "full vs scratch: significant gains (p < 0.05) on 1 columns before, 0 after" in out
