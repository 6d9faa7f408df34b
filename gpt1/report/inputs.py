"""The report's inputs: the runs and analyses a `plan.Plan` names, read from a results tree and verified against
the records their stages sealed them with.

A missing input is a Gap (a footnote saying why); a malformed one is a ReportError naming the file and the key,
or the row and column: a table built around a broken file would look finished and be wrong.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpt1.data.tasks import get_task
from gpt1.evaluation.metrics import BootstrapResult
from gpt1.evaluation.perplexity import paired_loss_test, perplexity_result
from gpt1.evaluation.significance import read_predictions
from gpt1.pipeline import layout, records
from gpt1.pipeline.errors import ReportError
from gpt1.pipeline.files import verify_file
from gpt1.pipeline.plan import Plan
from gpt1.training.numerics import Numerics

# Figure 2's lines as the paper draws them (labels; line styles per model): looked for even when params drops them.
LAYER_TASKS = {"mnli": "MultiNLI", "race": "RACE"}
MODELS = {"gpt": ("Transformer", "-"), "lstm": ("LSTM", "--")}

# p_vs_first: a point against its curve's first (k = 0; the first snapshot), empty at the first point.
LAYER_FIELDS = {
    "layers": "int",
    "train_accuracy": "number|empty",
    "dev_accuracy": "number",
    "dev_se": "number",
    "p_vs_first": "number|empty",
    "train_examples": "int",
    "dev_examples": "int",
    "dev_split": "str",
}
ZEROSHOT_FIELDS = {
    "model": "str",
    "step": "int",
    "task": "str",
    "metric": "str",
    "raw": "number",
    "se": "number",
    "normalised": "number",
    "normalised_se": "number",
    "p_vs_first": "number|empty",
}
HELDOUT_FIELDS = {  # one article's summed loss at one point (gpt1.stages.zeroshot's heldout.csv)
    "model": "str",
    "step": "int",
    "tokens": "int",
    "article": "int",
    "scored_tokens": "int",
    "words": "int",
    "nll": "number",
}
PRETRAIN_CURVE_FIELDS = {  # pre-training's curves.csv
    "step": "int",
    "tokens": "int",
    "train_loss": "number|empty",
    "val_loss": "number|empty",
    "val_perplexity": "number|empty",
}


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
        notes.append(Gap(folder / where / name, reason).note)
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


def checked_field(obj: Mapping[str, Any], key: str, kind: str, path: Path, where: str = "") -> Any:
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
    """The size and sha256 records of the files a stage wrote beside `sealed` (its sealed record), checked first."""
    record = next(name for name, stage in records.WRITERS.items() if stage == producer)
    return records.read(record, sealed, ReportError)["files"]


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
class Setup:
    """What a run was: its model's shape, its pre-training tokens and its fine-tuning recipe (metrics.json)."""

    kind: str  # gpt | lstm
    shape: dict[str, int]  # SHAPE_KEYS of its model config
    pretrain_tokens: int | None  # None: not recorded (the released model)
    recipe: dict[str, float]  # RECIPE_KEYS of its fine-tuning recipe


@dataclass(frozen=True)
class Run:
    """The parts of one finetune metrics.json the tables use."""

    path: Path
    task: str
    variant: str
    seed: int
    scores: dict[str, Score]
    cut: str | None  # the training cut's description, e.g. "validation[0%:80%] (shuffled, seed 0)"
    subset: tuple[int, int] | None  # a capped training set: (examples trained on, labelled examples it had)
    setup: Setup  # the model and recipe the run used
    # what it computed with (gpt1.training.numerics), in words: "unrecorded" for runs older than the record
    numerics: str


def _score(block: Any, name: str, metrics: Sequence[str], path: Path) -> Score:
    where = f"reports.{name}"
    if not isinstance(block, dict):
        raise ReportError(f"{path}: key {where!r} is {type(block).__name__}, expected object")
    values = checked_field(block, "metrics", "object", path, where)
    scores = {m: float(checked_field(values, m, "number", path, f"{where}.metrics")) for m in metrics}
    counts = checked_field(block, "counts", "object", path, where)
    return Score(
        scores,
        checked_field(block, "evaluated_on", "str", path, where),
        checked_field(block, "paper_split", "str|null", path, where),
        checked_field(block, "is_paper_split", "bool", path, where),
        checked_field(counts, "eval", "int", path, f"{where}.counts"),
    )


def _train_cut(train: dict[str, Any], path: Path) -> str | None:
    cut = checked_field(train, "cut", "object|null", path, "train")
    return None if cut is None else checked_field(cut, "description", "str", path, "train.cut")


