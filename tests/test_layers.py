"""Layers transferred (Figure 2 left): the curve points and the layer-transfer recipe."""

import csv
from pathlib import Path

import pytest
from conftest import tiny_config

from gpt1.data.rows import LAYER_CAPS, layer_caps
from gpt1.evaluation.metrics import bootstrap_se
from gpt1.evaluation.significance import predictions_by_key
from gpt1.pipeline.config import LAYER_TRANSFER_TASKS, load_config
from gpt1.pipeline.errors import ConfigError, Gpt1Error
from gpt1.stages.layers import curve_point, layers_stage

REPO = Path(__file__).resolve().parents[1]


def caps_of(cfg, task: str) -> dict[str, int | None]:
    return layer_caps(cfg.section("layers"), cfg.section("finetune"), task)


def test_layer_runs_narrow_the_tasks_examples_to_their_own_caps():
    cfg = load_config(REPO / "params.yaml", "default", ["layers.by_task={}"])
    assert caps_of(cfg, "mnli") == {key: cfg.section("layers")[key] for key in LAYER_CAPS}
    smoke = load_config(REPO / "params.yaml", "smoke")
    assert caps_of(smoke, "mnli") == {"max_train_examples": None, "max_eval_examples": None}  # null: finetune's
    evaluated = load_config(REPO / "params.yaml", "default", ["layers.max_eval_examples=123"])
    assert caps_of(evaluated, "race")["max_eval_examples"] == 123


def test_a_tasks_own_caps_lie_over_the_shared_ones():
    cfg = load_config(REPO / "params.yaml", "default", ["layers.max_train_examples=200", "layers.max_eval_examples=400",
                                                        "layers.by_task={mnli: {max_train_examples: null}}"])
    assert caps_of(cfg, "mnli") == {"max_train_examples": None, "max_eval_examples": 400}
    assert caps_of(cfg, "race") == {"max_train_examples": 200, "max_eval_examples": 400}


def test_a_cap_above_what_finetune_keeps_is_an_error_naming_the_setting():
    race_above = load_config(REPO / "params.yaml", "default", ["layers.by_task={race: {max_train_examples: 1600}}"])
    with pytest.raises(ConfigError, match=r"layers\.by_task\.race\.max_train_examples: 1600 is more than the 200 "):
        caps_of(race_above, "race")
    shared_above = load_config(REPO / "params.yaml", "default", ["layers.max_eval_examples=5000"])
    with pytest.raises(ConfigError, match=r"^layers\.max_eval_examples: 5000 is more than the 1500 .*finetune.s$"):
        caps_of(shared_above, "race")
    assert caps_of(shared_above, "mnli")["max_eval_examples"] is None  # MNLI's own null: finetune's 1500


def test_by_task_names_only_the_tasks_of_the_analysis():
    """The schema takes the layer-transfer tasks from gpt1.pipeline.config.LAYER_TRANSFER_TASKS (their one declaration),
    for layers.by_task and for layer_transfer_tasks alike."""
    from gpt1.pipeline.config import _schema, validate

    schema = _schema()
    layers = schema["$defs"]["profile"]["properties"]["layers"]
    assert layers["properties"]["by_task"]["propertyNames"] == {"$ref": "#/$defs/layer_task"}
    assert schema["properties"]["layer_transfer_tasks"]["items"] == {"$ref": "#/$defs/layer_task"}
    assert set(schema["$defs"]["layer_task"]["enum"]) == set(LAYER_TRANSFER_TASKS)
    root = load_config(REPO / "params.yaml", "default", []).root
    with pytest.raises(ConfigError, match=r"layer_transfer_tasks\.0: 'sst2' is not one of mnli, race"):
        validate({**root, "layer_transfer_tasks": ["sst2"]})
    with pytest.raises(ConfigError, match=r"layers\.by_task"):
        load_config(REPO / "params.yaml", "default", ["layers.by_task={sst2: {max_train_examples: 10}}"])
    with pytest.raises(ConfigError, match=r"layers\.by_task"):
        load_config(REPO / "params.yaml", "default", ["layers.by_task={mnli: {epochs: 1}}"])


