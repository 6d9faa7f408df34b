"""The paper's evaluation metrics, the GLUE-style average, and a paired bootstrap test (numpy/scipy only).

Values are fractions in [0, 1] (accuracy, F1) or correlations in [-1, 1] (MCC, Pearson, Spearman); `percent()`
turns them into the paper's table numbers. Metric names, as they appear in metrics.json and MLflow:
`accuracy`, `mcc`, `f1`, `pearson`, `spearman`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpt1.pipeline.errors import MetricError

ArrayLike = Sequence[float] | np.ndarray
Metric = Callable[[ArrayLike, ArrayLike], float]


def _pair(y_true: ArrayLike, y_pred: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    t, p = np.asarray(y_true), np.asarray(y_pred)
    if t.shape != p.shape or t.ndim != 1:
        raise MetricError(f"metrics: y_true {t.shape} and y_pred {p.shape} must be 1-d and of equal length")
    if t.size == 0:
        raise MetricError("metrics: no examples to score")
    return t, p


def accuracy(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    t, p = _pair(y_true, y_pred)
    return float(np.mean(t == p))


def matthews(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Matthews correlation (multi-class form, Gorodkin 2004); 0 when undefined (a constant column), as sklearn."""
    t, p = _pair(y_true, y_pred)
    classes, inverse = np.unique(np.concatenate([t, p]), return_inverse=True)
    k = len(classes)
    confusion = np.zeros((k, k), dtype=np.float64)
    np.add.at(confusion, (inverse[: t.size], inverse[t.size :]), 1)
    true_sums, pred_sums = confusion.sum(axis=1), confusion.sum(axis=0)
    n, correct = confusion.sum(), np.trace(confusion)
    cov_tp = correct * n - true_sums @ pred_sums
    cov_tt = n * n - true_sums @ true_sums
    cov_pp = n * n - pred_sums @ pred_sums
    denominator = math.sqrt(cov_tt * cov_pp)
    return float(cov_tp / denominator) if denominator else 0.0


def f1(y_true: ArrayLike, y_pred: ArrayLike, positive: int = 1) -> float:
    """Binary F1 of the positive class (MRPC: equivalent, QQP: duplicate); 0 when it is never predicted nor true."""
    t, p = _pair(y_true, y_pred)
    tp = float(np.sum((t == positive) & (p == positive)))
    predicted, actual = float(np.sum(p == positive)), float(np.sum(t == positive))
    return 2 * tp / (predicted + actual) if predicted + actual else 0.0


def _correlation(kind: Callable, y_true: ArrayLike, y_pred: ArrayLike) -> float:
    t, p = _pair(y_true, y_pred)
    # A constant column has no defined correlation (scipy warns and gives nan): score it 0, no association
    # measurable, so a degenerate model does not turn table averages into nan.
    if t.size < 2 or np.all(t == t[0]) or np.all(p == p[0]):
        return 0.0
    return float(kind(t.astype(np.float64), p.astype(np.float64))[0])


