"""One loader for every dataset and corpus: the Hugging Face hub, a local mirror in the hub's layout, or text files.

The mirror is not a second code path: it swaps the arguments of `datasets.load_dataset` (the hub id for the
"parquet" builder and the mirrored file), so records, features and ClassLabel names come out the same.
"""

from __future__ import annotations

import contextlib
import glob
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpt1.pipeline.errors import SourceError, causes


@dataclass(frozen=True)
class DatasetRef:
    """A hub dataset split: `load_dataset(path, name, split=split)`."""

    path: str
    name: str | None
    split: str

    @classmethod
    def from_config(cls, section: dict[str, Any]) -> DatasetRef:
        return cls(path=section["path"], name=section.get("name"), split=section["split"])

    def __str__(self) -> str:
        return f"{self.path} ({self.name or 'default'}, split {self.split})"


def mirror_file(ref: DatasetRef, mirror: Path) -> Path:
    """Where a split lives in a mirror: <org>/<name>/<config>/<split>.parquet ('default' when no config)."""
    return mirror / ref.path / (ref.name or "default") / f"{ref.split}.parquet"


def _check_parquet(ref: DatasetRef, file: Path) -> Path:
    """Read the footer only (milliseconds): a file that is no parquet, or has no rows, is named before `datasets`
    fails on it with an Arrow traceback."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        rows = pq.read_metadata(file).num_rows
    except (pa.ArrowException, OSError) as err:
        said = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise SourceError(f"{file}: not a readable parquet file ({said}); copy {ref} into the mirror again") from err
    if rows == 0:
        raise SourceError(f"{file}: 0 rows; the mirror's copy of {ref} is empty, copy it again")
    return file


def check_mirror_folder(mirror: Path) -> None:
    if not mirror.is_dir():
        raise SourceError(f"data mirror {mirror} does not exist; fix GPT1_DATA_MIRROR or data_mirror in params.yaml")


def _check_mirror(ref: DatasetRef, mirror: Path) -> Path:
    file = mirror_file(ref, mirror)
    if file.is_file():
        return _check_parquet(ref, file)
    folder = file.parent
    check_mirror_folder(mirror)
    if folder.is_dir():
        splits = sorted(p.stem for p in folder.glob("*.parquet"))
        raise SourceError(f"{ref}: split {ref.split!r} not in mirror (looked for {file}); present: {', '.join(splits)}")
    raise SourceError(f"{ref}: dataset not in mirror (looked for {file})")


def load_arguments(ref: DatasetRef, mirror: Path | None) -> dict[str, Any]:
    """The keyword arguments of `datasets.load_dataset` for this split, from the hub or the mirror."""
    if mirror is None:
        return {"path": ref.path, "name": ref.name, "split": ref.split}
    file = _check_mirror(ref, mirror)
    return {"path": "parquet", "data_files": {ref.split: str(file)}, "split": ref.split}


def load_split(ref: DatasetRef, mirror: Path | None = None, *, streaming: bool = False, columns: Iterable[str] = ()):
    """Load one split as a `datasets.Dataset` (or `IterableDataset` when streaming) and check its columns."""
    import datasets  # heavy: imported when data is actually loaded

    kwargs = load_arguments(ref, mirror)
    try:
        ds = datasets.load_dataset(**kwargs, streaming=streaming)
    except (FileNotFoundError, ValueError, ConnectionError, OSError) as err:
        where = f"mirror {mirror}" if mirror else "the Hugging Face hub"
        hint = "" if mirror else "; offline? set GPT1_DATA_MIRROR to a local mirror"
        raise SourceError(f"{ref}: could not be loaded from {where}: {err}{hint}".replace("\n", " ")) from err
    require_columns(ds.column_names or list(ds.features or {}), columns, f"{ref} from {kwargs['path']}")
    return ds


def require_columns(present: Iterable[str], needed: Iterable[str], where: str) -> None:
    missing = [c for c in needed if c not in set(present)]
    if missing:
        raise SourceError(f"{where}: missing column(s) {', '.join(missing)}; present: {', '.join(present)}")


def text_files(patterns: Iterable[str]) -> list[Path]:
    """Expand globs to a sorted, de-duplicated file list; an unmatched pattern is an error."""
    files: set[Path] = set()
    for pattern in patterns:
        matched = [Path(p) for p in glob.glob(pattern, recursive=True) if Path(p).is_file()]
        if not matched:
            raise SourceError(f"corpus.files: pattern {pattern!r} matches no file (relative to {Path.cwd()})")
        files.update(matched)
    return sorted(files)


def iter_documents(corpus: dict[str, Any], mirror: Path | None) -> Iterator[dict[str, str]]:
    """Stream the documents of the corpus section of a profile as {'id', 'text'} records."""
    source = corpus["source"]
    if source == "synthetic":
        from gpt1.data.synthetic.corpus import synthetic_corpus

        yield from synthetic_corpus(corpus["synthetic_documents"], seed=corpus["seed"])
        return
    if source == "files":
        import datasets

        files = text_files(corpus["files"])
        # One document per file, through the same datasets library as the hub path.
        ds = datasets.load_dataset("text", data_files=[str(f) for f in files], sample_by="document", streaming=True)
        done: list[Path] = []
        with _naming_file(files, done):
            for file, row in zip(files, ds["train"], strict=True):
                done.append(file)
                yield {"id": str(file), "text": row["text"]}
        return
    section = corpus["mirror_dataset"] if mirror is not None and "mirror_dataset" in corpus else corpus["dataset"]
    ref, field = DatasetRef.from_config(section), section["text_field"]
    for index, row in enumerate(load_split(ref, mirror, streaming=True, columns=[field])):
        yield {"id": f"{ref.path}:{ref.split}:{index}", "text": _text(row[field], ref, field, index)}


def _text(value: Any, ref: DatasetRef, field: str, index: int) -> str:
    """A document's text; null is an empty document (clean drops and counts it), anything else not text an error."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SourceError(f"{ref}: row {index}, column {field} holds {type(value).__name__} {value!r:.40}, not text; "
                          f"set text_field to a text column")
    return value


@contextlib.contextmanager
def _naming_file(files: list[Path], done: list[Path]) -> Iterator[None]:
    """A file of `source: files` that is not UTF-8 is named (datasets reads them in order, one document each)."""
    try:
        yield
    except Exception as err:
        cause = next((e for e in causes(err) if isinstance(e, UnicodeDecodeError)), None)
        if cause is None:
            raise
        file = files[len(done)] if len(done) < len(files) else files[-1]
        raise SourceError(f"{file}: not UTF-8 text (byte {cause.start}); convert it, e.g. "
                          f"iconv -f latin1 -t utf-8, or drop it from corpus.files") from err


def source_description(corpus: dict[str, Any], mirror: Path | None) -> str:
    """Where the corpus comes from, for manifests and MLflow tags: a mirror's file by its path inside the mirror, so
    one mirror read from another folder (or spelled another way) describes, and hashes, the same."""
    source = corpus["source"]
    if source == "synthetic":
        return f"synthetic:{corpus['synthetic_documents']}docs:seed{corpus['seed']}"
    if source == "files":
        return "files:" + ",".join(corpus["files"])
    section = corpus["mirror_dataset"] if mirror is not None and "mirror_dataset" in corpus else corpus["dataset"]
    ref = DatasetRef.from_config(section)
    return f"mirror:{mirror_file(ref, Path())}" if mirror else f"hub:{ref}"
