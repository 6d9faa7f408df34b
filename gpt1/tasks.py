"""The paper's 12 fine-tuning datasets (plus DPR for the zero-shot analysis) and the input transformations of §3.3.

One declarative `TaskSpec` per dataset says where it lives on the hub, which columns hold the texts, the label and
the answer choices, how the label is encoded, which metrics score it and what the paper reports. Everything else
(loading, validation, cuts, caps, the four input transformations) is generic code over the spec.

Schemas were checked against the hub-layout mirror (see tests/test_tasks.py): the `idx` column of GLUE is never
used as a row number (the mirror's MRPC `idx` holds positions in the original MSR file, not 0..n-1); an example's
`index` is its row in the split it was read from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gpt1.errors import TaskError
from gpt1.scoring import left_truncate

Kind = Literal["classification", "entailment", "similarity", "multiple_choice"]
# How the label column encodes the target:
#   class      an int (ClassLabel) in 0..num_labels-1; -1 means "no gold label" (SNLI, GLUE test) and is dropped
#   names      a string out of label_names (SciTail: "entails", "neutral") -> its position
#   letters    a letter out of label_names (RACE: "A".."D") -> index into the choices
#   one_based  an int 1..num_labels (Story Cloze answer_right_ending) -> 0-based index into the choices
#   float      a score in label_range (STS-B 0..5), kept as a float; -1 (GLUE test) means no gold label
Encoding = Literal["class", "names", "letters", "one_based", "float"]
UNLABELLED = -1  # the hub's label for a row without a gold label (SNLI disagreements, GLUE's hidden test labels)


@dataclass(frozen=True)
class ReportSpec:
    """How one number the paper reports for a task is scored here: which split we evaluate and which split the paper
    used (`PaperNumber` is what the tables say about it)."""

    name: str  # e.g. mnli_m, race_h: the key in metrics.json and the paper's tables
    validation: str  # the hub split evaluated when the test labels are hidden or the test split is absent
    test: str | None  # the hub split the paper reports (its labels may be hidden: see TaskSpec.test_labels)
    configs: tuple[str, ...] = ()  # the configurations it covers (RACE-m: middle); empty: all of the task's


@dataclass(frozen=True)
class TaskSpec:
    name: str
    kind: Kind
    path: str  # hub dataset id
    configs: tuple[str, ...]  # hub configurations; RACE reads middle and high as one task
    splits: tuple[str, ...]  # the hub's split names
    train: str | None  # the hub's training split (Story Cloze has none: train on a cut of validation)
    text_fields: tuple[str, ...]  # in input order; multiple choice: the context fields, joined by a space
    label_field: str
    encoding: Encoding
    num_labels: int  # classes; choices for multiple choice; 1 for a regression score
    label_names: tuple[str, ...] = ()  # class names, label strings or answer letters, in label-id order
    label_range: tuple[float, float] | None = None  # float labels only
    choice_fields: tuple[str, ...] = ()  # one list column of choices, or one column per choice
    metrics: tuple[str, ...] = ("accuracy",)
    paper_metric: str = "accuracy"  # the metric of the paper's table
    reports: tuple[ReportSpec, ...] = ()
    test_labels: Literal["public", "glue_server", "unknown"] = "public"  # GLUE test labels are hidden
    paper_table: str = ""
    finetune: bool = True  # False: an analysis dataset (DPR), never fine-tuned
    note: str = ""

    @property
    def n_choices(self) -> int | None:
        return self.num_labels if self.kind == "multiple_choice" else None


def _glue(name: str, kind: Kind, fields: tuple[str, ...], names: tuple[str, ...], **kw: Any) -> TaskSpec:
    splits = kw.pop("splits", ("train", "validation", "test"))
    reports = kw.pop("reports", (ReportSpec(name, "validation", "test"),))
    return TaskSpec(name, kind, "nyu-mll/glue", (name,), splits, "train", fields, "label", "class", len(names),
                    names, reports=reports, test_labels="glue_server", **kw)


_NLI3 = ("entailment", "neutral", "contradiction")
_NLI2 = ("entailment", "not_entailment")
_STD = ("train", "validation", "test")

TASKS: dict[str, TaskSpec] = {spec.name: spec for spec in (
    # Table 2: natural language inference (accuracy).
    TaskSpec("snli", "entailment", "stanfordnlp/snli", ("plain_text",), _STD, "train", ("premise", "hypothesis"),
             "label", "class", 3, _NLI3, reports=(ReportSpec("snli", "validation", "test"),), paper_table="2",
             note="label -1: no gold label (annotators disagreed); dropped and counted"),
    _glue("mnli", "entailment", ("premise", "hypothesis"), _NLI3, paper_table="2",
          splits=("train", "validation_matched", "validation_mismatched", "test_matched", "test_mismatched"),
          reports=(ReportSpec("mnli_m", "validation_matched", "test_matched"),
                   ReportSpec("mnli_mm", "validation_mismatched", "test_mismatched"))),
    # QNLI as entailment: the Wikipedia sentence is the premise (long, trimmed first), the question the hypothesis.
    _glue("qnli", "entailment", ("sentence", "question"), _NLI2, paper_table="2"),
    TaskSpec("scitail", "entailment", "allenai/scitail", ("tsv_format",), _STD, "train", ("premise", "hypothesis"),
             "label", "names", 2, ("entails", "neutral"), reports=(ReportSpec("scitail", "validation", "test"),),
             paper_table="2", note="label is a string: entails -> 0, neutral -> 1"),
    _glue("rte", "entailment", ("sentence1", "sentence2"), _NLI2, paper_table="2"),
    # Table 3: question answering and commonsense reasoning (accuracy).
    TaskSpec("race", "multiple_choice", "ehovy/race", ("middle", "high"), _STD, "train", ("article", "question"),
             "answer", "letters", 4, ("A", "B", "C", "D"), choice_fields=("options",), paper_table="3",
             reports=(ReportSpec("race_m", "validation", "test", ("middle",)),
                      ReportSpec("race_h", "validation", "test", ("high",)),
                      ReportSpec("race", "validation", "test")),
             note="context = article + ' ' + question; RACE-m, RACE-h and RACE (both) from one combined model"),
    TaskSpec("story_cloze", "multiple_choice", "LSDSem/story_cloze", ("2016",), ("validation", "test"), None,
             ("input_sentence_1", "input_sentence_2", "input_sentence_3", "input_sentence_4"),
             "answer_right_ending", "one_based", 2, choice_fields=("sentence_quiz1", "sentence_quiz2"),
             reports=(ReportSpec("story_cloze", "validation", "test"),), paper_table="3",
             note="no training split exists: train on a cut of validation, as the paper does"),
    # Table 4: semantic similarity and classification.
    _glue("mrpc", "similarity", ("sentence1", "sentence2"), ("not_equivalent", "equivalent"),
          metrics=("f1", "accuracy"), paper_metric="f1", paper_table="4"),
    _glue("qqp", "similarity", ("question1", "question2"), ("not_duplicate", "duplicate"),
          metrics=("f1", "accuracy"), paper_metric="f1", paper_table="4"),
    TaskSpec("stsb", "similarity", "nyu-mll/glue", ("stsb",), _STD, "train", ("sentence1", "sentence2"), "label",
             "float", 1, label_range=(0.0, 5.0), metrics=("pearson", "spearman"), paper_metric="pearson",
             reports=(ReportSpec("stsb", "validation", "test"),), test_labels="glue_server", paper_table="4",
             note="regression on a 0-5 score; GLUE test scores are hidden (-1)"),
    _glue("sst2", "classification", ("sentence",), ("negative", "positive"), paper_table="4"),
    _glue("cola", "classification", ("sentence",), ("unacceptable", "acceptable"),
          metrics=("mcc", "accuracy"), paper_metric="mcc", paper_table="4"),
    # Figure 2 (right): zero-shot pronoun resolution; candidates replace the pronoun and the LM scores them.
    TaskSpec("dprd", "multiple_choice", "community-datasets/definite_pronoun_resolution", ("plain_text",),
             ("train", "test"), "train", ("sentence", "pronoun"), "label", "class", 2, ("0", "1"),
             choice_fields=("candidates",), reports=(ReportSpec("dprd", "train", "test"),), test_labels="unknown",
             paper_table="figure 2", finetune=False,
             note="zero-shot analysis only; no validation split, so 'train' is its held-out fallback"),
)}

FINETUNE_TASKS: tuple[str, ...] = tuple(name for name, spec in TASKS.items() if spec.finetune)


@dataclass(frozen=True)
class PaperNumber:
    """One number the paper reports (its task, metric, split, table and where it comes from): the report builds
    Tables 2-4 from these."""

    report: str
    task: str
    metric: str
    paper_split: str | None
    via: str  # where the paper's number comes from: "GLUE server" (hidden labels) or "public test labels"
    table: str


def _paper_numbers(spec: TaskSpec) -> list[PaperNumber]:
    via = {"glue_server": "GLUE server", "public": "public test labels", "unknown": "not stated"}[spec.test_labels]
    return [PaperNumber(r.name, spec.name, spec.paper_metric, r.test, via, spec.paper_table) for r in spec.reports]


PAPER_NUMBERS: dict[str, PaperNumber] = {r.report: r for spec in TASKS.values() for r in _paper_numbers(spec)}


def get_task(name: str) -> TaskSpec:
    if name not in TASKS:
        raise TaskError(f"task {name!r} is unknown; valid: {', '.join(TASKS)}")
    return TASKS[name]


def _spec(task: TaskSpec | str) -> TaskSpec:
    return task if isinstance(task, TaskSpec) else get_task(task)


def evaluation_split(spec: TaskSpec, report: ReportSpec, present: Sequence[str] | None = None) -> str:
    """The split a report is scored on: the paper's test split where its labels are public and it is `present`
    (None: assume the hub, which has every split), the validation split otherwise. Name it in every table."""
    if spec.test_labels == "public" and report.test and (present is None or report.test in present):
        return report.test
    return report.validation


def mirror_splits(spec: TaskSpec, mirror: Path) -> list[str]:
    """The hub splits of a task present in the mirror for all of its configurations."""
    from gpt1.sources import DatasetRef, mirror_file

    return [s for s in spec.splits if all(mirror_file(DatasetRef(spec.path, c, s), mirror).is_file()
                                          for c in spec.configs)]


# ---------------------------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Example:
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


# ---------------------------------------------------------------------------------------------------- loading


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
        from gpt1.synthetic.tasks import synthetic_split

        return synthetic_split(spec.path, config, split, rows=rows, seed=seed, splits=spec.splits)
    from gpt1.sources import DatasetRef, load_split

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
    `synthetic` reads the project-made data of `gpt1.synthetic.tasks` (`synthetic_rows` rows per configuration,
    made from `synthetic_seed`) instead of the hub or mirror; the rest of the path is the same.
    """
    spec = _spec(spec)
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
    if synthetic:
        return f"synthetic:{rows}rows:seed{seed}"
    return f"mirror:{mirror}" if mirror else "hub"


