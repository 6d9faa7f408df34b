"""The table model: the paper's Tables 2-5 (gpt1/report/paper.yaml, its only source) with our rows beside them.

Rules the tables follow:
* A missing input is an explained gap: "—" plus a footnote naming the file and why it is missing.
* Numbers are percent with one decimal, rounded half up as the paper prints them (gpt1.report.numbers).
* Our cells: the mean over the seeds present ± one standard error (over seeds, or a bootstrap over the evaluation
  examples of one seed), then (paper X, Δ ours - paper), the difference taken between the two printed numbers so
  that a reader can check it.
* Table 5's Avg is the paper's: the unweighted mean of its 8 columns, MNLI the mean of matched and mismatched. The
  paper's printed average is kept as printed; where it disagrees with the mean of its own printed columns (the LSTM
  row: 69.1 printed, 69.1625 -> 69.2 recomputed) a footnote says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from gpt1.data.tasks import TASKS, TaskSpec
from gpt1.evaluation.metrics import GLUE_COMPONENTS, glue_average
from gpt1.evaluation.significance import (
    RESAMPLES,
    ColumnRuns,
    PairedTest,
    Runs,
    average_test,
    column_test,
    report_se,
)
from gpt1.pipeline import layout
from gpt1.pipeline.errors import ReportError
from gpt1.pipeline.plan import Plan
from gpt1.report.inputs import (
    RECIPE_KEYS,
    SHAPE_KEYS,
    Finetuned,
    Run,
    Setup,
    checked_field,
    gap_notes,
    predictions_beside,
    predictions_by_seed,
)
from gpt1.report.numbers import difference, exact_decimal, mean_sd, mean_se, paper_average, round_half_up

PAPER_FILE = Path(__file__).with_name("paper.yaml")
GAP = "—"  # our cell when its input is missing; the paper's own blanks stay empty

# Our rows of Tables 2-4, and the Table 5 variant of each paper row (paper.yaml names the variant per row).
MAIN_VARIANTS = {"pretrained": "ours (pretrained)", "scratch": "ours (no pre-training)"}
FULL_VARIANT = "pretrained"  # Table 5's full model, which every ablation is tested against
AVERAGE_COLUMN = "avg"  # Table 5's Avg
COMPUTED_COLUMNS = ("glue", AVERAGE_COLUMN)  # not a task: our GLUE-style average (Table 4), the paper's Avg (Table 5)


# ---------------------------------------------------------------------------------------------------- paper


@dataclass(frozen=True)
class PaperNumber:
    """One number the paper reports (its task, metric, split, table and where it comes from): the tables' columns
    are these (tasks.py's `ReportSpec`s), read the way the tables print them."""

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


def load_paper(path: Path = PAPER_FILE) -> dict[str, Any]:
    """paper.yaml: the paper's tables (rows of printed numbers) and the split notes for the footnotes."""
    data = yaml.safe_load(path.read_text())
    tables = checked_field(data, "tables", "object", path)
    for name in layout.REPORT_TABLES:
        table = checked_field(tables, name, "object", path, "tables")
        for i, row in enumerate(checked_field(table, "rows", "list", path, f"tables.{name}")):
            checked_field(row, "method", "str", path, f"tables.{name}.rows[{i}]")
            checked_field(row, "values", "object", path, f"tables.{name}.rows[{i}]")
    checked_field(data, "splits", "object", path)
    setup = checked_field(data, "setup", "object", path)
    for key, names in (("shape", SHAPE_KEYS["gpt"]), ("recipe", RECIPE_KEYS)):
        values = checked_field(setup, key, "object", path, "setup")
        for name in names:
            checked_field(values, name, "number", path, f"setup.{key}")
    checked_field(setup, "pretraining", "str", path, "setup")
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
        elif key in PAPER_NUMBERS:
            columns.append(Column(key, label, PAPER_NUMBERS[key].task, ((key, PAPER_NUMBERS[key].metric),)))
        else:
            raise ReportError(
                f"{PAPER_FILE}: key 'tables.{table}.columns' names {key!r}, which is not a report of "
                f"gpt1/data/tasks.py (valid: {', '.join(PAPER_NUMBERS)}, {', '.join(COMPUTED_COLUMNS)})"
            )
    if spec.get("average"):
        columns.append(Column(spec["average"], "Avg", None))
    return columns


def task_columns(columns: Iterable[Column]) -> list[Column]:
    """The columns a task run fills, in order: every column but the computed ones (GLUE average, Avg)."""
    return [c for c in columns if c.task is not None]


def average_discrepancy(method: str, values: Mapping[str, float], printed: float) -> str | None:
    """A footnote when the paper's printed average is not the rounded mean of its own printed columns."""
    exact = paper_average(values.values())
    recomputed = float(exact.quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))
    if recomputed == printed:
        return None
    total = sum((exact_decimal(v) for v in values.values()), Decimal(0))
    return (
        f"The paper prints Avg {printed:.1f} for “{method}”, but the mean of its {len(values)} printed columns "
        f"is {total.normalize()} / {len(values)} = {exact.normalize()}, {recomputed:.1f} when rounded; kept as "
        f"printed (the paper presumably averaged unrounded scores)."
    )


