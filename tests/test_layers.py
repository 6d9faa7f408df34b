"""Layers transferred (Figure 2 left): the curve points and the layer-transfer recipe."""

from pathlib import Path

import pytest

from gpt1.config import load_config
from gpt1.errors import Gpt1Error
from gpt1.layers import curve_point, layer_caps, layers_stage
from gpt1.metrics import bootstrap_se

REPO = Path(__file__).resolve().parents[1]


def test_layer_runs_narrow_the_tasks_examples_to_their_own_caps():
    cfg = load_config(REPO / "params.yaml", "default")
    assert layer_caps(cfg) == {key: cfg.section("layers")[key] for key in ("max_train_examples", "max_eval_examples")}
    smoke = load_config(REPO / "params.yaml", "smoke")
    assert layer_caps(smoke) == {"max_train_examples": None, "max_eval_examples": None}  # null keeps finetune's
    evaluated = load_config(REPO / "params.yaml", "default", ["layers.max_eval_examples=123"])
    assert layer_caps(evaluated)["max_eval_examples"] == 123


def records(report: str, labels: list[int], predictions: list[int]) -> list[dict]:
    return [{"report": report, "split": "validation_matched", "index": i, "label": y, "prediction": p}
            for i, (y, p) in enumerate(zip(labels, predictions, strict=True))]


def test_curve_point_reads_the_papers_reports_and_tests_against_the_first_point():
    metrics = {"task": "mnli", "train_accuracy": 0.9,
               "reports": {"mnli_m": {"metrics": {"accuracy": 0.7}, "evaluated_on": "validation_matched[80%:100%]"},
                           "mnli_mm": {"metrics": {"accuracy": 0.6}, "evaluated_on": "validation_mismatched"}}}
    labels = [0, 1, 2] * 20
    first = records("mnli_m", labels, [0] * 60) + records("mnli_mm", labels, labels)  # mnli_m 1/3
    good = records("mnli_m", labels, labels[:42] + [0] * 18) + records("mnli_mm", labels, [0] * 60)  # mnli_m 0.8
    start = curve_point(0, metrics, first, None)
    assert start == {"layers": 0, "train_accuracy": 0.9, "dev_accuracy": 0.7,
                     "dev_se": bootstrap_se("accuracy", labels, [0] * 60, n=1000, seed=0), "p_vs_first": None,
                     "dev_split": "validation_matched[80%:100%]"}
    point = curve_point(3, metrics, good, first)
    assert 0.03 < point["dev_se"] < 0.07  # sqrt(0.8 * 0.2 / 60) = 0.052, the curve's report (mnli_m) only
    assert point["p_vs_first"] < 0.01  # 1/3 -> 0.8 on the same 60 examples
    assert curve_point(3, metrics, first, first)["p_vs_first"] == 1.0


def test_only_the_papers_two_tasks(tmp_path):
    cfg = load_config(REPO / "params.yaml", "smoke")
    with pytest.raises(Gpt1Error, match="covers mnli, race"):
        layers_stage(cfg, "sst2", 0, tmp_path, tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