def report_examples(spec: TaskSpec, report: ReportSpec, examples: Sequence[Example]) -> list[int]:
    """Positions of the examples a report covers (RACE-m: the middle ones), for scoring one model's predictions."""
    configs = report.configs or spec.configs
    return [i for i, e in enumerate(examples) if e.config is None or e.config in configs]


# ---------------------------------------------------------------------------------------------- transformations


@dataclass(frozen=True)
class Transformed:
    sequences: list[list[int]]  # 1 (classification, entailment), 2 (similarity: both orders) or k (choices)
    truncated: bool


def _assemble(context: list[int], tail: list[int] | None, ids: dict[str, int], n_ctx: int) -> tuple[list[int], bool]:
    """[start] context [delim] tail [extract], or [start] context [extract] when there is no tail, within n_ctx."""
    specials = 2 if tail is None else 3
    budget = n_ctx - specials
    if budget < 1:
        raise TaskError(f"n_ctx {n_ctx} leaves no room for text beside {specials} special tokens")
    # The context loses its beginning first; the tail is cut from the right only if it alone overflows.
    fitted = left_truncate(context, tail or [], budget)
    sequence = [ids["_start_"], *fitted.context]
    if tail is not None:
        sequence += [ids["_delimiter_"], *fitted.tail]
    return [*sequence, ids["_classify_"]], fitted.truncated


