"""Layers transferred (Figure 2 left): the curve points and the layer-transfer recipe."""

from pathlib import Path

import pytest

from gpt1.config import load_config
from gpt1.errors import Gpt1Error
from gpt1.layers import curve_point, layer_caps, layers_stage

REPO = Path(__file__).resolve().parents[1]


def test_layer_runs_narrow_the_tasks_examples_to_their_own_caps():
    cfg = load_config(REPO / "params.yaml", "default")
    assert layer_caps(cfg) == {key: cfg.section("layers")[key] for key in ("max_train_examples", "max_eval_examples")}
    smoke = load_config(REPO / "params.yaml", "smoke")
    assert layer_caps(smoke) == {"max_train_examples": None, "max_eval_examples": None}  # null keeps finetune's
    evaluated = load_config(REPO / "params.yaml", "default", ["layers.max_eval_examples=123"])
    assert layer_caps(evaluated)["max_eval_examples"] == 123


def test_curve_point_reads_the_papers_reports():
    metrics = {"task": "mnli", "train_accuracy": 0.9,
               "reports": {"mnli_m": {"metrics": {"accuracy": 0.7}, "evaluated_on": "validation_matched[80%:100%]"},
                           "mnli_mm": {"metrics": {"accuracy": 0.6}, "evaluated_on": "validation_mismatched"}}}
    assert curve_point(3, metrics) == {"layers": 3, "train_accuracy": 0.9, "dev_accuracy": 0.7,
                                       "dev_split": "validation_matched[80%:100%]"}


def test_only_the_papers_two_tasks(tmp_path):
    cfg = load_config(REPO / "params.yaml", "smoke")
    with pytest.raises(Gpt1Error, match="covers mnli, race"):
        layers_stage(cfg, "sst2", 0, tmp_path, tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
