"""Milliseconds of one AdamW step over a fine-tuning model's parameters: PyTorch's foreach kernels against fused.

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.optimizer_step --rounds 40

Why: a fine-tuning update of GLUE's short sentences is small (16 sequences of ~15-70 tokens), so the optimizer's
step over all 5.3M parameters is a large share of it. The model is the default profile's GPT with a classification
head (`gpt1.modeling.heads.FinetuneModel`, the parameter groups fine-tuning uses); the gradients are random. The two
implementations step interleaved (A B B A ...), medians printed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bench.common import REPO, machine
from gpt1.data.tasks import get_task
from gpt1.modeling.checkpoints import build_model, model_config
from gpt1.modeling.heads import FinetuneModel
from gpt1.pipeline.config import load_config


def step_ms(optimizer: torch.optim.Optimizer) -> float:
    start = time.perf_counter()
    optimizer.step()
    return 1000 * (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--vocab", type=int, default=8197, help="the default profile's tokenizer has 8,197 tokens")
    args = parser.parse_args()
    cfg = load_config(REPO / "params.yaml", "default")
    torch.manual_seed(0)
    models = {}
    for fused in (False, True):
        model = FinetuneModel(build_model("gpt", model_config("gpt", cfg.section("model"), args.vocab)),
                              get_task("sst2"), 0.1)
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        models[fused] = torch.optim.AdamW(model.param_groups(0.01), lr=1e-4, fused=fused or None)
    for optimizer in models.values():  # warm-up: allocator and kernels
        step_ms(optimizer)
    times: dict[bool, list[float]] = {False: [], True: []}
    for r in range(args.rounds):
        for fused in ((False, True) if r % 2 == 0 else (True, False)):
            times[fused].append(step_ms(models[fused]))
    parameters = sum(p.numel() for group in models[False].param_groups for p in group["params"])
    a, b = statistics.median(times[False]), statistics.median(times[True])
    print(f"{machine()}; {torch.get_num_threads()} thread(s); {parameters:,} parameters; {args.rounds} rounds")
    print(f"| AdamW | ms per step (median) |\n| --- | ---: |\n| foreach (default) | {a:.1f} |\n"
          f"| fused | {b:.1f} ({b / a:.2f}x) |")


if __name__ == "__main__":
    main()
