"""A task's examples with their token sequences (`Part`, `TaskData`): planned and read through `rows`, transformed
through `transforms`, and the encoded examples that the encode_task stage writes once per task and every
fine-tuning, ablation and layer job of that task reads (write, read, verify).

A library: it takes a task spec, the finetune section (passed on to `rows`, which reads it), a tokenizer and n_ctx;
it loads no params.yaml, knows no MLflow, and takes its folders as arguments (the file names come from `layout`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpt1.data.rows import (
    Cut,
    DataSource,
    Example,
    LoadedSplit,
    PartPlan,
    narrow_rows,
    plan_parts,
    read_part,
    selection_rows,
)
from gpt1.data.tasks import ReportSpec, TaskSpec
from gpt1.data.transforms import Transformed, transform_batch
from gpt1.pipeline import layout
from gpt1.pipeline.errors import TaskDataError
from gpt1.pipeline.files import (
    file_record,
    read_jsonl,
    read_sealed_json,
    staged_outputs,
    verify_file,
    write_jsonl_line,
    write_sealed_json,
)

ENCODE_STAGE = "encode_task"


@dataclass
class Part:
    """Examples of one loaded split (or cut) with their token sequences."""

    loaded: LoadedSplit
    transformed: list[Transformed]
    split: str  # the hub split read
    cut: Cut | None

    @property
    def examples(self) -> list[Example]:
        return self.loaded.examples

    @property
    def truncated(self) -> int:
        return sum(t.truncated for t in self.transformed)

    @property
    def name(self) -> str:
        """What was read, for tables and run inputs: the cut when there is one, else the split."""
        return str(self.cut) if self.cut else self.split

    def subset(self, positions: Sequence[int]) -> Part:
        loaded = dataclasses.replace(self.loaded, examples=[self.loaded.examples[i] for i in positions])
        return dataclasses.replace(self, loaded=loaded, transformed=[self.transformed[i] for i in positions])


@dataclass
class EvalPart(Part):
    reports: list[ReportSpec] = field(default_factory=list)


@dataclass
class TaskData:
    """What a job of one task trains and scores on."""

    train: Part
    evals: list[EvalPart]


# ---------------------------------------------------------------------------------------------------- loading


def load_part(spec: TaskSpec, plan: PartPlan, source: DataSource, tokenizer: Any, n_ctx: int) -> Part:
    """One planned part read through `rows` and transformed: an `EvalPart` when the plan names its reports."""
    loaded = read_part(spec, plan, source)
    transformed = transform_batch(spec, loaded.examples, tokenizer, n_ctx)
    if plan.reports is None:
        return Part(loaded, transformed, plan.split, plan.cut)
    return EvalPart(loaded, transformed, plan.split, plan.cut, list(plan.reports))


def plan_task_data(spec: TaskSpec, settings: dict[str, Any], source: DataSource, tokenizer: Any, n_ctx: int
                   ) -> TaskData:
    """A task's training part and every evaluation part as `rows.plan_parts` plans them from `settings` (the
    fine-tuning section), loaded and transformed."""
    train, *evals = [load_part(spec, plan, source, tokenizer, n_ctx)
                     for plan in plan_parts(spec, settings, source.present)]
    return TaskData(train, [p for p in evals if isinstance(p, EvalPart)])


def narrow(part: Part, cap: int | None) -> Part:
    """At most `cap` examples of a part with their sequences (`rows.narrow_rows` chooses them)."""
    narrowed = narrow_rows(part.loaded, cap)
    if narrowed is None:
        return part
    keep, loaded = narrowed
    return dataclasses.replace(part, loaded=loaded, transformed=[part.transformed[i] for i in keep])


def carve_selection(spec: TaskSpec, train: Part) -> tuple[Part, Part | None]:
    """The training part without, and with only, the slice that picks the best epoch (`rows.selection_rows`:
    Story Cloze); other tasks train on all of it and select nothing."""
    n = len(train.examples)
    chosen = selection_rows(spec, n)
    if chosen is None:
        return train, None
    return (train.subset([i for i in range(n) if i not in chosen]),
            train.subset([i for i in range(n) if i in chosen]))


def part_sha256(part: Part) -> str:
    """sha256 of a part's examples as read (texts, choices, label, row, configuration), in order."""
    digest = hashlib.sha256()
    for e in part.examples:
        digest.update(json.dumps([e.texts, e.choices, e.label, e.index, e.config], ensure_ascii=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def part_source(spec: TaskSpec, part: Part) -> str:
    """Where a part's rows came from, for run inputs: the dataset on the hub or in a mirror, or the project's
    synthetic data."""
    source = part.loaded.description.get("source", "")
    return f"{source}:{spec.path}" if source in ("hub", "mirror") else source


# ---------------------------------------------------------------------------------------------- encoded examples


def _example_line(part: int, example: Example, transformed: Transformed) -> dict[str, Any]:
    return {"part": part, "index": example.index, "config": example.config, "label": example.label,
            "texts": list(example.texts), "choices": None if example.choices is None else list(example.choices),
            "sequences": transformed.sequences, "truncated": transformed.truncated}


def _part_record(part: Part) -> dict[str, Any]:
    loaded = part.loaded
    return {"role": "train" if not isinstance(part, EvalPart) else "eval", "split": part.split,
            "cut": dataclasses.asdict(part.cut) if part.cut else None,
            "reports": [r.name for r in part.reports] if isinstance(part, EvalPart) else [],
            "rows_read": loaded.rows_read, "unlabelled_dropped": loaded.unlabelled_dropped, "capped": loaded.capped,
            "description": loaded.description, "examples": len(loaded.examples), "truncated": part.truncated}


def write_encoded(out_dir: Path, spec: TaskSpec, data: TaskData, tokenizer_sha256: str, n_ctx: int,
                  settings: dict[str, Any]) -> dict[str, Any]:
    """OUT/examples.jsonl (one line per example of every part) and OUT/encoded.json (what they are, sealed),
    renamed into place together. Returns the header."""
    parts = [data.train, *data.evals]
    with staged_outputs(out_dir / layout.ENCODED_JSON, out_dir / layout.EXAMPLES_FILE) as (header_tmp, lines_tmp):
        with open(lines_tmp, "w", encoding="utf-8") as handle:
            for k, part in enumerate(parts):
                for example, transformed in zip(part.examples, part.transformed, strict=True):
                    write_jsonl_line(handle, _example_line(k, example, transformed))
        header = {"task": spec.name, "tokenizer_sha256": tokenizer_sha256, "n_ctx": n_ctx, "settings": settings,
                  "parts": [_part_record(p) for p in parts], "files": {layout.EXAMPLES_FILE: file_record(lines_tmp)}}
        write_sealed_json(header_tmp, header)
    return header


def _fix(folder: Path) -> str:
    return f"re-run the {ENCODE_STAGE} stage (gpt1 encode-task --out {folder})"


def read_encoded_header(folder: Path) -> dict[str, Any]:
    path = folder / layout.ENCODED_JSON
    if not path.is_file():
        raise TaskDataError(f"{path}: missing; {_fix(folder)}")
    return read_sealed_json(path, ENCODE_STAGE, TaskDataError)


def check_encoded(header: dict[str, Any], folder: Path, spec: TaskSpec, tokenizer_sha256: str, n_ctx: int,
                  settings: dict[str, Any]) -> None:
    """Refuse encoded examples made for another task, tokenizer, context or data settings, before training."""
    where = folder / layout.ENCODED_JSON
    expected = {"task": spec.name, "tokenizer_sha256": tokenizer_sha256, "n_ctx": n_ctx}
    for key, value in expected.items():
        if header.get(key) != value:
            raise TaskDataError(f"{where}: {key} is {header.get(key)!r}, this job needs {value!r}; {_fix(folder)}")
    recorded = header.get("settings", {})
    for key, value in settings.items():
        if recorded.get(key) != value:
            raise TaskDataError(f"{where}: encoded with {key}={recorded.get(key)!r}, but the job's settings say "
                                f"{value!r}; {_fix(folder)} with the same params.yaml")


def _example(line: dict[str, Any]) -> Example:
    choices = None if line["choices"] is None else tuple(line["choices"])
    return Example(tuple(line["texts"]), line["label"], choices, line["index"], line["config"])


def read_encoded(folder: Path, spec: TaskSpec, tokenizer_sha256: str, n_ctx: int, settings: dict[str, Any]
                 ) -> TaskData:
    """The task data the encode_task stage wrote, after checking that it is this job's and intact."""
    folder = Path(folder)
    header = read_encoded_header(folder)
    check_encoded(header, folder, spec, tokenizer_sha256, n_ctx, settings)
    lines_path = folder / layout.EXAMPLES_FILE
    verify_file(lines_path, header["files"].get(layout.EXAMPLES_FILE), ENCODE_STAGE, folder / layout.ENCODED_JSON,
                _fix(folder), TaskDataError)
    records = header["parts"]
    examples: list[list[Example]] = [[] for _ in records]
    transformed: list[list[Transformed]] = [[] for _ in records]
    for line in read_jsonl(lines_path):
        examples[line["part"]].append(_example(line))
        transformed[line["part"]].append(Transformed(line["sequences"], line["truncated"]))
    reports = {r.name: r for r in spec.reports}
    parts: list[Part] = []
    for k, record in enumerate(records):
        loaded = LoadedSplit(examples[k], record["rows_read"], record["unlabelled_dropped"], record["capped"],
                             record["description"])
        cut = Cut(**record["cut"]) if record["cut"] else None
        if record["role"] == "train":
            parts.append(Part(loaded, transformed[k], record["split"], cut))
        else:
            chosen = [reports[name] for name in record["reports"]]
            parts.append(EvalPart(loaded, transformed[k], record["split"], cut, chosen))
    return TaskData(parts[0], [p for p in parts[1:] if isinstance(p, EvalPart)])
