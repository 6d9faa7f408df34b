"""Which rows a job sees: where a task's rows come from (hub, mirror or synthetic), the training cut, the evaluation
splits, the caps, the layer runs' narrower caps and Story Cloze's selection slice; each row read, checked and parsed
into an `Example`.

A library: the finetune section's data settings (train_cuts, max_train_examples, train_examples_by_task,
max_eval_examples) are read here, by key, and named in its errors, and the layers section's narrower caps
(`layer_caps`). It knows no MLflow and no results path.

Data seeds: caps, the narrowing to a smaller cap and Story Cloze's selection slice use DATA_SEED, not the job's
seed, so every variant and seed of a task sees the same examples and runs stay pairwise comparable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpt1.data.tasks import UNLABELLED, ReportSpec, TaskSpec, finetune_task, task_spec
from gpt1.pipeline.errors import ConfigError, TaskDataError, TaskError

DATA_SEED = 0
SELECT_BEST_EPOCH = frozenset({"story_cloze"})  # no training split to spare: pick the best epoch on a slice
SELECTION_FRACTION = 0.1
LAYER_CAPS = ("max_train_examples", "max_eval_examples")  # what the layer runs may narrow (layer_caps)


# ---------------------------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Example:
    """One row of a task, parsed and checked against its spec."""

    texts: tuple[str, ...]  # the spec's text_fields, in order
    label: int | float  # class id, index of the right choice, or a similarity score
    choices: tuple[str, ...] | None  # multiple choice only
    index: int  # row in the hub split it was read from
    config: str | None = None  # which configuration (RACE: middle or high)


@dataclass(frozen=True)
class Cut:
    """A seeded shuffled slice [start_fraction, end_fraction) of another split, e.g. train on 80% of validation
    and evaluate on the other 20%: the same seed gives disjoint, complementary parts."""

    split: str
    start_fraction: float
    end_fraction: float
    seed: int = 0

    def __str__(self) -> str:
        return f"{self.split}[{self.start_fraction:.0%}:{self.end_fraction:.0%}] (shuffled, seed {self.seed})"


@dataclass
class LoadedSplit:
    examples: list[Example]
    rows_read: int  # rows taken from the source split (after the cut)
    unlabelled_dropped: int  # rows without a gold label (label -1)
    capped: int  # labelled rows left out by max_examples
    description: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """A one-line account for tables: 'validation[0%:80%] (shuffled, seed 0) as train, 64 of 1871 rows'."""
        d = self.description
        used = d["cut"] if d["cut"] else d["split"]
        role = f" as {d['part']}" if d["part"] != d["split"] else ""
        return f"{used}{role}, {len(self.examples)} of {self.rows_read} rows ({d['source']})"


# ---------------------------------------------------------------------------------------------------- parsing a row


def _where(spec: TaskSpec, split: str, row: int | None = None, name: str | None = None) -> str:
    parts = [f"task {spec.name}", f"split {split}"]
    if row is not None:
        parts.append(f"row {row}")
    if name is not None:
        parts.append(f"field {name!r}")
    return ", ".join(parts)


def _text(spec: TaskSpec, split: str, row: dict[str, Any], index: int, name: str) -> str:
    if name not in row:
        raise TaskError(f"{_where(spec, split, index, name)}: missing (columns: {', '.join(row)})")
    value = row[name]
    if not isinstance(value, str) or not value.strip():
        raise TaskError(f"{_where(spec, split, index, name)}: empty or not text ({value!r})")
    return value


def _choices(spec: TaskSpec, split: str, row: dict[str, Any], index: int) -> tuple[str, ...] | None:
    if spec.kind != "multiple_choice":
        return None
    if len(spec.choice_fields) == 1:
        name = spec.choice_fields[0]
        values = row.get(name)
        if not isinstance(values, list | tuple) or len(values) != spec.num_labels:
            raise TaskError(f"{_where(spec, split, index, name)}: expected {spec.num_labels} choices, got {values!r}")
        fake = {f"{name}[{k}]": v for k, v in enumerate(values)}
        return tuple(_text(spec, split, fake, index, key) for key in fake)
    return tuple(_text(spec, split, row, index, name) for name in spec.choice_fields)


def _out_of_range(spec: TaskSpec, split: str, index: int, value: Any) -> TaskError:
    if spec.encoding == "float":
        valid = f"a number in {spec.label_range[0]}..{spec.label_range[1]}"
    elif spec.encoding == "one_based":
        valid = f"1..{spec.num_labels}"
    elif spec.encoding == "class":
        valid = f"0..{spec.num_labels - 1} ({', '.join(spec.label_names)}) or -1 (no gold label)"
    else:
        valid = "one of " + ", ".join(repr(n) for n in spec.label_names)
    return TaskError(f"{_where(spec, split, index, spec.label_field)}: label {value!r} is not {valid}")


def parse_label(spec: TaskSpec, split: str, index: int, value: Any) -> int | float | None:
    """The label as a class id, choice index or score; None for a row without a gold label (-1)."""
    if value is None:
        raise TaskError(f"{_where(spec, split, index, spec.label_field)}: missing label")
    if spec.encoding in ("class", "float") and value == UNLABELLED and not isinstance(value, bool):
        return None
    if spec.encoding == "float":
        low, high = spec.label_range or (-np.inf, np.inf)
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
            raise _out_of_range(spec, split, index, value)
        return float(value)
    if spec.encoding in ("names", "letters"):
        if value not in spec.label_names:
            raise _out_of_range(spec, split, index, value)
        return spec.label_names.index(value)
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise _out_of_range(spec, split, index, value)
    label = int(value) - (1 if spec.encoding == "one_based" else 0)
    if not 0 <= label < spec.num_labels:
        raise _out_of_range(spec, split, index, value)
    return label


def parse_row(spec: TaskSpec, split: str, row: dict[str, Any], index: int, config: str | None = None) -> Example:
    """A validated Example from one hub row (the label must be gold: drop -1 rows before)."""
    texts = tuple(_text(spec, split, row, index, name) for name in spec.text_fields)
    if spec.label_field not in row:
        raise TaskError(f"{_where(spec, split, index, spec.label_field)}: missing (columns: {', '.join(row)})")
    label = parse_label(spec, split, index, row[spec.label_field])
    if label is None:
        raise TaskError(f"{_where(spec, split, index, spec.label_field)}: no gold label (-1)")
    return Example(texts, label, _choices(spec, split, row, index), index, config)


# ---------------------------------------------------------------------------------------------------- reading a split


def _source_split(spec: TaskSpec, split: str, cut: Cut | None) -> str:
    source = cut.split if cut else split
    if source not in spec.splits:
        raise TaskError(f"task {spec.name}: split {source!r} is not one of its hub splits: {', '.join(spec.splits)}")
    if cut and not 0.0 <= cut.start_fraction < cut.end_fraction <= 1.0:
        raise TaskError(f"task {spec.name}: cut {cut} needs 0 <= start_fraction < end_fraction <= 1")
    return source


def _read(spec: TaskSpec, config: str, split: str, mirror: Path | None, synthetic: bool, rows: int, seed: int):
    """One configuration's split as a datasets.Dataset, from the mirror or hub, or made up (smoke profile)."""
    if synthetic:
        from gpt1.data.synthetic.tasks import synthetic_split

        return synthetic_split(spec.path, config, split, rows=rows, seed=seed, splits=spec.splits)
    from gpt1.data.sources import DatasetRef, load_split

    return load_split(DatasetRef(spec.path, config, split), mirror)