# ---------------------------------------------------------------------------------------------------- cells


@dataclass(frozen=True)
class Cell:
    """One table cell. Paper rows: value only. Ours: mean over seeds, sd, the paper's number, footnotes."""

    value: float | None = None  # percent, unrounded
    sd: float | None = None  # over seeds (None for one seed)
    se: float | None = None  # standard error of `value` (our_cell says how)
    seeds: tuple[int, ...] = ()
    paper: float | None = None
    notes: tuple[str, ...] = ()
    ours: bool = False
    compare: bool = True  # False: the paper's number is shown but not subtracted (not the same quantity)
    per_seed: Mapping[int, float] = field(default_factory=dict)  # Table 5's Avg is a mean per seed
    evaluation_se: float | None = None  # the evaluation examples' part of `se` (a bootstrap over them)

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


def our_cell(
    values: Mapping[int, float],
    paper: float | None,
    notes: Iterable[str],
    compare: bool = True,
    evaluation_se: float | None = None,
) -> Cell:
    """Our cell from {seed: percent}; no values: a gap (its notes say why). Its standard error holds two noises: the
    training's, sd / sqrt(n) over n seeds, and the evaluation examples', `evaluation_se` (a bootstrap over them) when
    it is known. The seeds score the same examples, so averaging seeds does not shrink the second: for one seed the
    error is `evaluation_se`, for several sqrt(sd**2 / n + evaluation_se**2) (sd / sqrt(n) where it is unknown)."""
    if not values:
        return Cell(paper=paper, notes=tuple(dict.fromkeys(notes)), ours=True, compare=compare)
    mean, sd = mean_sd(list(values.values()))
    se = evaluation_se if sd is None else math.sqrt(sd * sd / len(values) + (evaluation_se or 0.0) ** 2)
    return Cell(mean, sd, se, tuple(sorted(values)), paper, tuple(dict.fromkeys(notes)), True, compare, dict(values),
                evaluation_se)


def evaluation_error(errors: Iterable[float | None]) -> float | None:
    """The evaluation examples' standard error of a mean over seeds from each seed's: their mean (the seeds score the
    same examples, so their errors are taken as shared, not independent); None when one is unknown."""
    known = list(errors)
    return None if not known or any(e is None for e in known) else float(np.mean(known))


def column_se(run: Run, column: Column) -> float | None:
    """Bootstrap standard error (percent) of one run's column value over its evaluation examples, from the run's
    predictions (verified against metrics.json); None without predictions. A column averaging several reports
    (MNLI: matched and mismatched, scored on disjoint examples) combines their errors as independent."""
    predictions = predictions_beside(run.path)
    if predictions is None:
        return None
    errors = []
    for report, metric in column.components:
        if not any(k[0] == report for k in predictions):
            return None
        errors.append(100.0 * report_se(predictions, report, metric))
    return mean_se(errors)


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


def component_mean(column: Column, value: Callable[[str, str], float]) -> float:
    """Percent: the mean of `value(report, metric)` over the column's (report, metric) pairs."""
    return 100.0 * float(np.mean([value(report, metric) for report, metric in column.components]))


def column_value(run: Run, column: Column) -> float:
    """Percent: the mean of the column's (report, metric) pairs in one run."""
    return component_mean(column, lambda report, metric: run.scores[report].metrics[metric])


def split_notes(column: Column, runs: Mapping[int, Run], beside_paper: bool = True) -> list[str]:
    """Which split each report of the column was scored on; `beside_paper`: and the paper's split and source
    (Tables 2-4; Table 5's notes say its paper splits once)."""
    notes = []
    for report, _ in column.components:
        scored = sorted({(r.scores[report].evaluated_on, r.scores[report].examples) for r in runs.values()})
        first = next(iter(runs.values())).scores[report]
        where = " / ".join(f"{split} ({n} examples)" for split, n in scored)
        if first.is_paper_split:
            paper = "the paper's split"
        else:
            paper = f"the paper: {first.paper_split} ({PAPER_NUMBERS[report].via})"
        notes.append(f"{report}: evaluated on {where}" + (f"; {paper}" if beside_paper else ""))
    return notes


