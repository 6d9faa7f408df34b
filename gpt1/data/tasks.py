"""The task registry: the paper's 12 fine-tuning datasets (plus DPR for the zero-shot analysis), one `TaskSpec` each.

A spec says where a dataset lives on the hub, which columns hold the texts, the label and the answer choices, how
the label is encoded, which metrics score it and which numbers the paper reports (`ReportSpec`). The code over it
lives elsewhere: which rows a job reads in `rows`, the input transformations in `transforms`.

Schemas were checked against the hub-layout mirror (see tests/test_tasks.py): the `idx` column of GLUE is never
used as a row number (the mirror's MRPC `idx` holds positions in the original MSR file, not 0..n-1); an example's
`index` is its row in the split it was read from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from gpt1.pipeline.errors import TaskError, UsageError

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
    used (`report.tables.PaperNumber` is what the tables say about it)."""

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


def get_task(name: str) -> TaskSpec:
    if name not in TASKS:
        raise TaskError(f"task {name!r} is unknown; valid: {', '.join(TASKS)}")
    return TASKS[name]


def task_spec(task: TaskSpec | str) -> TaskSpec:
    """A spec, or the spec of a task named (for functions that take either)."""
    return task if isinstance(task, TaskSpec) else get_task(task)


def finetune_task(name: str) -> TaskSpec:
    """The spec of a task that is fine-tuned (not an analysis dataset such as DPR), or a one-line refusal."""
    if name not in FINETUNE_TASKS:
        what = "an analysis dataset (zero-shot), not fine-tuned" if name in TASKS else "unknown"
        raise UsageError(f"--task {name!r} is {what}; valid: {', '.join(FINETUNE_TASKS)}")
    return get_task(name)