def _check_columns(spec: TaskSpec, split: str, columns: Sequence[str]) -> None:
    needed = (*spec.text_fields, spec.label_field, *spec.choice_fields)
    for name in needed:
        if name not in columns:
            raise TaskError(f"{_where(spec, split, name=name)}: column missing from the data "
                            f"(columns: {', '.join(columns)})")


def cut_positions(n: int, cut: Cut) -> np.ndarray:
    """Positions of a cut in 0..n-1: a seeded permutation, sliced at rounded fractions (so that adjacent cuts with
    the same seed share their boundary: disjoint and together complete)."""
    order = np.random.default_rng(cut.seed).permutation(n)
    return order[round(cut.start_fraction * n) : round(cut.end_fraction * n)]


def cap_positions(positions: np.ndarray, max_examples: int | None, seed: int) -> np.ndarray:
    """A seeded random subset of at most max_examples, in their original order (a split may be sorted by label,
    so the first N would be biased)."""
    if max_examples is None or len(positions) <= max_examples:
        return positions
    chosen = np.random.default_rng(seed).choice(len(positions), size=max_examples, replace=False)
    return positions[np.sort(chosen)]


def load_examples(
    spec: TaskSpec | str,
    split: str,
    mirror: Path | None = None,
    cut: Cut | None = None,
    max_examples: int | None = None,
    synthetic: bool = False,
    *,
    seed: int = 0,
    configs: Sequence[str] | None = None,
    synthetic_rows: int = 64,
    synthetic_seed: int = 0,
) -> LoadedSplit:
    """Read, validate and parse one split of a task.

    `split` is the hub split read, or, with a `cut`, the part it plays (e.g. "train") while the rows come from
    `cut.split`. Rows without a gold label are dropped and counted; `max_examples` then keeps a seeded random
    subset (seed `seed`). `configs` restricts a multi-configuration task (RACE) to some of its configurations;
    `synthetic` reads the project-made data of `gpt1.data.synthetic.tasks` (`synthetic_rows` rows per configuration,
    made from `synthetic_seed`) instead of the hub or mirror; the rest of the path is the same.
    """
    spec = task_spec(spec)
    source = _source_split(spec, split, cut)
    chosen = tuple(configs) if configs else spec.configs
    bad = [c for c in chosen if c not in spec.configs]
    if bad:
        valid = ", ".join(spec.configs)
        raise TaskError(f"task {spec.name}: configuration(s) {', '.join(bad)} unknown; valid: {valid}")
    if max_examples is not None and max_examples < 1:
        raise TaskError(f"task {spec.name}: max_examples must be at least 1, got {max_examples}")

    parts = [(c, _read(spec, c, source, mirror, synthetic, synthetic_rows, synthetic_seed)) for c in chosen]
    for _, ds in parts:
        _check_columns(spec, source, ds.column_names)
    # One position space over all configurations (RACE: middle rows, then high rows).
    owners = np.concatenate([np.full(len(ds), k) for k, (_, ds) in enumerate(parts)]).astype(int)
    rows = np.concatenate([np.arange(len(ds)) for _, ds in parts]).astype(int)
    positions = cut_positions(len(rows), cut) if cut else np.arange(len(rows))
    positions = np.sort(positions)

    unlabelled = _unlabelled_mask(spec, parts)
    labelled = positions[~unlabelled[positions]]
    dropped = len(positions) - len(labelled)
    kept = cap_positions(labelled, max_examples, seed)
    where = str(cut) if cut else source  # row numbers below are rows of the source split
    if len(kept) == 0:
        raise TaskError(f"task {spec.name}, split {where}: no labelled rows ({len(positions)} read, {dropped} without "
                        "a gold label); hidden test labels? evaluate on validation")
    examples = _parse_positions(spec, where, parts, owners, rows, kept)
    description = {
        "task": spec.name, "path": spec.path, "configs": list(chosen), "part": split, "split": source,
        "cut": str(cut) if cut else None, "cut_spec": asdict(cut) if cut else None,
        "source": _source_name(mirror, synthetic, synthetic_seed, synthetic_rows),
        "max_examples": max_examples, "seed": seed, "rows_read": len(positions),
        "unlabelled_dropped": dropped, "capped": len(labelled) - len(kept), "examples": len(examples),
    }
    return LoadedSplit(examples, len(positions), dropped, len(labelled) - len(kept), description)


