"""The paper's Tables 2-5 and Figure 2 beside ours: read the stage outputs, build tables and figures, render them.

Inputs (all under RESULTS = results/<profile>, only for the lists of params.yaml):
  finetune/<task>/<variant>/<seed>/metrics.json    gpt1.finetune   Tables 2-5
  finetune/<task>/<variant>/<seed>/predictions.jsonl                Table 5's paired tests (gpt1.significance)
  analyses/layers/<task>/<seed>/layers.csv          gpt1.layers     Figure 2 (left)
  analyses/zeroshot/<model>/zeroshot.csv            gpt1.zeroshot   Figure 2 (right)
  pretrain/<model>/curves.csv                       gpt1.pretrain   pre-training curves
Outputs (OUT = results/<profile>): OUT/tables/table{2,3,4,5}.{md,tex,csv,html}, OUT/tables/summary.json (every
number of the tables and figures), OUT/metrics.json (a curated few per stage, for `dvc metrics` and `dvc exp show`)
and OUT/figures/{figure2_left,figure2_right,pretraining}.{png,svg}, all renamed into place together at the end.

The paper's numbers come from gpt1/paper.yaml only. Rules the tables follow:
* A missing input (a run not in params.yaml, or not run yet) is an explained gap: "—" plus a footnote naming the
  file and why it is missing. A malformed input (bad JSON or CSV, a missing key, a wrong type) is a ReportError
  naming the file and the key: a table built around a broken file would look finished and be wrong.
* Numbers are percent with one decimal, rounded half up as the paper prints them (MNLI 81.75 -> 81.8); Python's
  round() rounds half to even on the binary value, which would print Table 5's full-model average 74.65 as 74.6.
* Our cells: the mean over the seeds present ± one standard error (over seeds, or a bootstrap over the evaluation
  examples of one seed), then (paper X, Δ ours - paper), the
  difference taken between the two printed numbers so that a reader can check it.
* Table 5's Avg is the paper's: the unweighted mean of its 8 columns, MNLI the mean of matched and mismatched. The
  paper's printed average is kept as printed; where it disagrees with the mean of its own printed columns (the LSTM
  row: 69.1 printed, 69.1625 -> 69.2 recomputed) a footnote says so.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from gpt1.errors import Gpt1Error
from gpt1.files import read_sealed_json, staged_outputs, verify_file
from gpt1.metrics import GLUE_COMPONENTS, bootstrap_se, glue_average
from gpt1.significance import BOOTSTRAP_SEED, RESAMPLES, PairedTest, column_test, read_predictions
from gpt1.tasks import REPORTED, get_task

PAPER_FILE = Path(__file__).with_name("paper.yaml")
TABLES = ("table2", "table3", "table4", "table5")
TABLE_FORMATS = ("md", "tex", "csv", "html")  # html: what `snakemake --report` shows inline
FIGURES = ("figure2_left", "figure2_right", "pretraining")
FIGURE_FORMATS = ("png", "svg")
SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.json"  # in OUT itself: the DVC metrics file
GAP = "—"  # our cell when its input is missing; the paper's own blanks stay empty
PARENT_TAG = "mlflow.parentRunId"  # the tag `mlflow ui` nests runs by
PIPELINE_TAG = "gpt1.pipeline_run"  # set by gpt1.tracking.stage_run from GPT1_PIPELINE_RUN

# Our rows of Tables 2-4, and the Table 5 variant of each paper row (paper.yaml names the variant per row).
MAIN_VARIANTS = {"pretrained": "ours (pretrained)", "scratch": "ours (no pre-training)"}
ABLATION_VARIANTS = ("no_aux", "lstm")  # run on params' ablation_tasks only (see workflow/rules/common.smk)
COMPUTED_COLUMNS = ("glue", "avg")  # not a task: our GLUE-style average (Table 4), the paper's Avg (Table 5)

# Figure 2 as the paper draws it: one colour per task, line style per model (right) or per split (left).
LAYER_TASKS = {"mnli": "MultiNLI", "race": "RACE"}
ZEROSHOT_TASKS = {"sst2": "Sentiment analysis (SST-2)", "dprd": "Winograd schema resolution (DPRD)",
                  "cola": "Linguistic acceptability (CoLA)", "race": "Question answering (RACE)"}
MODELS = {"gpt": ("Transformer", "-"), "lstm": ("LSTM", "--")}
COLOURS = {"mnli": "tab:blue", "race": "tab:orange", "gpt": "tab:blue", "lstm": "tab:red"}  # left, pre-training
ZEROSHOT_COLOURS = {"sst2": "tab:blue", "dprd": "tab:orange", "cola": "tab:green", "race": "tab:red"}
LAYER_FIELDS = {"layers": "int", "train_accuracy": "number|empty", "dev_accuracy": "number", "dev_split": "str"}
ZEROSHOT_FIELDS = {"model": "str", "step": "int", "task": "str", "metric": "str", "raw": "number",
                   "normalised": "number"}
CURVE_FIELDS = {"step": "int", "train_loss": "number|empty", "val_loss": "number|empty",
                "val_perplexity": "number|empty"}


class ReportError(Gpt1Error):
    """A malformed input: names the file and the key (or row and column), and what was expected."""


# ---------------------------------------------------------------------------------------------------- numbers


def _decimal(value: float) -> Decimal:
    # Through repr, and to 9 places: 100 * 0.8175 is 81.74999999999999 in binary, printed 81.75 by everyone.
    return Decimal(repr(float(value))).quantize(Decimal("1e-9"))


def round_half_up(value: float, digits: int = 1) -> float:
    """Round as the paper prints: 81.75 -> 81.8, 74.65 -> 74.7 (round() would give 74.6)."""
    return float(_decimal(value).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def paper_average(values: Iterable[float]) -> Decimal:
    """The exact mean of printed one-decimal numbers (no binary error): 553.3 / 8 = 69.1625."""
    numbers = [_decimal(v) for v in values]
    if not numbers:
        raise ReportError("paper average: no values")
    return sum(numbers, Decimal(0)) / len(numbers)


def difference(ours: float, paper: float) -> float:
    """Δ between the two numbers as printed, so that the printed Δ is their printed difference."""
    return float(_decimal(round_half_up(ours)) - _decimal(paper))


def mean_sd(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for one value: no spread to show)."""
    array = np.asarray(values, dtype=np.float64)
    return float(array.mean()), float(array.std(ddof=1)) if array.size > 1 else None


# ---------------------------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Plan:
    """What params.yaml asks for: the report reads exactly these runs, no more."""

    finetune_tasks: tuple[str, ...]
    finetune_variants: tuple[str, ...]
    seeds: tuple[int, ...]
    ablation_tasks: tuple[str, ...]
    layer_transfer_tasks: tuple[str, ...]
    pretrain_models: tuple[str, ...]

    @classmethod
    def from_config(cls, cfg: Any) -> Plan:
        root = cfg.root
        return cls(*(tuple(root[key]) for key in ("finetune_tasks", "finetune_variants", "seeds", "ablation_tasks",
                                                   "layer_transfer_tasks", "pretrain_models")))

    def why_not_planned(self, task: str, variant: str) -> str | None:
        """None when params.yaml asks for (task, variant); else the reason it does not."""
        if variant in ABLATION_VARIANTS:
            if task not in self.ablation_tasks:
                return f"the {variant} ablation runs on params.yaml ablation_tasks only, and {task} is not one"
            return None
        if variant not in self.finetune_variants:
            return f"variant {variant} is not in params.yaml finetune_variants"
        if task not in self.finetune_tasks:
            return f"task {task} is not in params.yaml finetune_tasks"
        return None


@dataclass(frozen=True)
class Gap:
    """An input that is not there, and why: rendered as a footnote, never an error."""

    path: Path
    reason: str

    @property
    def note(self) -> str:
        return f"{self.path}: missing; {self.reason}"


