"""Small file helpers every stage uses: atomic outputs, JSON and JSON-lines, hashes."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from gpt1.errors import Gpt1Error

# Starting a pool of spawned workers costs seconds: below this input size one process finishes first.
SMALL_INPUT_BYTES = 4_000_000


def pool_size(source: Path, workers: int) -> int:
    """`workers` for an input worth a worker pool, else 1."""
    return workers if source.stat().st_size > SMALL_INPUT_BYTES else 1


def temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


@contextlib.contextmanager
def staged_outputs(*paths: str | Path) -> Iterator[list[Path]]:
    """Yield temporary paths for `paths`; rename them into place only if the block finishes.

    A killed or failing stage leaves nothing that looks finished, and no partial file behind.
    """
    finals = [Path(p) for p in paths]
    temps = [temp_path(p) for p in finals]
    for final in finals:
        final.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield temps
    except BaseException:
        for temp in temps:
            temp.unlink(missing_ok=True)
        raise
    for temp, final in zip(temps, finals, strict=True):
        if not temp.exists():
            raise FileNotFoundError(f"stage did not write its declared output {final}")
    for temp, final in zip(temps, finals, strict=True):
        os.replace(temp, final)


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


def write_jsonl_line(handle: IO[str], record: dict[str, Any]) -> int:
    """Write one record; return the bytes written."""
    line = json.dumps(record, ensure_ascii=False) + "\n"
    handle.write(line)
    return len(line.encode())


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            try:
                yield json.loads(line)
            except json.JSONDecodeError as err:
                message = f"{path}:{number}: not a JSON line ({err.msg}); re-run the stage that wrote it"
                raise Gpt1Error(message) from err


def sha256_file(path: str | Path, block: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def require_files(producer: str, *paths: str | Path) -> None:
    """Fail before any work if an input is missing, naming the file and the stage that makes it."""
    for path in paths:
        if not Path(path).is_file():
            raise Gpt1Error(f"{path}: missing; run the {producer} stage (gpt1 {producer}) first")


def file_record(path: str | Path) -> dict[str, Any]:
    """What a stage records of a file it wrote, so the stage that reads it can verify it: size and sha256."""
    return {"bytes": Path(path).stat().st_size, "sha256": sha256_file(path)}


def verify_file(path: str | Path, record: dict[str, Any], producer: str, where: str | Path) -> None:
    """Refuse `path` unless it has the size and sha256 of `record` (written by `producer` into `where`), before any
    expensive work: a changed, truncated or corrupt input is named with the stage that makes it again."""
    path = Path(path)
    fix = f"re-run the {producer} stage (gpt1 {producer})"
    if not path.is_file():
        raise Gpt1Error(f"{path}: missing; {fix}")
    if not isinstance(record, dict) or not {"bytes", "sha256"} <= record.keys():
        raise Gpt1Error(f"{where}: records no size and sha256 for {path.name}; {fix}")
    size = path.stat().st_size
    if size != record["bytes"]:
        raise Gpt1Error(f"{path}: {size} bytes, but {where} records {record['bytes']}; the file was changed or "
                        f"truncated, {fix}")
    if sha256_file(path) != record["sha256"]:
        raise Gpt1Error(f"{path}: sha256 differs from the one {where} records; the file was changed or is corrupt, "
                        f"{fix}")