def _unlabelled_mask(spec: TaskSpec, parts) -> np.ndarray:
    """Which rows (in the joint position space) have no gold label; read from the label column alone."""
    if spec.encoding not in ("class", "float"):
        return np.zeros(sum(len(ds) for _, ds in parts), dtype=bool)
    labels = [ds.with_format("arrow")[spec.label_field].to_pylist() for _, ds in parts]
    return np.array([value == UNLABELLED for column in labels for value in column], dtype=bool)


def _parse_positions(spec, where, parts, owners, rows, kept) -> list[Example]:
    examples = []
    for k, (config, ds) in enumerate(parts):
        mine = [int(rows[p]) for p in kept if owners[p] == k]
        for index, row in zip(mine, ds.select(mine), strict=True):
            examples.append(parse_row(spec, where, row, index, config if len(spec.configs) > 1 else None))
    return examples


def _source_name(mirror: Path | None, synthetic: bool, seed: int, rows: int) -> str:
    """Where rows came from, without the mirror's folder: the same rows read from another one describe the same."""
    if synthetic:
        return f"synthetic:{rows}rows:seed{seed}"
    return "mirror" if mirror else "hub"


# ---------------------------------------------------------------------------------------------------- planning


@dataclass
class DataSource:
    """Where a task's rows are read from."""

    mirror: Path | None
    synthetic: bool
    present: list[str] | None  # splits the source holds (None: the hub, all of them)


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


