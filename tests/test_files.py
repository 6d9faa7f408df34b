"""gpt1.pipeline.files: the one JSON and the one CSV writer of the results tree."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from gpt1.pipeline.files import write_csv, write_json


def test_write_csv_writes_a_header_then_the_rows(tmp_path: Path) -> None:
    path = tmp_path / "curve.csv"
    write_csv(path, ["step", "loss"], [{"step": 1, "loss": 2.5}, {"step": 2, "loss": 2.25}])
    assert path.read_bytes() == b"step,loss\r\n1,2.5\r\n2,2.25\r\n"  # the csv module's dialect, as before
    assert list(csv.DictReader(path.open(newline=""))) == [{"step": "1", "loss": "2.5"}, {"step": "2", "loss": "2.25"}]


def test_write_json_sorts_keys_unless_the_order_says_something(tmp_path: Path) -> None:
    write_json(tmp_path / "a.json", {"b": 1, "a": [1, 2]})
    assert (tmp_path / "a.json").read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'
    write_json(tmp_path / "b.json", {"b": 1, "a": 2}, sort_keys=False)
    assert list(json.loads((tmp_path / "b.json").read_text())) == ["b", "a"]
