"""Layers transferred (the paper's Figure 2, left): fine-tune with the embeddings and the first k pre-trained blocks
transferred and the rest freshly initialised, for every k from 0 (embeddings only) to the number of layers.

One job per (task, seed) runs every k in turn: dvc.yaml can loop only over lists written in params.yaml, and the
number of layers differs per profile.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpt1.evaluation.significance import Key, Prediction, column_test, predictions_by_key, report_se
from gpt1.pipeline import layout, records
from gpt1.pipeline.clock import PROCESS
from gpt1.pipeline.config import LAYER_TRANSFER_TASKS
from gpt1.pipeline.errors import UsageError
from gpt1.pipeline.files import (
    file_record,
    read_json,
    require_files,
    staged_outputs,
    without_timings,
    write_csv,
)

if TYPE_CHECKING:
    from gpt1.pipeline.config import Config

FIELDS = ["layers", "train_accuracy", "dev_accuracy", "dev_se", "p_vs_first", "train_examples", "dev_examples",
          "dev_split"]


def curve_point(k: int, metrics: dict[str, Any], predictions: Mapping[Key, Prediction],
                first: Mapping[Key, Prediction] | None) -> dict[str, Any]:
    """One point of the figure: k, train and dev accuracy (fractions), dev's bootstrap standard error over its
    examples, the paired bootstrap p-value of this k against the curve's first (k = 0) on the same examples (None
    at k = 0), how many examples it trained on and was scored on, and what dev was. `predictions`, `first`: the
    fine-tuning runs' predictions by example key."""
    name = LAYER_TRANSFER_TASKS[metrics["task"]]
    report = metrics["reports"][name]
    return {"layers": k, "train_accuracy": metrics["train_accuracy"], "dev_accuracy": report["metrics"]["accuracy"],
            "dev_se": report_se(predictions, name, "accuracy"),
            "p_vs_first": None if first is None else column_test(f"layers {k}", name, "accuracy", [name],
                                                                 {0: predictions}, {0: first}).p_value,
            "train_examples": metrics["train"]["examples"], "dev_examples": report["counts"]["eval"],
            "dev_split": report["evaluated_on"]}


def layers_stage(cfg: Config, task: str, seed: int, pretrained_dir: Path, tokenizer_dir: Path, out_dir: Path,
                 examples_dir: Path | None = None):
    """`gpt1 layers`: OUT/layers.json (every k's full metrics) and OUT/layers.csv (the curve). The task's data: its
    encoded examples in `examples_dir` (the encode_task stage), else loaded here."""
    from gpt1.data.rows import layer_caps
    from gpt1.pipeline.config import finetune_settings
    from gpt1.pipeline.tracking import published_run
    from gpt1.training.finetuning import finetune_run
    from gpt1.training.numerics import in_effect, note_upstream
    from gpt1.training.runtime import default_device

    if task not in LAYER_TRANSFER_TASKS:
        raise UsageError(f"--task {task!r}: the layer-transfer analysis covers {', '.join(LAYER_TRANSFER_TASKS)}")
    require_files("pretrain", Path(pretrained_dir) / layout.MODEL_JSON)
    pretrained = read_json(Path(pretrained_dir) / layout.MODEL_JSON)
    n_layer = pretrained["config"]["n_layer"]
    numerics = in_effect(default_device().type)
    note_upstream(numerics, pretrained.get("numerics"), str(pretrained_dir))
    runs, points = {}, []
    caps = layer_caps(cfg.section("layers"), cfg.section("finetune"), task)  # a bad cap fails here, first
    settings = finetune_settings(cfg)
    params = {"task": task, "seed": seed, "n_layer": n_layer, "finetune": cfg.section("finetune"),
              "layers": cfg.section("layers")}
    with published_run("layers", cfg, params, name=f"layers {task} seed{seed}") as run:
        run.set_tags({"gpt1.task": task, "gpt1.seed": seed})
        PROCESS.lap("open")  # the store checked, the run opened, its params and tags logged
        first = None
        for k in range(n_layer + 1):
            result = finetune_run(settings, task, "pretrained", seed, pretrained_dir, tokenizer_dir, transfer_layers=k,
                                  examples_dir=examples_dir, mark=PROCESS.lap, **caps)
            runs[str(k)] = without_timings(result.metrics)
            keyed = predictions_by_key(result.predictions)
            points.append(curve_point(k, result.metrics, keyed, first))
            first = keyed if first is None else first
            run.log_metrics({key: points[-1][key] for key in ("train_accuracy", "dev_accuracy", "dev_se")}, step=k)
            print(f"layers {task}: k={k} train {points[-1]['train_accuracy']:.3f} dev {points[-1]['dev_accuracy']:.3f}"
                  f" ± {points[-1]['dev_se']:.3f}")
            PROCESS.lap("curve")  # the point's standard error and paired test, its metrics to MLflow
        with staged_outputs(out_dir / layout.LAYERS_JSON, out_dir / layout.LAYERS_CSV) as (json_tmp, csv_tmp):
            write_csv(csv_tmp, FIELDS, points)
            records.write("layers", json_tmp, {"task": task, "seed": seed, "n_layer": n_layer, "points": points,
                                         "runs": runs, "numerics": numerics.to_json(),
                                         "files": {layout.LAYERS_CSV: file_record(csv_tmp)}})
        run.log_output(out_dir / layout.LAYERS_CSV)
        run.log_times("write")  # the records, and the curve to MLflow
    return points