def mirror_splits(spec: TaskSpec, mirror: Path) -> list[str]:
    """The hub splits of a task present in the mirror for all of its configurations."""
    from gpt1.data.sources import DatasetRef, mirror_file

    return [s for s in spec.splits if all(mirror_file(DatasetRef(spec.path, c, s), mirror).is_file()
                                          for c in spec.configs)]


def evaluation_split(spec: TaskSpec, report: ReportSpec, present: Sequence[str] | None = None) -> str:
    """The split a report is scored on: the paper's test split where its labels are public and it is `present`
    (None: assume the hub, which has every split), the validation split otherwise. Name it in every table."""
    if spec.test_labels == "public" and report.test and (present is None or report.test in present):
        return report.test
    return report.validation


def _declared_cut(spec: TaskSpec, settings: dict[str, Any]) -> dict[str, Any] | None:
    return (settings.get("train_cuts") or {}).get(spec.name)


def train_cut(spec: TaskSpec, settings: dict[str, Any]) -> Cut | None:
    """The declared training cut (finetune.train_cuts[task]) as the first `fraction` of a seeded shuffle."""
    declared = _declared_cut(spec, settings)
    if declared is None:
        if spec.train is None:
            raise TaskDataError(f"task {spec.name} has no training split; declare finetune.train_cuts.{spec.name} "
                                f"(e.g. {{split: validation, fraction: 0.8, seed: 0}})")
        return None
    return Cut(declared["split"], 0.0, declared["fraction"], declared["seed"])


def train_cap(spec: TaskSpec, settings: dict[str, Any]) -> int | None:
    """How many training examples a task keeps: its entry in `train_examples_by_task`, else `max_train_examples`."""
    return (settings.get("train_examples_by_task") or {}).get(spec.name, settings["max_train_examples"])


def eval_cap(settings: dict[str, Any], narrowed: int | None = None) -> int | None:
    """How many examples of each evaluation split are scored: a layer run's narrower cap, else max_eval_examples."""
    return narrowed if narrowed is not None else settings["max_eval_examples"]


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


@dataclass(frozen=True)
class PartPlan:
    """One part of a task's data before it is read: the role it plays ("train", or the evaluation split), the hub
    split, the cut of it, the cap, and the reports scored on it (None: the training part)."""

    role: str
    split: str
    cut: Cut | None
    cap: int | None
    reports: list[ReportSpec] | None = None


def plan_parts(spec: TaskSpec, settings: dict[str, Any], present: Sequence[str] | None) -> list[PartPlan]:
    """The training part, then one part per distinct evaluation split, with the cut and caps of `settings` (the
    fine-tuning section: train_cuts, max_train_examples, train_examples_by_task, max_eval_examples)."""
    cut = train_cut(spec, settings)
    train = PartPlan("train", cut.split if cut else spec.train, cut, train_cap(spec, settings))
    return [train, *(PartPlan(split, split, rest, eval_cap(settings), reports)
                     for split, rest, reports in eval_plan(spec, present, cut))]


