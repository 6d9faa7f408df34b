"""Standard errors and paired tests over a fine-tuning run's evaluation examples: Table 5's tests of the full model
against each ablation, per column, on the examples both runs scored, by a paired bootstrap over those examples
(gpt1.evaluation.metrics.paired_bootstrap); the bootstrap standard error of a table cell or a curve's point; Figure 2
(left) tests each point against the curve's first.

Predictions (a fine-tuning run's predictions.jsonl) are joined by (report, split, index, config), so a test never
pairs two different examples. Over several seeds each side is the mean of its seeds' metrics (as the table's cell),
and a resample draws the examples once for all seeds: an example scored by three seeds is one unit of evidence, not
three. A column of several reports (Table 5's MNLI: matched and mismatched) and Table 5's Avg (average_test) are
means of their reports' metrics, as their cells are, each report's examples drawn on its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpt1.evaluation.metrics import PairedPart, bootstrap_se, paired_bootstrap_combined
from gpt1.pipeline.errors import PredictionsError

RESAMPLES = 1000
BOOTSTRAP_SEED = 0

Key = tuple[str, str, int, str | None]  # report, split, index, config


@dataclass(frozen=True)
class Prediction:
    label: float
    prediction: float


@dataclass(frozen=True)
class PairedTest:
    """Full minus ablation on one column (percent points), and how likely so large a difference is by chance."""

    variant: str
    column: str
    metric: str
    difference: float
    p_value: float
    examples: int  # the examples every seed of both sides scored
    seeds: tuple[int, ...]
    resamples: int = RESAMPLES


def _number(record: Mapping[str, Any], key: str, where: str) -> float:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PredictionsError(f"{where}: key {key!r} must be a number, got {value!r}")
    return float(value)


def _prediction(record: Any, where: str) -> tuple[Key, Prediction]:
    """One prediction record (a line of predictions.jsonl) by its example key; `where` names it in errors."""
    if not isinstance(record, dict):
        raise PredictionsError(f"{where}: a line must be a JSON object")
    for key in ("report", "split"):
        if not isinstance(record.get(key), str):
            raise PredictionsError(f"{where}: key {key!r} must be a string, got {record.get(key)!r}")
    index = record.get("index")
    if isinstance(index, bool) or not isinstance(index, int):
        raise PredictionsError(f"{where}: key 'index' must be an integer, got {index!r}")
    key = (record["report"], record["split"], index, record.get("config"))
    return key, Prediction(_number(record, "label", where), _number(record, "prediction", where))


def read_predictions(path: Path) -> dict[Key, Prediction]:
    """One run's predictions by example key; a malformed line is an error naming the file, line and key."""
    found: dict[Key, Prediction] = {}
    with open(path, encoding="utf-8") as handle:
        for line, text in enumerate(handle, start=1):
            try:
                record = json.loads(text)
            except json.JSONDecodeError as err:
                raise PredictionsError(f"{path}:{line}: not JSON ({err.msg}); rerun the fine-tuning job") from None
            key, prediction = _prediction(record, f"{path}:{line}")
            found[key] = prediction
    return found


def predictions_by_key(records: Iterable[Mapping[str, Any]]) -> dict[Key, Prediction]:
    """Prediction records a fine-tuning run returned (gpt1.training.finetuning.FinetuneResult.predictions), by
    example key."""
    return dict(_prediction(record, f"prediction {i}") for i, record in enumerate(records))


def report_se(predictions: Mapping[Key, Prediction], report: str, metric: str) -> float:
    """Bootstrap standard error (a fraction, as the metric) of one run's `metric` on the examples of `report`: the
    noise of the evaluation examples for one trained model."""
    keys = sorted((k for k in predictions if k[0] == report), key=lambda k: (k[1], k[2], k[3] or ""))
    if not keys:
        raise PredictionsError(f"no predictions of report {report!r}")
    labels = [predictions[k].label for k in keys]
    guesses = [predictions[k].prediction for k in keys]
    return bootstrap_se(metric, labels, guesses, n=RESAMPLES, seed=BOOTSTRAP_SEED)


Runs = Mapping[int, Mapping[Key, Prediction]]  # seed -> one run's predictions


@dataclass(frozen=True)
class ColumnRuns:
    """A column of Table 5 as a test reads it: its (report, metric) components and both variants' runs."""

    components: Sequence[tuple[str, str]]
    full_runs: Runs
    other_runs: Runs


def _paired_arrays(column: str, report: str, seeds: Sequence[int], full_runs: Runs, other_runs: Runs
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Labels and both sides' predictions (seeds x examples) on the examples of `report` that every seed of both
    sides scored; None where there is none. A label that differs between runs is an error."""
    shared = set.intersection(*({k for k in full_runs[s] if k[0] == report and k in other_runs[s]} for s in seeds)) \
        if seeds else set()
    if not shared:
        return None
    keys = sorted(shared, key=lambda k: (k[0], k[1], k[2], k[3] or ""))
    labels = np.array([full_runs[seeds[0]][k].label for k in keys])
    for s in seeds:
        for runs in (full_runs, other_runs):
            if any(runs[s][k].label != label for k, label in zip(keys, labels, strict=True)):
                raise PredictionsError(f"column {column}: seed {s}'s predictions give an example another label than "
                                       f"seed {seeds[0]}'s; rerun its fine-tuning jobs")
    full = np.array([[full_runs[s][k].prediction for k in keys] for s in seeds])
    other = np.array([[other_runs[s][k].prediction for k in keys] for s in seeds])
    return labels, full, other


def column_test(variant: str, column: str, metric: str, reports: Sequence[str], full_runs: Runs, other_runs: Runs
                ) -> PairedTest | None:
    """The test of one column over the seeds both variants have, on the examples every one of their runs scored;
    None when a report has none. Each side is the mean of its seeds' metrics, and a resample draws those examples
    once for every seed (metrics.paired_bootstrap). A column of several reports (Table 5's MNLI) is the mean of
    their metrics, as its cell is, each report's examples drawn on its own."""
    return _combined_test(variant, column, metric, [ColumnRuns(tuple((r, metric) for r in reports), full_runs,
                                                               other_runs)])


def average_test(variant: str, column: str, columns: Sequence[ColumnRuns]) -> PairedTest | None:
    """The test of an average of columns (Table 5's Avg: each column the mean of its components, MNLI matched and
    mismatched), over the seeds both variants have in every column: the mean of the columns' differences, each
    report's examples resampled on its own (metrics.paired_bootstrap_combined). None where a report has nothing to
    pair: an average of fewer columns is not the table's."""
    return _combined_test(variant, column, "average", columns)


def _combined_test(variant: str, column: str, metric: str, columns: Sequence[ColumnRuns]) -> PairedTest | None:
    """The mean of `columns`, each the mean of its (report, metric) components, full minus other; one column of one
    report is metrics.paired_bootstrap, draw for draw."""
    if not columns:
        return None
    seeds = tuple(sorted(set.intersection(*(set(c.full_runs) & set(c.other_runs) for c in columns))))
    parts, examples = [], 0
    for tested in columns:
        for report, report_metric in tested.components:
            arrays = _paired_arrays(column, report, seeds, tested.full_runs, tested.other_runs)
            if arrays is None:
                return None
            weight = 1.0 / (len(columns) * len(tested.components))
            parts.append(PairedPart(report_metric, *arrays, weight=weight))
            examples += arrays[0].size
    result = paired_bootstrap_combined(parts, n=RESAMPLES, seed=BOOTSTRAP_SEED)
    return PairedTest(variant, column, metric, 100.0 * result.difference, result.p_value, examples, seeds)
