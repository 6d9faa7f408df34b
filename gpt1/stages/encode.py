"""The encode stage (`gpt1 encode`): the cleaned corpus's train and validation splits -> token-id files
(`gpt1.data.ids`), with the tokenizer of the bpe stage; one MLflow run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gpt1.data.ids import encode_split
from gpt1.data.tokenizer import GPT1Tokenizer
from gpt1.pipeline import layout
from gpt1.pipeline.files import read_json, verify_file

if TYPE_CHECKING:
    from gpt1.pipeline.config import Config


def encode_stage(cfg: Config, tokenizer_dir: Path, corpus_dir: Path, out: Path, workers: int) -> dict[str, dict]:
    """`gpt1 encode`: CORPUS/{train,validation}.jsonl -> OUT/{split}.bin + OUT/{split}.json."""
    import time

    from gpt1.pipeline.files import require_files
    from gpt1.pipeline.tracking import published_run

    require_files("clean", *(corpus_dir / layout.corpus_split(split) for split in layout.SPLITS),
                  corpus_dir / layout.CORPUS_MANIFEST)
    manifest = read_json(corpus_dir / layout.CORPUS_MANIFEST)
    for split in layout.SPLITS:
        verify_file(corpus_dir / layout.corpus_split(split), manifest.get(split), "clean",
                    corpus_dir / layout.CORPUS_MANIFEST)
    GPT1Tokenizer.load(tokenizer_dir)  # fails early, naming the missing file
    encode = cfg.section("encode")
    headers = {}
    with published_run("encode", cfg, {"encode": encode}) as run:
        for split in layout.SPLITS:
            name = layout.corpus_split(split)
            run.log_dataset(f"{layout.CORPUS}/{name}", f"gpt1 clean:{corpus_dir / name}", manifest[split]["sha256"],
                            split)
            start = time.perf_counter()
            header = encode_split(tokenizer_dir, corpus_dir / name, out / layout.ids_bin(split),
                                  out / layout.ids_header(split), encode["dtype"], encode["chunk_chars"], workers)
            seconds = time.perf_counter() - start
            run.log_metrics({f"{split}_tokens": header["tokens"],
                             f"{split}_tokens_per_second": header["tokens"] / seconds})
            run.log_output(out / layout.ids_header(split))
            headers[split] = header
        run.set_tags({"gpt1.tokenizer_sha256": headers["train"]["tokenizer_sha256"]})
    return headers
