"""Which settings rerun which stage: stage -> the params.yaml keys whose change must rerun it, declared once.

A key is dotted, `profile.` standing for the selected profile (`profile.corpus` is profiles.<profile>.corpus). The
engines read this table: Snakemake's rules take the keys' values as one param (`settings=settings("fetch")` in
workflow/rules/common.smk), so a changed value replans the job (Snakemake's "params" rerun trigger); dvc.yaml lists
the same keys in each stage's `params:` (as profiles.${profile}.corpus; DVC cannot import them), and
tests/test_dag.py checks that every dvc.yaml stage lists exactly these. `data_mirror` is resolved as the stages
resolve it (GPT1_DATA_MIRROR wins; a profile that makes its own data has none), by `resolve`.

A library: plain data and a lookup in the params mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

PROFILE = "profile."
FINETUNE = ("profile.cpu", "device", "profile.finetune")  # a fine-tuning job, an ablation: recipe and numerics

RERUN_SETTINGS: dict[str, tuple[str, ...]] = {
    "fetch": ("profile.corpus", "data_mirror"),
    "clean": ("profile.corpus",),
    "bpe": ("profile.bpe", "profile.encode.chunk_chars"),
    "encode": ("profile.encode",),
    "pretrain": ("profile.cpu", "device", "profile.model", "profile.pretrain"),
    # the settings that decide which examples are encoded (the rest of the finetune section does not)
    "encode_task": ("profile.finetune.train_cuts", "profile.finetune.max_train_examples",
                    "profile.finetune.train_examples_by_task", "profile.finetune.max_eval_examples",
                    "profile.model.n_ctx", "data_mirror"),
    "finetune": FINETUNE,
    "ablation_no_aux": FINETUNE,
    "ablation_lstm": FINETUNE,
    "zeroshot": ("profile.cpu", "device", "profile.zeroshot", "zeroshot_reference", "data_mirror"),
    "layers": ("profile.cpu", "device", "profile.layers", "profile.finetune"),
    # the lists of what to read; the page of samples: its settings, and the numerics its model computes with
    "report": ("finetune_tasks", "finetune_variants", "seeds", "pretrain_models", "ablation_tasks",
               "layer_transfer_tasks", "profile.cpu", "device", "profile.samples"),
}


def dvc_key(key: str) -> str:
    """The key as dvc.yaml's `params:` writes it."""
    return "profiles.${profile}." + key.removeprefix(PROFILE) if key.startswith(PROFILE) else key


def resolve(stage: str, root: Mapping[str, Any], profile: str, mirror: Path | str | None) -> dict[str, Any]:
    """The values of `stage`'s rerun settings in params.yaml's `root` for `profile`, `mirror` standing for
    data_mirror (the one the stages read)."""
    values = {}
    for key in RERUN_SETTINGS[stage]:
        if key == "data_mirror":
            values[key] = None if mirror is None else str(mirror)
            continue
        node: Any = root["profiles"][profile] if key.startswith(PROFILE) else root
        for part in key.removeprefix(PROFILE).split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        values[key] = node
    return values


__all__ = ["RERUN_SETTINGS", "dvc_key", "resolve"]
