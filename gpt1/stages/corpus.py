"""Corpus stages: fetch (stream, cap, manifest) and clean (ftfy + standardisation, dedupe, split by document)."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from gpt1.data.pool import bounded_imap, pool_size
from gpt1.data.sources import iter_documents, source_description
from gpt1.data.textnorm import clean_text
from gpt1.pipeline import layout
from gpt1.pipeline.errors import Gpt1Error
from gpt1.pipeline.files import (
    file_record,
    read_jsonl,
    sha256_text,
    staged_outputs,
    write_json,
    write_jsonl_line,
)

if TYPE_CHECKING:
    from gpt1.pipeline.config import Config


def capped(documents: Iterable[dict[str, str]], max_documents: int | None, max_bytes: int | None):
    """Stop after `max_documents` documents or once `max_bytes` bytes of text have been taken."""
    total = 0
    for count, doc in enumerate(documents):
        if max_documents is not None and count >= max_documents:
            return
        if max_bytes is not None and total >= max_bytes:
            return
        total += len(doc["text"].encode())
        yield doc


def fetch(corpus: dict[str, Any], mirror: Path | None, out: Path, manifest: Path) -> dict[str, Any]:
    """Stream the corpus into a JSON-lines file, one {'id', 'text'} per document, and describe it."""
    docs = capped(iter_documents(corpus, mirror), corpus["max_documents"], corpus["max_bytes"])
    documents = text_bytes = 0
    with staged_outputs(out, manifest) as (tmp_out, tmp_manifest):
        with open(tmp_out, "w", encoding="utf-8") as handle:
            for doc in tqdm(docs, desc="fetch", unit="doc", total=corpus["max_documents"]):
                write_jsonl_line(handle, {"id": doc["id"], "text": doc["text"]})
                documents += 1
                text_bytes += len(doc["text"].encode())
        if documents == 0:
            raise Gpt1Error(f"corpus: the source {source_description(corpus, mirror)} gave no documents")
        info = {
            "source": source_description(corpus, mirror),
            "documents": documents,
            "text_bytes": text_bytes,
            "file_bytes": tmp_out.stat().st_size,  # the same as "bytes"; kept for earlier readers
            **file_record(tmp_out),
            "max_documents": corpus["max_documents"],
            "max_bytes": corpus["max_bytes"],
        }
        write_json(tmp_manifest, info)
    return info


def _clean_record(record: dict[str, str]) -> dict[str, str]:
    return {"id": record["id"], "text": clean_text(record["text"])}


def validation_indices(n: int, fraction: float, seed: int) -> set[int]:
    """A seeded choice of documents to hold out: at least one, and at least one left to train on."""
    if n < 2:
        raise Gpt1Error(f"corpus: {n} document(s) after cleaning; a train/validation split needs at least 2")
    k = min(max(1, round(n * fraction)), n - 1)
    return set(random.Random(seed).sample(range(n), k))


def _cleaned(records: Iterable[dict[str, str]], workers: int) -> Iterator[dict[str, str]]:
    return bounded_imap(_clean_record, records, workers)


def clean(raw: Path, corpus: dict[str, Any], outputs: dict[str, Path], manifest: Path, workers: int = 1):
    """Clean every document, drop empty and duplicate ones, split the rest by document into train/validation."""
    counts = {"raw": 0, "empty": 0, "duplicate": 0}
    seen: set[str] = set()
    kept_tmp = raw.with_name(f".{raw.name}.kept")
    try:
        with open(kept_tmp, "w", encoding="utf-8") as handle:
            workers = pool_size(raw, workers)
            for doc in tqdm(_cleaned(read_jsonl(raw), workers), desc="clean", unit="doc"):
                counts["raw"] += 1
                if not doc["text"]:
                    counts["empty"] += 1
                    continue
                digest = sha256_text(doc["text"])
                if digest in seen:
                    counts["duplicate"] += 1
                    continue
                seen.add(digest)
                write_jsonl_line(handle, doc)
        held_out = validation_indices(len(seen), corpus["validation_fraction"], corpus["seed"])
        return _split(kept_tmp, held_out, outputs, manifest, counts)
    finally:
        kept_tmp.unlink(missing_ok=True)


def _split(kept: Path, held_out: set[int], outputs: dict[str, Path], manifest: Path, counts: dict[str, int]):
    stats = {split: {"documents": 0, "text_bytes": 0} for split in layout.SPLITS}
    with staged_outputs(*(outputs[s] for s in layout.SPLITS), manifest) as temps:
        with contextlib.ExitStack() as stack:
            handles = {s: stack.enter_context(open(t, "w", encoding="utf-8"))
                       for s, t in zip(layout.SPLITS, temps, strict=False)}
            for index, doc in enumerate(read_jsonl(kept)):
                split = "validation" if index in held_out else "train"
                write_jsonl_line(handles[split], doc)
                stats[split]["documents"] += 1
                stats[split]["text_bytes"] += len(doc["text"].encode())
        for split, temp in zip(layout.SPLITS, temps, strict=False):
            stats[split].update(file_record(temp))
        info = {"dropped_empty": counts["empty"], "dropped_duplicate": counts["duplicate"],
                "raw_documents": counts["raw"]}
        info.update(stats)
        write_json(temps[-1], info)
    return info


def fetch_stage(cfg: Config, out: Path) -> dict[str, Any]:
    """`gpt1 fetch`: stream the profile's corpus into OUT/raw.jsonl and OUT/raw.manifest.json."""
    from gpt1.pipeline.tracking import published_run

    corpus = cfg.section("corpus")
    with published_run("fetch", cfg, {"corpus": corpus}) as run:
        info = fetch(corpus, cfg.data_mirror, out / layout.RAW, out / layout.RAW_MANIFEST)
        run.set_tags({"gpt1.data_source": info["source"], "gpt1.data_sha256": info["sha256"]})
        run.log_dataset(f"{layout.CORPUS}/{layout.RAW}", info["source"], info["sha256"], "fetched")
        run.log_metrics({"documents": info["documents"], "text_bytes": info["text_bytes"]})
        run.log_output(out / layout.RAW_MANIFEST)
    return info