def _gap(path: Path, planned_reason: str | None, producer: str) -> Gap:
    return Gap(path, planned_reason or f"not produced yet (run {producer})")


def gap_notes(gaps: Sequence[Gap]) -> list[str]:
    """One footnote per run folder and reason: the seeds missing for the same reason share it
    (results/finetune/rte/scratch/{0,1}/metrics.json), so a table of unrun seeds stays readable."""
    groups: dict[tuple[Path, str, str], list[str]] = {}
    for gap in gaps:
        groups.setdefault((gap.path.parent.parent, gap.path.name, gap.reason), []).append(gap.path.parent.name)
    notes = []
    for (folder, name, reason), seeds in groups.items():
        where = seeds[0] if len(seeds) == 1 else "{" + ",".join(seeds) + "}"
        notes.append(f"{folder}/{where}/{name}: missing; {reason}")
    return notes


# ---------------------------------------------------------------------------------------------------- validation

_KINDS: dict[str, Callable[[Any], bool]] = {
    "str": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v),
    "bool": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "list": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def _field(obj: Mapping[str, Any], key: str, kind: str, path: Path, where: str = "") -> Any:
    """obj[key] if it is of `kind` ('str', 'number|null', ...); else a ReportError naming the file and key."""
    name = f"{where}.{key}" if where else key
    if key not in obj:
        raise ReportError(f"{path}: key {name!r} is missing; re-run the stage that wrote the file")
    value = obj[key]
    if not any(_KINDS[k](value) for k in kind.split("|")):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise ReportError(f"{path}: key {name!r} is {shown}, expected {kind.replace('|', ' or ')}")
    return value


def _verified_inputs(sealed: Path, producer: str) -> dict[str, Any]:
    """The size and sha256 records of the files a stage wrote beside `sealed` (its sealed JSON), checked first."""
    data = read_sealed_json(sealed, producer, ReportError)
    return _field(data, "files", "object", sealed)


def _verify_beside(path: Path, sealed: Path, producer: str) -> None:
    """Refuse `path` unless it matches the record its stage wrote in `sealed`."""
    files = _verified_inputs(sealed, producer)
    if path.name not in files:
        raise ReportError(f"{sealed}: records no {path.name}; re-run the {producer} stage")
    verify_file(path, files[path.name], producer, sealed, error=ReportError)


# ---------------------------------------------------------------------------------------------------- fine-tuning


@dataclass(frozen=True)
class Score:
    """One report of one run (metrics.json `reports.<name>`): fractions, and where they were scored."""

    metrics: dict[str, float]
    evaluated_on: str
    paper_split: str | None
    is_paper_split: bool
    examples: int


@dataclass(frozen=True)
class Run:
    """The parts of one finetune metrics.json the tables use."""

    path: Path
    task: str
    variant: str
    seed: int
    scores: dict[str, Score]
    cut: str | None  # the training cut's description, e.g. "validation[0%:80%] (shuffled, seed 0)"


def _score(block: Any, name: str, metrics: Sequence[str], path: Path) -> Score:
    where = f"reports.{name}"
    if not isinstance(block, dict):
        raise ReportError(f"{path}: key {where!r} is {type(block).__name__}, expected object")
    values = _field(block, "metrics", "object", path, where)
    scores = {m: float(_field(values, m, "number", path, f"{where}.metrics")) for m in metrics}
    counts = _field(block, "counts", "object", path, where)
    return Score(scores, _field(block, "evaluated_on", "str", path, where),
                 _field(block, "paper_split", "str|null", path, where),
                 _field(block, "is_paper_split", "bool", path, where),
                 _field(counts, "eval", "int", path, f"{where}.counts"))


def _train_cut(data: dict[str, Any], path: Path) -> str | None:
    train = _field(data, "train", "object", path)
    cut = _field(train, "cut", "object|null", path, "train")
    return None if cut is None else _field(cut, "description", "str", path, "train.cut")


def read_finetune_metrics(path: Path, task: str, variant: str, seed: int) -> Run:
    """Validate one finetune metrics.json (gpt1.finetune.build_metrics) and keep what the tables need."""
    data = read_sealed_json(path, "finetune", ReportError)
    for key, kind, expected in (("task", "str", task), ("variant", "str", variant), ("seed", "int", seed)):
        found = _field(data, key, kind, path)
        if found != expected:  # a file copied into the wrong folder would put one run's numbers in another's cell
            raise ReportError(f"{path}: key {key!r} is {found!r}, but the file sits in the folder of {expected!r}")
    spec = get_task(task)
    reports = _field(data, "reports", "object", path)
    scores = {}
    for report in spec.reports:
        if report.name not in reports:
            raise ReportError(f"{path}: key 'reports.{report.name}' is missing; {task} reports "
                              f"{', '.join(r.name for r in spec.reports)}")
        scores[report.name] = _score(reports[report.name], report.name, spec.metrics, path)
    return Run(path, task, variant, seed, scores, _train_cut(data, path))


@dataclass
class Finetuned:
    """Every (task, variant) the tables need: the runs found by seed, and the gaps."""

    runs: dict[tuple[str, str], dict[int, Run]] = field(default_factory=dict)
    gaps: dict[tuple[str, str], list[Gap]] = field(default_factory=dict)

    def of(self, task: str, variant: str) -> dict[int, Run]:
        return self.runs.get((task, variant), {})

    def gaps_of(self, task: str, variant: str) -> list[Gap]:
        return self.gaps.get((task, variant), [])


def finetune_path(results_dir: Path, task: str, variant: str, seed: int) -> Path:
    return results_dir / "finetune" / task / variant / str(seed) / "metrics.json"


def collect_finetune(results_dir: Path, plan: Plan, pairs: Iterable[tuple[str, str]]) -> Finetuned:
    """Read (task, variant) for every seed of the plan; a missing file is a gap, a malformed one an error."""
    found = Finetuned()
    for task, variant in dict.fromkeys(pairs):
        for seed in plan.seeds:
            path = finetune_path(results_dir, task, variant, seed)
            if path.is_file():
                found.runs.setdefault((task, variant), {})[seed] = read_finetune_metrics(path, task, variant, seed)
            else:
                command = f"gpt1 finetune --task {task} --variant {variant} --seed SEED"  # seed: in the path
                found.gaps.setdefault((task, variant), []).append(
                    _gap(path, plan.why_not_planned(task, variant), command))
    return found


# ---------------------------------------------------------------------------------------------------- CSV inputs


def _parse(value: str | None, kind: str, path: Path, row: int, column: str) -> Any:
    text = (value or "").strip()
    if text == "" and "empty" in kind:
        return None
    try:
        if kind.startswith("int"):
            return int(text)
        if kind.startswith("number"):
            number = float(text)
            if math.isfinite(number):
                return number
        elif text:
            return text
    except ValueError:
        pass
    raise ReportError(f"{path}: row {row}, column {column!r} is {text!r}, expected {kind.replace('|', ' or ')}")