def _subset(train: dict[str, Any], path: Path) -> tuple[int, int] | None:
    if not checked_field(train, "capped", "int", path, "train"):
        return None
    examples = checked_field(train, "examples", "int", path, "train")
    labelled = checked_field(train, "rows_read", "int", path, "train") - checked_field(
        train, "unlabelled_dropped", "int", path, "train")
    return examples, labelled


SHAPE_KEYS = {"gpt": ("n_layer", "n_embd", "n_head", "n_ctx", "vocab_size"), "lstm": ("n_embd", "hidden_size", "n_ctx")}
RECIPE_KEYS = ("lr", "batch_size", "epochs", "warmup_fraction", "lm_weight")


def _setup(data: dict[str, Any], path: Path) -> Setup:
    model = checked_field(data, "model", "object", path)
    kind = checked_field(model, "kind", "str", path, "model")
    if kind not in SHAPE_KEYS:
        raise ReportError(f"{path}: key 'model.kind' is {kind!r}, expected one of {', '.join(SHAPE_KEYS)}")
    config = checked_field(model, "config", "object", path, "model")
    recipe = checked_field(data, "recipe", "object", path)
    return Setup(
        kind,
        {k: checked_field(config, k, "int", path, "model.config") for k in SHAPE_KEYS[kind]},
        checked_field(model, "pretrain_tokens", "int|null", path, "model"),
        {k: checked_field(recipe, k, "number", path, "recipe") for k in RECIPE_KEYS},
    )


def read_finetune_metrics(path: Path, task: str, variant: str, seed: int) -> Run:
    """Validate one finetune metrics.json (gpt1.training.finetuning.build_metrics) and keep what the tables need."""
    data = records.read("finetune_metrics", path, ReportError)
    for key, kind, expected in (("task", "str", task), ("variant", "str", variant), ("seed", "int", seed)):
        found = checked_field(data, key, kind, path)
        if found != expected:  # a file copied into the wrong folder would put one run's numbers in another's cell
            raise ReportError(f"{path}: key {key!r} is {found!r}, but the file sits in the folder of {expected!r}")
    spec = get_task(task)
    reports = checked_field(data, "reports", "object", path)
    scores = {}
    for report in spec.reports:
        if report.name not in reports:
            raise ReportError(
                f"{path}: key 'reports.{report.name}' is missing; {task} reports "
                f"{', '.join(r.name for r in spec.reports)}"
            )
        scores[report.name] = _score(reports[report.name], report.name, spec.metrics, path)
    train = checked_field(data, "train", "object", path)
    record = Numerics.from_json(data.get("numerics"), str(path))
    return Run(path, task, variant, seed, scores, _train_cut(train, path), _subset(train, path), _setup(data, path),
               "unrecorded" if record is None else record.describe())


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
    return results_dir / layout.finetune_dir(task, variant, seed) / layout.FINETUNE_METRICS


def mixed_numerics(finetuned: Finetuned) -> str | None:
    """One line when the runs of the tables were computed with other numerics than one another (runs of two
    hosts, or pinned beside unpinned), else None."""
    counts = Counter(run.numerics for runs in finetuned.runs.values() for run in runs.values())
    if len(counts) < 2:
        return None
    return "note: the tables mix runs computed with " + "; ".join(f"{what} ({n} runs)" for what, n in counts.items())


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
                    _gap(path, plan.why_not_planned(task, variant), command)
                )
    return found


@dataclass(frozen=True)
class HeldoutPoint:
    """One point of a model's held-out perplexity: its articles' scored tokens, words and summed losses, in order."""

    step: int
    tokens: int
    scored_tokens: np.ndarray
    words: np.ndarray
    nll: np.ndarray

    def result(self) -> dict[str, Any]:
        return perplexity_result(self.scored_tokens, self.words, self.nll)

    def minus(self, other: HeldoutPoint) -> tuple[BootstrapResult, float] | None:
        """This point's loss minus `other`'s, paired by article (the test, the difference's SE); None where the two
        scored different tokens (another vocabulary): their losses per token do not compare."""
        if not np.array_equal(self.scored_tokens, other.scored_tokens):
            return None
        return paired_loss_test(self.scored_tokens, self.nll, other.nll)


def heldout_points(rows: Sequence[dict[str, Any]]) -> list[HeldoutPoint]:
    """heldout.csv's rows as points, by step."""
    points = []
    for step in sorted({r["step"] for r in rows}):
        mine = sorted((r for r in rows if r["step"] == step), key=lambda r: r["article"])
        points.append(HeldoutPoint(step, mine[0]["tokens"], *(np.array([r[key] for r in mine])
                                                              for key in ("scored_tokens", "words", "nll"))))
    return points