def clean_stage(cfg: Config, raw_dir: Path, out: Path, workers: int) -> dict[str, Any]:
    """`gpt1 clean`: RAW/raw.jsonl -> OUT/{train,validation}.jsonl and OUT/manifest.json."""
    from gpt1.pipeline.files import check_types, read_json, require_files, verify_file
    from gpt1.pipeline.tracking import published_run

    require_files("fetch", raw_dir / layout.RAW, raw_dir / layout.RAW_MANIFEST)
    corpus = cfg.section("corpus")
    raw_info = read_json(raw_dir / layout.RAW_MANIFEST)
    check_types(raw_info, {"source": str, "sha256": str}, raw_dir / layout.RAW_MANIFEST, "fetch")
    verify_file(raw_dir / layout.RAW, raw_info, "fetch", raw_dir / layout.RAW_MANIFEST)
    params = {"corpus": {k: corpus[k] for k in ("validation_fraction", "seed")}}
    with published_run("clean", cfg, params) as run:
        run.set_tags({"gpt1.data_source": raw_info["source"], "gpt1.data_sha256": raw_info["sha256"]})
        run.log_dataset(f"{layout.CORPUS}/{layout.RAW}", raw_info["source"], raw_info["sha256"], "raw")
        outputs = {split: out / layout.corpus_split(split) for split in layout.SPLITS}
        info = clean(raw_dir / layout.RAW, corpus, outputs, out / layout.CORPUS_MANIFEST, workers)
        run.log_metrics({
            "dropped_empty": info["dropped_empty"],
            "dropped_duplicate": info["dropped_duplicate"],
            **{f"{s}_documents": info[s]["documents"] for s in layout.SPLITS},
            **{f"{s}_text_bytes": info[s]["text_bytes"] for s in layout.SPLITS},
        })
        run.log_output(out / layout.CORPUS_MANIFEST)
    return info
