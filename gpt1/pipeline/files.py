"""Small file helpers every stage uses: atomic outputs, JSON and JSON-lines, hashes."""

from __future__ import annotations

import contextlib
import contextvars
import csv
import hashlib
import json
import os
import tempfile
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from gpt1.pipeline.errors import Gpt1Error


def temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


@contextlib.contextmanager
def staged_outputs(*paths: str | Path) -> Iterator[list[Path]]:
    """Yield temporary paths for `paths`; rename them into place only if the block finishes, or, inside a
    `publication()`, when that ends.

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
    staged = dict(zip(finals, temps, strict=True))
    if (held := _HELD.get()) is not None:
        held.update(staged)
    else:
        _rename(staged)


# Inside a publication(): the outputs written so far, final path -> the temporary file holding it.
_HELD: contextvars.ContextVar[dict[Path, Path] | None] = contextvars.ContextVar("gpt1_held_outputs", default=None)


@contextlib.contextmanager
def publication() -> Iterator[None]:
    """Hold back the renames of every `staged_outputs` block inside it until the block ends, then make them all.

    A stage runs its work and its MLflow logging inside one, so a failure anywhere, the tracking store's included,
    leaves the earlier run's outputs as they were; `staged_path` finds a written output while it is still held."""
    if _HELD.get() is not None:
        raise RuntimeError("publication() inside a publication(): the outer one publishes everything")
    held: dict[Path, Path] = {}
    token = _HELD.set(held)
    try:
        yield
    except BaseException:
        for temp in held.values():
            temp.unlink(missing_ok=True)
        raise
    finally:
        _HELD.reset(token)
    _rename(held)


def staged_path(path: str | Path) -> Path:
    """Where output `path` is now: inside a publication, the temporary file holding it (an output not written in
    it is an error: its file would be the earlier run's); outside one, the path."""
    held = _HELD.get()
    if held is None:
        return Path(path)
    if Path(path) not in held:
        raise RuntimeError(f"{path}: not an output written in this publication (written by staged_outputs under "
                           f"another spelling?)")
    return held[Path(path)]


def _rename(staged: Mapping[Path, Path]) -> None:
    """Every temporary file onto its final path; if one rename fails (or a signal stops them), the temporary files
    not yet renamed are removed, not left behind."""
    pairs = list(staged.items())
    for done, (final, temp) in enumerate(pairs):
        try:
            os.replace(temp, final)
        except BaseException:
            for _, left in pairs[done:]:
                left.unlink(missing_ok=True)
            raise


# Timings differ from run to run: they go to MLflow and the logs, never into files whose bytes must reproduce.
TIMING_KEYS = frozenset({"wall_seconds", "train_seconds", "device_seconds", "tokens_per_second"})


def unwritable(folder: Path) -> OSError | None:
    """Why no file can be made in `folder` (an existing folder), or None: a nameless temporary file tries."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        return err
    return None


def without_timings(metrics: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in metrics.items() if key not in TIMING_KEYS}


def write_json(path: Path, data: Any, *, sort_keys: bool = True) -> None:
    """The project's one JSON file format: indented by 2, keys sorted unless the order says something."""
    path.write_text(json.dumps(data, indent=2, sort_keys=sort_keys) + "\n")


def write_csv(path: Path, fields: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    """The project's one CSV file format: a header row, then the rows (the csv module's dialect)."""
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(fields))
        writer.writeheader()
        writer.writerows(rows)


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


_KIND_NAMES = {int: "an integer", str: "text", float: "a number", list: "a list", dict: "an object"}


def check_types(record: Mapping[str, Any], kinds: Mapping[str, type], path: str | Path, producer: str,
                error: type[Gpt1Error] = Gpt1Error) -> None:
    """The keys an earlier stage writes, of the types it writes them: a hand-edited or foreign value stops the
    reader here, naming the file and key, not later in a traceback. Absent keys are the caller's to name."""
    if not isinstance(record, Mapping):
        raise error(f"{path}: holds a {type(record).__name__}, expected an object; re-run {stage_command(producer)}")
    for key, kind in kinds.items():
        value = record.get(key)
        if key in record and (not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool)):
            raise error(f"{path}: key {key!r} is {value!r}, expected {_KIND_NAMES.get(kind, kind.__name__)}; "
                        f"re-run {stage_command(producer)}")