def read_part(spec: TaskSpec, plan: PartPlan, source: DataSource) -> LoadedSplit:
    """The rows of one planned part, capped with DATA_SEED."""
    return load_examples(spec, plan.role, source.mirror, cut=plan.cut, max_examples=plan.cap,
                         synthetic=source.synthetic, seed=DATA_SEED)


def data_settings(spec: TaskSpec, settings: dict[str, Any], source: DataSource) -> dict[str, Any]:
    """The settings that decide a task's examples, as recorded beside the encoded examples and checked by jobs."""
    return {"train_cut": _declared_cut(spec, settings), "max_train_examples": train_cap(spec, settings),
            "max_eval_examples": eval_cap(settings),
            "source": {"synthetic": source.synthetic, "present": source.present}}


def layer_caps(layers: dict[str, Any], finetune: dict[str, Any], task: str) -> dict[str, int | None]:
    """The caps the layer runs (n_layer + 1 fine-tunings) narrow the task's fine-tuning examples to:
    layers.max_train_examples / max_eval_examples, with layers.by_task.<task> laid over them (a key absent there
    keeps the shared cap; null anywhere keeps finetune's). A cap can only narrow: one above what finetune keeps for
    the task is an error, not a silent no-op."""
    own = (layers.get("by_task") or {}).get(task, {})
    caps = {key: layers.get(key) for key in LAYER_CAPS} | own
    kept = {"max_train_examples": train_cap(finetune_task(task), finetune),
            "max_eval_examples": eval_cap(finetune)}
    for key, cap in caps.items():
        if cap is not None and kept[key] is not None and cap > kept[key]:
            where = f"layers.by_task.{task}.{key}" if key in own else f"layers.{key}"
            raise ConfigError(f"{where}: {cap} is more than the {kept[key]} examples finetune keeps for {task} "
                              f"(finetune's caps); a layer cap can only narrow them: lower it, or raise finetune's")
    return caps


# ---------------------------------------------------------------------------------------------------- narrowing


def narrow_rows(loaded: LoadedSplit, cap: int | None) -> tuple[list[int], LoadedSplit] | None:
    """At most `cap` of a split's examples, a seeded random subset in their order (the layer runs train on fewer
    examples than fine-tuning, drawn from the same encoded ones): their positions and the split they leave, or None
    when the cap keeps them all."""
    keep = cap_positions(np.arange(len(loaded.examples)), cap, DATA_SEED)
    if len(keep) == len(loaded.examples):
        return None
    left_out = len(loaded.examples) - len(keep)
    description = {**loaded.description, "max_examples": cap, "examples": len(keep),
                   "capped": loaded.capped + left_out}
    narrowed = dataclasses.replace(loaded, examples=[loaded.examples[i] for i in keep],
                                   capped=loaded.capped + left_out, description=description)
    return keep.tolist(), narrowed


def selection_rows(spec: TaskSpec, n: int) -> set[int] | None:
    """Story Cloze: the positions of a seeded 10% of the n training examples, the slice that picks the best epoch;
    None for a task that keeps them all for training."""
    if spec.name not in SELECT_BEST_EPOCH:
        return None
    size = max(1, round(SELECTION_FRACTION * n))
    if n - size < 1:
        raise TaskDataError(f"task {spec.name}: {n} training example(s) leave none after the {size}-example "
                            f"selection slice; raise finetune.max_train_examples or the train cut's fraction")
    return set(np.random.default_rng(DATA_SEED).permutation(n)[:size].tolist())


def report_examples(spec: TaskSpec, report: ReportSpec, examples: Sequence[Example]) -> list[int]:
    """Positions of the examples a report covers (RACE-m: the middle ones), for scoring one model's predictions."""
    configs = report.configs or spec.configs
    return [i for i, e in enumerate(examples) if e.config is None or e.config in configs]