def read_csv_rows(path: Path, fields: Mapping[str, str]) -> list[dict[str, Any]]:
    """Rows of a stage's CSV with `fields` ({column: 'int' | 'number' | 'number|empty' | 'str'}) parsed."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            missing = [name for name in fields if name not in header]
            if missing:
                raise ReportError(f"{path}: column {missing[0]!r} is missing (header: {', '.join(header) or 'none'})")
            return [{name: _parse(row.get(name), kind, path, number, name) for name, kind in fields.items()}
                    for number, row in enumerate(reader, 2)]  # row 1 is the header
    except (UnicodeDecodeError, csv.Error) as err:
        raise ReportError(f"{path}: not a readable CSV file ({err})") from err


@dataclass
class Analyses:
    """Figure inputs: layer curves by task and seed, zero-shot rows and pre-training curves by model, and gaps."""

    layers: dict[str, dict[int, list[dict[str, Any]]]] = field(default_factory=dict)
    zeroshot: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    curves: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    gaps: dict[str, list[Gap]] = field(default_factory=dict)  # by figure name


def _wanted(paper: Iterable[str], planned: Sequence[str]) -> list[str]:
    return list(dict.fromkeys([*paper, *planned]))


def collect_analyses(results_dir: Path, plan: Plan) -> Analyses:
    """Read what the figures draw; the paper's tasks and models are looked for even when params drops them,
    so that the figure says why a line is absent."""
    found = Analyses()
    for task in _wanted(LAYER_TASKS, plan.layer_transfer_tasks):
        why = None if task in plan.layer_transfer_tasks else f"{task} is not in params.yaml layer_transfer_tasks"
        for seed in plan.seeds:
            path = results_dir / "analyses" / "layers" / task / str(seed) / "layers.csv"
            producer = f"gpt1 layers --task {task} --seed SEED"
            rows = _rows_or_gap(found, "figure2_left", path, LAYER_FIELDS, why, producer, "layers", "layers.json")
            if rows is not None:
                found.layers.setdefault(task, {})[seed] = rows
    for model in _wanted(MODELS, plan.pretrain_models):
        why = None if model in plan.pretrain_models else f"{model} is not in params.yaml pretrain_models"
        path = results_dir / "analyses" / "zeroshot" / model / "zeroshot.csv"
        rows = _rows_or_gap(found, "figure2_right", path, ZEROSHOT_FIELDS, why, f"gpt1 zeroshot on pretrain/{model}",
                            "zeroshot", "zeroshot.json")
        if rows is not None:
            found.zeroshot[model] = rows
        path = results_dir / "pretrain" / model / "curves.csv"
        rows = _rows_or_gap(found, "pretraining", path, CURVE_FIELDS, why, f"gpt1 pretrain --model {model}",
                            "pretrain", "metrics.json")
        if rows is not None:
            found.curves[model] = rows
    return found


def _rows_or_gap(found: Analyses, figure: str, path: Path, fields: Mapping[str, str], why: str | None,
                 producer: str, stage: str, sealed: str) -> list[dict[str, Any]] | None:
    """The parsed rows (verified against the record that `stage` wrote in the sealed JSON beside them, named
    `sealed`), or None after recording the gap in `found` (`producer`: the command that makes the file)."""
    if path.is_file():
        _verify_beside(path, path.with_name(sealed), stage)
        return read_csv_rows(path, fields)
    found.gaps.setdefault(figure, []).append(_gap(path, why, producer))
    return None


# ---------------------------------------------------------------------------------------------------- paper


def load_paper(path: Path = PAPER_FILE) -> dict[str, Any]:
    """paper.yaml: the paper's tables (rows of printed numbers) and the split notes for the footnotes."""
    data = yaml.safe_load(path.read_text())
    tables = _field(data, "tables", "object", path)
    for name in TABLES:
        table = _field(tables, name, "object", path, "tables")
        for i, row in enumerate(_field(table, "rows", "list", path, f"tables.{name}")):
            _field(row, "method", "str", path, f"tables.{name}.rows[{i}]")
            _field(row, "values", "object", path, f"tables.{name}.rows[{i}]")
    _field(data, "splits", "object", path)
    return data


@dataclass(frozen=True)
class Column:
    """One table column: the paper's key and label; for ours, the task run and the (report, metric) pairs averaged
    (a task column: one pair; Table 5's MNLI: matched and mismatched)."""

    key: str
    label: str
    task: str | None  # None: a computed column (GLUE average, Avg)
    components: tuple[tuple[str, str], ...] = ()


def make_columns(table: str, spec: Mapping[str, Any]) -> list[Column]:
    columns = []
    for entry in spec["columns"]:
        key, label = entry["key"], entry["label"]
        if key in COMPUTED_COLUMNS:
            columns.append(Column(key, label, None))
        elif table == "table5" and key == "mnli":
            columns.append(Column(key, label, "mnli", GLUE_COMPONENTS["mnli"]))
        elif key in REPORTED:
            columns.append(Column(key, label, REPORTED[key].task, ((key, REPORTED[key].metric),)))
        else:
            raise ReportError(f"{PAPER_FILE}: key 'tables.{table}.columns' names {key!r}, which is not a report of "
                              f"gpt1/tasks.py (valid: {', '.join(REPORTED)}, {', '.join(COMPUTED_COLUMNS)})")
    if spec.get("average"):
        columns.append(Column(spec["average"], "Avg", None))
    return columns


def average_discrepancy(method: str, values: Mapping[str, float], printed: float) -> str | None:
    """A footnote when the paper's printed average is not the rounded mean of its own printed columns."""
    exact = paper_average(values.values())
    recomputed = float(exact.quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))
    if recomputed == printed:
        return None
    total = sum((_decimal(v) for v in values.values()), Decimal(0))
    return (f"The paper prints Avg {printed:.1f} for “{method}”, but the mean of its {len(values)} printed columns "
            f"is {total.normalize()} / {len(values)} = {exact.normalize()}, {recomputed:.1f} when rounded; kept as "
            f"printed (the paper presumably averaged unrounded scores).")


# ---------------------------------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class Cell:
    """One table cell. Paper rows: value only. Ours: mean over seeds, sd, the paper's number, footnotes."""

    value: float | None = None  # percent, unrounded
    sd: float | None = None  # over seeds (None for one seed)
    se: float | None = None  # standard error of `value`: sd / sqrt(seeds), or for one seed a bootstrap over examples
    seeds: tuple[int, ...] = ()
    paper: float | None = None
    notes: tuple[str, ...] = ()
    ours: bool = False
    compare: bool = True  # False: the paper's number is shown but not subtracted (not the same quantity)
    per_seed: Mapping[int, float] = field(default_factory=dict)  # Table 5's Avg is a mean per seed

    @property
    def shown(self) -> float | None:
        return None if self.value is None else round_half_up(self.value)

    @property
    def diff(self) -> float | None:
        if self.value is None or self.paper is None or not self.compare:
            return None
        return difference(self.value, self.paper)

    def text(self) -> str:
        """'79.3 ± 0.4 (paper 82.1, Δ -2.8)', ± one standard error; the paper's blanks stay empty, our gaps '—'."""
        if self.value is None:
            return GAP if self.ours else ""
        text = f"{self.shown:.1f}"
        if self.se is not None:
            text += f" ± {round_half_up(self.se):.1f}"
        if self.ours and self.paper is not None:
            text += f" (paper {self.paper:.1f}" + (f", Δ {self.diff:+.1f})" if self.compare else ")")
        return text


def our_cell(values: Mapping[int, float], paper: float | None, notes: Iterable[str], compare: bool = True,
             one_seed_se: float | None = None) -> Cell:
    """Our cell from {seed: percent}; no values: a gap (its notes say why). The standard error is sd / sqrt(n) over
    several seeds; for one seed, `one_seed_se` (a bootstrap over the evaluation examples) when it is known."""
    if not values:
        return Cell(paper=paper, notes=tuple(dict.fromkeys(notes)), ours=True, compare=compare)
    mean, sd = mean_sd(list(values.values()))
    se = sd / math.sqrt(len(values)) if sd is not None else one_seed_se
    return Cell(mean, sd, se, tuple(sorted(values)), paper, tuple(dict.fromkeys(notes)), True, compare, dict(values))