def pearson(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    from scipy import stats  # imported here: scipy.stats costs every stage ~1 s of start-up

    return _correlation(stats.pearsonr, y_true, y_pred)


def spearman(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    from scipy import stats

    return _correlation(stats.spearmanr, y_true, y_pred)


METRICS: dict[str, Metric] = {
    "accuracy": accuracy,
    "mcc": matthews,
    "f1": f1,
    "pearson": pearson,
    "spearman": spearman,
}


def metric_function(name: str | Metric) -> Metric:
    if callable(name):
        return name
    if name not in METRICS:
        raise MetricError(f"metric {name!r} is unknown; valid: {', '.join(METRICS)}")
    return METRICS[name]


def compute(spec_metrics: Iterable[str], y_true: ArrayLike, y_pred: ArrayLike) -> dict[str, float]:
    """Every metric a task declares (`TaskSpec.metrics`), by name."""
    return {name: metric_function(name)(y_true, y_pred) for name in spec_metrics}


def percent(value: float, digits: int = 1) -> float:
    """A fraction or correlation as the paper prints it: 0.8213 -> 82.1."""
    return round(100.0 * float(value), digits)


# The GLUE benchmark's score (Wang et al. 2018): a macro-average over tasks, where a task with several metrics
# counts the unweighted mean of them. MNLI counts once, as the mean of its matched and mismatched accuracies.
# Keys are report names (as in `gpt1.report.tables.PAPER_NUMBERS`); values, the (report, metric) pairs averaged for
# the task.
GLUE_COMPONENTS: dict[str, tuple[tuple[str, str], ...]] = {
    "cola": (("cola", "mcc"),),
    "sst2": (("sst2", "accuracy"),),
    "mrpc": (("mrpc", "f1"), ("mrpc", "accuracy")),
    "qqp": (("qqp", "f1"), ("qqp", "accuracy")),
    "stsb": (("stsb", "pearson"), ("stsb", "spearman")),
    "mnli": (("mnli_m", "accuracy"), ("mnli_mm", "accuracy")),
    "qnli": (("qnli", "accuracy"),),
    "rte": (("rte", "accuracy"),),
}


def glue_task_score(task: str, scores: Mapping[str, Mapping[str, float]]) -> float:
    """One task's contribution to the GLUE-style average: the mean of its GLUE metrics."""
    if task not in GLUE_COMPONENTS:
        raise MetricError(f"glue average: {task!r} is not a GLUE task; valid: {', '.join(GLUE_COMPONENTS)}")
    values = []
    for report, metric in GLUE_COMPONENTS[task]:
        if metric not in scores.get(report, {}):
            raise MetricError(f"glue average: {task} needs {report}.{metric}, which is missing from the scores")
        values.append(float(scores[report][metric]))
    return float(np.mean(values))


def glue_average(scores: Mapping[str, Mapping[str, float]], tasks: Iterable[str] = tuple(GLUE_COMPONENTS)) -> float:
    """GLUE-style average of `scores` ({report name: {metric: value}}) over `tasks` (default: all eight).

    Not the leaderboard's "GLUE score" of the paper's Table 4 (72.8): that one is on the hidden test sets and also
    counts WNLI, which the paper does not fine-tune. Pass `tasks` to average a subset; a missing metric is an error,
    never silently skipped, so a partial average is always asked for by name.
    """
    names = list(tasks)
    if not names:
        raise MetricError("glue average: no tasks to average")
    return float(np.mean([glue_task_score(task, scores) for task in names]))


@dataclass(frozen=True)
class BootstrapResult:
    difference: float  # metric(a) - metric(b) on the full evaluation set
    mean_difference: float  # mean of the difference over the bootstrap resamples
    p_value: float  # two-sided: how often a resample's difference strays from the observed one by |difference|
    n: int


def _runs(y_true: np.ndarray, predictions: ArrayLike) -> np.ndarray:
    """Predictions as (runs, examples): one run's 1-d array, or one row per run (seeds) on y_true's examples."""
    runs = np.asarray(predictions)
    rows = runs.reshape(1, -1) if runs.ndim == 1 else runs
    if rows.ndim != 2 or rows.shape[0] == 0:
        raise MetricError(f"paired bootstrap: predictions of shape {runs.shape} are neither one run nor "
                          "runs x examples")
    for row in rows:
        _pair(y_true, row)
    return rows


@dataclass(frozen=True)
class PairedPart:
    """One evaluation set of a combined paired test: its metric, labels, both systems' runs (runs x examples, or
    one run) and the weight of its difference in the combination."""

    metric: str | Metric
    y_true: ArrayLike
    pred_a: ArrayLike
    pred_b: ArrayLike
    weight: float = 1.0


def paired_bootstrap(
    metric: str | Metric,
    y_true: ArrayLike,
    pred_a: ArrayLike,
    pred_b: ArrayLike,
    n: int = 1000,
    seed: int = 0,
) -> BootstrapResult:
    """Paired bootstrap test of system A against system B on the same examples (Berg-Kirkpatrick et al. 2012).

    Each resample draws the same example indices for both systems. Under the null hypothesis the resampled
    differences are centred on 0; shifting them by the observed difference gives the null distribution, so
    p = (1 + #{|d_i - d| >= |d|}) / (1 + n). Identical systems give p = 1.

    A system of several runs on the same examples (one row each: the seeds) is scored as the mean of its runs'
    metrics, and a resample draws the examples once for all of them: an example is one unit however many runs
    scored it (pooling the runs' pairs as if independent would shrink p with every copy of the same evidence).
    """
    return paired_bootstrap_combined([PairedPart(metric, y_true, pred_a, pred_b)], n, seed)


def paired_bootstrap_combined(parts: Sequence[PairedPart], n: int = 1000, seed: int = 0) -> BootstrapResult:
    """The paired bootstrap of a weighted sum of differences on several evaluation sets (Table 5's Avg: the mean of
    its columns' differences): each resample draws every set's examples anew, on its own, in the parts' order; a
    set's runs are scored as in `paired_bootstrap` (one part is that test, draw for draw)."""
    if n < 1:
        raise MetricError(f"paired bootstrap: n must be at least 1, got {n}")
    if not parts:
        raise MetricError("paired bootstrap: no evaluation sets to compare")
    prepared = []
    for part in parts:
        t = np.asarray(part.y_true)
        prepared.append((metric_function(part.metric), t, _runs(t, part.pred_a), _runs(t, part.pred_b), part.weight))

    def difference(draws: Sequence[np.ndarray | slice]) -> float:
        total = 0.0
        for (function, t, a, b, weight), idx in zip(prepared, draws, strict=True):
            labels = t[idx]
            total += weight * (float(np.mean([function(labels, run[idx]) for run in a]))
                               - float(np.mean([function(labels, run[idx]) for run in b])))
        return total

    observed = difference([slice(None)] * len(prepared))
    rng = np.random.default_rng(seed)
    deltas = np.empty(n)
    for i in range(n):
        deltas[i] = difference([rng.integers(0, t.size, size=t.size) for _, t, *_ in prepared])
    extreme = int(np.sum(np.abs(deltas - observed) >= abs(observed) - 1e-12))
    return BootstrapResult(float(observed), float(deltas.mean()), (1 + extreme) / (1 + n), n)


def bootstrap_se(metric: str | Metric, y_true: ArrayLike, y_pred: ArrayLike, n: int = 1000, seed: int = 0) -> float:
    """Standard error of `metric` on these examples: the standard deviation of its value over `n` resamples of the
    examples with replacement (the noise of the evaluation set, for one trained model)."""
    function = metric_function(metric)
    t, p = _pair(y_true, y_pred)
    if n < 2:
        raise MetricError(f"bootstrap standard error: n must be at least 2, got {n}")
    rng = np.random.default_rng(seed)
    values = np.empty(n)
    for i in range(n):
        idx = rng.integers(0, t.size, size=t.size)
        values[i] = function(t[idx], p[idx])
    return float(np.nanstd(values, ddof=1))
