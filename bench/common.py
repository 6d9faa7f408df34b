"""Shared by the benchmarks and the experiments (experiments/): the repository, the data mirror, the machine's
description, medians, the 99-novel corpus as JSON lines."""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("GPT1_DATA_MIRROR", REPO.parent / "shared" / "data"))


def machine() -> str:
    return (f"{platform.machine()} {os.cpu_count()} cores, {platform.python_implementation()} "
            f"{platform.python_version()}, torch {torch.__version__}, {datetime.date.today().isoformat()}")


def median(values: list[float]) -> float:
    return statistics.median(values)


def novels_jsonl(out: Path, copies: int = 1, limit: int | None = None) -> Path:
    """The mirror's Gutenberg novels, cleaned as the clean stage does, `copies` times over (a bigger corpus).
    Reuses the default profile's cleaned corpus when the pipeline has made it."""
    from gpt1.data.sources import DatasetRef, load_split
    from gpt1.data.textnorm import clean_text

    cache = out.with_name("novels-clean.jsonl")
    made = [REPO / "results/default/corpus" / f"{split}.jsonl" for split in ("train", "validation")]
    if not cache.exists() and all(p.is_file() for p in made):
        cache.write_text("".join(p.read_text() for p in made))
    if not cache.exists():
        ds = load_split(DatasetRef("books/gutenberg", "default", "train"), MIRROR, columns=["text"])
        with open(cache, "w") as handle:
            for i, row in enumerate(ds):
                handle.write(json.dumps({"id": str(i), "text": clean_text(row["text"])}) + "\n")
    lines = cache.read_text().splitlines()[:limit]
    with open(out, "w") as handle:
        for _ in range(copies):
            handle.write("\n".join(lines) + "\n")
    return out
