"""Checks of a stage's arguments that take milliseconds, run before it loads data, trains or opens an MLflow run:
a seed is one every library takes, the output folder can be written and is not the model's it reads, input folders
are folders, a corpus split is not empty. And, after a failure that names no file (a library's JSON or tokenizers
error), the input file at fault."""

from __future__ import annotations

import argparse
import errno
import json
import os
from argparse import Namespace
from pathlib import Path

from gpt1.pipeline import layout
from gpt1.pipeline.errors import Gpt1Error
from gpt1.pipeline.files import unwritable

# Arguments naming the folder of an earlier stage, and that stage.
INPUT_FOLDERS = {"raw": "fetch", "corpus": "clean", "tokenizer": "bpe", "ids": "encode", "pretrained": "pretrain",
                 "model_dir": "pretrain", "examples": "encode-task"}
# Of those, the pre-trained models' folders: never a stage's --out.
MODEL_INPUTS = ("pretrained", "model_dir")
# Of those, the ones that must be folders (--pretrained may also be a weights file or a hub id).
FOLDER_ONLY = ("raw", "corpus", "tokenizer", "ids", "model_dir", "examples")
CORPUS_SPLITS = tuple(layout.corpus_split(split) for split in layout.SPLITS)
MAX_SEED = 2**32 - 1  # numpy's legacy seeding (and the widest seed every library takes)
# Keys stages read from earlier stages' JSON files: valid JSON without them is the input to blame for a KeyError.
READ_KEYS = {layout.RAW_MANIFEST: ("source", "sha256"), layout.CORPUS_MANIFEST: ("train",),
             layout.MODEL_JSON: ("kind", "config"), layout.TOKENIZER_META: ("pretokenizer", "sha256")}


def seed(text: str) -> int:
    """--seed: an integer 0 .. 2**32 - 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"{value} is outside 0..{MAX_SEED}")
    return value


def _flag(attr: str) -> str:
    return "--" + attr.replace("_", "-")


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            return False  # _check_names says which part
        raise


def _existing_ancestor(path: Path) -> Path:
    """The nearest part of `path` that exists (the path itself when it does)."""
    while not _exists(path) and path != path.parent:
        path = path.parent
    return path


def _check_names(out: Path, ancestor: Path) -> None:
    """Folder names the file system cannot hold, found before the stage's work rather than at its last rename."""
    limit = os.pathconf(ancestor, "PC_NAME_MAX")
    for part in out.relative_to(ancestor).parts:
        if len(os.fsencode(part)) > limit:
            raise Gpt1Error(f"--out {out}: the name {part[:20]}... is longer than {limit} bytes; choose a shorter one")


def check_output_folder(out: Path) -> None:
    """Fail in milliseconds when the stage could not write its outputs: a file in the way, a folder it may not
    write, a name too long. Creates nothing."""
    try:
        ancestor = _existing_ancestor(out)
    except OSError as err:
        raise Gpt1Error(f"--out {out}: cannot be reached ({err.strerror}); fix the permissions of its folders or "
                        f"choose another --out") from err
    if not ancestor.is_dir():
        what = "is a file" if ancestor == out else f"is inside {ancestor}, which is a file"
        raise Gpt1Error(f"--out {out}: {what}, not a folder; choose another --out")
    _check_names(out, ancestor)
    missing = ancestor / out.relative_to(ancestor).parts[0] if out != ancestor else None
    if missing is not None and missing.is_symlink():  # it points nowhere: it is not there, yet mkdir fails on it
        raise Gpt1Error(f"--out {out}: {missing} is a broken or looping symbolic link; remove it or choose "
                        f"another --out")
    if (err := unwritable(ancestor)) is not None:
        raise Gpt1Error(f"--out {out}: cannot write in {ancestor} ({err.strerror}); fix its permissions or choose "
                        f"another --out") from err


def check_input_folders(args: Namespace) -> None:
    for attr in FOLDER_ONLY:
        path = getattr(args, attr, None)
        if path is not None and Path(path).is_file():
            raise Gpt1Error(f"{_flag(attr)} {path}: a file; pass the folder gpt1 {INPUT_FOLDERS[attr]} wrote "
                            f"(here perhaps {Path(path).parent})")


def check_out_is_no_model_input(args: Namespace, out: Path) -> None:
    """--out may not be the pre-trained model's folder the stage reads: its files would be written over (export's
    model.safetensors over pretrain's), or written into another stage's declared output. Data folders are shared by
    design (fetch and clean both write corpus/, the report writes into the --results folder it reads)."""
    for attr in MODEL_INPUTS:
        path = getattr(args, attr, None)
        if path is not None and _exists(Path(path)) and Path(path).resolve() == out.resolve():
            raise Gpt1Error(f"--out {out}: is the {_flag(attr)} folder, which this stage reads; choose another --out")