def column_se(run: Run, column: Column) -> float | None:
    """Bootstrap standard error (percent) of one run's column value over its evaluation examples, from the run's
    predictions (verified against metrics.json); None without predictions. A column averaging several reports
    (MNLI: matched and mismatched, scored on disjoint examples) combines their errors as independent."""
    path = run.path.with_name("predictions.jsonl")
    if not path.is_file():
        return None
    predictions = _verified_predictions(path)
    errors = []
    for report, metric in column.components:
        keys = sorted((k for k in predictions if k[0] == report), key=lambda k: (k[1], k[2], k[3] or ""))
        if not keys:
            return None
        labels = [predictions[k].label for k in keys]
        errors.append(100.0 * bootstrap_se(metric, labels, [predictions[k].prediction for k in keys],
                                           n=RESAMPLES, seed=BOOTSTRAP_SEED))
    return math.sqrt(sum(e * e for e in errors)) / len(errors)


@dataclass(frozen=True)
class Row:
    method: str
    source: str  # "paper" or "ours"
    variant: str | None
    cells: dict[str, Cell]


@dataclass(frozen=True)
class Table:
    name: str
    title: str
    columns: list[Column]
    rows: list[Row]
    notes: list[str]  # table-wide notes, printed under the footnotes
    tests: list[PairedTest] = field(default_factory=list)  # Table 5: full vs each ablation, per column
    untested: list[str] = field(default_factory=list)  # the comparisons with no predictions to pair, and why


def column_value(run: Run, column: Column) -> float:
    """Percent: the mean of the column's (report, metric) pairs in one run."""
    return 100.0 * float(np.mean([run.scores[report].metrics[metric] for report, metric in column.components]))


def split_notes(column: Column, runs: Mapping[int, Run], beside_paper: bool = True) -> list[str]:
    """Which split each report of the column was scored on; `beside_paper`: and the paper's split and source
    (Tables 2-4; Table 5's paper numbers are dev-set numbers, said once in its notes)."""
    notes = []
    for report, _ in column.components:
        scored = sorted({(r.scores[report].evaluated_on, r.scores[report].examples) for r in runs.values()})
        first = next(iter(runs.values())).scores[report]
        where = " / ".join(f"{split} ({n} examples)" for split, n in scored)
        paper = "the paper's split" if first.is_paper_split else f"the paper: {first.paper_split} " \
                                                                  f"({REPORTED[report].via})"
        notes.append(f"{report}: evaluated on {where}" + (f"; {paper}" if beside_paper else ""))
    return notes


def cut_notes(runs: Mapping[int, Run]) -> list[str]:
    cuts = sorted({(r.task, r.cut) for r in runs.values() if r.cut})
    return [f"{task}: fine-tuned on the cut {cut} (params.yaml finetune.train_cuts.{task}); scored on the rest of "
            f"that split" for task, cut in cuts]


def task_cell(column: Column, variant: str, finetuned: Finetuned, paper: float | None,
              beside_paper: bool = True) -> Cell:
    runs = finetuned.of(column.task, variant)
    notes = gap_notes(finetuned.gaps_of(column.task, variant))
    if runs:
        notes += split_notes(column, runs, beside_paper) + cut_notes(runs)
    one_seed_se = column_se(next(iter(runs.values())), column) if len(runs) == 1 else None
    return our_cell({seed: column_value(run, column) for seed, run in runs.items()}, paper, notes,
                    one_seed_se=one_seed_se)


GLUE_NOTE = ("GLUE-style average over the tasks we have ({tasks}{missing}): gpt1.metrics.glue_average, the mean "
             "over tasks of each task's GLUE metrics (CoLA: MCC; MRPC, QQP: F1 and accuracy; STS-B: Pearson and "
             "Spearman; MNLI: matched and mismatched accuracy), on the splits we evaluate. Not the GLUE leaderboard "
             "score the paper prints (hidden test sets, and WNLI, which the paper does not fine-tune): no Δ.")


def glue_cell(variant: str, finetuned: Finetuned, paper: float | None) -> Cell:
    """Table 4's GLUE column for us: glue_average per seed over the GLUE tasks present for every counted seed."""
    by_seed: dict[int, dict[str, Run]] = {}
    for task in GLUE_COMPONENTS:
        for seed, run in finetuned.of(task, variant).items():
            by_seed.setdefault(seed, {})[task] = run
    common = [t for t in GLUE_COMPONENTS if by_seed and all(t in runs for runs in by_seed.values())]
    if not common:
        return our_cell({}, paper, [f"GLUE-style average: no GLUE task results for variant {variant}"], False)
    missing = [t for t in GLUE_COMPONENTS if t not in common]
    note = GLUE_NOTE.format(tasks=", ".join(common), missing=f"; missing: {', '.join(missing)}" if missing else "")
    values = {seed: 100.0 * glue_average({r: s.metrics for t in common for r, s in runs[t].scores.items()}, common)
              for seed, runs in by_seed.items()}
    return our_cell(values, paper, [note], compare=False)


AVG_NOTE = ("Avg: the unweighted mean of the 8 columns (MNLI: the mean of matched and mismatched), as the paper "
            "defines it; ours averages the unrounded scores, per seed; left empty while a column is missing.")


def average_cell(cells: Mapping[str, Cell], paper: float | None) -> Cell:
    """Table 5's Avg for us: per seed, the mean of the 8 columns, over the seeds every column has."""
    seeds = set.intersection(*(set(c.seeds) for c in cells.values())) if cells else set()
    absent = [key for key, cell in cells.items() if cell.value is None]
    if absent or not seeds:
        why = f"missing columns: {', '.join(absent)}" if absent else "no seed has every column"
        return our_cell({}, paper, [f"{AVG_NOTE} Here: {why}"])
    errors = [c.se for c in cells.values()]
    one_seed_se = (math.sqrt(sum(e * e for e in errors)) / len(errors)
                   if len(seeds) == 1 and all(e is not None for e in errors) else None)  # columns as independent
    return our_cell({s: float(np.mean([c.per_seed[s] for c in cells.values()])) for s in sorted(seeds)},
                    paper, [AVG_NOTE], one_seed_se=one_seed_se)


def _paper_method(row: Mapping[str, Any]) -> str:
    return row["method"].replace(" (ours)", "") + " (paper)" if row.get("ours") else row["method"]


def paper_row(row: Mapping[str, Any], columns: Sequence[Column], label: str | None = None) -> Row:
    values = dict(row["values"])
    if row.get("avg") is not None:
        values["avg"] = row["avg"]
    cells = {c.key: Cell(float(values[c.key])) if c.key in values else Cell() for c in columns}
    return Row(label or _paper_method(row), "paper", row.get("variant"), cells)


def table_notes(name: str, paper: Mapping[str, Any], seeds: Sequence[int]) -> list[str]:
    splits = paper["splits"]
    notes = [f"Our rows: percent (MCC, F1 and correlations × 100), one decimal, rounded half up; the mean "
             f"over the seeds present (params.yaml seeds: {', '.join(map(str, seeds))}) ± one standard error: "
             f"sd / sqrt(seeds) over several seeds; for one seed, a bootstrap over the evaluation examples "
             f"({RESAMPLES} resamples of the run's predictions; averages combine their columns' errors as "
             f"independent; the GLUE-style average shows none); in "
             f"brackets the paper's number and Δ = ours - paper, between the printed numbers. {GAP}: no result "
             f"(the footnote names the missing file)."]
    notes += {"table2": [splits["glue_test_server"], splits["public_test"]], "table3": [splits["public_test"]],
              "table4": [splits["glue_test_server"]], "table5": [splits["table5"]]}[name]
    return [" ".join(n.split()) for n in notes]


