"""Resumable training state: a checkpoint folder holding the weights, the optimizer, scheduler and sampler states,
every RNG state and the progress so far, plus a pointer file (latest.json) naming them, written last.

The pointer also records the run's settings and their fingerprint: a checkpoint resumes only a run with equal
settings, and a refusal names the first key that differs. Each file is checked against the size and sha256 the
pointer records before anything is restored.

A library module: the settings come in as a dict (it names only the three pretrain keys that may differ across a
resume, RESUME_FREE_KEYS), no MLflow, and no results path (the folder comes in as an argument).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from gpt1.modeling.checkpoints import load_weights, read_weights, save_weights
from gpt1.modeling.model import GPTConfig, LSTMConfig
from gpt1.pipeline.errors import ResumeError
from gpt1.pipeline.files import file_record, first_difference, read_json, temp_path, verify_file, write_json

LATEST = "latest.json"  # the pointer to the current checkpoint; written last, so a half-written checkpoint is ignored
# Settings a resumed run may change: they do not change what is computed (checkpoint_every, compile) or only its
# float summation order and dropout masks (micro_batch_size, a memory knob).
RESUME_FREE_KEYS = frozenset({"checkpoint_every", "compile", "micro_batch_size"})
CHECKPOINT_FORMAT = 1


class Stateful(Protocol):
    """What a checkpoint saves of a data sampler: its generator state."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> None: ...


@dataclass
class Progress:
    """What a resumed run must know about the updates already done."""

    step: int = 0  # updates completed
    wall_seconds: float = 0.0  # training wall time so far, all invocations together
    curves: list[dict[str, float]] = field(default_factory=list)
    snapshots: list[dict[str, float]] = field(default_factory=list)
    interval_loss: float = 0.0  # sum of train losses since the last evaluation
    interval_updates: int = 0


# ----------------------------------------------------------------------------------------------------------------
# Settings


def run_settings(kind: str, config: GPTConfig | LSTMConfig, pretrain: dict[str, Any], tokenizer_sha256: str,
                 headers: dict[str, dict[str, Any]], numerics: dict[str, Any]) -> dict[str, Any]:
    """Everything that decides the trajectory of a run, the numerics it computes with included (gpt1.training.numerics);
    a checkpoint only resumes a run with equal settings."""
    settings = {
        "kind": kind,
        "model": dataclasses.asdict(config),
        "pretrain": {k: v for k, v in pretrain.items() if k not in RESUME_FREE_KEYS},
        "tokenizer_sha256": tokenizer_sha256,
        "ids": headers,
        "numerics": numerics,
    }
    return json.loads(json.dumps(settings))  # tuples -> lists, as they come back from JSON


