"""The sealed records the stages write and later stages read, declared once as JSON Schemas (records.schema.yaml)
and written and read only through here: pretrain's metrics.json, finetune's metrics.json, layers.json and
zeroshot.json. A record that lacks a declared key, holds an undeclared one or a value of another type fails where it
is written (a bug: the writer and the declaration disagree) or where it is read (a file of another version), the
message naming the file, the key and the stage that writes it. Readers then index the checked mapping by key.

A library: the files' sealing (content sha256) is gpt1.pipeline.files'.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from gpt1.pipeline.errors import Gpt1Error, RecordError
from gpt1.pipeline.files import read_sealed_json, stage_command, write_sealed_json

SCHEMA_PATH = Path(__file__).with_name("records.schema.yaml")
WRITERS = {"pretrain_metrics": "pretrain", "finetune_metrics": "finetune", "layers": "layers", "zeroshot": "zeroshot"}


@cache
def _validator(record: str) -> jsonschema.protocols.Validator:
    import yaml

    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    return jsonschema.Draft202012Validator({"$defs": schema["$defs"], **schema["records"][record]})


def problem(record: str, data: Any) -> str | None:
    """The first way `data` differs from the declaration of `record`, in words ("key 'a.b' is missing"), else
    None."""
    errors = list(_validator(record).iter_errors(data))
    # A key that fails its own declaration also leaves the keys beside it "unevaluated": name the key itself.
    errors = [e for e in errors if e.validator != "unevaluatedProperties"] or errors
    error = jsonschema.exceptions.best_match(errors)
    if error is None:
        return None
    where = [str(p) for p in error.absolute_path]
    key = ".".join(where) or "<top level>"
    if error.validator == "required":
        missing = error.message.split("'")[1]
        return f"key '{'.'.join([*where, missing])}' is missing"
    if error.validator in ("additionalProperties", "unevaluatedProperties"):
        extra = error.message.split("'")[1]  # "... are not allowed ('extra' was unexpected)"
        return f"key '{'.'.join([*where, extra])}' is not declared in gpt1/pipeline/records.schema.yaml"
    if error.validator == "type":
        expected = error.validator_value if isinstance(error.validator_value, str) else " or ".join(
            error.validator_value)
        shown = repr(error.instance) if len(repr(error.instance)) <= 60 else repr(error.instance)[:57] + "..."
        return f"key '{key}' is {shown}, expected {expected}"
    return f"key '{key}': {error.message}"


def write(record: str, path: Path, data: dict[str, Any]) -> None:
    """Seal and write `data` as `record`, after checking it against the declaration (ValueError: a bug)."""
    found = problem(record, data)
    if found is not None:
        raise ValueError(f"{path}: the {record} record the {WRITERS[record]} stage wrote differs from "
                         f"gpt1/pipeline/records.schema.yaml: {found}")
    write_sealed_json(path, data)


def read(record: str, path: str | Path, error: type[Gpt1Error] = RecordError) -> dict[str, Any]:
    """`record` from `path`: its seal and its declaration checked; errors (of class `error`) name the file, the key
    and the stage to re-run."""
    stage = WRITERS[record]
    data = read_sealed_json(path, stage, error)
    found = problem(record, data)
    if found is not None:
        raise error(f"{path}: {found}; written by another version of {stage_command(stage)}? re-run the {stage} "
                    f"stage ({stage_command(stage)})")
    return data


__all__ = ["WRITERS", "RecordError", "problem", "read", "write"]