def main_table(name: str, paper: Mapping[str, Any], finetuned: Finetuned, plan: Plan) -> Table:
    """Tables 2-4: the paper's rows, then ours (pretrained) and ours (no pre-training)."""
    spec = paper["tables"][name]
    columns = make_columns(name, spec)
    rows = [paper_row(r, columns) for r in spec["rows"]]
    reference = next((r["values"] for r in spec["rows"] if r.get("ours")), {})
    for variant, label in MAIN_VARIANTS.items():
        cells = {c.key: glue_cell(variant, finetuned, reference.get(c.key)) if c.key == "glue"
                 else task_cell(c, variant, finetuned, reference.get(c.key)) for c in columns}
        rows.append(Row(label, "ours", variant, cells))
    return Table(name, spec["title"], columns, rows, table_notes(name, paper, plan.seeds))


FULL_VARIANT = "pretrained"  # Table 5's full model, which every ablation is tested against


def _predictions(results_dir: Path, finetuned: Finetuned, task: str, variant: str) -> dict[int, dict]:
    runs = {}
    for seed in finetuned.of(task, variant):
        path = finetune_path(results_dir, task, variant, seed).with_name("predictions.jsonl")
        if path.is_file():
            runs[seed] = _verified_predictions(path)
    return runs


def _verified_predictions(path: Path) -> dict:
    """One run's predictions, checked against the record in the metrics.json beside them first."""
    _verify_beside(path, path.with_name("metrics.json"), "finetune")
    return read_predictions(path)


def ablation_tests(results_dir: Path, columns: Sequence[Column], variants: Sequence[str],
                   finetuned: Finetuned) -> tuple[list[PairedTest], list[str]]:
    """Full vs each ablation on every task column (paired bootstrap over the evaluation examples both scored);
    and a line for each comparison that has nothing to pair."""
    tests, untested = [], []
    for column in (c for c in columns if c.task is not None):
        full = _predictions(results_dir, finetuned, column.task, FULL_VARIANT)
        reports, metrics = zip(*column.components, strict=True)  # Table 5's MNLI: two reports, one metric
        for variant in variants:
            test = column_test(variant, column.key, metrics[0], reports, full,
                               _predictions(results_dir, finetuned, column.task, variant))
            if test is None:
                untested.append(f"{column.label}: full vs {variant} not tested, no seed has the predictions of both")
            else:
                tests.append(test)
    return tests, untested


def ablation_table(paper: Mapping[str, Any], finetuned: Finetuned, plan: Plan, results_dir: Path) -> Table:
    """Table 5: each paper row, our row of the same variant right under it; then the paired tests."""
    spec = paper["tables"]["table5"]
    columns = make_columns("table5", spec)
    tasks = [c for c in columns if c.task is not None]
    rows = []
    for row in spec["rows"]:
        printed = paper_row(row, columns, f"paper: {row['method']}")
        note = average_discrepancy(row["method"], row["values"], float(row["avg"]))
        if note:
            printed.cells["avg"] = Cell(printed.cells["avg"].value, notes=(note,))
        cells = {c.key: task_cell(c, row["variant"], finetuned, row["values"].get(c.key), beside_paper=False)
                 for c in tasks}
        cells["avg"] = average_cell(cells, float(row["avg"]))
        rows += [printed, Row(f"ours: {row['method']}", "ours", row["variant"], cells)]
    variants = [r["variant"] for r in spec["rows"] if r["variant"] != FULL_VARIANT]
    tests, untested = ablation_tests(results_dir, columns, variants, finetuned)
    return Table("table5", spec["title"], columns, rows, table_notes("table5", paper, plan.seeds), tests, untested)


