"""How large fine-tuning's gradients are: the global norm of every update's gradient, the number a clip at
`--clip` (OpenAI's finetune-transformer-lm clips at 1, `--max_grad_norm`; ours clips nothing) would compare.

    GPT1_DATA_MIRROR=../shared/data OMP_NUM_THREADS=1 .venv/bin/python -m experiments.finetune_grad_norms \\
        --variant pretrained [--tasks cola,sst2] [--seed 0] [--clip 1.0]

Each task is one fine-tuning job of the default profile's recipe at its own training size (finetune.max_train_examples
and train_examples_by_task) through learning_curves.py's held-out design (the first 80% of its training data; nothing
a table reports), with the default profile's pre-trained GPT (`--variant pretrained`) or the same architecture from
scratch. A hook before every optimizer step takes the global L2 norm of the gradients, as
torch.nn.utils.clip_grad_norm_ computes it; the job itself runs unchanged. Printed per task: updates, the median,
90th percentile and largest norm, and the share of updates above `--clip`, over the whole job and over its first
tenth (the warm-up and the new head's first steps). Raw norms are appended to
experiments/results/finetune_grad_norms.jsonl.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from bench.common import REPO, machine
from experiments.learning_curves import holdout_job

RESULTS = Path(__file__).with_name("results") / "finetune_grad_norms.jsonl"
HOLDOUT = 100  # held-out examples scored: the job's score is not what this measures


def global_norm(optimizer: torch.optim.Optimizer) -> float:
    """The L2 norm of all of `optimizer`'s gradients together (clip_grad_norm_'s total_norm)."""
    grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    return torch.nn.utils.get_total_norm(grads).item()


def recording(norms: list[float]) -> Callable[..., None]:
    """A step pre-hook that appends each update's global gradient norm to `norms`."""

    def hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        norms.append(global_norm(optimizer))

    return hook


def summary(norms: Sequence[float], clip: float) -> dict[str, float]:
    """Median, 90th percentile and largest norm; the share above `clip` over all updates and the first tenth."""
    ordered = sorted(norms)
    first = norms[: max(1, len(norms) // 10)]
    return {"updates": len(norms), "median": statistics.median(ordered),
            "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], "max": ordered[-1],
            "above": sum(n > clip for n in norms) / len(norms), "above_first_tenth": sum(n > clip for n in first)
            / len(first)}


def training_size(task: str) -> int:
    """The default profile's training examples for `task`."""
    from gpt1.pipeline.config import load_config

    finetune = load_config(REPO / "params.yaml", "default").section("finetune")
    return finetune["train_examples_by_task"].get(task, finetune["max_train_examples"])


def measure(task: str, variant: str, seed: int) -> list[float]:
    """Every update's global gradient norm in one held-out job of `task`."""
    from gpt1.training.finetuning import finetune_job

    job, _ = holdout_job(task, variant, training_size(task), 3, HOLDOUT, seed, [])
    norms: list[float] = []
    handle = register_optimizer_step_pre_hook(recording(norms))
    try:
        finetune_job(job)
    finally:
        handle.remove()
    return norms


def main(argv: list[str] | None = None) -> int:
    from gpt1.pipeline.config import load_config

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=None, help="comma list (default: params.yaml's finetune_tasks)")
    parser.add_argument("--variant", default="pretrained", choices=("pretrained", "scratch"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clip", type=float, default=1.0, help="the clip a share is counted against (default 1)")
    args = parser.parse_args(argv)
    default_tasks = load_config(REPO / "params.yaml", "default").root["finetune_tasks"]
    tasks = args.tasks.split(",") if args.tasks else list(default_tasks)
    print(f"# {machine()}; variant {args.variant}, seed {args.seed}, clip {args.clip}")
    print("| task | examples | updates | median norm | 90th pct | max | above clip | above clip, first tenth |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for task in tasks:
        norms = measure(task, args.variant, args.seed)
        s = summary(norms, args.clip)
        print(f"| {task} | {training_size(task)} | {s['updates']} | {s['median']:.3f} | {s['p90']:.3f} | "
              f"{s['max']:.3f} | {s['above']:.1%} | {s['above_first_tenth']:.1%} |", flush=True)
        RESULTS.parent.mkdir(exist_ok=True)
        with RESULTS.open("a") as handle:
            handle.write(json.dumps({"task": task, "variant": args.variant, "seed": args.seed, "clip": args.clip,
                                     "machine": machine(), **s, "norms": norms}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
