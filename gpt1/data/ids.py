"""Corpus splits -> token ids: one flat memory-mapped file per split plus a small JSON header.

Encoding streams: documents are read one at a time and cut into paragraph-aligned chunks, workers encode a
bounded window of chunks, and the ids are appended to the file, so peak memory does not grow with the corpus.
Pre-training reads them as random windows (`WindowSampler`, `read_windows`). A library: the encode stage is
`gpt1.stages.encode`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from gpt1.data.pool import bounded_imap, pool_size
from gpt1.data.tokenizer import GPT1Tokenizer, paragraph_chunks
from gpt1.pipeline import layout
from gpt1.pipeline.errors import IdsError
from gpt1.pipeline.files import (
    check_types,
    file_record,
    read_json,
    read_jsonl,
    sha256_file,
    staged_outputs,
    verify_file,
    write_json,
)

if TYPE_CHECKING:
    import torch

HEADER_TYPES = {"tokens": int, "dtype": str, "vocab_size": int, "tokenizer_sha256": str, "documents": int,
                "source_sha256": str, "pretokenizer": str, "bytes": int, "sha256": str}  # the last two: the .bin's
HEADER_KEYS = tuple(HEADER_TYPES)


@cache
def _worker_tokenizer(folder: str) -> GPT1Tokenizer:
    return GPT1Tokenizer.load(folder)


def _encode_chunk(job: tuple[str, str, str]) -> bytes:
    folder, dtype, text = job
    return np.asarray(_worker_tokenizer(folder).encode(text), dtype=dtype).tobytes()


def _jobs(source: Path, folder: str, dtype: str, chunk_chars: int, separator: list[int], counter: dict[str, int]):
    """Chunks of every document; a separator (as between two paragraphs) goes between documents and chunks."""
    sep = np.asarray(separator, dtype=dtype).tobytes()
    for doc in read_jsonl(source):
        counter["documents"] += 1
        for chunk in paragraph_chunks(doc["text"], chunk_chars):
            if counter["chunks"]:
                yield sep
            counter["chunks"] += 1
            yield (folder, dtype, chunk)


def encode_split(
    tokenizer_dir: Path, source: Path, bin_out: Path, header_out: Path, dtype: str, chunk_chars: int, workers: int
) -> dict[str, Any]:
    """Encode one corpus split (JSON lines of {'id', 'text'}) into `bin_out` and describe it in `header_out`."""
    tok = GPT1Tokenizer.load(tokenizer_dir)
    workers = pool_size(source, workers)
    if tok.vocab_size > np.iinfo(dtype).max + 1:  # ids 0 .. max
        raise IdsError(f"encode.dtype: {tok.vocab_size} tokens do not fit {dtype}; use uint32")
    counter = {"documents": 0, "chunks": 0}
    jobs = _jobs(source, str(tokenizer_dir), dtype, chunk_chars, tok.paragraph_separator(), counter)
    # Separators are already bytes; only chunks go to the workers.
    encode = _encode_or_pass
    tokens = 0
    with staged_outputs(bin_out, header_out) as (tmp_bin, tmp_header):
        with open(tmp_bin, "wb") as handle, tqdm(desc=f"encode {source.stem}", unit="tok", unit_scale=True) as bar:
            for data in bounded_imap(encode, jobs, workers):
                handle.write(data)
                n = len(data) // np.dtype(dtype).itemsize
                tokens += n
                bar.update(n)
        header = {
            "tokens": tokens,
            "dtype": dtype,
            "vocab_size": tok.base_vocab_size,
            "tokenizer_sha256": tok.fingerprint(),
            "pretokenizer": tok.pretokenizer,
            "documents": counter["documents"],
            "source_sha256": sha256_file(source),
            **file_record(tmp_bin),
        }
        if tokens == 0:
            raise IdsError(f"{source}: no tokens; is the corpus split empty?")
        write_json(tmp_header, header)
    return header


def _encode_or_pass(job: bytes | tuple[str, str, str]) -> bytes:
    return job if isinstance(job, bytes) else _encode_chunk(job)


@dataclass(frozen=True)
class TokenIds:
    """An encoded split: the ids as a read-only memmap, and its header."""

    ids: np.memmap
    header: dict[str, Any]

    def __len__(self) -> int:
        return len(self.ids)


def _id_dtype(name: str, header_path: Path) -> np.dtype:
    """The header's dtype, if it is one encode writes (encode.dtype)."""
    if name not in layout.IDS_DTYPE_VOCAB:
        raise IdsError(f"{header_path}: dtype {name!r} is not one of {', '.join(layout.IDS_DTYPE_VOCAB)} "
                       f"(encode.dtype); re-run gpt1 encode")
    return np.dtype(name)