def finetune_pairs(paper: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every (task, variant) a table cell reads."""
    pairs = []
    for name in TABLES:
        spec = paper["tables"][name]
        variants = [r["variant"] for r in spec["rows"]] if name == "table5" else list(MAIN_VARIANTS)
        tasks = [c.task for c in make_columns(name, spec) if c.task]
        if name == "table4":  # the GLUE-style average reads every GLUE task
            tasks += list(GLUE_COMPONENTS)
        pairs += [(t, v) for v in variants for t in tasks]
    return list(dict.fromkeys(pairs))


def build_tables(paper: Mapping[str, Any], finetuned: Finetuned, plan: Plan, results_dir: Path) -> list[Table]:
    return [*(main_table(n, paper, finetuned, plan) for n in TABLES[:3]),
            ablation_table(paper, finetuned, plan, results_dir)]


# ---------------------------------------------------------------------------------------------------- rendering


def number_notes(table: Table) -> dict[str, int]:
    """Footnote numbers in reading order (rows, then columns); each distinct text once."""
    numbers: dict[str, int] = {}
    for row in table.rows:
        for column in table.columns:
            for note in row.cells[column.key].notes:
                numbers.setdefault(note, len(numbers) + 1)
    return numbers


def _markers(cell: Cell, numbers: Mapping[str, int]) -> str:
    return ",".join(str(numbers[n]) for n in cell.notes)


def _md(text: str) -> str:
    return text.replace("|", "\\|")


TESTS_TITLE = ("Paired tests: the full model minus each ablation, in percent points, and the two-sided p-value of a "
               f"paired bootstrap over the evaluation examples both runs scored ({RESAMPLES} resamples; seeds present "
               "in both pooled; gpt1/significance.py).")


def tested_columns(table: Table) -> list[Column]:
    return [c for c in table.columns if c.task is not None]


def test_grid(table: Table) -> list[tuple[str, list[str]]]:
    """Per ablation: its label and one 'Δ (p)' text per task column ('' where not tested)."""
    labels = {row.variant: row.method.removeprefix("ours: ") for row in table.rows if row.source == "ours"}
    grid = []
    for variant in dict.fromkeys(t.variant for t in table.tests):
        found = {t.column: t for t in table.tests if t.variant == variant}
        grid.append((f"full vs {labels.get(variant, variant)}",
                     [f"{found[c.key].difference:+.1f} (p {found[c.key].p_value:.3f})" if c.key in found else ""
                      for c in tested_columns(table)]))
    return grid


def _markdown_tests(table: Table) -> list[str]:
    if not table.tests and not table.untested:
        return []
    columns = tested_columns(table)
    lines = ["", TESTS_TITLE, "", "| Comparison | " + " | ".join(c.label for c in columns) + " |",
             "| --- |" + " ---: |" * len(columns)]
    lines += [f"| {_md(label)} | " + " | ".join(texts) + " |" for label, texts in test_grid(table)]
    return lines + [f"- {_md(line)}" for line in table.untested]


def to_markdown(table: Table) -> str:
    numbers = number_notes(table)
    lines = [f"# {table.title}", "", "| Method | " + " | ".join(c.label for c in table.columns) + " |",
             "| --- |" + " ---: |" * len(table.columns)]
    for row in table.rows:
        texts = []
        for column in table.columns:
            cell, marks = row.cells[column.key], _markers(row.cells[column.key], numbers)
            texts.append(_md(cell.text()) + (f" [{marks}]" if marks else ""))
        method = f"**{row.method}**" if row.source == "ours" else row.method
        lines.append(f"| {_md(method)} | " + " | ".join(texts) + " |")
    if numbers:
        lines += ["", "Footnotes:", ""] + [f"{n}. {_md(text)}" for text, n in numbers.items()]
    lines += ["", "Notes:", ""] + [f"- {_md(note)}" for note in table.notes]
    return "\n".join(lines + _markdown_tests(table)) + "\n"


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "—": "---", "–": "--", "±": r"$\pm$",
        "Δ": r"$\Delta$", "×": r"$\times$", "−": "--", "→": r"$\rightarrow$", "λ": r"$\lambda$", "“": "``",
        "”": "''"}


def tex(text: str) -> str:
    return "".join(_TEX.get(ch, ch) for ch in text)


def to_latex(table: Table) -> str:
    """A booktabs table (needs \\usepackage{booktabs,graphicx}); footnotes and notes under it."""
    numbers = number_notes(table)
    header = " & ".join([r"\textbf{Method}", *(rf"\textbf{{{tex(c.label)}}}" for c in table.columns)])
    lines = ["% Rendered by gpt1/report.py; needs \\usepackage{booktabs,graphicx}.", r"\begin{table}[t]",
             r"\centering", rf"\caption{{{tex(table.title)}}}", rf"\label{{tab:{table.name}}}",
             r"\resizebox{\textwidth}{!}{%", rf"\begin{{tabular}}{{l{'r' * len(table.columns)}}}", r"\toprule",
             header + r" \\", r"\midrule"]
    for index, row in enumerate(table.rows):
        if row.source == "ours" and (index == 0 or table.rows[index - 1].source == "paper") and table.name != "table5":
            lines.append(r"\midrule")
        cells = []
        for column in table.columns:
            cell, marks = row.cells[column.key], _markers(row.cells[column.key], numbers)
            cells.append(tex(cell.text()) + (rf"\textsuperscript{{{marks}}}" if marks else ""))
        method = rf"\textit{{{tex(row.method)}}}" if row.source == "ours" else tex(row.method)
        lines.append(" & ".join([method, *cells]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}}", r"\par\smallskip\footnotesize"]
    lines += [rf"\textsuperscript{{{n}}}~{tex(text)}\par" for text, n in numbers.items()]
    lines += [rf"{tex(note)}\par" for note in table.notes]
    if table.tests:
        columns = tested_columns(table)
        lines += [r"\medskip", rf"\begin{{tabular}}{{l{'r' * len(columns)}}}", r"\toprule",
                  " & ".join([r"\textbf{Comparison}", *(tex(c.label) for c in columns)]) + r" \\",
                  r"\midrule"]
        lines += [" & ".join([tex(label), *(tex(t) for t in texts)]) + r" \\" for label, texts in test_grid(table)]
        lines += [r"\bottomrule", r"\end{tabular}\par", rf"{tex(TESTS_TITLE)}\par"]
    lines += [rf"{tex(line)}\par" for line in table.untested] + [r"\end{table}"]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = ("table", "method", "source", "variant", "column", "label", "value", "se", "sd", "seeds", "paper",
               "diff",
               "value_exact", "text", "notes", "p_value", "examples")


def _num(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def to_csv(table: Table) -> str:
    """Tidy: one line per cell, numbers as printed (value_exact unrounded), footnotes joined by ' | '."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in table.rows:
        for column in table.columns:
            cell = row.cells[column.key]
            writer.writerow({
                "table": table.name, "method": row.method, "source": row.source, "variant": row.variant or "",
                "column": column.key, "label": column.label, "value": _num(cell.shown),
                "se": _num(None if cell.se is None else round_half_up(cell.se)),
                "sd": _num(None if cell.sd is None else round_half_up(cell.sd)),
                "seeds": " ".join(map(str, cell.seeds)), "paper": _num(cell.paper), "diff": _num(cell.diff),
                "value_exact": _num(cell.value, 4), "text": cell.text(), "notes": " | ".join(cell.notes),
            })
    labels = {c.key: c.label for c in table.columns}
    for test in table.tests:  # source paired_test: value = full - ablation (percent points)
        writer.writerow({
            "table": table.name, "method": f"full vs {test.variant}", "source": "paired_test",
            "variant": test.variant, "column": test.column, "label": labels[test.column],
            "value": _num(test.difference), "seeds": " ".join(map(str, test.seeds)),
            "value_exact": _num(test.difference, 4), "text": f"{test.difference:+.1f} (p {test.p_value:.3f})",
            "notes": f"paired bootstrap, {test.resamples} resamples, metric {test.metric}",
            "p_value": f"{test.p_value:.4f}", "examples": test.examples,
        })
    return out.getvalue()


HTML_STYLE = """
body { font-family: system-ui, sans-serif; font-size: 13px; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1em; }
th, td { padding: 3px 8px; border-bottom: 1px solid #ddd; text-align: right; }
td:first-child { white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
thead th { border-bottom: 2px solid #444; }
tr.ours td { font-weight: 600; background: #f3f7fb; }
sup { color: #666; font-weight: normal; }
.notes { max-width: 75em; color: #444; }
"""


def _html_table(header: Sequence[str], rows: Iterable[tuple[str, Sequence[str]]]) -> list[str]:
    """rows: (css class, cells as HTML); the header is plain text."""
    lines = ["<table>", "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr></thead>",
             "<tbody>"]
    lines += [f'<tr class="{kind}">' + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>" for kind, cells in rows]
    return [*lines, "</tbody>", "</table>"]


def to_html(table: Table) -> str:
    """A standalone page (Snakemake's report shows it inline): the table, footnotes, notes and the paired tests."""
    numbers = number_notes(table)

    def cell_html(cell: Cell) -> str:
        marks = _markers(cell, numbers)
        return html.escape(cell.text()) + (f"<sup>{marks}</sup>" if marks else "")

    rows = [(row.source, [html.escape(row.method), *(cell_html(row.cells[c.key]) for c in table.columns)])
            for row in table.rows]
    lines = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html.escape(table.title)}</title><style>{HTML_STYLE}</style></head><body>",
             f"<h2>{html.escape(table.title)}</h2>", *_html_table(["Method", *(c.label for c in table.columns)], rows)]
    if numbers:
        lines += ['<ol class="notes">', *(f"<li>{html.escape(text)}</li>" for text in numbers), "</ol>"]
    lines += ['<ul class="notes">', *(f"<li>{html.escape(note)}</li>" for note in table.notes), "</ul>"]
    if table.tests or table.untested:
        lines += [f'<p class="notes">{html.escape(TESTS_TITLE)}</p>',
                  *_html_table(["Comparison", *(c.label for c in tested_columns(table))],
                               [("test", [html.escape(label), *map(html.escape, texts)])
                                for label, texts in test_grid(table)]),
                  '<ul class="notes">', *(f"<li>{html.escape(line)}</li>" for line in table.untested), "</ul>"]
    return "\n".join([*lines, "</body></html>"]) + "\n"


RENDERERS: dict[str, Callable[[Table], str]] = {"md": to_markdown, "tex": to_latex, "csv": to_csv, "html": to_html}


# ---------------------------------------------------------------------------------------------------- summary


def _rounded(value: float) -> float:
    return round(float(value), 4)


def table_summary(tables: Sequence[Table]) -> dict[str, float]:
    """Our headline numbers (percent): table2.pretrained.mnli_m, table4.glue_average.pretrained, table5.lstm.avg."""
    summary: dict[str, float] = {}
    for table in tables:
        for row in (r for r in table.rows if r.source == "ours"):
            for key, cell in row.cells.items():
                if cell.value is None:
                    continue
                name = f"table4.glue_average.{row.variant}" if key == "glue" else f"{table.name}.{row.variant}.{key}"
                summary[name] = _rounded(cell.value)
                if table.name == "table5" and key == "avg" and cell.diff is not None:
                    summary[f"table5.{row.variant}.avg_diff"] = _rounded(cell.diff)
    return summary


def analysis_summary(analyses: Analyses) -> dict[str, float]:
    """The last point of each curve: dev accuracy with all layers, final zero-shot scores, final perplexity."""
    summary: dict[str, float] = {}
    for task, curve in layer_means(analyses).items():
        summary[f"figure2_left.{task}.dev_accuracy"] = _rounded(curve["dev"][-1])
    for model, rows in analyses.zeroshot.items():
        for task in ZEROSHOT_TASKS:
            points = sorted((r["step"], r["normalised"]) for r in rows if r["task"] == task)
            if points:
                summary[f"figure2_right.{model}.{task}.normalised"] = _rounded(points[-1][1])
    for model, rows in analyses.curves.items():
        perplexity = [r for r in rows if r["val_perplexity"] is not None]
        if perplexity:
            summary[f"pretrain.{model}.val_perplexity"] = _rounded(max(perplexity, key=lambda r: r["step"])
                                                                   ["val_perplexity"])
    return summary


