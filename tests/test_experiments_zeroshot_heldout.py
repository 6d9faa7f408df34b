"""experiments/zeroshot_heldout.py's table and its --from-log reading: what docs/experiments_archive.md quotes is
what they print."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments import zeroshot_heldout


def point(raw: float, se: float = 0.01, p: float | None = None) -> dict:
    return {"cola": {"metric": "mcc", "raw": raw, "se": se, "p_vs_first": p, "examples": 30}}


def rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| cola")]


def test_runs_sharing_weights_show_one_starting_column() -> None:
    results = {"first": point(0.0), "a:final": point(0.05, p=0.01), "b:final": point(0.005, p=0.6)}
    text = zeroshot_heldout.table(["a", "b"], results)
    assert text.splitlines()[0] == "| task (examples) | first | a final | b final | a − first (p) | b − first (p) |"
    assert rows(text) == [["cola mcc (30)", "0 ± 0.01", "0.05 ± 0.01", "0.005 ± 0.01", "+0.05 (0.01)",
                           "+0.005 (0.60)"]]
    assert text.endswith("a 1 of 1, b 0 of 1")


def test_runs_from_different_weights_each_show_their_own_start() -> None:
    results = {"a:first": point(0.0), "b:first": point(-0.04), "a:final": point(0.02, p=0.2),
               "b:final": point(0.02, p=0.01)}
    text = zeroshot_heldout.table(["a", "b"], results)
    assert text.splitlines()[0].startswith("| task (examples) | a first | b first | a final | b final |")
    assert rows(text)[0][1:3] == ["0 ± 0.01", "-0.04 ± 0.01"]
    assert rows(text)[0][5:] == ["+0.02 (0.20)", "+0.06 (0.01)"]
    assert text.endswith("a 1 of 1, b 1 of 1")


def test_from_log_reads_the_latest_points_of_those_arguments(tmp_path: Path, monkeypatch) -> None:
    log = tmp_path / "log.jsonl"
    args = {"run": ["a=x"], "examples": 30, "fit": 10, "reported": 10, "seed": 0}
    lines = [{"point": "first", "args": args, "machine": "old", "tasks": point(0.1)},
             {"point": "first", "args": {**args, "examples": 99}, "machine": "other", "tasks": point(0.3)},
             {"point": "first", "args": args, "machine": "new", "tasks": point(0.2)}]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    monkeypatch.setattr(zeroshot_heldout, "LOG", log)
    assert zeroshot_heldout.logged(args) == ("new", {"first": point(0.2)})
    with pytest.raises(SystemExit, match=r"no points logged .* run without --from-log"):
        zeroshot_heldout.logged({**args, "seed": 1})