def cut_notes(runs: Mapping[int, Run]) -> list[str]:
    cuts = sorted({(r.task, r.cut) for r in runs.values() if r.cut})
    return [
        f"{task}: fine-tuned on the cut {cut} (params.yaml finetune.train_cuts.{task}); scored on the rest of "
        f"that split"
        for task, cut in cuts
    ]


def subset_notes(runs: Mapping[int, Run]) -> list[str]:
    """How many of the examples a task could train on (its training split, or its cut of another) its runs saw,
    when that was a seeded subset."""
    subsets = sorted({(r.task, r.subset) for r in runs.values() if r.subset})
    return [f"{task}: fine-tuned on {examples:,} of the {rows:,} examples it could train on, a seeded subset "
            f"(params.yaml finetune.max_train_examples, finetune.train_examples_by_task)"
            for task, (examples, rows) in subsets]


def _shape(kind: str, shape: Mapping[str, int]) -> str:
    if kind == "lstm":
        return f"one LSTM layer of {shape['hidden_size']} units on {shape['n_embd']}-wide embeddings"
    return f"{shape['n_layer']} layers, {shape['n_embd']} wide, {shape['n_head']} heads"


def _recipe(recipe: Mapping[str, float]) -> str:
    return (f"{recipe['epochs']:g} epochs, lr {recipe['lr']:g}, batch {recipe['batch_size']:g}, warm-up "
            f"{recipe['warmup_fraction']:.1%} of the updates, λ {recipe['lm_weight']:g}")


def _gpt_setup(setup: Setup, theirs: Mapping[str, Any]) -> str:
    tokens = ("an unrecorded number of tokens" if setup.pretrain_tokens is None
              else f"{setup.pretrain_tokens:,} tokens")
    return (f"{_shape('gpt', setup.shape)}, a {setup.shape['n_ctx']}-token context, {setup.shape['vocab_size']:,} "
            f"token embeddings, pre-trained on {tokens} (the paper: {_shape('gpt', theirs['shape'])}, "
            f"{theirs['shape']['n_ctx']} tokens, {theirs['shape']['vocab_size']:,} token embeddings, "
            f"{theirs['pretraining']}); fine-tuned {_recipe(setup.recipe)} (the paper: {_recipe(theirs['recipe'])})")


def setup_notes(finetuned: Finetuned, paper: Mapping[str, Any], tasks: Iterable[str], variants: Iterable[str]
                ) -> list[str]:
    """Our model and recipe beside the paper's, read from the table's own runs: those of the pre-trained GPT and,
    where the table has its row, the LSTM. Runs that differ are each described; no GPT run, no note."""
    shown, columns = {FULL_VARIANT, "lstm"} & set(variants), set(tasks)
    setups: dict[str, list[tuple[Setup, list[str]]]] = {}  # kind -> (setup, the tasks whose runs used it)
    for (task, variant), runs in finetuned.runs.items():
        if task in columns and variant in shown:
            for run in runs.values():
                of_kind = setups.setdefault(run.setup.kind, [])
                used_by = next((tasks for setup, tasks in of_kind if setup == run.setup), None)
                if used_by is None:
                    of_kind.append((run.setup, used_by := []))
                if task not in used_by:
                    used_by.append(task)
    if "gpt" not in setups:
        return []
    several = len(setups["gpt"]) > 1
    gpt = " / ".join(f"{'for ' + ', '.join(used_by) + ': ' if several else ''}{_gpt_setup(s, paper['setup'])}"
                     for s, used_by in setups["gpt"])
    lstm = "".join(f"; the LSTM: {shape}"  # its shape only: LSTM runs that differ in recipe read the same here
                   for shape in dict.fromkeys(_shape("lstm", s.shape) for s, _ in setups.get("lstm", [])))
    differ = " (the runs differ: one description per setup, after its tasks)" if several else ""
    return [f"Our model and recipe (params.yaml) beside the paper's{differ}: {gpt}{lstm}."]


def task_cell(
    column: Column, variant: str, finetuned: Finetuned, paper: float | None, beside_paper: bool = True
) -> Cell:
    runs = finetuned.of(column.task, variant)
    notes = gap_notes(finetuned.gaps_of(column.task, variant))
    if runs:
        notes += split_notes(column, runs, beside_paper) + cut_notes(runs) + subset_notes(runs)
    values = {seed: column_value(run, column) for seed, run in runs.items()}
    evaluation_se = evaluation_error(column_se(run, column) for run in runs.values())
    return our_cell(values, paper, notes, evaluation_se=evaluation_se)


