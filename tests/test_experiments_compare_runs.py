"""experiments/compare_runs.py: per-seed cells, their mean across seeds and the paired test between two results trees,
on hand-made runs whose answer is known."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_report import record_beside, write_metrics
from test_significance import write_predictions

from experiments import compare_runs
from gpt1.pipeline import layout
from gpt1.pipeline.errors import ReportError

EXAMPLES = 40


def write_run(results: Path, seed: int, right: int) -> None:
    """RTE, pre-trained, `seed`: the first `right` of 40 examples answered right, its accuracy in metrics.json."""
    write_metrics(results, "rte", "pretrained", seed, values={"rte": {"accuracy": right / EXAMPLES}})
    folder = results / layout.finetune_dir("rte", "pretrained", seed)
    rows = [("rte", i, i % 2, i % 2 if i < right else 1 - i % 2) for i in range(EXAMPLES)]
    record_beside(write_predictions(folder / layout.PREDICTIONS, rows), layout.FINETUNE_METRICS)


def cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip("|").split("|")]


def test_per_seed_cells_their_mean_and_the_paired_test_over_seeds(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for seed, (a, b) in enumerate([(20, 30), (24, 34)]):
        write_run(first, seed, a)
        write_run(second, seed, b)
    row = cells(compare_runs.compare_task([first, second], "rte", "pretrained", [0, 1, 2]))
    assert row[0] == "rte"
    assert [c.split(" ± ")[0] for c in row[1].split("; ")] == ["0: 50.0", "1: 60.0"]  # seed 2 never ran
    assert row[2] == "55.0 ± 5.0"  # sd 7.07 over two seeds, / sqrt(2)
    assert row[4] == "80.0 ± 5.0"
    # over both seeds: the second is right on 10 more of each seed's 40 examples, and never worse; each example
    # counts once, however many seeds scored it
    assert row[5].startswith("+25.0 (p 0.001") and row[5].endswith("40 examples)")


def test_a_task_missing_from_one_tree_prints_dashes_not_a_test(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write_run(first, 0, 20)
    second.mkdir()
    row = cells(compare_runs.compare_task([first, second], "rte", "pretrained", [0]))
    assert row[1].startswith("0: 50.0 ± ") and row[2] == "50.0"  # one seed: no SE across seeds
    assert row[3:] == ["-", "-", "-"]


def test_predictions_that_do_not_match_their_record_are_refused(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write_run(first, 0, 20)
    write_run(second, 0, 30)
    (second / layout.finetune_dir("rte", "pretrained", 0) / layout.PREDICTIONS).write_text("")
    with pytest.raises(ReportError, match=r"predictions\.jsonl"):
        compare_runs.compare_task([first, second], "rte", "pretrained", [0])
