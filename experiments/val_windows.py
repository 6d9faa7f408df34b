"""Validation perplexity with its standard error, per window, for one pre-trained model or two on the same windows.

    .venv/bin/python -m experiments.val_windows results/default/pretrain/gpt [OTHER_PRETRAIN_FOLDER]

The windows are the pre-training stage's own (`gpt1.data.ids.validation_offsets` with the profile's eval_batches x
batch_size and seed), so the mean loss equals the val_loss in the model's metrics.json. Prints the mean loss, its
standard error over the windows (sd / sqrt(windows)), and the perplexity at +-1 and 2 SE; with a second model, the
paired difference of the two losses window by window and its standard error.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import torch

from bench.common import REPO, machine
from gpt1.data.ids import load_ids, validation_offsets
from gpt1.modeling.checkpoints import load_pretrained
from gpt1.pipeline.config import load_config, pretrain_settings
from gpt1.training.pretraining import evaluate
from gpt1.training.runtime import Runtime, resolve_precision


def window_losses(folder: Path, ids: np.ndarray, offsets: torch.Tensor, dtype: torch.dtype | None) -> np.ndarray:
    """Each window's mean next-token loss, by the pre-training stage's own `evaluate`, one window at a time."""
    model, _ = load_pretrained(folder)
    rt = Runtime(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), distributed=False)
    n_ctx = model.config.n_ctx
    return np.array([evaluate(model, ids, window, 1, n_ctx, rt, dtype) for window in offsets.split(1)])


def describe(name: str, losses: np.ndarray) -> str:
    mean, se = losses.mean(), losses.std(ddof=1) / math.sqrt(len(losses))
    return (f"{name}: loss {mean:.4f} +- {se:.4f} nats over {len(losses)} windows; perplexity {math.exp(mean):.1f} "
            f"(1 SE {math.exp(mean - se):.1f}-{math.exp(mean + se):.1f}, 2 SE {math.exp(mean - 2 * se):.1f}-"
            f"{math.exp(mean + 2 * se):.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", type=Path, help="one or two pre-training output folders")
    parser.add_argument("--profile", default="default")
    parser.add_argument("--ids", type=Path, default=None, help="folder of validation.bin (default: the profile's)")
    args = parser.parse_args()
    cfg = load_config(REPO / "params.yaml", args.profile)
    pretrain = pretrain_settings(cfg, "gpt")
    ids_dir = args.ids or REPO / cfg.results("ids")
    ids = load_ids(ids_dir / "validation.bin", ids_dir / "validation.json").ids
    n_ctx = cfg.section("model")["n_ctx"]
    offsets = validation_offsets(len(ids), n_ctx, pretrain["eval_batches"] * pretrain["batch_size"], pretrain["seed"])
    dtype = resolve_precision(pretrain["precision"], torch.device("cpu"))
    print(machine())
    runs = [(str(folder), window_losses(folder, ids, offsets, dtype)) for folder in args.models[:2]]
    for name, losses in runs:
        print(describe(name, losses))
    if len(runs) == 2:
        diff = runs[1][1] - runs[0][1]
        se = diff.std(ddof=1) / math.sqrt(len(diff))
        print(f"paired: second minus first {diff.mean():+.4f} +- {se:.4f} nats ({diff.mean() / se:+.1f} SE); "
              f"perplexity ratio {math.exp(diff.mean()):.3f}")


if __name__ == "__main__":
    main()