def code_name(function: Callable[..., Any]) -> str:
    """A function's importable name, for notes that say what computed a number (taken from the function: it moves
    with the code)."""
    return f"{function.__module__}.{function.__qualname__}"


GLUE_NOTE = (
    "GLUE-style average over the tasks we have ({tasks}{missing}): " + code_name(glue_average) + ", the mean "
    "over tasks of each task's GLUE metrics (CoLA: MCC; MRPC, QQP: F1 and accuracy; STS-B: Pearson and "
    "Spearman; MNLI: matched and mismatched accuracy), on the splits we evaluate. Not the GLUE leaderboard "
    "score the paper prints (hidden test sets, and WNLI, which the paper does not fine-tune): no Δ."
)


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
    values = {
        seed: 100.0 * glue_average({r: s.metrics for t in common for r, s in runs[t].scores.items()}, common)
        for seed, runs in by_seed.items()
    }
    return our_cell(values, paper, [note], compare=False)


AVG_NOTE = (
    "Avg: the unweighted mean of the 8 columns (MNLI: the mean of matched and mismatched), as the paper "
    "defines it; ours averages the unrounded scores, per seed; left empty while a column is missing."
)


def average_cell(cells: Mapping[str, Cell], paper: float | None) -> Cell:
    """Table 5's Avg for us: per seed, the mean of the 8 columns, over the seeds every column has."""
    seeds = set.intersection(*(set(c.seeds) for c in cells.values())) if cells else set()
    absent = [key for key, cell in cells.items() if cell.value is None]
    if absent or not seeds:
        why = f"missing columns: {', '.join(absent)}" if absent else "no seed has every column"
        return our_cell({}, paper, [f"{AVG_NOTE} Here: {why}"])
    errors = [c.evaluation_se for c in cells.values()]
    # the columns' evaluation errors, combined as independent (each column scores its own task's examples)
    evaluation_se = mean_se(errors) if all(e is not None for e in errors) else None
    values = {s: float(np.mean([c.per_seed[s] for c in cells.values()])) for s in sorted(seeds)}
    return our_cell(values, paper, [AVG_NOTE], evaluation_se=evaluation_se)


# ---------------------------------------------------------------------------------------------------- tables


def _paper_method(row: Mapping[str, Any]) -> str:
    return row["method"].replace(" (ours)", "") + " (paper)" if row.get("ours") else row["method"]


def paper_row(row: Mapping[str, Any], columns: Sequence[Column], label: str | None = None) -> Row:
    values = dict(row["values"])
    if row.get("avg") is not None:
        values[AVERAGE_COLUMN] = row["avg"]
    cells = {c.key: Cell(float(values[c.key])) if c.key in values else Cell() for c in columns}
    return Row(label or _paper_method(row), "paper", row.get("variant"), cells)


def table_notes(name: str, paper: Mapping[str, Any], seeds: Sequence[int]) -> list[str]:
    splits = paper["splits"]
    notes = [
        f"Our rows: percent (MCC, F1 and correlations × 100), one decimal, rounded half up; the mean "
        f"over the seeds present (params.yaml seeds: {', '.join(map(str, seeds))}) ± one standard error: "
        f"for one seed, a bootstrap over the evaluation examples ({RESAMPLES} resamples of the run's predictions); "
        f"over several seeds, sd / sqrt(seeds) combined with the seeds' mean bootstrap error (they score the same "
        f"examples); averages combine their columns' errors as independent; the GLUE-style average has only the "
        f"seeds' part; in "
        f"brackets the paper's number and Δ = ours - paper, between the printed numbers. {GAP}: no result "
        f"(the footnote names the missing file)."
    ]
    notes += {
        "table2": [splits["glue_test_server"], splits["public_test"]],
        "table3": [splits["public_test"]],
        "table4": [splits["glue_test_server"]],
        "table5": [splits["table5"]],
    }[name]
    return [" ".join(n.split()) for n in notes]


def main_table(name: str, paper: Mapping[str, Any], finetuned: Finetuned, plan: Plan) -> Table:
    """Tables 2-4: the paper's rows, then ours (pretrained) and ours (no pre-training)."""
    spec = paper["tables"][name]
    columns = make_columns(name, spec)
    rows = [paper_row(r, columns) for r in spec["rows"]]
    reference = next((r["values"] for r in spec["rows"] if r.get("ours")), {})
    for variant, label in MAIN_VARIANTS.items():
        cells = {
            c.key: glue_cell(variant, finetuned, reference.get(c.key))
            if c.key == "glue"
            else task_cell(c, variant, finetuned, reference.get(c.key))
            for c in columns
        }
        rows.append(Row(label, "ours", variant, cells))
    tasks = [c.task for c in task_columns(columns)]
    notes = table_notes(name, paper, plan.seeds) + setup_notes(finetuned, paper, tasks, MAIN_VARIANTS)
    return Table(name, spec["title"], columns, rows, notes)


