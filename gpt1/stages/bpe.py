"""The bpe stage (`gpt1 bpe`): learn the GPT-1 BPE on the cleaned corpus with `gpt1.data.tokenizer` and write the
tokenizer folder; one MLflow run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gpt1.data.tokenizer import GPT1Tokenizer, train_on_corpus
from gpt1.pipeline import layout

if TYPE_CHECKING:
    from gpt1.pipeline.config import Config


def bpe_stage(cfg: Config, corpus_dir: Path, out: Path, workers: int) -> GPT1Tokenizer:
    """`gpt1 bpe`: learn the BPE on CORPUS/train.jsonl; write OUT/tokenizer.json and OUT/gpt1_tokenizer.json."""
    import time

    from gpt1.pipeline.files import read_json, require_files, staged_outputs, verify_file
    from gpt1.pipeline.tracking import published_run

    train_file, manifest_file = corpus_dir / layout.corpus_split("train"), corpus_dir / layout.CORPUS_MANIFEST
    require_files("clean", train_file, manifest_file)
    bpe, chunk_chars = cfg.section("bpe"), cfg.section("encode")["chunk_chars"]
    manifest = read_json(manifest_file)
    verify_file(train_file, manifest.get("train"), "clean", manifest_file)
    with published_run("bpe", cfg, {"bpe": bpe}) as run:
        run.set_tags({"gpt1.data_sha256": manifest["train"]["sha256"]})
        run.log_dataset(f"{layout.CORPUS}/{train_file.name}", f"gpt1 clean:{train_file}", manifest["train"]["sha256"],
                        "train")
        start = time.perf_counter()
        tok = train_on_corpus(train_file, bpe, chunk_chars, workers)
        seconds = time.perf_counter() - start
        if tok.n_merges < bpe["merges"]:
            print(f"bpe: the corpus yields only {tok.n_merges} of {bpe['merges']} merges at min_frequency "
                  f"{bpe['min_frequency']}")
        with staged_outputs(out / layout.TOKENIZER_FILE, out / layout.TOKENIZER_META) as (tmp_tok, tmp_meta):
            tok.save_files(tmp_tok, tmp_meta)
        run.set_tags({"gpt1.tokenizer_sha256": tok.fingerprint()})
        run.log_metrics({"train_seconds": seconds, "merges": tok.n_merges, "base_vocab_size": tok.base_vocab_size})
        run.log_output(out / layout.TOKENIZER_FILE)
        run.log_output(out / layout.TOKENIZER_META)
    return tok
