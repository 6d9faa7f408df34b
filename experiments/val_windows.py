"""Validation perplexity with its standard error, per window, for one pre-trained model or two on the same windows.

    .venv/bin/python -m experiments.val_windows results/default/pretrain/gpt [OTHER_PRETRAIN_FOLDER]

The windows are the pre-training stage's own (`gpt1.data.ids.validation_offsets` with the profile's eval_batches x
batch_size and seed), so the mean loss equals the val_loss in the model's metrics.json. Prints the mean loss and
two standard errors of it, and the perplexity at +-1 and 2 SE of each; with a second model, the paired difference of
the two losses window by window and its two standard errors:
- over the windows (sd / sqrt(windows)), as if they were independent;
- clustered by document (the validation split is a handful of novels; windows of one novel share its style and
  vocabulary, and neighbours overlap): the cluster-robust standard error of the mean, sqrt(G / (G - 1) *
  sum over documents of (the sum of its windows' deviations)^2) / windows, with G - 1 degrees of freedom. A window
  belongs to the document it starts in. The documents' bounds come from encoding each document of the corpus split
  alone with the encode stage's own `encode_split` (checked: with the separators between them they add up to the
  encoded split).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from bench.common import REPO, machine
from gpt1.data.ids import encode_split, load_ids, validation_offsets
from gpt1.data.tokenizer import GPT1Tokenizer
from gpt1.modeling.checkpoints import load_pretrained
from gpt1.pipeline.config import load_config, pretrain_settings
from gpt1.pipeline.files import read_jsonl
from gpt1.training.pretraining import evaluate
from gpt1.training.runtime import Runtime, resolve_precision


def window_losses(folder: Path, ids: np.ndarray, offsets: torch.Tensor, dtype: torch.dtype | None) -> np.ndarray:
    """Each window's mean next-token loss, by the pre-training stage's own `evaluate`, one window at a time."""
    model, _ = load_pretrained(folder)
    rt = Runtime(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), distributed=False)
    n_ctx = model.config.n_ctx
    return np.array([evaluate(model, ids, window, 1, n_ctx, rt, dtype) for window in offsets.split(1)])


def document_starts(source: Path, tokenizer_dir: Path, dtype: str, chunk_chars: int, total: int) -> np.ndarray:
    """The offset in the encoded split where each document of `source` (the corpus split, JSON lines) begins."""
    separator = len(GPT1Tokenizer.load(tokenizer_dir).paragraph_separator())
    lengths = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, doc in enumerate(read_jsonl(source)):
            one = Path(tmp, f"{i}.jsonl")
            one.write_text(json.dumps(doc) + "\n")
            lengths.append(encode_split(tokenizer_dir, one, Path(tmp, f"{i}.bin"), Path(tmp, f"{i}.json"), dtype,
                                        chunk_chars, 1)["tokens"])
    starts = np.cumsum([0] + [n + separator for n in lengths[:-1]])
    if starts[-1] + lengths[-1] != total:
        raise SystemExit(f"{source}: its documents encode to {starts[-1] + lengths[-1]} tokens with separators, "
                         f"the split holds {total}; was it encoded with another tokenizer or chunk_chars?")
    return starts


def window_documents(starts: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The document each window starts in (its index in `starts`)."""
    return np.searchsorted(starts, offsets, side="right") - 1


@dataclass(frozen=True)
class Errors:
    mean: float
    windows_se: float
    clustered_se: float
    clusters: int

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """The clustered interval, with the t quantile of clusters - 1 degrees of freedom."""
        half = stats.t.ppf(0.5 + level / 2, self.clusters - 1) * self.clustered_se
        return self.mean - half, self.mean + half


def errors(values: np.ndarray, documents: np.ndarray) -> Errors:
    """The mean of `values` (one per window) with its standard error over windows and clustered by document."""
    n, mean = len(values), float(values.mean())
    groups = np.unique(documents)
    sums = np.array([np.sum(values[documents == g] - mean) for g in groups])
    clustered = math.sqrt(len(groups) / (len(groups) - 1) * np.sum(sums**2)) / n if len(groups) > 1 else math.nan
    return Errors(mean, float(values.std(ddof=1) / math.sqrt(n)), clustered, len(groups))


def describe(name: str, losses: np.ndarray, documents: np.ndarray) -> str:
    e = errors(losses, documents)
    low, high = e.interval()
    return (f"{name}: loss {e.mean:.4f} nats over {len(losses)} windows in {e.clusters} documents, SE "
            f"{e.windows_se:.4f} by window, {e.clustered_se:.4f} by document; perplexity {math.exp(e.mean):.1f} "
            f"(1 SE by window {math.exp(e.mean - e.windows_se):.1f}-{math.exp(e.mean + e.windows_se):.1f}; "
            f"1 SE by document {math.exp(e.mean - e.clustered_se):.1f}-{math.exp(e.mean + e.clustered_se):.1f}, "
            f"95% by document (t, {e.clusters - 1} df) {math.exp(low):.1f}-{math.exp(high):.1f}); per document: "
            + ", ".join(f"{math.exp(losses[documents == g].mean()):.1f} ({np.sum(documents == g)} windows)"
                        for g in np.unique(documents)))


def describe_paired(first: np.ndarray, second: np.ndarray, documents: np.ndarray) -> str:
    e = errors(second - first, documents)
    t = e.mean / e.clustered_se
    p = 2 * stats.t.sf(abs(t), e.clusters - 1)
    return (f"paired: second minus first {e.mean:+.4f} nats, SE {e.windows_se:.4f} by window "
            f"({e.mean / e.windows_se:+.1f} SE), {e.clustered_se:.4f} by document ({t:+.1f} SE, t-test p {p:.2g} "
            f"on {e.clusters - 1} df); perplexity ratio {math.exp(e.mean):.3f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", type=Path, help="one or two pre-training output folders")
    parser.add_argument("--profile", default="default")
    parser.add_argument("--results", type=Path, default=None,
                        help="the profile's results tree (default: the profile's, here); its ids/, corpus/, tokenizer/")
    args = parser.parse_args(argv)
    cfg = load_config(REPO / "params.yaml", args.profile)
    results = args.results or REPO / cfg.results()
    pretrain, encode = pretrain_settings(cfg, "gpt"), cfg.section("encode")
    ids = load_ids(results / "ids" / "validation.bin", results / "ids" / "validation.json").ids
    n_ctx = cfg.section("model")["n_ctx"]
    offsets = validation_offsets(len(ids), n_ctx, pretrain["eval_batches"] * pretrain["batch_size"], pretrain["seed"])
    starts = document_starts(results / "corpus" / "validation.jsonl", results / "tokenizer", encode["dtype"],
                             encode["chunk_chars"], len(ids))
    documents = window_documents(starts, offsets.numpy())
    dtype = resolve_precision(pretrain["precision"], torch.device("cpu"))
    print(machine())
    runs = [(str(folder), window_losses(folder, ids, offsets, dtype)) for folder in args.models[:2]]
    for name, losses in runs:
        print(describe(name, losses, documents))
    if len(runs) == 2:
        print(describe_paired(runs[0][1], runs[1][1], documents))


if __name__ == "__main__":
    main()