def load_ids(bin_path: str | Path, header_path: str | Path, tokenizer_sha256: str | None = None) -> TokenIds:
    """Open an encoded split, checking that header, file size and (optionally) tokenizer agree."""
    bin_path, header_path = Path(bin_path), Path(header_path)
    for path in (bin_path, header_path):
        if not path.is_file():
            raise IdsError(f"{path}: missing; run the encode stage (gpt1 encode) first")
    header = read_json(header_path)
    missing = [k for k in HEADER_KEYS if k not in header]
    if missing:
        raise IdsError(f"{header_path}: header lacks {', '.join(missing)}; re-run gpt1 encode")
    check_types(header, HEADER_TYPES, header_path, "encode", IdsError)
    expected = header["tokens"] * _id_dtype(header["dtype"], header_path).itemsize
    if bin_path.stat().st_size != expected:
        raise IdsError(
            f"{bin_path}: {bin_path.stat().st_size} bytes, header says {header['tokens']} {header['dtype']} tokens "
            f"({expected} bytes); the file is truncated or stale, re-run gpt1 encode"
        )
    verify_file(bin_path, header, "encode", header_path)
    if tokenizer_sha256 is not None and header["tokenizer_sha256"] != tokenizer_sha256:
        raise IdsError(
            f"{header_path}: encoded with tokenizer {header['tokenizer_sha256'][:12]}, but the tokenizer is "
            f"{tokenizer_sha256[:12]}; re-run gpt1 encode"
        )
    return TokenIds(np.memmap(bin_path, dtype=header["dtype"], mode="r"), header)


# ----------------------------------------------------------------------------------------------------------------
# Training windows: random contiguous windows of the ids, for pre-training

VALIDATION_SEED_OFFSET = 1_000_003  # validation windows come from their own stream, not the training one


class WindowSampler:
    """Offsets of random contiguous windows of n_ctx + 1 tokens, from a generator whose state can be saved."""

    def __init__(self, n_tokens: int, n_ctx: int, seed: int) -> None:
        import torch  # here, not at the top: encoding needs no torch

        self.high = n_tokens - n_ctx  # offsets 0 .. n_tokens - n_ctx - 1: the last window ends at the last token
        self.generator = torch.Generator().manual_seed(seed)

    def draw(self, count: int) -> torch.Tensor:
        import torch

        return torch.randint(0, self.high, (count,), generator=self.generator)

    def state_dict(self) -> torch.Tensor:
        return self.generator.get_state()

    def load_state_dict(self, state: torch.Tensor) -> None:
        self.generator.set_state(state)


def validation_offsets(n_tokens: int, n_ctx: int, count: int, seed: int) -> torch.Tensor:
    """The fixed validation windows: the same for every evaluation, every run with this seed, any process count."""
    return WindowSampler(n_tokens, n_ctx, seed + VALIDATION_SEED_OFFSET).draw(count)


def read_windows(ids: np.ndarray, offsets: torch.Tensor, n_ctx: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """x = window[:-1], y = window[1:] for each offset, as int64 on `device`."""
    import torch

    rows = torch.from_numpy(np.stack([ids[o : o + n_ctx + 1] for o in offsets.tolist()]).astype(np.int64))
    if device.type == "cuda":
        rows = rows.pin_memory().to(device, non_blocking=True)
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