def variant_runs(results_dir: Path, finetuned: Finetuned, columns: Sequence[Column], variant: str) -> list[Runs]:
    """Each task column's verified predictions of one variant, by seed, in the columns' order."""
    return [predictions_by_seed(results_dir, finetuned, c.task, variant) for c in task_columns(columns)]


def paired_runs(columns: Sequence[Column], full: Sequence[Runs], other: Sequence[Runs]) -> list[ColumnRuns]:
    """The task columns as a test of `full` against `other` reads them (variant_runs' lists of both)."""
    return [ColumnRuns(c.components, f, o) for c, f, o in zip(task_columns(columns), full, other, strict=True)]


def ablation_tests(
    results_dir: Path, columns: Sequence[Column], variants: Sequence[str], finetuned: Finetuned
) -> tuple[list[PairedTest], list[str]]:
    """Full vs each ablation on every task column (paired bootstrap over the evaluation examples both scored), then
    on the table's Avg where it has one; and a line for each comparison that has nothing to pair."""
    tests, untested = [], []
    tasks = task_columns(columns)
    full = variant_runs(results_dir, finetuned, tasks, FULL_VARIANT)
    tested = {v: paired_runs(tasks, full, variant_runs(results_dir, finetuned, tasks, v)) for v in variants}
    for i, column in enumerate(tasks):
        reports, metrics = zip(*column.components, strict=True)  # Table 5's MNLI: two reports, one metric
        for variant in variants:
            runs = tested[variant][i]
            test = column_test(variant, column.key, metrics[0], reports, runs.full_runs, runs.other_runs)
            if test is None:
                untested.append(f"{column.label}: full vs {variant} not tested, no seed has the predictions of both")
            else:
                tests.append(test)
    for average in (c for c in columns if c.key == AVERAGE_COLUMN):
        for variant in variants:
            test = average_test(variant, average.key, tested[variant])
            if test is None:
                untested.append(f"{average.label}: full vs {variant} not tested, a column has nothing to pair")
            else:
                tests.append(test)
    return tests, untested


def ablation_table(paper: Mapping[str, Any], finetuned: Finetuned, plan: Plan, results_dir: Path) -> Table:
    """Table 5: each paper row, our row of the same variant right under it; then the paired tests."""
    spec = paper["tables"]["table5"]
    columns = make_columns("table5", spec)
    tasks = task_columns(columns)
    rows = []
    for row in spec["rows"]:
        printed = paper_row(row, columns, f"paper: {row['method']}")
        note = average_discrepancy(row["method"], row["values"], float(row["avg"]))
        if note:
            printed.cells[AVERAGE_COLUMN] = Cell(printed.cells[AVERAGE_COLUMN].value, notes=(note,))
        cells = {
            c.key: task_cell(c, row["variant"], finetuned, row["values"].get(c.key), beside_paper=False) for c in tasks
        }
        cells[AVERAGE_COLUMN] = average_cell(cells, float(row["avg"]))
        rows += [printed, Row(f"ours: {row['method']}", "ours", row["variant"], cells)]
    variants = [r["variant"] for r in spec["rows"] if r["variant"] != FULL_VARIANT]
    tests, untested = ablation_tests(results_dir, columns, variants, finetuned)
    notes = table_notes("table5", paper, plan.seeds) + setup_notes(finetuned, paper, [c.task for c in tasks],
                                                                   [r["variant"] for r in spec["rows"]])
    return Table("table5", spec["title"], columns, rows, notes, tests, untested)


def finetune_pairs(paper: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every (task, variant) a table cell reads."""
    pairs = []
    for name in layout.REPORT_TABLES:
        spec = paper["tables"][name]
        variants = [r["variant"] for r in spec["rows"]] if name == "table5" else list(MAIN_VARIANTS)
        tasks = [c.task for c in make_columns(name, spec) if c.task]
        if name == "table4":  # the GLUE-style average reads every GLUE task
            tasks += list(GLUE_COMPONENTS)
        pairs += [(t, v) for v in variants for t in tasks]
    return list(dict.fromkeys(pairs))


def build_tables(paper: Mapping[str, Any], finetuned: Finetuned, plan: Plan, results_dir: Path) -> list[Table]:
    return [
        *(main_table(n, paper, finetuned, plan) for n in layout.REPORT_TABLES[:3]),
        ablation_table(paper, finetuned, plan, results_dir),
    ]