def transform_batch(spec: TaskSpec | str, examples: Sequence[Example], tokenizer, n_ctx: int) -> list[Transformed]:
    """The input transformations of §3.3 (Figure 1, right) as token ids, encoding each distinct text once.

    - classification: [start] text [extract]
    - entailment:     [start] premise [delim] hypothesis [extract]
    - similarity:     [start] A [delim] B [extract] and [start] B [delim] A [extract]; the model sums the two
                      extract-token states before the linear layer
    - multiple choice: [start] context [delim] answer_k [extract] for every answer k; the context is the
                      text fields joined by a space (RACE: article + " " + question; Story Cloze: the four
                      sentences), the answers the choices
    start/delim/extract are `tokenizer.specials` _start_, _delimiter_, _classify_.

    Truncation, when a sequence exceeds n_ctx: the special tokens always stay. The context (the only text of
    classification, the premise, the first text of a similarity order, the article-and-question context) is
    trimmed from the LEFT, so the end next to the delimiter survives (RACE: the question outlives the article;
    `gpt1.scoring.left_truncate`, the rule zero-shot scoring uses too).
    The second segment (hypothesis, second text, answer) is never trimmed unless it alone, with the specials,
    exceeds n_ctx; then the context is dropped entirely and that segment is cut from the right. `truncated`
    reports whether any sequence of the example lost tokens.
    """
    spec = _spec(spec)
    if not spec.finetune:
        raise TaskError(f"task {spec.name} is an analysis dataset (zero-shot), not fine-tuned: no input transformation")
    ids = tokenizer.specials
    texts = sorted({t for e in examples for t in _segments(spec, e)})
    encoded = dict(zip(texts, tokenizer.encode_batch(texts), strict=True))
    results = []
    for example in examples:
        pairs = _pairs(spec, example)
        built = [_assemble(encoded[a], None if b is None else encoded[b], ids, n_ctx) for a, b in pairs]
        results.append(Transformed([s for s, _ in built], any(t for _, t in built)))
    return results


def transform(spec: TaskSpec | str, example: Example, tokenizer, n_ctx: int) -> Transformed:
    """One example's sequences; see `transform_batch` for the layouts and the truncation policy."""
    return transform_batch(spec, [example], tokenizer, n_ctx)[0]


def _pairs(spec: TaskSpec, example: Example) -> list[tuple[str, str | None]]:
    """(context, tail) per sequence, before encoding."""
    if spec.kind == "classification":
        return [(example.texts[0], None)]
    if spec.kind == "entailment":
        return [(example.texts[0], example.texts[1])]
    if spec.kind == "similarity":
        a, b = example.texts
        return [(a, b), (b, a)]
    context = " ".join(example.texts)
    return [(context, choice) for choice in example.choices or ()]


def _segments(spec: TaskSpec, example: Example) -> list[str]:
    return [t for pair in _pairs(spec, example) for t in pair if t is not None]
