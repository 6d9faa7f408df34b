"""experiments/learning_curves.py's held-out settings: what experiments/finetune_ab.py's A/B arms train with."""

from __future__ import annotations

from pathlib import Path

from experiments import learning_curves
from gpt1.pipeline.config import finetune_settings, load_config
from gpt1.training.finetune_loop import Recipe

REPO = Path(__file__).resolve().parents[1]
CUT = ("train", 0.8, 0)


def recipe(task: str, extra: list[str]) -> Recipe:
    overrides = learning_curves.holdout_overrides(task, CUT, 400, 3, 100, extra)
    finetune = finetune_settings(load_config(REPO / "params.yaml", "default", overrides)).finetune
    return Recipe.from_section(finetune, task, None)


def test_a_task_keeps_its_own_lr_unless_the_arm_sets_one() -> None:
    own = load_config(REPO / "params.yaml", "default").section("finetune")["lr_by_task"]["cola"]
    assert recipe("cola", []).lr == own
    assert recipe("cola", ["finetune.lr=1.0e-4"]).lr == 1.0e-4  # the arm's rate, not CoLA's own
    assert recipe("cola", ["finetune.dropout=0.0"]).lr == own


def test_the_held_out_cut_and_sizes_are_what_the_job_asked_for() -> None:
    finetune = load_config(REPO / "params.yaml", "default",
                           learning_curves.holdout_overrides("qnli", ("validation", 0.64, 0), 800, 2, 100, [])
                           ).section("finetune")
    assert (finetune["max_train_examples"], finetune["train_examples_by_task"], finetune["epochs"],
            finetune["max_eval_examples"]) == (800, {}, 2, 100)
    assert finetune["train_cuts"]["qnli"] == {"split": "validation", "fraction": 0.64, "seed": 0}
