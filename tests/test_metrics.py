"""Metrics against scikit-learn and scipy, the GLUE-style average, and the paired bootstrap test."""

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from gpt1.evaluation.metrics import (
    GLUE_COMPONENTS,
    PairedPart,
    accuracy,
    bootstrap_se,
    compute,
    f1,
    glue_average,
    matthews,
    paired_bootstrap,
    paired_bootstrap_combined,
    pearson,
    percent,
    spearman,
)
from gpt1.pipeline.errors import MetricError

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("classes", [2, 3, 5])
def test_classification_metrics_equal_sklearn(classes):
    for _ in range(20):
        n = int(RNG.integers(5, 300))
        y, p = RNG.integers(0, classes, n), RNG.integers(0, classes, n)
        p[: n // 2] = y[: n // 2]  # some agreement, so the scores are not all near 0
        assert accuracy(y, p) == pytest.approx(accuracy_score(y, p))
        assert matthews(y, p) == pytest.approx(matthews_corrcoef(y, p))
        if classes == 2:
            assert f1(y, p) == pytest.approx(f1_score(y, p, pos_label=1))


def test_degenerate_cases_are_zero_not_nan():
    assert matthews([1, 1, 1], [1, 1, 1]) == 0.0  # sklearn gives 0 too
    assert matthews([0, 1, 0, 1], [1, 1, 1, 1]) == 0.0
    assert f1([0, 0], [0, 0]) == 0.0
    assert pearson([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]) == 0.0
    assert spearman([1.0, 1.0], [1.0, 2.0]) == 0.0


def test_correlations_equal_scipy():
    for _ in range(20):
        n = int(RNG.integers(3, 200))
        y = RNG.uniform(0, 5, n)
        p = y + RNG.normal(0, 1.5, n)
        assert pearson(y, p) == pytest.approx(stats.pearsonr(y, p)[0])
        assert spearman(y, p) == pytest.approx(stats.spearmanr(y, p)[0])
    ties = np.array([0, 0, 1, 1, 2, 5.0]), np.array([1, 1, 1, 3, 3, 4.0])
    assert spearman(*ties) == pytest.approx(stats.spearmanr(*ties)[0])


def test_compute_by_name_and_bad_input():
    y, p = [1, 0, 1, 1], [1, 0, 0, 1]
    assert compute(("f1", "accuracy"), y, p) == {"f1": pytest.approx(0.8), "accuracy": 0.75}
    with pytest.raises(MetricError, match=r"metric 'bleu' is unknown; valid: accuracy, mcc"):
        compute(("bleu",), y, p)
    with pytest.raises(MetricError, match="equal length"):
        accuracy([1, 0], [1])
    with pytest.raises(MetricError, match="no examples"):
        accuracy([], [])


def test_percent():
    assert percent(0.82134) == 82.1
    assert percent(-0.5, 2) == -50.0


def _scores(value: float) -> dict[str, dict[str, float]]:
    scores: dict[str, dict[str, float]] = {}
    for pairs in GLUE_COMPONENTS.values():
        for report, metric in pairs:
            scores.setdefault(report, {})[metric] = value
    return scores


def test_glue_average_averages_metrics_within_a_task_then_tasks():
    scores = _scores(0.5)
    scores["mrpc"] = {"f1": 0.9, "accuracy": 0.7}  # task score 0.8
    scores["mnli_m"]["accuracy"], scores["mnli_mm"]["accuracy"] = 0.6, 0.8  # MNLI counts once: 0.7
    expected = (0.8 + 0.7 + 6 * 0.5) / 8
    assert glue_average(scores) == pytest.approx(expected)
    assert glue_average(scores, ["mrpc", "mnli"]) == pytest.approx(0.75)


def test_glue_average_names_what_is_missing():
    scores = _scores(0.5)
    del scores["stsb"]["spearman"]
    with pytest.raises(MetricError, match=r"stsb needs stsb.spearman"):
        glue_average(scores)
    with pytest.raises(MetricError, match="not a GLUE task"):
        glue_average(scores, ["snli"])


def test_bootstrap_identical_systems_give_p_one():
    y = RNG.integers(0, 2, 200)
    p = np.where(RNG.random(200) < 0.7, y, 1 - y)
    result = paired_bootstrap("accuracy", y, p, p, n=200, seed=1)
    assert result.p_value == 1.0 and result.difference == 0.0 and result.mean_difference == 0.0


def test_bootstrap_large_difference_gives_small_p():
    y = RNG.integers(0, 2, 300)
    good = np.where(RNG.random(300) < 0.9, y, 1 - y)
    bad = np.where(RNG.random(300) < 0.5, y, 1 - y)
    result = paired_bootstrap("accuracy", y, good, bad, n=500, seed=0)
    assert result.p_value < 0.01
    assert result.difference > 0.2 and result.mean_difference == pytest.approx(result.difference, abs=0.03)
    assert paired_bootstrap("accuracy", y, good, bad, n=500, seed=0) == result  # seeded


def test_bootstrap_small_difference_is_not_significant():
    y = RNG.integers(0, 2, 100)
    a = np.where(RNG.random(100) < 0.7, y, 1 - y)
    b = a.copy()
    b[np.flatnonzero(a == y)[0]] ^= 1  # one more error
    assert paired_bootstrap("accuracy", y, a, b, n=300, seed=0).p_value > 0.3


def test_bootstrap_takes_any_metric():
    y = RNG.uniform(0, 5, 80)
    result = paired_bootstrap(pearson, y, y + RNG.normal(0, 0.1, 80), RNG.uniform(0, 5, 80), n=100)
    assert result.p_value < 0.05 and result.n == 100


def test_bootstrap_of_runs_draws_the_examples_once_for_every_run():
    """Rows are runs (seeds) on the same examples: one row is the 1-d test, and the difference is the runs' mean."""
    y = RNG.integers(0, 2, 120)
    a = np.where(RNG.random((2, 120)) < 0.8, y, 1 - y)
    b = np.where(RNG.random((2, 120)) < 0.6, y, 1 - y)
    assert paired_bootstrap("accuracy", y, a[:1], b[:1], n=50) == paired_bootstrap("accuracy", y, a[0], b[0], n=50)
    result = paired_bootstrap("accuracy", y, a, b, n=50)
    assert result.difference == pytest.approx(np.mean(a == y) - np.mean(b == y))


@pytest.mark.parametrize(("shape", "said"), [((2, 3, 120), "neither one run nor runs x examples"),
                                             ((0, 120), "neither one run nor runs x examples"),
                                             ((2, 119), "must be 1-d and of equal length")])
def test_bootstrap_refuses_runs_of_another_shape(shape, said):
    y = RNG.integers(0, 2, 120)
    with pytest.raises(MetricError, match=said):
        paired_bootstrap("accuracy", y, np.zeros(shape), y, n=10)


def test_bootstraps_refuse_too_few_resamples():
    y = RNG.integers(0, 2, 20)
    with pytest.raises(MetricError, match="n must be at least 1"):
        paired_bootstrap("accuracy", y, y, y, n=0)
    with pytest.raises(MetricError, match="n must be at least 2"):
        bootstrap_se("accuracy", y, y, n=1)


def test_the_paired_bootstrap_draws_as_it_always_has():
    """One evaluation set: each resample one draw of the examples, in order, from the seeded generator (what every
    committed table's p-values were made with), here written out by hand."""
    y = RNG.integers(0, 2, 90)
    a, b = np.where(RNG.random(90) < 0.8, y, 1 - y), np.where(RNG.random(90) < 0.6, y, 1 - y)
    rng = np.random.default_rng(3)
    observed = accuracy(y, a) - accuracy(y, b)
    deltas = np.array([accuracy(y[i], a[i]) - accuracy(y[i], b[i]) for i in (rng.integers(0, 90, 90)
                                                                              for _ in range(200))])
    result = paired_bootstrap("accuracy", y, a, b, n=200, seed=3)
    assert result.difference == observed and result.mean_difference == pytest.approx(deltas.mean())
    assert result.p_value == (1 + np.sum(np.abs(deltas - observed) >= abs(observed) - 1e-12)) / 201
    assert paired_bootstrap_combined([PairedPart("accuracy", y, a, b)], n=200, seed=3) == result


def test_a_combined_bootstrap_weighs_its_parts_and_draws_each_on_its_own():
    """Table 5's Avg: the weighted sum of the parts' differences, observed and under each resample, where every
    part's examples are drawn anew from its own set (here checked draw for draw against a hand-written loop)."""
    y1, y2 = RNG.integers(0, 2, 50), RNG.uniform(0, 5, 70)
    a1, b1 = np.where(RNG.random(50) < 0.9, y1, 1 - y1), np.where(RNG.random(50) < 0.5, y1, 1 - y1)
    a2, b2 = y2 + RNG.normal(0, 0.5, 70), y2 + RNG.normal(0, 2.0, 70)
    parts = [PairedPart("accuracy", y1, a1, b1, weight=0.25), PairedPart("pearson", y2, a2, b2, weight=0.75)]
    result = paired_bootstrap_combined(parts, n=100, seed=7)

    def diff(i1, i2):
        return (0.25 * (accuracy(y1[i1], a1[i1]) - accuracy(y1[i1], b1[i1]))
                + 0.75 * (pearson(y2[i2], a2[i2]) - pearson(y2[i2], b2[i2])))

    observed = diff(slice(None), slice(None))
    rng = np.random.default_rng(7)
    deltas = np.array([diff(rng.integers(0, 50, 50), rng.integers(0, 70, 70)) for _ in range(100)])
    assert result.difference == pytest.approx(observed)
    assert result.mean_difference == pytest.approx(deltas.mean())
    assert result.p_value == (1 + np.sum(np.abs(deltas - observed) >= abs(observed) - 1e-12)) / 101


def test_a_combined_bootstrap_of_identical_systems_gives_p_one_and_refuses_no_parts():
    y = RNG.integers(0, 2, 40)
    same = paired_bootstrap_combined([PairedPart("accuracy", y, y, y), PairedPart("f1", y, 1 - y, 1 - y)], n=20)
    assert same.difference == 0.0 and same.p_value == 1.0
    with pytest.raises(MetricError, match="no evaluation sets"):
        paired_bootstrap_combined([], n=20)
