"""gpt1.training.resume: the settings fingerprint, RNG states, atomic writes, and a checkpoint saved and restored (or
refused) in-process with a tiny model. The stage's kill -9 and NaN-stop resumes are in tests/test_pretrain.py."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from gpt1.modeling.checkpoints import build_model, model_config
from gpt1.pipeline.errors import Gpt1Error
from gpt1.pipeline.files import first_difference
from gpt1.training.resume import (
    LATEST,
    RESUME_FREE_KEYS,
    Progress,
    atomic_write,
    fingerprint,
    load_checkpoint,
    read_pointer,
    rng_states,
    run_settings,
    save_checkpoint,
    set_rng_states,
)

CONFIG = model_config("gpt", {"n_ctx": 8, "n_embd": 16, "n_layer": 1, "n_head": 2, "dropout": 0.0}, 50)
PRETRAIN = {"lr": 1e-3, "seed": 0, "checkpoint_every": 4, "compile": "auto", "micro_batch_size": 2}


class Sampler:
    """A generator with state, as the pre-training window sampler."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def state_dict(self) -> torch.Tensor:
        return self.generator.get_state()

    def load_state_dict(self, state: torch.Tensor) -> None:
        self.generator.set_state(state)

    def draw(self) -> int:
        return int(torch.randint(0, 1000, (), generator=self.generator))


NUMERICS = {"device": "cpu", "isa": "avx2", "threads": 1, "torch": "2.13.0"}


def settings(**pretrain: object) -> dict:
    return run_settings("gpt", CONFIG, {**PRETRAIN, **pretrain}, "f" * 64, {"train": {"tokens": 100}}, NUMERICS)


def training(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    torch.manual_seed(seed)
    model = build_model("gpt", CONFIG)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)


def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, sched) -> None:
    _, loss = model(torch.randint(0, 50, (2, 8)), torch.randint(0, 50, (2, 8)))
    loss.backward()
    optimizer.step()
    sched.step()
    optimizer.zero_grad()


# ------------------------------------------------------------------------------------------------ pure pieces


def test_fingerprint_ignores_the_free_keys_and_names_the_first_difference() -> None:
    assert {"checkpoint_every", "compile", "micro_batch_size"} == RESUME_FREE_KEYS
    assert fingerprint(settings()) == fingerprint(settings(checkpoint_every=9, micro_batch_size=1))
    assert fingerprint(settings()) != fingerprint(settings(lr=2e-3))
    assert first_difference(settings(), settings(lr=2e-3)) == ("pretrain.lr", 1e-3, 2e-3)
    assert first_difference(settings(), settings()) is None
    assert first_difference(None, settings()) == ("", None, "<absent>")  # a pointer whose settings are no object


def test_rng_states_round_trip_through_torch_save(tmp_path: Path) -> None:
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    torch.save({"rng": rng_states()}, tmp_path / "state.pt")
    expected = (random.random(), float(np.random.rand()), float(torch.rand(())))
    set_rng_states(torch.load(tmp_path / "state.pt", weights_only=True)["rng"])
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == expected


def test_atomic_write_leaves_the_old_file_when_the_writer_fails(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "f.txt"
    atomic_write(path, lambda p: p.write_text("old"))

    def half(p: Path) -> None:
        p.write_text("ne")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, half)
    assert path.read_text() == "old" and [p.name for p in path.parent.iterdir()] == ["f.txt"]


# ------------------------------------------------------------------------------------------------ checkpoints


def test_checkpoint_restores_weights_optimizer_sampler_and_progress(tmp_path: Path) -> None:
    resume = tmp_path / "resume"
    assert read_pointer(resume) is None
    model, optimizer, sched = training(0)
    sampler = Sampler(3)
    for stored in (2, 4):  # the second checkpoint replaces the first
        step(model, optimizer, sched)
        sampler.draw()
        save_checkpoint(resume, stored, model, optimizer, sched, sampler, Progress(step=stored, wall_seconds=1.5),
                        settings(), {"kind": "gpt"})
    assert sorted(p.name for p in resume.iterdir()) == [LATEST, "state-000000004.pt", "weights-000000004.safetensors"]
    expected = [float(torch.rand(())), sampler.draw()]

    other, other_optimizer, other_sched = training(1)
    other_sampler = Sampler(99)
    progress = load_checkpoint(resume, settings(micro_batch_size=1), 10, other, other_optimizer, other_sched,
                               other_sampler)
    assert progress == Progress(step=4, wall_seconds=1.5)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values(),
                                                 strict=True))
    mine, theirs = optimizer.state_dict()["state"][0], other_optimizer.state_dict()["state"][0]
    assert int(theirs["step"]) == 2 and torch.equal(mine["exp_avg"], theirs["exp_avg"]) and other_sched.last_epoch == 2
    assert [float(torch.rand(())), other_sampler.draw()] == expected


def test_checkpoint_of_other_settings_or_damaged_is_refused(tmp_path: Path) -> None:
    resume = tmp_path / "resume"
    model, optimizer, sched = training(0)
    save_checkpoint(resume, 2, model, optimizer, sched, Sampler(0), Progress(step=2), settings(), {})
    with pytest.raises(Gpt1Error, match=r"made with pretrain\.lr=0\.001, this run has pretrain\.lr=0\.002"):
        load_checkpoint(resume, settings(lr=2e-3), 10, model, optimizer, sched, Sampler(0))
    with pytest.raises(Gpt1Error, match="step 2 does not fit a run of 2 updates"):
        load_checkpoint(resume, settings(), 2, model, optimizer, sched, Sampler(0))
    pointer = json.loads((resume / LATEST).read_text())
    (resume / pointer["state"]["name"]).write_bytes(b"")
    with pytest.raises(Gpt1Error, match=r"state-000000002\.pt: 0 bytes, but .*latest\.json records"):
        load_checkpoint(resume, settings(), 10, model, optimizer, sched, Sampler(0))
    (resume / LATEST).write_text('{"format": 0}')
    with pytest.raises(Gpt1Error, match="not a checkpoint pointer of format 1"):
        read_pointer(resume)
