"""The one place that plans a task's data: which split a job trains and scores on, the cuts, the caps, loading
and the input transformation, and the encoded examples that the encode_task stage writes once per task and every
fine-tuning, ablation and layer job of that task reads.

A library: it takes a task spec, the finetune section's data settings (train_cuts, max_train_examples,
train_examples_by_task, max_eval_examples), which it reads by key and names in its errors, a tokenizer and n_ctx;
it loads no params.yaml, knows no MLflow, and takes its folders as arguments (the file names come from `layout`).
The layer runs' caps (`layer_caps`, what the layers stage narrows a task's examples to) take the loaded profile and
read its layers and finetune sections.

Data seeds: caps, the narrowing to a smaller cap and Story Cloze's selection slice use DATA_SEED, not the job's
seed, so every variant and seed of a task sees the same examples and runs stay pairwise comparable.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpt1 import layout
from gpt1.errors import ConfigError, TaskDataError, UsageError
from gpt1.files import (
    file_record,
    read_jsonl,
    read_sealed_json,
    staged_outputs,
    verify_file,
    write_jsonl_line,
    write_sealed_json,
)
from gpt1.tasks import (
    FINETUNE_TASKS,
    TASKS,
    Cut,
    Example,
    LoadedSplit,
    ReportSpec,
    TaskSpec,
    Transformed,
    cap_positions,
    evaluation_split,
    get_task,
    load_examples,
    mirror_splits,
    transform_batch,
)

DATA_SEED = 0
SELECT_BEST_EPOCH = frozenset({"story_cloze"})  # no training split to spare: pick the best epoch on a slice
SELECTION_FRACTION = 0.1
LAYER_CAPS = ("max_train_examples", "max_eval_examples")  # what the layer runs may narrow (layer_caps)
# The settings that decide which examples a task's jobs see, and so what the encoded examples hold.
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


@dataclass
class DataSource:
    mirror: Path | None
    synthetic: bool
    present: list[str] | None  # splits the source holds (None: the hub, all of them)


# ---------------------------------------------------------------------------------------------------- planning


def finetune_task(name: str) -> TaskSpec:
    """The spec of a task that is fine-tuned (not an analysis dataset such as DPR), or a one-line refusal."""
    if name not in FINETUNE_TASKS:
        what = "an analysis dataset (zero-shot), not fine-tuned" if name in TASKS else "unknown"
        raise UsageError(f"--task {name!r} is {what}; valid: {', '.join(FINETUNE_TASKS)}")
    return get_task(name)


def train_cut(spec: TaskSpec, train_cuts: dict[str, Any] | None) -> Cut | None:
    """The declared training cut (finetune.train_cuts[task]) as the first `fraction` of a seeded shuffle."""
    declared = (train_cuts or {}).get(spec.name)
    if declared is None:
        if spec.train is None:
            raise TaskDataError(f"task {spec.name} has no training split; declare finetune.train_cuts.{spec.name} "
                                f"(e.g. {{split: validation, fraction: 0.8, seed: 0}})")
        return None
    return Cut(declared["split"], 0.0, declared["fraction"], declared["seed"])


EvalSpec = tuple[str, Cut | None, list[ReportSpec]]  # (hub split, complement of the training cut or None, reports)


def eval_plan(spec: TaskSpec, present: Sequence[str] | None, cut: Cut | None) -> list[EvalSpec]:
    """(split, complement cut or None, reports) per distinct evaluation split, in report order."""
    plan: dict[str, list[ReportSpec]] = {}
    for report in spec.reports:
        plan.setdefault(evaluation_split(spec, report, present), []).append(report)
    out = []
    for split, reports in plan.items():
        rest = Cut(cut.split, cut.end_fraction, 1.0, cut.seed) if cut and cut.split == split else None
        out.append((split, rest, reports))
    return out


def data_source(mirror: Path | None, synthetic: bool, spec: TaskSpec, present: Sequence[str] | None = None
                ) -> DataSource:
    """Where a task's rows come from; `present` overrides the splits it is taken to hold. Synthetic data mimics
    the hub (every split), a mirror holds what it has, the hub all."""
    mirror = None if synthetic else mirror
    if present is not None:
        found: list[str] | None = list(present)
    elif synthetic:
        found = list(spec.splits)
    else:
        found = mirror_splits(spec, mirror) if mirror else None
    return DataSource(mirror, synthetic, found)


def load_part(spec: TaskSpec, role: str, split: str, cut: Cut | None, cap: int | None, source: DataSource,
              tokenizer: Any, n_ctx: int) -> Part:
    loaded = load_examples(spec, role, source.mirror, cut=cut, max_examples=cap, synthetic=source.synthetic,
                           seed=DATA_SEED)
    return Part(loaded, transform_batch(spec, loaded.examples, tokenizer, n_ctx), split, cut)


def train_cap(spec: TaskSpec, settings: dict[str, Any]) -> int | None:
    """How many training examples a task keeps: its entry in `train_examples_by_task`, else `max_train_examples`."""
    return (settings.get("train_examples_by_task") or {}).get(spec.name, settings["max_train_examples"])


def layer_caps(cfg: Any, task: str) -> dict[str, int | None]:
    """The caps the layer runs (n_layer + 1 fine-tunings) narrow the task's fine-tuning examples to:
    layers.max_train_examples / max_eval_examples, with layers.by_task.<task> laid over them (a key absent there
    keeps the shared cap; null anywhere keeps finetune's). A cap can only narrow: one above what finetune keeps for
    the task is an error, not a silent no-op."""
    layers, finetune = cfg.section("layers"), cfg.section("finetune")
    own = (layers.get("by_task") or {}).get(task, {})
    caps = {key: layers.get(key) for key in LAYER_CAPS} | own
    kept = {"max_train_examples": train_cap(finetune_task(task), finetune),
            "max_eval_examples": finetune["max_eval_examples"]}
    for key, cap in caps.items():
        if cap is not None and kept[key] is not None and cap > kept[key]:
            where = f"layers.by_task.{task}.{key}" if key in own else f"layers.{key}"
            raise ConfigError(f"{where}: {cap} is more than the {kept[key]} examples finetune keeps for {task} "
                              f"(finetune's caps); a layer cap can only narrow them: lower it, or raise finetune's")
    return caps


def plan_task_data(spec: TaskSpec, settings: dict[str, Any], source: DataSource, tokenizer: Any, n_ctx: int
                   ) -> TaskData:
    """Load and transform a task's training part and every evaluation part, with the caps of `settings` (the
    fine-tuning section: train_cuts, max_train_examples, train_examples_by_task, max_eval_examples)."""
    cut = train_cut(spec, settings.get("train_cuts"))
    train = load_part(spec, "train", cut.split if cut else spec.train, cut, train_cap(spec, settings), source,
                      tokenizer, n_ctx)
    evals = []
    for split, rest, reports in eval_plan(spec, source.present, cut):
        part = load_part(spec, split, split, rest, settings["max_eval_examples"], source, tokenizer, n_ctx)
        evals.append(EvalPart(part.loaded, part.transformed, part.split, part.cut, reports))
    return TaskData(train, evals)


def narrow(part: Part, cap: int | None) -> Part:
    """At most `cap` examples of a part, a seeded random subset in their order (the layer runs train on fewer
    examples than fine-tuning, drawn from the same encoded ones)."""
    keep = cap_positions(np.arange(len(part.examples)), cap, DATA_SEED)
    if len(keep) == len(part.examples):
        return part
    narrowed = part.subset(keep.tolist())
    left_out = len(part.examples) - len(keep)
    description = {**part.loaded.description, "max_examples": cap, "examples": len(keep),
                   "capped": part.loaded.capped + left_out}
    loaded = dataclasses.replace(narrowed.loaded, capped=part.loaded.capped + left_out, description=description)
    return dataclasses.replace(narrowed, loaded=loaded)


def carve_selection(spec: TaskSpec, train: Part) -> tuple[Part, Part | None]:
    """Story Cloze: a seeded 10% of the training examples becomes the slice that picks the best epoch."""
    if spec.name not in SELECT_BEST_EPOCH:
        return train, None
    n = len(train.examples)
    size = max(1, round(SELECTION_FRACTION * n))
    if n - size < 1:
        raise TaskDataError(f"task {spec.name}: {n} training example(s) leave none after the {size}-example "
                            f"selection slice; raise finetune.max_train_examples or the train cut's fraction")
    chosen = set(np.random.default_rng(DATA_SEED).permutation(n)[:size].tolist())
    return (train.subset([i for i in range(n) if i not in chosen]),
            train.subset([i for i in range(n) if i in chosen]))


def data_settings(spec: TaskSpec, settings: dict[str, Any], source: DataSource) -> dict[str, Any]:
    """The settings that decide a task's examples, as recorded beside the encoded examples and checked by jobs."""
    cut = (settings.get("train_cuts") or {}).get(spec.name)
    return {"train_cut": cut, "max_train_examples": train_cap(spec, settings),
            "max_eval_examples": settings["max_eval_examples"],
            "source": {"synthetic": source.synthetic, "present": source.present}}


def part_sha256(part: Part) -> str:
    """sha256 of a part's examples as read (texts, choices, label, row, configuration), in order."""
    digest = hashlib.sha256()
    for e in part.examples:
        digest.update(json.dumps([e.texts, e.choices, e.label, e.index, e.config], ensure_ascii=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def part_source(spec: TaskSpec, part: Part) -> str:
    """Where a part's rows came from, for run inputs: the hub id, the mirror or the project's synthetic data."""
    source = part.loaded.description.get("source", "")
    return f"hub:{spec.path}" if source == "hub" else source


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