def flatten(mapping: Mapping[str, Any], skip: Collection[str] = (), prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}, leaving out the keys in `skip` at any depth (MLflow's params, and the settings
    two records are compared by, are flat)."""
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        if key in skip:
            continue
        if isinstance(value, Mapping):
            flat.update(flatten(value, skip, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def first_difference(old: Any, new: Any) -> tuple[str, Any, Any] | None:
    """The first (sorted) dotted key where two JSON values differ, with the old and the new value; None if equal.
    Errors name one setting instead of printing two whole objects (a value that is no object is the key '')."""
    a, b = ((flatten(value) if isinstance(value, Mapping) else {"": value}) for value in (old, new))
    for key in sorted(a.keys() | b.keys()):
        if a.get(key, "<absent>") != b.get(key, "<absent>"):
            return key, a.get(key, "<absent>"), b.get(key, "<absent>")
    return None


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


def stage_command(stage: str) -> str:
    """The command that runs `stage` (as the DAG names it: the encode_task stage is `gpt1 encode-task`)."""
    return f"gpt1 {stage.replace('_', '-')}"


def rerun_hint(producer: str) -> str:
    """What to do about a bad input that a stage wrote: rerun that stage."""
    return f"re-run the {producer} stage ({stage_command(producer)})"


def require_files(producer: str, *paths: str | Path) -> None:
    """Fail before any work if an input is missing, naming the file and the stage that makes it."""
    for path in paths:
        if not Path(path).is_file():
            raise Gpt1Error(f"{path}: missing; run the {producer} stage ({stage_command(producer)}) first")


def file_record(path: str | Path) -> dict[str, Any]:
    """What a stage records of a file it wrote, so the stage that reads it can verify it: size and sha256."""
    return {"bytes": Path(path).stat().st_size, "sha256": sha256_file(path)}


def verify_file(path: str | Path, record: dict[str, Any], producer: str, where: str | Path, fix: str | None = None,
                error: type[Gpt1Error] = Gpt1Error) -> None:
    """Refuse `path` (raising `error`) unless it has the size and sha256 of `record` (written by `producer` into
    `where`), before any expensive work: a changed, truncated or corrupt input is named with its `fix`, by default
    the stage that makes it again."""
    path = Path(path)
    fix = fix or rerun_hint(producer)
    if not path.is_file():
        raise error(f"{path}: missing; {fix}")
    if not isinstance(record, dict) or not {"bytes", "sha256"} <= record.keys():
        raise error(f"{where}: records no size and sha256 for {path.name}; {fix}")
    size = path.stat().st_size
    if size != record["bytes"]:
        raise error(f"{path}: {size} bytes, but {where} records {record['bytes']}; the file was changed or "
                    f"truncated, {fix}")
    if sha256_file(path) != record["sha256"]:
        raise error(f"{path}: sha256 differs from the one {where} records; the file was changed or is corrupt, "
                    f"{fix}")


# A JSON object that carries the sha256 of its own content (canonical form, without this key): a reader can tell a
# changed or corrupt file from a good one without a second file beside it.
SEAL_KEY = "content_sha256"


def _content_sha256(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write_sealed_json(path: Path, data: dict[str, Any]) -> None:
    write_json(path, {**data, SEAL_KEY: _content_sha256(data)})


def read_sealed_json(path: str | Path, producer: str, error: type[Gpt1Error] = Gpt1Error) -> dict[str, Any]:
    """A sealed JSON object, after checking its content against its sha256; errors (of class `error`) name the
    file and the stage that writes it."""
    path = Path(path)
    fix = rerun_hint(producer)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise error(f"{path}: not valid JSON ({err.msg}, line {err.lineno}); {fix}") from err
    except UnicodeDecodeError as err:
        raise error(f"{path}: not UTF-8 text; {fix}") from err
    check_types(data, {}, path, producer, error)
    seal = data.pop(SEAL_KEY, None)
    if seal is None:
        raise error(f"{path}: no {SEAL_KEY} recorded (written by an older version?); {fix}")
    if seal != _content_sha256(data):
        raise error(f"{path}: content differs from its recorded {SEAL_KEY}; the file was changed or is corrupt, "
                    f"{fix}")
    return data