def check_heldout(path: Path, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """heldout.csv's rows, refused unless every point scored the same articles, the same tokens of each, some."""
    articles = {}
    for row in rows:
        articles.setdefault(row["step"], []).append((row["article"], row["scored_tokens"]))
    shapes = {tuple(sorted(found)) for found in articles.values()}
    if len(shapes) != 1 or not sum(tokens for _, tokens in next(iter(shapes))):
        raise ReportError(f"{path}: its points did not score the same articles' tokens, or none; re-run gpt1 zeroshot")
    return list(rows)


def verified_heldout(path: Path) -> list[dict[str, Any]]:
    """A model's heldout.csv, checked against the record in the zeroshot.json beside it first."""
    _verify_beside(path, path.with_name(layout.ZEROSHOT_JSON), "zeroshot")
    return check_heldout(path, read_csv_rows(path, HELDOUT_FIELDS))


def verified_predictions(path: Path) -> dict:
    """One run's predictions, checked against the record in the metrics.json beside them first."""
    _verify_beside(path, path.with_name(layout.FINETUNE_METRICS), "finetune")
    return read_predictions(path)


def predictions_beside(metrics: Path) -> dict | None:
    """The verified predictions of the run whose metrics.json is `metrics`; None when it wrote none."""
    path = metrics.with_name(layout.PREDICTIONS)
    return verified_predictions(path) if path.is_file() else None


def predictions_by_seed(results_dir: Path, finetuned: Finetuned, task: str, variant: str) -> dict[int, dict]:
    """The verified predictions of every run found of (task, variant) that wrote them."""
    found = {seed: predictions_beside(finetune_path(results_dir, task, variant, seed))
             for seed in finetuned.of(task, variant)}
    return {seed: predictions for seed, predictions in found.items() if predictions is not None}


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
                raise ReportError(f"{path}: column {missing[0]!r} is missing (header: {', '.join(header) or 'none'});"
                                  " re-run the stage that wrote the file")
            return [
                {name: _parse(row.get(name), kind, path, number, name) for name, kind in fields.items()}
                for number, row in enumerate(reader, 2)  # row 1 is the header
            ]
    except (UnicodeDecodeError, csv.Error) as err:
        raise ReportError(f"{path}: not a readable CSV file ({err})") from err


@dataclass
class Analyses:
    """Figure inputs: layer curves by task and seed, zero-shot rows and pre-training curves by model, and gaps."""

    layers: dict[str, dict[int, list[dict[str, Any]]]] = field(default_factory=dict)
    zeroshot: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    heldout: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
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
            path = results_dir / layout.layers_dir(task, seed) / layout.LAYERS_CSV
            producer = f"gpt1 layers --task {task} --seed SEED"
            rows = _rows_or_gap(found, "figure2_left", path, LAYER_FIELDS, why, producer, "layers", layout.LAYERS_JSON)
            if rows is not None:
                found.layers.setdefault(task, {})[seed] = rows
    for model in _wanted(MODELS, plan.pretrain_models):
        why = None if model in plan.pretrain_models else f"{model} is not in params.yaml pretrain_models"
        path = results_dir / layout.zeroshot_dir(model) / layout.ZEROSHOT_CSV
        producer = f"gpt1 zeroshot on {layout.pretrain_dir(model)}"
        rows = _rows_or_gap(found, "figure2_right", path, ZEROSHOT_FIELDS, why, producer, "zeroshot",
                            layout.ZEROSHOT_JSON)
        if rows is not None:
            found.zeroshot[model] = rows
        path = results_dir / layout.zeroshot_dir(model) / layout.HELDOUT_CSV
        rows = _rows_or_gap(found, "pretraining", path, HELDOUT_FIELDS, why, producer, "zeroshot",
                            layout.ZEROSHOT_JSON)
        if rows is not None:
            found.heldout[model] = check_heldout(path, rows)
        path = results_dir / layout.pretrain_dir(model) / layout.PRETRAIN_CURVES
        producer = f"gpt1 pretrain --model {model}"
        rows = _rows_or_gap(found, "pretraining", path, PRETRAIN_CURVE_FIELDS, why, producer, "pretrain",
                            layout.PRETRAIN_METRICS)
        if rows is not None:
            found.curves[model] = rows
    return found


def _rows_or_gap(
    found: Analyses,
    figure: str,
    path: Path,
    fields: Mapping[str, str],
    why: str | None,
    producer: str,
    stage: str,
    sealed: str,
) -> list[dict[str, Any]] | None:
    """The parsed rows (verified against the record that `stage` wrote in the sealed JSON beside them, named
    `sealed`), or None after recording the gap in `found` (`producer`: the command that makes the file)."""
    if path.is_file():
        _verify_beside(path, path.with_name(sealed), stage)
        return read_csv_rows(path, fields)
    found.gaps.setdefault(figure, []).append(_gap(path, why, producer))
    return None