def build_summary(tables: Sequence[Table], analyses: Analyses, gaps: int) -> dict[str, float]:
    return {**table_summary(tables), **analysis_summary(analyses), "report.gaps": gaps}


# The curated metrics: short flat keys (they are column headers of `dvc exp show`), a few per stage, each the
# summary key it copies or the mean of the summary keys it averages (a key missing from the summary, a gap, is left
# out of the mean; none present gives null), then `gaps`, the count of missing inputs.
CURATED_METRICS: dict[str, tuple[str, ...]] = {
    "ppl_gpt": ("pretrain.gpt.val_perplexity",),
    "ppl_lstm": ("pretrain.lstm.val_perplexity",),
    "glue": ("table4.glue_average.pretrained",),
    "glue_scratch": ("table4.glue_average.scratch",),
    "race": ("table3.pretrained.race",),
    "t5_no_aux": ("table5.no_aux.avg",),
    "t5_lstm": ("table5.lstm.avg",),
    "layers": ("figure2_left.mnli.dev_accuracy", "figure2_left.race.dev_accuracy"),
    "zs_gpt": tuple(f"figure2_right.gpt.{task}.normalised" for task in ("cola", "sst2", "race", "dprd")),
    "zs_lstm": tuple(f"figure2_right.lstm.{task}.normalised" for task in ("cola", "sst2", "race", "dprd")),
}


def curated_metrics(summary: Mapping[str, float]) -> dict[str, float | None]:
    """The few numbers per stage that `dvc metrics show`, `dvc metrics diff` and `dvc exp show` print."""
    curated: dict[str, float | None] = {}
    for name, keys in CURATED_METRICS.items():
        present = [summary[key] for key in keys if key in summary]
        curated[name] = _rounded(sum(present) / len(present)) if present else None
    curated["gaps"] = summary.get("report.gaps")
    return curated


# ---------------------------------------------------------------------------------------------------- figures


def layer_means(analyses: Analyses) -> dict[str, dict[str, list[float]]]:
    """Per task: layers k, mean train and dev accuracy (percent) over the seeds present, and their sd."""
    curves = {}
    for task, seeds in analyses.layers.items():
        ks = sorted({row["layers"] for rows in seeds.values() for row in rows})
        if not ks:
            continue
        curve: dict[str, list[float]] = {"k": [float(k) for k in ks]}
        for split, column in (("train", "train_accuracy"), ("dev", "dev_accuracy")):
            stats = [mean_sd([100.0 * row[column] for rows in seeds.values() for row in rows
                              if row["layers"] == k and row[column] is not None] or [math.nan]) for k in ks]
            curve[split] = [m for m, _ in stats]
            curve[f"{split}_sd"] = [s if s is not None else 0.0 for _, s in stats]
        curve["seeds"] = [float(len(seeds))]
        curves[task] = curve
    return curves


def _new_figure(width: float = 5.0, height: float = 3.8, panels: int = 1) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width * panels, height), layout="constrained")
    return figure, [figure.add_subplot(1, panels, i + 1) for i in range(panels)]


def _gap_text(figure: Any, gaps: Sequence[Gap]) -> None:
    """Name what is missing on the figure itself: a figure silently missing a line reads as a result."""
    if not gaps:
        return
    notes = gap_notes(gaps)
    shown = notes[:4] + ([f"... and {len(notes) - 4} more"] if len(notes) > 4 else [])
    # Below the axes, outside the layout: savefig's tight bounding box takes it in.
    figure.text(0.01, -0.01, "\n".join(shown), fontsize=5.5, color="0.35", va="top", ha="left")


def _no_data(axis: Any, what: str) -> None:
    axis.text(0.5, 0.5, f"no {what} yet", transform=axis.transAxes, ha="center", va="center", color="0.4")


def figure2_left(analyses: Analyses) -> Any:
    """Accuracy against the number of pre-trained layers transferred: dev solid, train dashed, a colour per task."""
    figure, (axis,) = _new_figure()
    curves = layer_means(analyses)
    for task, curve in curves.items():
        colour, label = COLOURS.get(task, "tab:gray"), LAYER_TASKS.get(task, task)
        for split, style in (("train", "--"), ("dev", "-")):
            mean, sd = np.array(curve[split]), np.array(curve[f"{split}_sd"])
            axis.plot(curve["k"], mean, style, color=colour, marker="o", markersize=3.5,
                      label=f"{label} {split.capitalize()}")
            if curve["seeds"][0] > 1:
                axis.fill_between(curve["k"], mean - sd, mean + sd, color=colour, alpha=0.12, linewidth=0)
    if not curves:
        _no_data(axis, "layer-transfer results")
    else:
        axis.legend(fontsize=8, frameon=False)
        seeds = sorted({len(s) for s in analyses.layers.values()})
        axis.set_title(f"dev: {_dev_splits(analyses)}; mean of {'/'.join(map(str, seeds))} seed(s)",
                       fontsize=7, color="0.35")
    axis.set_xlabel("# of layers transferred")
    axis.set_ylabel("Accuracy (%)")
    axis.xaxis.get_major_locator().set_params(integer=True)
    axis.grid(alpha=0.3)
    _gap_text(figure, analyses.gaps.get("figure2_left", []))
    return figure


def _dev_splits(analyses: Analyses) -> str:
    splits = {task: sorted({r["dev_split"] for rows in seeds.values() for r in rows})
              for task, seeds in analyses.layers.items()}
    return "; ".join(f"{LAYER_TASKS.get(t, t)} {', '.join(s)}" for t, s in splits.items() if s)


def figure2_right(analyses: Analyses) -> Any:
    """Normalised zero-shot performance against pre-training updates (log): a colour per task, LSTM dashed."""
    from matplotlib.lines import Line2D

    figure, (axis,) = _new_figure()
    drawn = set()
    for model, rows in analyses.zeroshot.items():
        style = MODELS.get(model, (model, ":"))[1]
        for task in ZEROSHOT_TASKS:
            points = sorted((r["step"], r["normalised"]) for r in rows if r["task"] == task and r["step"] > 0)
            if points:  # a log axis has no 0: an untrained snapshot (step 0) is left out
                steps, values = zip(*points, strict=True)
                axis.plot(steps, values, style, color=ZEROSHOT_COLOURS[task], marker="o", markersize=3)
                drawn.add((model, task))
    if not drawn:
        _no_data(axis, "zero-shot results")
    axis.set_xscale("log")
    axis.axhline(0.0, color="0.6", linewidth=0.8, zorder=0)
    axis.set_xlabel("# of pre-training updates")
    axis.set_ylabel("Normalized performance")
    axis.grid(alpha=0.3)
    tasks = [Line2D([], [], color=ZEROSHOT_COLOURS[t], label=label) for t, label in ZEROSHOT_TASKS.items()]
    models = [Line2D([], [], color="0.2", linestyle=MODELS[m][1], label=MODELS[m][0]) for m in MODELS]
    axis.legend(handles=tasks + models, fontsize=7, framealpha=0.8, loc="best")  # one legend: "best" sees the lines
    _gap_text(figure, analyses.gaps.get("figure2_right", []))
    return figure