def records(report: str, labels: list[int], predictions: list[int]) -> list[dict]:
    return [{"report": report, "split": "validation_matched", "index": i, "label": y, "prediction": p}
            for i, (y, p) in enumerate(zip(labels, predictions, strict=True))]


def test_curve_point_reads_the_papers_reports_and_tests_against_the_first_point():
    metrics = {"task": "mnli", "train_accuracy": 0.9, "train": {"examples": 1600},
               "reports": {"mnli_m": {"metrics": {"accuracy": 0.7}, "evaluated_on": "validation_matched[80%:100%]",
                                      "counts": {"train": 1600, "eval": 60}},
                           "mnli_mm": {"metrics": {"accuracy": 0.6}, "evaluated_on": "validation_mismatched",
                                       "counts": {"train": 1600, "eval": 60}}}}
    labels = [0, 1, 2] * 20
    first = predictions_by_key(records("mnli_m", labels, [0] * 60) + records("mnli_mm", labels, labels))  # mnli_m 1/3
    good = predictions_by_key(records("mnli_m", labels, labels[:42] + [0] * 18)  # mnli_m 0.8
                              + records("mnli_mm", labels, [0] * 60))
    start = curve_point(0, metrics, first, None)
    assert start == {"layers": 0, "train_accuracy": 0.9, "dev_accuracy": 0.7,
                     "dev_se": bootstrap_se("accuracy", labels, [0] * 60, n=1000, seed=0), "p_vs_first": None,
                     "train_examples": 1600, "dev_examples": 60, "dev_split": "validation_matched[80%:100%]"}
    point = curve_point(3, metrics, good, first)
    assert 0.03 < point["dev_se"] < 0.07  # sqrt(0.8 * 0.2 / 60) = 0.052, the curve's report (mnli_m) only
    assert point["p_vs_first"] < 0.01  # 1/3 -> 0.8 on the same 60 examples
    assert curve_point(3, metrics, first, first)["p_vs_first"] == 1.0


def test_only_the_papers_two_tasks(tmp_path):
    cfg = load_config(REPO / "params.yaml", "smoke")
    with pytest.raises(Gpt1Error, match="covers mnli, race"):
        layers_stage(cfg, "sst2", 0, tmp_path, tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_each_run_trains_and_scores_on_the_tasks_own_caps(tmp_path, trained_gpt, tiny_data, mlflow_env):
    cfg = tiny_config("finetune.max_train_examples=16", "finetune.max_eval_examples=16", "finetune.batch_size=8",
                      "finetune.eval_batch_size=16", "finetune.epochs=1", "layers.max_train_examples=12",
                      "layers.by_task={mnli: {max_train_examples: 10, max_eval_examples: 6}}")
    points = layers_stage(cfg, "mnli", 0, trained_gpt, tiny_data.tokenizer, tmp_path / "out")
    assert [p["layers"] for p in points] == [0, 1]  # the tiny model's one block
    assert {(p["train_examples"], p["dev_examples"]) for p in points} == {(10, 6)}
    with open(tmp_path / "out" / "layers.csv") as handle:
        assert {(row["train_examples"], row["dev_examples"]) for row in csv.DictReader(handle)} == {("10", "6")}
    # Where the process's time went (gpt1.pipeline.clock): the run opened, each k's load, train, evaluate and curve
    # added up, then the records written
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_env)
    run = client.search_runs([e.experiment_id for e in client.search_experiments()], "tags.`gpt1.stage` = 'layers'",
                             order_by=["attributes.start_time DESC"])[0]  # this test's: the module shares a store
    assert run.data.tags["gpt1.phases"] == "open,load,train,evaluate,curve,write"
    times = {k: v for k, v in run.data.metrics.items() if k.startswith("time.")}
    assert set(times) == {f"time.{p}_s" for p in ("open", "load", "train", "evaluate", "curve", "write", "process")}
    assert all(v >= 0 for v in times.values()) and times["time.train_s"] > 0
