"""What params.yaml's top-level lists ask the pipeline to run: the fine-tuning fan-out (finetune_tasks x
finetune_variants x seeds, and Table 5's ablations on ablation_tasks), the layer-transfer jobs and the pre-trained
models. Built here once and read by the Snakemake rules (workflow/rules/common.smk: the targets), the report (it
reads exactly these runs, and says why one it is asked for is not planned) and the tests. dvc.yaml loops over the
same lists (foreach/matrix), and tests/test_dag.py checks that both engines plan these jobs.

A library: plain data from the params mapping, no file read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ABLATION_VARIANTS = ("no_aux", "lstm")  # Table 5's other rows: run on ablation_tasks only


@dataclass(frozen=True)
class Plan:
    """The runs params.yaml asks for."""

    finetune_tasks: tuple[str, ...]
    finetune_variants: tuple[str, ...]
    seeds: tuple[int, ...]
    ablation_tasks: tuple[str, ...]
    layer_transfer_tasks: tuple[str, ...]
    pretrain_models: tuple[str, ...]

    @classmethod
    def from_params(cls, root: Mapping[str, Any]) -> Plan:
        """From params.yaml's top level (a Config's `root`, or Snakemake's `config`)."""
        keys = ("finetune_tasks", "finetune_variants", "seeds", "ablation_tasks", "layer_transfer_tasks",
                "pretrain_models")
        return cls(*(tuple(root[key]) for key in keys))

    def finetune_runs(self) -> list[tuple[str, str, int]]:
        """(task, variant, seed) of every fine-tuning job: the variants on every task, then the ablations."""
        runs = [(t, v, s) for t in self.finetune_tasks for v in self.finetune_variants for s in self.seeds]
        return runs + [(t, v, s) for t in self.ablation_tasks for v in ABLATION_VARIANTS for s in self.seeds]

    def layer_runs(self) -> list[tuple[str, int]]:
        """(task, seed) of every layer-transfer job."""
        return [(t, s) for t in self.layer_transfer_tasks for s in self.seeds]

    def why_not_planned(self, task: str, variant: str) -> str | None:
        """None when params.yaml asks for (task, variant); else the reason it does not."""
        if variant in ABLATION_VARIANTS:
            if task not in self.ablation_tasks:
                return f"the {variant} ablation runs on params.yaml ablation_tasks only, and {task} is not one"
            return None
        if variant not in self.finetune_variants:
            return f"variant {variant} is not in params.yaml finetune_variants"
        if task not in self.finetune_tasks:
            return f"task {task} is not in params.yaml finetune_tasks"
        return None


__all__ = ["ABLATION_VARIANTS", "Plan"]