def pretraining_figure(analyses: Analyses) -> Any:
    """Validation perplexity (log) and training loss against updates, for the GPT and the LSTM."""
    figure, (left, right) = _new_figure(4.2, 3.4, panels=2)
    for model, rows in analyses.curves.items():
        label, style = MODELS.get(model, (model, ":"))
        colour = COLOURS.get(model, "tab:gray")
        for axis, column in ((left, "val_perplexity"), (right, "train_loss")):
            points = sorted((r["step"], r[column]) for r in rows if r[column] is not None)
            if points:
                steps, values = zip(*points, strict=True)
                axis.plot(steps, values, style, color=colour, marker="o", markersize=2.5, label=label)
    for axis, name in ((left, "Validation perplexity"), (right, "Training loss")):
        axis.set_xlabel("# of pre-training updates")
        axis.set_ylabel(name)
        axis.grid(alpha=0.3, which="both")
        if axis.lines:
            axis.legend(fontsize=8, frameon=False)
        else:
            _no_data(axis, "pre-training curves")
    if left.lines:
        left.set_yscale("log")
    _gap_text(figure, analyses.gaps.get("pretraining", []))
    return figure


FIGURE_BUILDERS: dict[str, Callable[[Analyses], Any]] = {
    "figure2_left": figure2_left, "figure2_right": figure2_right, "pretraining": pretraining_figure}


def save_figure(figure: Any, path: Path, fmt: str) -> None:
    """Deterministic bytes (no dates, a fixed SVG id salt): committed figures change only when the data does."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)  # the Agg backend, whatever MPLBACKEND says: stages run headless
    metadata = {"Date": None} if fmt == "svg" else {"Software": None}
    with matplotlib.rc_context({"svg.hashsalt": "gpt1", "svg.fonttype": "none"}):
        figure.savefig(path, format=fmt, dpi=200, metadata=metadata, bbox_inches="tight", pad_inches=0.05)


# ---------------------------------------------------------------------------------------------------- the stage


@dataclass
class Report:
    tables: list[Table]
    analyses: Analyses
    finetuned: Finetuned
    summary: dict[str, float]

    @property
    def gaps(self) -> list[Gap]:
        return [g for gaps in self.finetuned.gaps.values() for g in gaps] + \
               [g for gaps in self.analyses.gaps.values() for g in gaps]


def build_report(plan: Plan, results_dir: Path, paper: Mapping[str, Any] | None = None) -> Report:
    """Read and validate every input, build every table; nothing is written (a malformed input fails here)."""
    paper = paper or load_paper()
    finetuned = collect_finetune(results_dir, plan, finetune_pairs(paper))
    analyses = collect_analyses(results_dir, plan)
    tables = build_tables(paper, finetuned, plan, results_dir)
    report = Report(tables, analyses, finetuned, {})
    report.summary = build_summary(tables, analyses, len(report.gaps))
    return report


def declared_outputs(out_dir: str | Path) -> list[Path]:
    """Every file the stage writes, in the order it writes them (the Snakemake rule and dvc.yaml list these)."""
    out_dir = Path(out_dir)
    tables = [out_dir / "tables" / f"{name}.{fmt}" for name in TABLES for fmt in TABLE_FORMATS]
    figures = [out_dir / "figures" / f"{name}.{fmt}" for name in FIGURES for fmt in FIGURE_FORMATS]
    return [*tables, out_dir / "tables" / SUMMARY_FILE, out_dir / METRICS_FILE, *figures]


def write_report(report: Report, out_dir: Path) -> list[Path]:
    """Render every output to temporary names and rename them all together at the end."""
    finals = declared_outputs(out_dir)
    with staged_outputs(*finals) as temps:
        temp_of = dict(zip(finals, temps, strict=True))
        for table in report.tables:
            for fmt, render in RENDERERS.items():
                temp_of[out_dir / "tables" / f"{table.name}.{fmt}"].write_text(render(table), encoding="utf-8")
        temp_of[out_dir / "tables" / SUMMARY_FILE].write_text(json.dumps(report.summary, indent=2, sort_keys=True)
                                                              + "\n")
        temp_of[out_dir / METRICS_FILE].write_text(json.dumps(curated_metrics(report.summary), indent=2) + "\n")
        for name, build in FIGURE_BUILDERS.items():
            figure = build(report.analyses)
            for fmt in FIGURE_FORMATS:
                save_figure(figure, temp_of[out_dir / "figures" / f"{name}.{fmt}"], fmt)
    return finals


def render_report(cfg: Any, results_dir: str | Path, out_dir: str | Path) -> Report:
    """The stage without MLflow: read RESULTS for cfg's lists, write OUT/tables and OUT/figures."""
    report = build_report(Plan.from_config(cfg), Path(results_dir))
    write_report(report, Path(out_dir))
    return report


def adopt_pipeline_runs(parent_run_id: str, pipeline_run: str | None = None) -> list[str]:
    """Make every run of this pipeline invocation (tag gpt1.pipeline_run, default: $GPT1_PIPELINE_RUN) a child of
    `parent_run_id`, so that `mlflow ui` nests them under the report; returns the children's run ids."""
    from mlflow.tracking import MlflowClient

    from gpt1.tracking import PIPELINE_RUN_ENV, StageRun, tracking_uri

    pipeline_run = pipeline_run if pipeline_run is not None else os.environ.get(PIPELINE_RUN_ENV)
    if not pipeline_run:
        return []
    if "'" in pipeline_run or "\\" in pipeline_run:  # MLflow's filter strings cannot escape them
        raise ReportError(f"{PIPELINE_RUN_ENV}={pipeline_run!r}: quotes and backslashes cannot be searched for; "
                          "use letters, digits, '-', '_' or ':'")
    client = MlflowClient(tracking_uri())
    experiment = client.get_run(parent_run_id).info.experiment_id
    query = f"tags.`{PIPELINE_TAG}` = '{pipeline_run}'"
    children, token = [], None
    while True:
        page = client.search_runs([experiment], filter_string=query, max_results=1000, page_token=token)
        children += [run.info.run_id for run in page if run.info.run_id != parent_run_id]
        token = page.token
        if not token:
            break
    for child in children:
        StageRun(child).set_tags({PARENT_TAG: parent_run_id})
    return children


def _stage_params(cfg: Any, results_dir: Path, out_dir: Path, plan: Plan) -> dict[str, Any]:
    return {"results_dir": str(results_dir), "out_dir": str(out_dir), "finetune_tasks": list(plan.finetune_tasks),
            "finetune_variants": list(plan.finetune_variants), "seeds": list(plan.seeds),
            "ablation_tasks": list(plan.ablation_tasks), "layer_transfer_tasks": list(plan.layer_transfer_tasks),
            "pretrain_models": list(plan.pretrain_models)}


def report_stage(cfg: Any, results_dir: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """`gpt1 report`: Tables 2-5 (Markdown, LaTeX, CSV), summary.json and the figures under OUT, written together;
    one MLflow run holding them as artifacts, made the parent of this pipeline invocation's runs."""
    from gpt1.tracking import stage_run

    results_dir, out_dir = Path(results_dir), Path(out_dir)
    plan = Plan.from_config(cfg)
    report = build_report(plan, results_dir)  # malformed inputs fail before a run is opened or a file written
    for note in gap_notes(report.gaps):
        print(f"report: gap: {note}")
    params = _stage_params(cfg, results_dir, out_dir, plan)
    with stage_run("report", cfg.profile, cfg.root["mlflow"]["experiment"], params) as run:
        outputs = write_report(report, out_dir)
        run.log_metrics(report.summary)
        for path in outputs:
            run.log_artifact(path, path.parent.name)
        children = adopt_pipeline_runs(run.run_id)
        run.set_tags({"gpt1.children": len(children), "gpt1.gaps": len(report.gaps)})
    print(f"report: {len(outputs)} files under {out_dir}; {len(report.gaps)} gaps; {len(children)} runs nested")
    return {"run_id": run.run_id, "outputs": [str(p) for p in outputs], "summary": report.summary,
            "gaps": [g.note for g in report.gaps], "children": children}


__all__ = [
    "ReportError",
    "adopt_pipeline_runs",
    "build_report",
    "curated_metrics",
    "declared_outputs",
    "load_paper",
    "paper_average",
    "render_report",
    "report_stage",
    "round_half_up",
]