def fingerprint(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


# ----------------------------------------------------------------------------------------------------------------
# RNG states


def rng_states() -> dict[str, Any]:
    """torch's, every GPU's, NumPy's and Python's generator state, as tensors and plain data (torch.load's
    weights_only accepts them)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": pos,
                  "has_gauss": has_gauss, "cached": cached},
        "python": random.getstate(),
    }


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore `rng_states()`; the GPU states only on the same GPU count (each micro-batch reseeds them anyway)."""
    torch.set_rng_state(states["torch"])
    if torch.cuda.is_available() and len(states["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(states["cuda"])
    n = states["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))


# ----------------------------------------------------------------------------------------------------------------
# Saving


def _fsync(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """write(temp) then rename: a reader sees the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_path(path)
    try:
        write(temp)
        _fsync(temp)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def _file_record(path: Path) -> dict[str, Any]:
    return {"name": path.name, **file_record(path)}


def save_checkpoint(resume: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: torch.optim.lr_scheduler.LRScheduler, sampler: Stateful, progress: Progress,
                    settings: dict[str, Any], metadata: dict[str, str]) -> None:
    """Weights + state files named by step, then the pointer; older checkpoints are removed only after that."""
    weights, state_file = resume / f"weights-{step:09d}.safetensors", resume / f"state-{step:09d}.pt"
    atomic_write(weights, lambda p: save_weights(model, p, metadata))
    state = {
        "format": CHECKPOINT_FORMAT,
        "step": step,
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "sampler": sampler.state_dict(),
        "rng": rng_states(),
        "progress": dataclasses.asdict(progress),
    }
    atomic_write(state_file, lambda p: torch.save(state, p))
    pointer = {"format": CHECKPOINT_FORMAT, "step": step, "fingerprint": fingerprint(settings), "settings": settings,
               "weights": _file_record(weights), "state": _file_record(state_file)}
    atomic_write(resume / LATEST, lambda p: write_json(p, pointer))
    for old in resume.glob("*-*.*"):
        if old.name not in (weights.name, state_file.name) and re.fullmatch(r"(weights|state)-\d+\..+", old.name):
            old.unlink(missing_ok=True)


# ----------------------------------------------------------------------------------------------------------------
# Loading


def _verified(resume: Path, record: Any, what: str) -> Path:
    """The checkpoint file `record` names, after checking its size and sha256 against the pointer."""
    if not isinstance(record, dict) or not {"name", "bytes", "sha256"} <= record.keys():
        raise ResumeError(f"{resume / LATEST}: no valid {what} entry; the checkpoint is corrupt, delete {resume}")
    path = resume / record["name"]
    verify_file(path, record, "pretrain", resume / LATEST, f"delete {resume} to start over", ResumeError)
    return path


def read_pointer(resume: Path) -> dict[str, Any] | None:
    """The checkpoint pointer, or None when there is no checkpoint yet."""
    path = resume / LATEST
    if not path.is_file():
        return None
    try:
        pointer = read_json(path)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ResumeError(f"{path}: not valid JSON ({err}); the checkpoint is corrupt, delete {resume}") from err
    if not isinstance(pointer, dict) or pointer.get("format") != CHECKPOINT_FORMAT or "settings" not in pointer:
        raise ResumeError(f"{path}: not a checkpoint pointer of format {CHECKPOINT_FORMAT}; delete {resume}")
    return pointer


def _restore_state(state_file: Path, resume: Path, optimizer: torch.optim.Optimizer,
                   scheduler: torch.optim.lr_scheduler.LRScheduler, sampler: Stateful) -> Progress:
    """Optimizer, scheduler, sampler and RNG states from the state file; its progress."""
    try:
        state = torch.load(state_file, map_location="cpu", weights_only=True)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        sampler.load_state_dict(state["sampler"])
        set_rng_states(state["rng"])
        return Progress(**state["progress"])
    except (RuntimeError, KeyError, ValueError, TypeError, EOFError) as err:
        raise ResumeError(f"{state_file}: cannot restore the training state ({err}); delete {resume}") from err
    except pickle.UnpicklingError as err:  # weights_only refused a global: not a file a gpt1 run wrote
        said = next((line for line in str(err).splitlines() if "global" in line.lower()), type(err).__name__)
        raise ResumeError(f"{state_file}: refused to unpickle it, it holds more than tensors and plain data "
                          f"({said[:150]}); delete {resume}") from err


def load_checkpoint(resume: Path, settings: dict[str, Any], total_steps: int, model: nn.Module,
                    optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler,
                    sampler: Stateful) -> Progress | None:
    """Restore everything from the checkpoint in `resume`, or return None when there is none. Refuses (before any
    training) a checkpoint of other settings, naming the key and both values, and a truncated or corrupt one."""
    pointer = read_pointer(resume)
    if pointer is None:
        return None
    diff = first_difference(pointer["settings"], settings)
    if diff is not None:
        key, old, new = diff
        raise ResumeError(f"{resume}: the checkpoint was made with {key}={old!r}, this run has {key}={new!r}; "
                          f"restore the setting to resume, or delete {resume} to start over")
    weights = _verified(resume, pointer.get("weights"), "weights")
    state_file = _verified(resume, pointer.get("state"), "state")
    tensors, _ = read_weights(weights)
    load_weights(model, tensors, str(weights))
    progress = _restore_state(state_file, resume, optimizer, scheduler, sampler)
    if not 0 < progress.step < total_steps or progress.step != pointer["step"]:
        raise ResumeError(f"{state_file}: step {progress.step} does not fit a run of {total_steps} updates; "
                          f"delete {resume}")
    return progress


__all__ = [
    "CHECKPOINT_FORMAT",
    "LATEST",
    "RESUME_FREE_KEYS",
    "Progress",
    "ResumeError",
    "Stateful",
    "atomic_write",
    "fingerprint",
    "load_checkpoint",
    "read_pointer",
    "rng_states",
    "run_settings",
    "save_checkpoint",
    "set_rng_states",
]