def check_results_folder(args: Namespace) -> None:
    """The report reads every job's outputs under --results: a folder that is not there would give a report of gaps
    alone, written over a finished one."""
    results = getattr(args, "results", None)
    if results is not None and not Path(results).is_dir():
        what = "a file" if Path(results).is_file() else "no such folder"
        raise Gpt1Error(f"--results {results}: {what}; pass the pipeline's results folder (results/<profile>)")


def check_corpus_documents(args: Namespace) -> None:
    """An empty split would train a BPE of nothing without a word (the bpe stage succeeds on it)."""
    corpus = getattr(args, "corpus", None)
    for name in CORPUS_SPLITS if corpus is not None else ():
        split = Path(corpus) / name
        if split.is_file() and split.stat().st_size == 0:
            raise Gpt1Error(f"{split}: no documents; re-run gpt1 clean, and check that the corpus section of "
                            f"params.yaml gives documents")


def check_stage(args: Namespace) -> None:
    """Everything above for the arguments this stage has, and the MLflow store every stage logs into."""
    check_input_folders(args)
    check_results_folder(args)
    check_corpus_documents(args)
    out = getattr(args, "out", None)
    if out is not None:
        from gpt1.pipeline.mlflow_store import check_store
        from gpt1.pipeline.tracking import pipeline_run_name

        check_output_folder(Path(out))
        check_out_is_no_model_input(args, Path(out))
        pipeline_run_name()  # the report searches the runs by it: refused here, not by the last stage
        check_store()


# ---------------------------------------------------------------------------------------------------- post-mortem


def json_problem(path: Path) -> str | None:
    """Why `path` is not a readable JSON file, or lacks the keys stages read from it, or None."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        return f"not UTF-8 text (byte {err.start})"
    except json.JSONDecodeError as err:
        return f"not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})"
    except OSError as err:
        return f"cannot be read ({err.strerror})"
    missing = [key for key in READ_KEYS.get(path.name, ()) if not isinstance(data, dict) or key not in data]
    return f"lacks {', '.join(missing)}" if missing else None


def _tokenizer_problem(folder: Path) -> tuple[Path, str] | None:
    """A tokenizer.json that parses as JSON but does not load."""
    backend = folder / layout.TOKENIZER_FILE
    if backend.is_file():
        from tokenizers import Tokenizer

        try:
            Tokenizer.from_file(str(backend))
        except Exception as err:  # tokenizers raises plain Exception
            return backend, f"not a tokenizers file ({str(err).splitlines()[0] if str(err) else type(err).__name__})"
    return None


def jsonl_problem(path: Path) -> str | None:
    """Why `path` is not a JSON-lines file, naming the line, or None. Reads it all: only after a failure."""
    try:
        with open(path, "rb") as handle:
            for number, line in enumerate(handle, 1):
                try:
                    json.loads(line.decode("utf-8"))
                except UnicodeDecodeError as err:
                    return f"line {number} is not UTF-8 text (byte {err.start})"
                except json.JSONDecodeError as err:
                    return f"line {number} is not JSON ({err.msg})"
    except OSError as err:
        return f"cannot be read ({err.strerror})"
    return None


def _stage_files(folder: Path, pattern: str) -> list[Path]:
    """Files a stage wrote in `folder` and its subfolders (snapshots/), temp files left out."""
    found = [*folder.glob(pattern), *folder.glob(f"*/{pattern}")]
    return sorted(p for p in found if not any(part.startswith(".") for part in p.relative_to(folder).parts))


def _folder_problem(folder: Path) -> tuple[Path, str] | None:
    checks = [(path, json_problem) for path in _stage_files(folder, "*.json")]
    checks += [(path, jsonl_problem) for path in _stage_files(folder, "*.jsonl")]
    for path, check in checks:
        problem = check(path)
        if problem:
            return path, problem
    return _tokenizer_problem(folder)


def diagnose_inputs(args: Namespace) -> str | None:
    """After a failure that names no file: the first unreadable file among the stage's input folders, as one line
    naming it and the stage to re-run; None when they all read."""
    for attr, producer in INPUT_FOLDERS.items():
        folder = getattr(args, attr, None)
        try:
            found = _folder_problem(Path(folder)) if folder is not None and Path(folder).is_dir() else None
        except (OSError, ValueError):
            continue  # a folder it cannot read is not where to look: the error itself is reported then
        if found:
            path, problem = found
            if (Path(folder) / "config.json").is_file() and not (Path(folder) / layout.MODEL_JSON).is_file():
                producer = "export"  # a Hugging Face folder
            return f"{path}: {problem}; re-run gpt1 {producer} (it writes {_flag(attr)} {folder})"
    return None
