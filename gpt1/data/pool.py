"""Worker pools for the stages that fan text out (clean, bpe, encode): how many workers an input is worth, and an
ordered map over a pool that reads a bounded window ahead. A library module: it knows nothing of the pipeline."""

from __future__ import annotations

import itertools
import multiprocessing as mp
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

# Starting a pool of spawned workers costs seconds: below this input size one process finishes first.
SMALL_INPUT_BYTES = 4_000_000


def pool_size(source: Path, workers: int) -> int:
    """`workers` for an input worth a worker pool, else 1."""
    return workers if source.stat().st_size > SMALL_INPUT_BYTES else 1


def bounded_imap(function: Callable[[Any], Any], items: Iterable, workers: int, window: int = 64) -> Iterator:
    """`Pool.imap` in order, but reading at most `window` items ahead, so memory does not grow with the input; one
    worker maps in this process."""
    items = iter(items)
    if workers <= 1:
        yield from map(function, items)
        return
    with mp.get_context("spawn").Pool(workers) as pool:
        while batch := list(itertools.islice(items, window)):
            yield from pool.imap(function, batch)


__all__ = ["SMALL_INPUT_BYTES", "bounded_imap", "pool_size"]
