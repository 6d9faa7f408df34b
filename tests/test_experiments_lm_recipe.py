"""experiments/lm_recipe.py: the arms' overrides, and the refusal of an arm that would train on fewer tokens."""

from __future__ import annotations

import pytest

from experiments import lm_recipe

STEPS = ["pretrain.max_steps=600", "pretrain.warmup_steps=200"]


def test_steps_arm_scales_the_shared_updates_and_keeps_its_own_overrides() -> None:
    overrides = lm_recipe.resolve(lm_recipe.ARMS["plain-bf16+b8"], [*STEPS, "pretrain.seed=3"])
    assert overrides[:3] == ["pretrain.max_steps=2400", "pretrain.warmup_steps=800", "pretrain.seed=3"]
    assert "pretrain.batch_size=8" in overrides and not any(o.startswith("@") for o in overrides)


def test_an_arm_without_steps_keeps_the_shared_updates() -> None:
    assert lm_recipe.resolve(lm_recipe.ARMS["lr1e-3"], STEPS) == [*STEPS, "pretrain.lr=1.0e-3"]


@pytest.mark.parametrize("extra", [[], STEPS[:1], STEPS[1:]])
def test_a_steps_arm_without_both_keys_is_refused(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        lm_recipe.main(["--arms", "lr1e-3,plain-bf16+b16", *(x for o in extra for x in ("--set", o))])
    assert info.value.code == 2
    assert "arm 'plain-bf16+b16' scales pretrain.max_steps and pretrain.warmup_steps" in capsys.readouterr().err


def test_unknown_arm_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        lm_recipe.main(["--arms", "fp32"])
    assert "unknown arm 'fp32'" in capsys.readouterr().err
