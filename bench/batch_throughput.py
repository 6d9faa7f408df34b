"""Tokens per second of one pre-training update at several batch sizes, for the GPT and the LSTM of a profile.

    .venv/bin/python -m bench.batch_throughput --batches 8,16,32 --threads 1 --rounds 6

Why: a smaller batch gives more updates for the same tokens (docs/experiments.md, "Pre-training recipe"); whether it
costs wall time depends on how well a CPU keeps busy on small matrices, which differs between a transformer (all
positions at once) and an LSTM (one position after another). One update here is what gpt1.stages.pretrain does per
micro-batch: forward under the profile's autocast, cross-entropy, backward, clipping at 1.0, AdamW. The batch sizes
are timed interleaved (A B C C B A, ...), so the machine's drift hits them alike; medians over rounds are printed
with each batch's ratio to the largest.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from bench.common import REPO, machine
from gpt1.data.tokenizer import GPT1Tokenizer
from gpt1.modeling.checkpoints import build_model, model_config
from gpt1.pipeline.config import N_SPECIAL_TOKENS, Config, load_config
from gpt1.training.runtime import autocast, resolve_precision


def update_seconds(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: int, n_ctx: int, vocab: int,
                   dtype: torch.dtype | None) -> float:
    idx = torch.randint(0, vocab, (batch, n_ctx + 1))
    start = time.perf_counter()
    with autocast(torch.device("cpu"), dtype):
        logits = model(idx[:, :-1])
        logits = logits[0] if isinstance(logits, tuple) else logits
    loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), idx[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def vocab_size(cfg: Config, profile: str) -> int:
    """The profile's tokenizer's size where the pipeline has trained it, else the most the bpe settings allow."""
    folder = REPO / "results" / profile / "tokenizer"
    if folder.is_dir():
        return GPT1Tokenizer.load(folder).base_vocab_size
    bpe = cfg.section("bpe")
    return N_SPECIAL_TOKENS + 2 * bpe["limit_alphabet"] + bpe["merges"]


def measure(kind: str, profile: str, batches: list[int], rounds: int) -> dict[int, float]:
    """batch -> median tokens/s over the rounds."""
    cfg = load_config(REPO / "params.yaml", profile)
    vocab = vocab_size(cfg, profile)
    config = model_config(kind, cfg.section("model"), vocab)
    torch.manual_seed(0)
    model = build_model(kind, config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dtype = resolve_precision(cfg.section("pretrain")["precision"], torch.device("cpu"))
    n_ctx = config.n_ctx
    for batch in batches:  # warm-up: allocator and kernels
        update_seconds(model, optimizer, batch, n_ctx, vocab, dtype)
    seconds: dict[int, list[float]] = {b: [] for b in batches}
    for r in range(rounds):
        for batch in (batches if r % 2 == 0 else batches[::-1]):
            seconds[batch].append(update_seconds(model, optimizer, batch, n_ctx, vocab, dtype))
    return {b: b * n_ctx / statistics.median(s) for b, s in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="default")
    parser.add_argument("--models", default="gpt,lstm")
    parser.add_argument("--batches", default="8,16,32", help="comma list of sequences per update")
    parser.add_argument("--rounds", type=int, default=6, help="timed updates per batch size")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the pipeline's fan-out uses 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    batches = sorted(int(b) for b in args.batches.split(","))
    print(f"{machine()}; profile {args.profile}, {args.threads} thread(s), {args.rounds} rounds, medians")
    print("| model | " + " | ".join(f"batch {b}: tokens/s" for b in batches) + " |")
    print("| --- |" + " --- |" * len(batches))
    for kind in args.models.split(","):
        speed = measure(kind, args.profile, batches, args.rounds)
        top = speed[batches[-1]]
        print(f"| {kind} | " + " | ".join(f"{speed[b]:,.0f} ({speed[b] / top:.2f}x)" for b in batches) + " |")


if __name__ == "__main__":
    main()
