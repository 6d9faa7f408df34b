"""gpt1.evaluation.significance: Table 5's paired tests on hand-made predictions whose answer is known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpt1.evaluation.metrics import accuracy, matthews
from gpt1.evaluation.significance import ColumnRuns, average_test, column_test, read_predictions
from gpt1.pipeline.errors import PredictionsError


def write_predictions(path: Path, rows: list[tuple[str, int, int, int]], split: str = "validation") -> Path:
    """rows: (report, index, label, prediction)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"report": r, "split": split, "index": i, "label": y, "prediction": p}) + "\n"
                            for r, i, y, p in rows))
    return path


def test_identical_runs_differ_by_nothing_with_p_one(tmp_path: Path) -> None:
    rows = [("sst2", i, i % 2, (i // 3) % 2) for i in range(60)]
    a = read_predictions(write_predictions(tmp_path / "a.jsonl", rows))
    test = column_test("no_aux", "sst2", "accuracy", ["sst2"], {0: a}, {0: a})
    assert test is not None and test.difference == 0.0 and test.p_value == 1.0 and test.examples == 60


def test_always_right_against_always_wrong_is_significant(tmp_path: Path) -> None:
    right = read_predictions(write_predictions(tmp_path / "a.jsonl", [("rte", i, i % 2, i % 2) for i in range(50)]))
    wrong = read_predictions(write_predictions(tmp_path / "b.jsonl", [("rte", i, i % 2, 1 - i % 2) for i in range(50)]))
    test = column_test("scratch", "rte", "accuracy", ["rte"], {0: right}, {0: wrong})
    assert test.difference == pytest.approx(100.0)
    assert test.p_value == pytest.approx(1 / 1001)  # no resample comes near a difference of 0


def test_pairs_are_joined_by_example_never_by_position(tmp_path: Path) -> None:
    full = read_predictions(write_predictions(tmp_path / "a.jsonl", [("mrpc", i, 1, 1) for i in (3, 1, 2)]))
    # the other run lists the examples in another order and has one more (index 9) that full never scored; full has
    # one (index 7) that the other never scored
    full = {**full, **read_predictions(write_predictions(tmp_path / "a7.jsonl", [("mrpc", 7, 1, 0)]))}
    rows = [("mrpc", i, 1, int(i == 2)) for i in (9, 2, 1, 3)]
    other = read_predictions(write_predictions(tmp_path / "b.jsonl", rows))
    test = column_test("scratch", "mrpc", "accuracy", ["mrpc"], {0: full}, {0: other})
    assert test.examples == 3 and test.difference == pytest.approx(100.0 * 2 / 3)


def test_copies_of_one_seed_are_no_more_evidence_than_the_seed(tmp_path: Path) -> None:
    """Three seeds that are the same run: the same difference and the same p as that one run (pooling the seeds'
    pairs as independent examples made p shrink with every copy)."""
    a = read_predictions(write_predictions(tmp_path / "a.jsonl", [("rte", i, i % 2, (i // 2) % 2) for i in range(80)]))
    b = read_predictions(write_predictions(tmp_path / "b.jsonl", [("rte", i, i % 2, (i // 3) % 2) for i in range(80)]))
    one = column_test("scratch", "rte", "accuracy", ["rte"], {0: a}, {0: b})
    three = column_test("scratch", "rte", "accuracy", ["rte"], dict.fromkeys((0, 1, 2), a), dict.fromkeys((0, 1, 2), b))
    assert (three.difference, three.p_value, three.examples) == (one.difference, one.p_value, 80)
    assert three.seeds == (0, 1, 2)


def test_over_seeds_the_difference_is_the_mean_of_the_seeds_metrics(tmp_path: Path) -> None:
    """MCC is no mean over examples: the difference is that of the seeds' mean MCCs, as the table's cell shows."""
    labels = [i % 2 for i in range(40)]
    guesses = {name: [(i * k) % 3 % 2 for i in range(40)] for name, k in (("f0", 1), ("f1", 2), ("o0", 5), ("o1", 7))}
    runs = {name: read_predictions(write_predictions(tmp_path / f"{name}.jsonl", [("cola", i, labels[i], g[i])
                                                                                   for i in range(40)]))
            for name, g in guesses.items()}
    test = column_test("scratch", "cola", "mcc", ["cola"], {0: runs["f0"], 1: runs["f1"]},
                       {0: runs["o0"], 1: runs["o1"]})
    mean = {side: (matthews(labels, guesses[f"{side}0"]) + matthews(labels, guesses[f"{side}1"])) / 2
            for side in ("f", "o")}
    assert test.difference == pytest.approx(100.0 * (mean["f"] - mean["o"]))


def test_seeds_that_disagree_on_a_label_are_an_error(tmp_path: Path) -> None:
    a = read_predictions(write_predictions(tmp_path / "a.jsonl", [("rte", i, 0, 0) for i in range(5)]))
    b = read_predictions(write_predictions(tmp_path / "b.jsonl", [("rte", i, 1, 0) for i in range(5)]))
    with pytest.raises(PredictionsError, match="seed 1's predictions give an example another label"):
        column_test("scratch", "rte", "accuracy", ["rte"], {0: a, 1: b}, {0: a, 1: b})
    with pytest.raises(PredictionsError, match="seed 0's predictions give an example another label"):
        column_test("scratch", "rte", "accuracy", ["rte"], {0: a}, {0: b})  # the ablation's side too


def test_seeds_pool_and_a_column_pools_its_reports(tmp_path: Path) -> None:
    """Table 5's MNLI column: matched and mismatched, over the seeds both variants have (seed 1 only in full)."""
    rows = [("mnli_m", i, 0, 0) for i in range(10)] + [("mnli_mm", i, 0, 0) for i in range(10)]
    wrong = [(r, i, y, 1) for r, i, y, _ in rows]
    full = {s: read_predictions(write_predictions(tmp_path / f"f{s}.jsonl", rows)) for s in (0, 1)}
    other = {0: read_predictions(write_predictions(tmp_path / "o0.jsonl", wrong))}
    test = column_test("lstm", "mnli", "accuracy", ["mnli_m", "mnli_mm"], full, other)
    assert test.seeds == (0,) and test.examples == 20 and test.difference == pytest.approx(100.0)


def test_nothing_to_pair_is_no_test(tmp_path: Path) -> None:
    a = read_predictions(write_predictions(tmp_path / "a.jsonl", [("cola", 0, 1, 1)]))
    assert column_test("lstm", "cola", "mcc", ["cola"], {0: a}, {}) is None


def test_the_average_test_averages_the_columns_as_table5s_avg_does(tmp_path: Path) -> None:
    """Avg = the mean of the columns, MNLI the mean of its two reports (not their pooled examples: here 10 matched,
    30 mismatched): the test's difference is that of the two rows' Avg cells, on the seeds both have everywhere."""
    def runs(name: str, rows: list[tuple[str, int, int, int]], seeds=(0,)) -> dict:
        path = write_predictions(tmp_path / f"{name}.jsonl", rows)
        return {s: read_predictions(path) for s in seeds}

    rte_labels = [i % 2 for i in range(20)]
    rte_full, rte_other = [i % 2 for i in range(20)], [0] * 20  # 100% against 50%
    mnli = [("mnli_m", i, 0, 0) for i in range(10)] + [("mnli_mm", i, 0, 0) for i in range(30)]
    mnli_other = [("mnli_m", i, 0, 1) for i in range(10)] + [("mnli_mm", i, 0, int(i < 15)) for i in range(30)]
    columns = [
        ColumnRuns((("rte", "accuracy"),), runs("rf", [("rte", i, rte_labels[i], rte_full[i]) for i in range(20)]),
                     runs("ro", [("rte", i, rte_labels[i], rte_other[i]) for i in range(20)])),
        ColumnRuns((("mnli_m", "accuracy"), ("mnli_mm", "accuracy")), runs("mf", mnli, seeds=(0, 1)),
                     runs("mo", mnli_other)),
    ]
    test = average_test("lstm", "avg", columns)
    rte_diff = accuracy(rte_labels, rte_full) - accuracy(rte_labels, rte_other)
    mnli_diff = ((1.0 - 0.0) + (1.0 - 0.5)) / 2  # matched 100 vs 0, mismatched 100 vs 50; pooled would say 0.625
    assert test.difference == pytest.approx(100.0 * (rte_diff + mnli_diff) / 2)
    assert (test.column, test.metric, test.examples, test.seeds) == ("avg", "average", 60, (0,))
    assert test.p_value < 0.01
    same = average_test("lstm", "avg", [ColumnRuns(c.components, c.full_runs, c.full_runs) for c in columns])
    assert same.difference == 0.0 and same.p_value == 1.0


def test_an_average_with_a_column_that_has_nothing_to_pair_is_no_test(tmp_path: Path) -> None:
    a = read_predictions(write_predictions(tmp_path / "a.jsonl", [("rte", i, 1, 1) for i in range(5)]))
    rte = ColumnRuns((("rte", "accuracy"),), {0: a}, {0: a})
    same = average_test("lstm", "avg", [rte])
    assert same is not None and same.difference == 0.0 and same.p_value == 1.0
    assert average_test("lstm", "avg", [rte, ColumnRuns((("cola", "mcc"),), {0: a}, {0: a})]) is None  # no cola rows
    assert average_test("lstm", "avg", [rte, ColumnRuns((("rte", "accuracy"),), {0: a}, {1: a})]) is None  # seeds
    assert average_test("lstm", "avg", []) is None


@pytest.mark.parametrize(("line", "key"), [('{"report": "sst2", "split": "v", "index": 0, "label": 1}', "prediction"),
                                           ('{"report": "sst2", "split": "v", "index": "0", "label": 1, '
                                            '"prediction": 1}', "index"),
                                           ('{"split": "v", "index": 0, "label": 1, "prediction": 1}', "report")])
def test_a_malformed_line_names_file_line_and_key(tmp_path: Path, line: str, key: str) -> None:
    path = tmp_path / "predictions.jsonl"
    path.write_text('{"report": "sst2", "split": "v", "index": 1, "label": 1, "prediction": 1}\n' + line + "\n")
    with pytest.raises(PredictionsError, match=rf"predictions.jsonl:2: key '{key}'"):
        read_predictions(path)


def test_a_line_that_is_not_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "predictions.jsonl"
    path.write_text("{not json\n")
    with pytest.raises(PredictionsError, match=r"predictions.jsonl:1: not JSON"):
        read_predictions(path)
