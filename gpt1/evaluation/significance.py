"""Standard errors and paired tests over a fine-tuning run's evaluation examples: Table 5's tests of the full model
against each ablation, per column, on the examples both runs scored, by a paired bootstrap over those examples
(gpt1.evaluation.metrics.paired_bootstrap); the bootstrap standard error of a table cell or a curve's point; Figure 2
(left) tests each point against the curve's first.

Predictions (a fine-tuning run's predictions.jsonl) are joined by (report, split, index, config), so a test never
pairs two different examples. The seeds both variants have are pooled: seed s of the full model is paired with
seed s of the ablation, and all those pairs are resampled together. A column of several reports (Table 5's MNLI:
matched and mismatched) pools their examples.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpt1.evaluation.metrics import bootstrap_se, paired_bootstrap
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
    examples: int  # pairs, over the pooled seeds
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


def paired_arrays(full: Mapping[Key, Prediction], other: Mapping[Key, Prediction],
                  reports: Iterable[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(labels, full's predictions, the other's predictions) on the examples of `reports` both scored."""
    wanted = set(reports)
    keys = sorted((k for k in full if k[0] in wanted and k in other), key=lambda k: (k[0], k[1], k[2], k[3] or ""))
    labels = np.array([full[k].label for k in keys])
    return labels, np.array([full[k].prediction for k in keys]), np.array([other[k].prediction for k in keys])


def column_test(variant: str, column: str, metric: str, reports: Sequence[str],
                full_runs: Mapping[int, Mapping[Key, Prediction]],
                other_runs: Mapping[int, Mapping[Key, Prediction]]) -> PairedTest | None:
    """The test of one column over the seeds both variants have; None when they share no example."""
    seeds = tuple(sorted(set(full_runs) & set(other_runs)))
    parts = [paired_arrays(full_runs[s], other_runs[s], reports) for s in seeds]
    labels, full, other = (np.concatenate([p[i] for p in parts]) if parts else np.array([]) for i in range(3))
    if labels.size == 0:
        return None
    result = paired_bootstrap(metric, labels, full, other, n=RESAMPLES, seed=BOOTSTRAP_SEED)
    return PairedTest(variant, column, metric, 100.0 * result.difference, result.p_value, int(labels.size), seeds)
