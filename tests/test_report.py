"""gpt1.report: Tables 2-5 beside the paper, Figure 2, summary.json and the MLflow grouping, on fake results trees
written in the exact schemas of gpt1.stages.finetune, gpt1.stages.layers, gpt1.stages.zeroshot and
gpt1.stages.pretrain."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import PARAMS

from gpt1.data.rows import Cut, evaluation_split
from gpt1.data.tasks import get_task
from gpt1.evaluation.metrics import glue_average
from gpt1.pipeline import layout
from gpt1.pipeline.config import Config, load_config
from gpt1.pipeline.errors import Gpt1Error, ReportError
from gpt1.pipeline.files import file_record, read_sealed_json, write_sealed_json
from gpt1.pipeline.plan import Plan
from gpt1.report.figures import FIGURES
from gpt1.report.inputs import read_finetune_metrics
from gpt1.report.numbers import paper_average, round_half_up
from gpt1.report.stage import CURATED_METRICS, build_report, curated_metrics, declared_outputs, render_report
from gpt1.report.tables import load_paper
from gpt1.stages.layers import FIELDS as LAYER_FIELDS
from gpt1.stages.zeroshot import HELDOUT_FIELDS

PAPER = load_paper()
MNLI_CUT = Cut("validation_matched", 0.0, 0.8, 0)


# ---------------------------------------------------------------------------------------------------- fake results


def config(**lists: Any) -> Config:
    """The repository's params.yaml (smoke profile) with some top-level lists replaced."""
    cfg = load_config(PARAMS, "smoke")
    return dataclasses.replace(cfg, root={**cfg.root, **lists})


FAKE_NUMERICS = {"device": "cpu", "isa": "avx2", "threads": 1, "torch": "2.13.0"}
FAKE_RECIPE = {"lr": 2e-4, "batch_size": 16, "epochs": 3, "warmup_fraction": 0.02, "lm_weight": 0.5,
               "weight_decay": 0.01}
FAKE_SHAPES = {"gpt": {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_ctx": 128, "vocab_size": 8197},
               "lstm": {"n_embd": 256, "hidden_size": 512, "n_ctx": 128, "vocab_size": 8197}}


def metrics_json(task: str, variant: str, seed: int, values: dict[str, dict[str, float]] | None = None,
                 cut: Cut | None = None, default: float = 0.5) -> dict[str, Any]:
    """A metrics.json as gpt1.training.finetuning.build_metrics writes it; `values` {report: {metric: fraction}}."""
    spec = get_task(task)
    reports = {}
    for report in spec.reports:
        split = evaluation_split(spec, report)
        rest = Cut(cut.split, cut.end_fraction, 1.0, cut.seed) if cut and cut.split == split else None
        evaluated_on = str(rest) if rest else split
        metrics = {m: (values or {}).get(report.name, {}).get(m, default) for m in spec.metrics}
        reports[report.name] = {
            "metrics": metrics, "paper_metric": spec.paper_metric, "split": split, "evaluated_on": evaluated_on,
            "complement_of_train_cut": rest is not None, "paper_split": report.test,
            "is_paper_split": split == report.test, "configs": list(report.configs or spec.configs),
            "counts": {"train": 800, "eval": 200, "rows_read": 250, "unlabelled_dropped": 0, "capped": 50,
                       "truncated": 3},
            "description": f"{evaluated_on}, 200 of 250 rows (fake)",
        }
    train_cut = None if cut is None else {"split": cut.split, "fraction": cut.end_fraction, "seed": cut.seed,
                                          "description": str(cut)}
    return {
        "task": task, "kind": spec.kind, "variant": variant, "seed": seed, "transfer_layers": None,
        "reports": reports,
        "train": {"split": cut.split if cut else "train", "cut": train_cut, "examples": 800, "rows_read": 1000,
                  "unlabelled_dropped": 0, "capped": 200, "truncated": 2, "selection_slice": 0,
                  "description": f"{cut or 'train'}, 800 of 1000 rows (fake)"},
        "train_metrics": {"accuracy": 0.9}, "train_metrics_examples": 800, "train_accuracy": 0.9,
        "selection": None, "epochs": 3, "updates": 150, "warmup_updates": 3,
        "lm_weight": 0.0 if variant == "no_aux" else 0.5, "recipe": dict(FAKE_RECIPE), "final_loss": 0.3,
        "tokens": 10_000,
        "model": {"kind": "lstm" if variant == "lstm" else "gpt", "init": "checkpoint",
                  "config": dict(FAKE_SHAPES["lstm" if variant == "lstm" else "gpt"]),
                  "source": "fake", "pretrain_step": 1500, "pretrain_tokens": 6_000_000, "parameters": 1000},
        "transfer": None, "tokenizer": {"source": "fake", "sha256": "0" * 64, "n_ctx": 128},
        "data": {"source": "fake", "data_seed": 0},
        "numerics": FAKE_NUMERICS, "files": {},
    }


def write_metrics(results: Path, task: str, variant: str, seed: int, **kwargs: Any) -> Path:
    path = results / "finetune" / task / variant / str(seed) / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_sealed_json(path, metrics_json(task, variant, seed, **kwargs))
    return path


def fake_record(sealed: Path) -> dict[str, Any]:
    """The rest of a record the report only checks (gpt1/pipeline/records.schema.yaml) and takes `files` from:
    layers.json, zeroshot.json, or pre-training's metrics.json."""
    if sealed.name == "layers.json":
        return {"task": sealed.parent.parent.name, "seed": int(sealed.parent.name), "n_layer": 12, "points": [],
                "runs": {}, "numerics": FAKE_NUMERICS}
    if sealed.name == "zeroshot.json":
        return {"model_kind": sealed.parent.name, "model_dir": "fake", "profile": "smoke", "n_ctx": 128,
                "tokenizer_sha256": "0" * 64, "zeroshot": {}, "references": {}, "tasks": {}, "snapshots": [],
                "notes": [], "numerics": FAKE_NUMERICS, "heldout_lm": {"data": "fake", "articles": 1, "titles": [],
                                                                        "words": 1, "scored_tokens": 1}}
    return {"val_loss": 4.7, "val_perplexity": 110.0, "train_loss": 4.8, "steps": 1500, "tokens": 6_000_000,
            "flops": 1e15, "flops_per_token": 3e7, "parameters": 5_000_000, "world_size": 1}


def record_beside(path: Path, sealed_name: str) -> None:
    """Record `path`'s size and sha256 in the sealed record beside it, as the stage that writes both does."""
    sealed = path.with_name(sealed_name)
    data = read_sealed_json(sealed, "test") if sealed.is_file() else {**fake_record(sealed), "files": {}}
    data["files"][path.name] = file_record(path)
    write_sealed_json(sealed, data)


def write_csv(path: Path, fields: list[str], rows: list[dict[str, Any]], sealed: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    if sealed is not None:
        record_beside(path, sealed)


def paper_like(task: str, variant: str, rng: np.random.Generator) -> dict[str, dict[str, float]]:
    """Scores near the paper's (lower without pre-training), for every metric of the task."""
    spec = get_task(task)
    drop = {"pretrained": 0.0, "no_aux": 0.01, "lstm": 0.06, "scratch": 0.15}[variant]
    return {r.name: {m: float(np.clip(rng.normal(0.7 - drop, 0.02), 0, 1)) for m in spec.metrics}
            for r in spec.reports}


def write_analyses(results: Path, seeds: tuple[int, ...] = (0, 1), n_layer: int = 12) -> None:
    """Figure inputs shaped like the paper's: accuracy rising with layers, zero-shot rising with updates."""
    rng = np.random.default_rng(0)
    for task, (low, high, split) in {"mnli": (0.38, 0.81, "validation_matched"),
                                     "race": (0.30, 0.59, "validation")}.items():
        for seed in seeds:
            rows = []
            for k in range(n_layer + 1):
                dev = low + (high - low) * (1 - math.exp(-k / 4)) / (1 - math.exp(-n_layer / 4))
                dev += rng.normal(0, 0.006)
                rows.append({"layers": k, "train_accuracy": min(dev + 0.08 + 0.004 * k, 1.0), "dev_accuracy": dev,
                             "dev_se": 0.02 + 0.001 * seed, "p_vs_first": None if k == 0 else 0.5 / k,
                             "train_examples": 1600, "dev_examples": 1500, "dev_split": split})
            write_csv(results / "analyses" / "layers" / task / str(seed) / "layers.csv", LAYER_FIELDS, rows,
                      "layers.json")
    steps = [1, 4, 16, 64, 256, 1024, 1500]
    for model, scale in (("gpt", 1.0), ("lstm", 0.55)):
        rows = []
        for step in steps:
            grow = math.log(step + 1) / math.log(1501)
            for task, top in {"cola": 0.35, "sst2": 0.75, "race": 0.3, "dprd": 0.25}.items():
                value = scale * top * grow + rng.normal(0, 0.02)
                rows.append({"model": model, "step": step, "task": task, "metric": "mcc" if task == "cola"
                             else "accuracy", "raw": value, "se": 0.03, "normalised": value, "normalised_se": 0.1,
                             "p_vs_first": None if step == steps[0] else 0.04})
        write_csv(results / "analyses" / "zeroshot" / model / "zeroshot.csv",
                  ["model", "step", "task", "metric", "raw", "se", "normalised", "normalised_se", "p_vs_first"], rows,
                  "zeroshot.json")
        write_csv(results / "analyses" / "zeroshot" / model / "heldout.csv", list(HELDOUT_FIELDS),
                  heldout_rows(model, steps, 0.0 if model == "gpt" else 0.5), "zeroshot.json")
        curve = []
        for step in range(100, 1501, 100):
            loss = (4.2 if model == "gpt" else 4.6) + 4.0 * math.exp(-step / 300)
            curve.append({"step": step, "tokens": step * 4096, "lr": 1e-4, "train_loss": loss + 0.05,
                          "val_loss": loss, "val_perplexity": math.exp(loss)})
        write_csv(results / "pretrain" / model / "curves.csv",
                  ["step", "tokens", "lr", "train_loss", "val_loss", "val_perplexity"], curve, "metrics.json")


ARTICLE_TOKENS = (300, 800, 150, 1200, 500, 640)
ARTICLE_DIFFICULTY = (0.3, -0.2, 0.5, 0.0, -0.4, 0.1)  # nats per token, shared by both models (paired away)


def heldout_rows(model: str, steps: list[int], worse_by: float) -> list[dict[str, Any]]:
    """heldout.csv of a model whose loss falls with updates, `worse_by` nats per token above the GPT's."""
    return [{"model": model, "step": step, "tokens": step * 4096, "article": i, "scored_tokens": tokens,
             "words": tokens * 3 // 4, "nll": tokens * (4.0 + 3.0 / math.log(step + 2) + worse_by + hard + 0.01 * i)}
            for step in steps for i, (tokens, hard) in enumerate(zip(ARTICLE_TOKENS, ARTICLE_DIFFICULTY, strict=True))]


def write_everything(results: Path, cfg: Config) -> None:
    """Every file params asks for, with MNLI trained on a cut as in the default profile."""
    rng = np.random.default_rng(1)
    root = cfg.root
    for task, variant, seed in Plan.from_params(root).finetune_runs():
        write_metrics(results, task, variant, seed, values=paper_like(task, variant, rng),
                      cut=MNLI_CUT if task == "mnli" else None)
    write_analyses(results, tuple(root["seeds"]))


def markdown_rows(markdown: str) -> list[list[str]]:
    """The rows of every pipe table in a Markdown text, each cell stripped of the padding that aligns the columns."""
    rows = [line.strip("|").split(" | ") for line in markdown.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows]


def cells(out: Path, table: str) -> dict[tuple[str, str], dict[str, str]]:
    """table.csv as {(method, column): row}."""
    rows = csv.DictReader(io.StringIO((out / "tables" / f"{table}.csv").read_text()))
    return {(r["method"], r["column"]): r for r in rows}


# ---------------------------------------------------------------------------------------------------- the paper


def test_rounding_is_half_up_like_the_paper() -> None:
    assert round_half_up(81.75) == 81.8  # Table 5's MNLI: mean of 82.1 and 81.4
    assert round_half_up(74.65) == 74.7  # round(74.65, 1) is 74.6 (half to even on the binary value)
    assert round_half_up(100 * 0.8175) == 81.8
    assert round_half_up(-2.85) == -2.9


def test_paper_averages_recomputed_from_its_own_columns() -> None:
    """Table 5's Avg is the unweighted mean of its 8 printed columns: true for three rows. The LSTM row prints 69.1,
    but (30.3 + 90.5 + 83.2 + 71.8 + 68.1 + 73.7 + 81.1 + 54.6) / 8 = 553.3 / 8 = 69.1625, i.e. 69.2."""
    rows = {r["variant"]: r for r in PAPER["tables"]["table5"]["rows"]}
    recomputed = {v: round_half_up(float(paper_average(r["values"].values()))) for v, r in rows.items()}
    assert recomputed == {"pretrained": 74.7, "scratch": 59.9, "no_aux": 75.0, "lstm": 69.2}
    assert {v: r["avg"] for v, r in rows.items()} == {"pretrained": 74.7, "scratch": 59.9, "no_aux": 75.0,
                                                      "lstm": 69.1}
    assert paper_average(rows["lstm"]["values"].values()) == Decimal("69.1625")
    assert paper_average(rows["pretrained"]["values"].values()) == Decimal("74.65")  # half up: 74.7
    assert PAPER["tables"]["table2"]["rows"][-1]["values"]["mnli_m"] == 82.1  # MNLI of Table 5: (82.1+81.4)/2


def test_table5_keeps_the_paper_average_and_footnotes_the_lstm_discrepancy(tmp_path: Path) -> None:
    render_report(config(), tmp_path / "results", tmp_path / "out")  # no results at all: the paper's rows only
    table = cells(tmp_path / "out", "table5")
    printed = {m.removeprefix("paper: "): r["value"] for (m, c), r in table.items() if c == "avg" and
               m.startswith("paper: ")}
    assert printed == {"Transformer w/ aux LM (full)": "74.7", "Transformer w/o pre-training": "59.9",
                       "Transformer w/o aux LM": "75.0", "LSTM w/ aux LM": "69.1"}
    lstm = table[("paper: LSTM w/ aux LM", "avg")]["notes"]
    assert "69.1625" in lstm and "69.2 when rounded" in lstm and "prints Avg 69.1" in lstm
    assert table[("paper: Transformer w/ aux LM (full)", "avg")]["notes"] == ""  # consistent: no footnote
    markdown = (tmp_path / "out" / "tables" / "table5.md").read_text()
    lstm_row = next(row for row in markdown_rows(markdown) if row[0] == "paper: LSTM w/ aux LM")
    assert lstm_row[:-1] == ["paper: LSTM w/ aux LM", "30.3", "90.5", "83.2", "71.8", "68.1", "73.7", "81.1", "54.6"]
    assert lstm_row[-1].startswith("69.1 [")


# ---------------------------------------------------------------------------------------------------- cells


def test_cells_show_mean_se_paper_and_difference_over_two_seeds(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    for seed, (m, mm) in enumerate([(0.80, 0.78), (0.82, 0.79)]):
        write_metrics(results, "mnli", "pretrained", seed, values={"mnli_m": {"accuracy": m},
                                                                   "mnli_mm": {"accuracy": mm}}, cut=MNLI_CUT)
    render_report(config(seeds=[0, 1]), results, out)
    cell = cells(out, "table2")[("ours (pretrained)", "mnli_m")]
    # mean 81.0, sample sd 1.414, standard error 1.414 / sqrt(2) = 1.0; the paper 82.1; Δ = 81.0 - 82.1
    assert (cell["value"], cell["sd"], cell["se"], cell["seeds"], cell["paper"], cell["diff"]) == (
        "81.0", "1.4", "1.0", "0 1", "82.1", "-1.1")
    assert cell["text"] == "81.0 ± 1.0 (paper 82.1, Δ -1.1)"
    assert float(cell["value_exact"]) == pytest.approx(81.0)
    # Table 5's MNLI is the mean of matched and mismatched: seeds 79.0 and 80.5, mean 79.75 -> 79.8 (half up)
    table5 = cells(out, "table5")[("ours: Transformer w/ aux LM (full)", "mnli")]
    assert (table5["value"], table5["paper"], table5["diff"]) == ("79.8", "81.8", "-2.0")
    markdown = (out / "tables" / "table2.md").read_text()
    assert "81.0 ± 1.0 (paper 82.1, Δ -1.1) [" in markdown


def write_run(results: Path, data: dict[str, Any]) -> None:
    """A metrics.json as given (a fake edited by the test) where the report looks for it."""
    path = results / "finetune" / data["task"] / data["variant"] / str(data["seed"]) / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_sealed_json(path, data)


PAPER_SETUP = ("(the paper: 12 layers, 768 wide, 12 heads, 512 tokens, 40,478 token embeddings, 100 epochs of "
               "BooksCorpus (over 7,000 books) in minibatches of 64 × 512 tokens); fine-tuned {recipe} (the paper: 3 "
               "epochs, lr 6.25e-05, batch 32, warm-up 0.2% of the updates, λ 0.5)")
OUR_RECIPE = "3 epochs, lr 0.0002, batch 16, warm-up 2.0% of the updates, λ 0.5"


def test_a_subset_footnote_counts_the_examples_the_task_could_train_on(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    write_metrics(results, "rte", "pretrained", 0)  # 800 of the 1,000 training rows read
    cut = metrics_json("mnli", "pretrained", 0, cut=MNLI_CUT)  # a cut of another split, 2 rows without a label
    cut["train"]["unlabelled_dropped"] = 2
    write_run(results, cut)
    whole = metrics_json("sst2", "pretrained", 0)
    whole["train"]["capped"] = 0  # every training example: no subset to name
    write_run(results, whole)
    render_report(config(), results, out)
    subset = ("rte: fine-tuned on 800 of the 1,000 examples it could train on, a seeded subset (params.yaml "
              "finetune.max_train_examples, finetune.train_examples_by_task)")
    assert subset in cells(out, "table2")[("ours (pretrained)", "rte")]["notes"]
    assert "mnli: fine-tuned on 800 of the 998 examples it could train on" in cells(out, "table2")[
        ("ours (pretrained)", "mnli_m")]["notes"]
    assert "seeded subset" not in cells(out, "table4")[("ours (pretrained)", "sst2")]["notes"]


def test_the_setup_note_reads_the_tables_own_pre_trained_runs(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    write_metrics(results, "rte", "pretrained", 0)
    write_metrics(results, "sst2", "lstm", 0)
    scratch = metrics_json("rte", "scratch", 0)
    scratch["recipe"]["lr"] = 1.0  # not the pre-trained GPT's run: not described
    write_run(results, scratch)
    render_report(config(), results, out)
    ours = ("Our model and recipe (params.yaml) beside the paper's: 4 layers, 256 wide, 4 heads, a 128-token "
            "context, 8,197 token embeddings, pre-trained on 6,000,000 tokens ")
    setup = ours + PAPER_SETUP.format(recipe=OUR_RECIPE)
    assert setup + "." in (out / "tables" / "table2.md").read_text()  # RTE's run; Table 2 has no LSTM row
    assert setup + "; the LSTM: one LSTM layer of 512 units on 256-wide embeddings." in (
        out / "tables" / "table5.md").read_text()
    for table in ("table3", "table4"):  # no pre-trained GPT run of their tasks (Table 4's SST-2: the LSTM's only)
        assert "Our model and recipe" not in (out / "tables" / f"{table}.md").read_text()


def test_the_setup_note_describes_each_setup_its_runs_differ_in(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    unrecorded = metrics_json("rte", "pretrained", 0)
    unrecorded["model"]["pretrain_tokens"] = None
    write_run(results, unrecorded)
    other = metrics_json("qnli", "pretrained", 0)
    other["recipe"]["lr"] = 1e-4
    write_run(results, other)
    render_report(config(), results, out)
    notes = (out / "tables" / "table2.md").read_text()
    assert "beside the paper's (the runs differ: one description per setup, after its tasks): for " in notes
    rte, qnli = (notes.split(f"for {task}: 4 layers")[1].split(" / ")[0] for task in ("rte", "qnli"))
    assert "pre-trained on an unrecorded number of tokens (the paper" in rte and "lr 0.0002, batch 16" in rte
    assert "pre-trained on 6,000,000 tokens (the paper" in qnli and "lr 0.0001, batch 16" in qnli


def test_lstm_runs_at_two_rates_are_described_once(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    write_metrics(results, "sst2", "pretrained", 0)
    write_metrics(results, "sst2", "lstm", 0)
    faster = metrics_json("cola", "lstm", 0)
    faster["recipe"]["lr"] = 5e-4
    write_run(results, faster)
    render_report(config(), results, out)
    assert (out / "tables" / "table5.md").read_text().count("the LSTM: one LSTM layer of 512 units") == 1


def test_a_run_without_its_recipe_is_refused_naming_the_key(tmp_path: Path) -> None:
    results = tmp_path / "results"
    broken = metrics_json("rte", "pretrained", 0)
    del broken["recipe"]["lr"]
    path = results / "finetune" / "rte" / "pretrained" / "0" / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_sealed_json(path, broken)
    with pytest.raises(ReportError, match=r"metrics\.json: key 'recipe\.lr' is missing"):
        render_report(config(), results, tmp_path / "out")


def test_a_run_of_an_unknown_model_kind_is_refused_naming_the_key(tmp_path: Path) -> None:
    results = tmp_path / "results"
    broken = metrics_json("rte", "pretrained", 0)
    broken["model"]["kind"] = "rnn"
    path = results / "finetune" / "rte" / "pretrained" / "0" / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_sealed_json(path, broken)
    with pytest.raises(ReportError, match=r"metrics\.json: key 'model\.kind' is 'rnn', expected one of gpt, lstm"):
        render_report(config(), results, tmp_path / "out")


def test_a_paper_table_column_that_is_no_report_is_refused() -> None:
    from gpt1.report.tables import make_columns

    assert [c.key for c in make_columns("table2", {"columns": [{"key": "rte", "label": "RTE"}]})] == ["rte"]
    with pytest.raises(ReportError, match=r"key 'tables\.table2\.columns' names 'rtee', which is not a report of "
                                          r"gpt1/data/tasks\.py \(valid: "):
        make_columns("table2", {"columns": [{"key": "rtee", "label": "RTE"}]})


def test_task_columns_leave_out_the_computed_ones() -> None:
    from gpt1.report.tables import AVERAGE_COLUMN, make_columns, task_columns

    paper = load_paper()["tables"]
    table4, table5 = make_columns("table4", paper["table4"]), make_columns("table5", paper["table5"])
    assert "glue" in {c.key for c in table4} and "glue" not in {c.key for c in task_columns(table4)}
    assert [c.key for c in task_columns(table5)] == [c.key for c in table5 if c.key != AVERAGE_COLUMN]
    assert len(task_columns(table5)) == 8 and all(c.components for c in task_columns(table5))


def test_the_predictions_beside_a_runs_metrics_are_verified_or_none(tmp_path: Path) -> None:
    from test_significance import write_predictions

    from gpt1.report.inputs import predictions_beside

    path = write_metrics(tmp_path / "results", "rte", "pretrained", 0)
    assert predictions_beside(path) is None  # a run that wrote none
    predictions = path.with_name(layout.PREDICTIONS)
    write_predictions(predictions, [("rte", i, i % 2, 0) for i in range(4)])
    record_beside(predictions, layout.FINETUNE_METRICS)
    assert predictions_beside(path)
    predictions.write_text(predictions.read_text() + "\n")
    with pytest.raises(ReportError, match=r"predictions\.jsonl"):
        predictions_beside(path)


def test_footnotes_name_the_split_the_cut_and_the_glue_server(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    write_metrics(results, "mnli", "pretrained", 0, cut=MNLI_CUT)
    write_metrics(results, "snli", "pretrained", 0)
    render_report(config(), results, out)
    notes = cells(out, "table2")[("ours (pretrained)", "mnli_m")]["notes"]
    assert "mnli_m: evaluated on validation_matched[80%:100%] (shuffled, seed 0) (200 examples); the paper: " \
           "test_matched (GLUE server)" in notes
    assert "mnli: fine-tuned on the cut validation_matched[0%:80%] (shuffled, seed 0)" in notes
    # The mismatched report is scored on a whole split: no cut of it was trained on.
    assert "evaluated on validation_mismatched (200 examples)" in cells(out, "table2")[("ours (pretrained)",
                                                                                         "mnli_mm")]["notes"]
    # SNLI's test labels are public: scored on the paper's own split.
    assert "snli: evaluated on test (200 examples); the paper's split" in \
        cells(out, "table2")[("ours (pretrained)", "snli")]["notes"]
    for name in ("table2", "table4"):
        markdown = (out / "tables" / f"{name}.md").read_text()
        assert "GLUE test-server scores, which cannot be computed offline" in markdown
        assert "QNLI has been re-released since" in markdown
    assert "test-server" not in (out / "tables" / "table3.md").read_text()
    table5 = cells(out, "table5")[("ours: Transformer w/ aux LM (full)", "mnli")]["notes"]
    assert "mnli_m: evaluated on validation_matched[80%:100%]" in table5 and "the paper:" not in table5  # dev sets
    latex = (out / "tables" / "table2.tex").read_text()
    assert r"validation\_matched[80\%:100\%]" in latex and r"\begin{tabular}" in latex
    lines = latex.splitlines()
    ours = next(line for line in lines if line.startswith(r"\textit{ours (pretrained)}"))
    assert lines[lines.index(ours) - 1] == r"\midrule"  # a rule between the paper's rows and ours
    assert r"(paper 82.1, $\Delta$ " in ours and r"$\pm$" not in ours  # one seed: no spread


def test_table4_glue_column_is_our_glue_style_average_over_the_tasks_we_have(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    scores = {"cola": {"cola": {"mcc": 0.30, "accuracy": 0.7}}, "sst2": {"sst2": {"accuracy": 0.88}},
              "mrpc": {"mrpc": {"f1": 0.80, "accuracy": 0.70}}}
    for task, values in scores.items():
        write_metrics(results, task, "pretrained", 0, values=values)
    render_report(config(), results, out)
    cell = cells(out, "table4")[("ours (pretrained)", "glue")]
    expected = 100 * glue_average({r: m for v in scores.values() for r, m in v.items()}, ["cola", "sst2", "mrpc"])
    assert float(cell["value_exact"]) == pytest.approx(expected)  # (30 + 88 + 75) / 3
    assert cell["paper"] == "72.8" and cell["diff"] == ""  # not the leaderboard score: no difference
    assert "GLUE-style average over the tasks we have (cola, sst2, mrpc; missing: qqp, stsb, mnli, qnli, rte)" \
        in cell["notes"]
    summary = json.loads((out / "tables" / layout.SUMMARY).read_text())
    assert summary["table4.glue_average.pretrained"] == pytest.approx(expected, abs=1e-4)


def test_table5_average_is_the_mean_of_the_eight_columns(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    cfg = config(seeds=[0, 1])
    write_everything(results, cfg)
    render_report(cfg, results, out)
    table = cells(out, "table5")
    for variant, method in (("pretrained", "Transformer w/ aux LM (full)"), ("lstm", "LSTM w/ aux LM")):
        columns = [float(table[(f"ours: {method}", c)]["value_exact"]) for c in
                   ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte")]
        avg = table[(f"ours: {method}", "avg")]
        assert float(avg["value_exact"]) == pytest.approx(np.mean(columns), abs=1e-3)
        assert avg["seeds"] == "0 1" and avg["sd"] != ""
        summary = json.loads((out / "tables" / layout.SUMMARY).read_text())
        assert summary[f"table5.{variant}.avg"] == pytest.approx(float(avg["value_exact"]), abs=1e-3)


# ---------------------------------------------------------------------------------------------------- gaps


def test_a_missing_file_is_a_gap_with_a_footnote_never_a_crash(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    write_metrics(results, "mnli", "pretrained", 0, cut=MNLI_CUT)  # seed 1 of mnli was never run
    cfg = config(seeds=[0, 1], ablation_tasks=["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "rte"])
    render_report(cfg, results, out)
    table2 = cells(out, "table2")
    mnli = table2[("ours (pretrained)", "mnli_m")]
    assert mnli["value"] != "" and mnli["seeds"] == "0"  # the seed present still counts
    missing = results / "finetune" / "mnli" / "pretrained" / "1" / "metrics.json"
    assert f"{missing}: missing; not produced yet (run gpt1 finetune --task mnli --variant pretrained --seed SEED)" \
        in mnli["notes"]
    rte = table2[("ours (no pre-training)", "rte")]  # both seeds missing: one footnote
    assert rte["text"] == "—" and rte["notes"].startswith(f"{results}/finetune/rte/scratch/{{0,1}}/metrics.json: "
                                                          "missing; not produced yet")
    qnli = cells(out, "table5")[("ours: Transformer w/o aux LM", "qnli")]
    assert qnli["text"] == "—"
    assert "the no_aux ablation runs on params.yaml ablation_tasks only, and qnli is not one" in qnli["notes"]
    avg = cells(out, "table5")[("ours: Transformer w/o aux LM", "avg")]
    assert avg["text"] == "—" and "missing columns: cola, sst2" in avg["notes"]
    markdown = (out / "tables" / "table2.md").read_text()
    number = next(line.split(".")[0] for line in markdown.splitlines() if "rte/scratch/{0,1}/metrics" in line)
    assert f"— [{number}]" in markdown  # the gap points at its footnote
    figure_gaps = json.loads((out / "tables" / layout.SUMMARY).read_text())["report.gaps"]
    assert figure_gaps > 0


def test_scratch_not_in_params_is_explained(tmp_path: Path) -> None:
    render_report(config(finetune_variants=["pretrained"]), tmp_path / "results", tmp_path / "out")
    notes = cells(tmp_path / "out", "table3")[("ours (no pre-training)", "race")]["notes"]
    assert "variant scratch is not in params.yaml finetune_variants" in notes


# ---------------------------------------------------------------------------------------------------- malformed


def _corrupt(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        data = data[key]
    if value is KeyError:
        del data[last]
    else:
        data[last] = value


@pytest.mark.parametrize(("where", "value", "key"), [
    ("reports.mnli_mm", KeyError, "reports.mnli_mm"),
    ("reports.mnli_m.metrics.accuracy", "0.8", "reports.mnli_m.metrics.accuracy"),
    ("reports.mnli_m.metrics.accuracy", float("nan"), "reports.mnli_m.metrics.accuracy"),
    ("reports.mnli_m.evaluated_on", KeyError, "reports.mnli_m.evaluated_on"),
    ("reports.mnli_m.counts.eval", 2.5, "reports.mnli_m.counts.eval"),
    ("seed", "0", "seed"),
    ("variant", "scratch", "variant"),
    ("train.cut", "validation", "train.cut"),
    ("reports", [], "reports"),
])  # fmt: skip
def test_a_malformed_file_fails_loudly_naming_file_and_key(tmp_path: Path, where: str, value: Any, key: str) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    data = metrics_json("mnli", "pretrained", 0, cut=MNLI_CUT)
    _corrupt(data, where, value)
    path = results / "finetune" / "mnli" / "pretrained" / "0" / "metrics.json"
    path.parent.mkdir(parents=True)
    write_sealed_json(path, data)
    with pytest.raises(ReportError, match=f"{path}: key '{key}'") as raised:
        render_report(config(), results, out)
    assert isinstance(raised.value, Gpt1Error)
    assert not out.exists()  # nothing written


def test_invalid_json_and_csv_fail_naming_the_file(tmp_path: Path) -> None:
    results = tmp_path / "results"
    path = results / "finetune" / "cola" / "scratch" / "0" / "metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"task": "cola", ')
    with pytest.raises(ReportError, match=f"{path}: not valid JSON"):
        render_report(config(), results, tmp_path / "out")
    path.unlink()
    write_analyses(results, (0,))
    layers = results / "analyses" / "layers" / "race" / "0" / "layers.csv"
    layers.write_text(layers.read_text().replace("validation\n", "validation\n3,0.5,high,validation\n", 1))
    with pytest.raises(ReportError, match=rf"{layers}: \d+ bytes, but .*layers\.json records \d+"):
        render_report(config(), results, tmp_path / "out")  # changed after its stage recorded it
    record_beside(layers, "layers.json")
    with pytest.raises(ReportError, match=rf"{layers}: row 3, column 'dev_accuracy' is 'high', expected number"):
        render_report(config(), results, tmp_path / "out")
    curves = results / "pretrain" / "gpt" / "curves.csv"
    write_csv(curves, ["step", "tokens"], [{"step": 1, "tokens": 2}], "metrics.json")
    layers.unlink()
    with pytest.raises(ReportError, match=f"{curves}: column 'train_loss' is missing .*; re-run the stage"):
        render_report(config(), results, tmp_path / "out")


# ---------------------------------------------------------------------------------------------------- outputs


def test_every_output_is_written_and_summary_holds_numbers_only(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    cfg = config(seeds=[0, 1])
    write_everything(results, cfg)
    report = render_report(cfg, results, out)
    assert report.gaps == []
    written = sorted(p for p in out.rglob("*") if p.is_file())
    assert written == sorted(declared_outputs(out))  # no temporary names left behind
    for table in layout.REPORT_TABLES:
        assert (out / "tables" / f"{table}.md").read_text().startswith("# Table")
        grid = (out / "tables" / f"{table}.md").read_text().split("\n\n")[1].splitlines()  # the table itself
        assert len(grid) > 4 and all(line.startswith("| ") for line in grid[2:]), table
        assert len({len(line) for line in grid}) == 1, table  # pandas aligns the columns
        assert grid[1].startswith("|:--") and grid[1].endswith("-:|")  # the method left, the numbers right
        assert r"\toprule" in (out / "tables" / f"{table}.tex").read_text()
        assert "—" not in (out / "tables" / f"{table}.md").read_text().split("Footnotes")[0]
    for name in FIGURES:
        assert (out / "figures" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / "figures" / f"{name}.png").stat().st_size > 10_000
        assert "<svg" in (out / "figures" / f"{name}.svg").read_text()
    summary = json.loads((out / "tables" / layout.SUMMARY).read_text())
    assert all(isinstance(v, int | float) and not isinstance(v, bool) for v in summary.values())
    for key in ("table5.pretrained.avg", "table4.glue_average.pretrained", "table2.scratch.mnli_m",
                "table3.pretrained.race_h", "figure2_left.mnli.dev_accuracy", "figure2_right.lstm.dprd.normalised",
                "pretrain.gpt.val_perplexity", "heldout.gpt.perplexity", "heldout.lstm_minus_gpt.p", "report.gaps"):
        assert key in summary, key
    assert summary["report.gaps"] == 0


def test_html_tables_hold_every_cell_of_the_csv_for_the_snakemake_report(tmp_path: Path) -> None:
    from html.parser import HTMLParser

    class Cells(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.cells: list[str] = []
            self.inside = False

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            if tag == "td":
                self.inside, self.cells = True, [*self.cells, ""]

        def handle_endtag(self, tag: str) -> None:
            self.inside = self.inside and tag != "td"

        def handle_data(self, data: str) -> None:
            if self.inside:
                self.cells[-1] += data

    results, out = tmp_path / "results", tmp_path / "out"
    cfg = config(seeds=[0, 1])
    write_everything(results, cfg)
    render_report(cfg, results, out)
    page = (out / "tables" / "table2.html").read_text()
    assert page.count('ours" >') == 2 * 7 and page.count('paper" >') == 7 * 7  # our rows highlighted, by class
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</body></html>\n")
    for table in layout.REPORT_TABLES:
        parser = Cells()
        parser.feed((out / "tables" / f"{table}.html").read_text())
        shown = "\n".join(parser.cells)
        for row in csv.DictReader(io.StringIO((out / "tables" / f"{table}.csv").read_text())):
            assert row["text"] in shown, (table, row["method"], row["column"])


def test_figures_are_drawn_from_partial_inputs(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    write_analyses(results, (0,))
    render_report(config(seeds=[0, 1]), results, tmp_path / "whole")  # before any input is taken away
    (results / "analyses" / "zeroshot" / "lstm" / "zeroshot.csv").unlink()
    report = render_report(config(seeds=[0, 1]), results, out)
    assert any("zeroshot/lstm/zeroshot.csv" in g.note for g in report.gaps)
    (results / "analyses" / "zeroshot" / "gpt" / "heldout.csv").unlink()
    report = render_report(config(seeds=[0, 1]), results, out)
    assert any("zeroshot/gpt/heldout.csv" in g.note for g in report.gaps)
    assert "heldout.lstm.perplexity" in report.summary and "heldout.lstm_minus_gpt.p" not in report.summary
    assert any("layers/mnli/1/layers.csv" in g.note for g in report.gaps)
    def drawn(folder: Path, name: str) -> int:
        """The lines and markers inside the axes (clipped to them), not the frame, ticks or legend."""
        return (folder / "figures" / f"{name}.svg").read_text().count('clip-path="url(#')

    whole = {name: drawn(tmp_path / "whole", name) for name in FIGURES}
    assert all(count > 0 for count in whole.values())
    # What is left is drawn; what went is not: the LSTM's zero-shot lines, the GPT's held-out curve
    assert 0 < drawn(out, "figure2_right") < whole["figure2_right"]
    assert 0 < drawn(out, "pretraining") < whole["pretraining"]
    assert drawn(out, "figure2_left") == whole["figure2_left"]


def test_figure2_summary_carries_the_last_points_standard_error_and_its_test_against_the_first(
        tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_analyses(results, (0,))
    one = json.loads(_summary_of(config(seeds=[0]), results, tmp_path / "one"))
    assert one["figure2_left.mnli.dev_se"] == 2.0  # the seed's bootstrap SE, 0.02, in percent
    assert one["figure2_left.race.p_vs_first"] == round(0.5 / 12, 4)  # k = 12 against k = 0
    assert one["figure2_right.gpt.cola.normalised_se"] == 0.1 and one["figure2_right.gpt.cola.p_vs_first"] == 0.04
    write_analyses(results, (0, 1))
    two = json.loads(_summary_of(config(seeds=[0, 1]), results, tmp_path / "two"))
    dev = [read_rows(results, seed)[-1]["dev_accuracy"] for seed in (0, 1)]
    assert two["figure2_left.mnli.dev_se"] == pytest.approx(100 * abs(dev[0] - dev[1]) / 2, abs=1e-4)  # sd / sqrt(2)
    assert "figure2_left.mnli.p_vs_first" not in two  # a test over several seeds would pool them; not made here


def test_figure2_left_names_what_each_curve_trained_on_and_was_scored_on(tmp_path: Path) -> None:
    from gpt1.report.figures import figure2_left

    write_analyses(tmp_path, (0,))
    analyses = build_report(Plan.from_params(config(seeds=[0]).root), tmp_path).analyses
    title = figure2_left(analyses).axes[0].get_title()
    assert title.splitlines() == ["MultiNLI: train 1600, dev 1500 of validation_matched; "
                                  "RACE: train 1600, dev 1500 of validation", "mean of 1 seed(s); bars: dev ± 1 SE"]


def _summary_of(cfg: Config, results: Path, out: Path) -> str:
    render_report(cfg, results, out)
    return (out / "tables" / layout.SUMMARY).read_text()


def read_rows(results: Path, seed: int) -> list[dict[str, Any]]:
    with open(results / "analyses" / "layers" / "mnli" / str(seed) / "layers.csv") as handle:
        return [{k: float(v) for k, v in row.items() if k == "dev_accuracy"} for row in csv.DictReader(handle)]


def test_a_failure_while_rendering_leaves_the_previous_outputs(tmp_path: Path, monkeypatch) -> None:
    from gpt1.report.figures import FIGURE_BUILDERS

    results, out = tmp_path / "results", tmp_path / "out"
    render_report(config(), results, out)
    before = {p: p.read_bytes() for p in declared_outputs(out)}
    write_metrics(results, "cola", "pretrained", 0)

    def broken(analyses: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setitem(FIGURE_BUILDERS, "pretraining", broken)
    with pytest.raises(RuntimeError, match="boom"):
        render_report(config(), results, out)
    assert {p: p.read_bytes() for p in declared_outputs(out)} == before
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == sorted(p.name for p in before)


def test_fake_metrics_match_what_finetune_writes(tmp_path: Path, trained_gpt: Path, tiny_data: Any) -> None:
    """The fake metrics.json of these tests has the keys gpt1.stages.finetune writes, both are what
    gpt1/pipeline/records.schema.yaml declares, and the reader accepts the real one."""
    from conftest import tiny_config

    from gpt1.pipeline import records
    from gpt1.pipeline.config import finetune_settings
    from gpt1.pipeline.files import without_timings
    from gpt1.training.finetuning import finetune_run

    settings = finetune_settings(tiny_config())
    real = finetune_run(settings, "mrpc", "pretrained", 0, trained_gpt, tiny_data.tokenizer).metrics
    written = {**without_timings(real), "numerics": FAKE_NUMERICS, "files": {}}  # as gpt1.stages.finetune writes it
    fake = metrics_json("mrpc", "pretrained", 0)
    assert records.problem("finetune_metrics", written) is None and records.problem("finetune_metrics", fake) is None
    assert set(fake) == set(written)
    assert set(fake["reports"]["mrpc"]) == set(written["reports"]["mrpc"])
    assert set(fake["train"]) == set(written["train"])
    path = tmp_path / "metrics.json"
    records.write("finetune_metrics", path, written)
    run = read_finetune_metrics(path, "mrpc", "pretrained", 0)
    assert set(run.scores["mrpc"].metrics) == {"f1", "accuracy"}


def test_plan_reads_the_lists_of_params() -> None:
    plan = Plan.from_params(config(seeds=[3]).root)
    assert plan.seeds == (3,) and "lstm" in plan.pretrain_models and plan.layer_transfer_tasks == ("mnli", "race")
    assert plan.why_not_planned("qnli", "lstm") is None
    assert build_report(plan, Path("/nonexistent")).summary["report.gaps"] > 0


# ---------------------------------------------------------------------------------------------------- MLflow


def test_the_report_run_logs_the_curated_metrics_that_exist() -> None:
    """The curated few under the names `dvc metrics show` gives them (the columns of MLflow's saved views), beside
    every number of the summary; a curated metric without its inputs (None in metrics.json) is not logged."""
    from gpt1.pipeline.tracking import VIEW_METRICS
    from gpt1.report.stage import CURATED_METRICS, report_metrics

    summary = {"table4.glue_average.pretrained": 61.5, "figure2_left.mnli.dev_accuracy": 40.0,
               "figure2_left.race.dev_accuracy": 30.0, "report.gaps": 3}
    assert report_metrics(summary) == {**summary, "glue": 61.5, "layers": 35.0, "gaps": 3}
    assert (*CURATED_METRICS, "gaps") == VIEW_METRICS  # every one a column of the views, in this order


def test_report_run_becomes_the_parent_of_its_pipeline_runs(tmp_path: Path, monkeypatch, capsys, new_store) -> None:
    from mlflow.tracking import MlflowClient

    from gpt1.pipeline.tracking import PIPELINE_RUN_ENV, stage_run
    from gpt1.report.stage import report_stage

    uri = new_store(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    cfg = config()
    experiment = cfg.root["mlflow"]["experiment"]
    monkeypatch.setenv(PIPELINE_RUN_ENV, "other-invocation")
    with stage_run("pretrain", "smoke", experiment, {}) as other:
        pass
    monkeypatch.setenv(PIPELINE_RUN_ENV, "pipeline-42")
    children = []
    for stage in ("pretrain", "finetune"):
        with stage_run(stage, "smoke", experiment, {"stage": stage}) as run:
            children.append(run.run_id)
    results, out = tmp_path / "results", tmp_path / "out"
    write_metrics(results, "sst2", "pretrained", 0, values={"sst2": {"accuracy": 0.9}})
    done = report_stage(cfg, results, out)

    client = MlflowClient(uri)
    parent = done["run_id"]
    assert sorted(done["children"]) == sorted(children)
    for child in children:
        assert client.get_run(child).data.tags["mlflow.parentRunId"] == parent
    assert "mlflow.parentRunId" not in client.get_run(other.run_id).data.tags
    assert "mlflow.parentRunId" not in client.get_run(parent).data.tags
    run = client.get_run(parent)
    assert run.info.status == "FINISHED" and run.data.tags["gpt1.stage"] == "report"
    assert run.info.run_name == "report pipeline-42"  # which pipeline's report, in the runs table
    assert run.data.metrics["table4.pretrained.sst2"] == pytest.approx(90.0)
    assert run.data.metrics["gaps"] == run.data.metrics["report.gaps"] > 0  # a curated metric, one of the columns
    # The profile's settings, as the stages log their sections: comparing two pipelines' reports shows what changed.
    assert run.data.params["finetune.lr"] == str(cfg.p["finetune"]["lr"])
    assert run.data.params["model.n_layer"] == str(cfg.p["model"]["n_layer"])
    url = f"http://127.0.0.1:5000/#/experiments/{run.info.experiment_id}/runs?workflowType=machine_learning"
    assert (f"report: the pipelines in MLflow's UI: {url}&viewStateShareKey=gpt1-pipelines (served by: mlflow ui "
            f"--backend-store-uri {uri})\n") in capsys.readouterr().out  # a store of its own: how to open it
    artifacts = {a.path for folder in ("tables", "figures") for a in client.list_artifacts(parent, folder)}
    assert {"tables/table2.md", "tables/table5.tex", "tables/summary.json", "figures/figure2_left.png",
            "figures/figure2_right.svg", "figures/pretraining.png"} <= artifacts


def test_table5_tests_the_full_model_against_each_ablation_on_paired_predictions(tmp_path: Path) -> None:
    from test_significance import write_predictions

    results, out = tmp_path / "results", tmp_path / "out"
    cfg = config(seeds=[0])
    write_everything(results, cfg)
    folder = results / "finetune" / "rte"
    write_predictions(folder / "pretrained" / "0" / "predictions.jsonl", [("rte", i, i % 2, i % 2) for i in range(40)])
    write_predictions(folder / "lstm" / "0" / "predictions.jsonl", [("rte", i, i % 2, 0) for i in range(40)])
    for variant in ("pretrained", "lstm"):
        record_beside(folder / variant / "0" / "predictions.jsonl", "metrics.json")
    render_report(cfg, results, out)
    test = cells(out, "table5")[("full vs lstm", "rte")]
    assert test["source"] == "paired_test" and float(test["value_exact"]) == pytest.approx(50.0)
    assert float(test["p_value"]) < 0.01 and test["examples"] == "40"
    markdown = (out / "tables" / "table5.md").read_text()
    tested = next(row for row in markdown_rows(markdown) if row[0] == "full vs LSTM w/ aux LM")
    assert tested[-1].startswith("**+50.0 (p 0.00") and tested[-1].endswith(")**")  # p < 0.05: bold
    assert all(text == "" for text in tested[1:-1])
    assert r"\textbf{+50.0 (p 0.00" in (out / "tables" / "table5.tex").read_text()
    assert 'col8 significant" >+50.0 (p 0.00' in (out / "tables" / "table5.html").read_text()  # RTE's column
    # no predictions for the other pairs: said, not invented
    assert "RTE (acc): full vs no_aux not tested" in markdown and "CoLA (mc): full vs lstm not tested" in markdown
    assert "Avg: full vs lstm not tested, a column has nothing to pair" in markdown  # an average of 1 column is not


TABLE5_REPORTS = {"cola": ["cola"], "sst2": ["sst2"], "mrpc": ["mrpc"], "stsb": ["stsb"], "qqp": ["qqp"],
                  "mnli": ["mnli_m", "mnli_mm"], "qnli": ["qnli"], "rte": ["rte"]}  # Table 5's columns' reports


def write_table5_predictions(results: Path, right: dict[str, float], examples: int = 30) -> None:
    """Seed 0's predictions.jsonl of every Table 5 column for each variant of `right`, which gets that fraction of
    binary labels right (seeded), recorded in the metrics.json beside it."""
    from test_significance import write_predictions

    rng = np.random.default_rng(5)
    for task, names in TABLE5_REPORTS.items():
        labels = rng.integers(0, 2, examples)
        for variant, fraction in right.items():
            guesses = np.where(rng.random(examples) < fraction, labels, 1 - labels)
            path = results / "finetune" / task / variant / "0" / "predictions.jsonl"
            write_predictions(path, [(r, i, int(labels[i]), int(guesses[i])) for r in names for i in range(examples)])
            record_beside(path, "metrics.json")


def test_table5_tests_the_average_where_every_column_has_predictions(tmp_path: Path) -> None:
    """Full vs LSTM on all 8 columns: the Avg test's difference is the mean of the columns' (MNLI's two reports the
    same size, so its pooled test is their mean too), and the tests' table gains an Avg column."""
    results, out = tmp_path / "results", tmp_path / "out"
    cfg = config(seeds=[0])
    write_everything(results, cfg)
    write_table5_predictions(results, {"pretrained": 0.8, "lstm": 0.6})
    render_report(cfg, results, out)
    table = cells(out, "table5")
    columns = [float(table[("full vs lstm", key)]["value_exact"]) for key in TABLE5_REPORTS]
    average = table[("full vs lstm", "avg")]
    assert float(average["value_exact"]) == pytest.approx(np.mean(columns), abs=1e-3)
    assert average["examples"] == str(30 * 9) and 0 < float(average["p_value"]) <= 1
    header = next(row for row in markdown_rows((out / "tables" / "table5.md").read_text()) if row[0] == "Comparison")
    assert header[-2:] == ["RTE (acc)", "Avg"]


def test_changed_metrics_and_predictions_are_refused_by_their_records(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    cfg = config(seeds=[0])
    write_everything(results, cfg)
    path = results / "finetune" / "rte" / "pretrained" / "0" / "metrics.json"
    path.write_text(path.read_text().replace('"accuracy": 0.', '"accuracy": 1.', 1))  # a number edited by hand
    with pytest.raises(ReportError, match=rf"{path}: content differs from its recorded content_sha256.*finetune"):
        render_report(cfg, results, out)
    write_metrics(results, "rte", "pretrained", 0)
    from test_significance import write_predictions

    predictions = path.with_name("predictions.jsonl")
    write_predictions(predictions, [("rte", i, i % 2, i % 2) for i in range(10)])
    record_beside(predictions, "metrics.json")
    with open(predictions, "a") as handle:
        handle.write('{"report": "rte", "split": "validation", "index": 99, "label": 1, "prediction": 1}\n')
    with pytest.raises(ReportError, match=rf"{predictions}: \d+ bytes, but .*metrics\.json records"):
        render_report(cfg, results, out)
    assert not out.exists()


def test_one_seed_cells_carry_a_bootstrap_standard_error_from_the_predictions(tmp_path: Path) -> None:
    from test_significance import write_predictions

    results, out = tmp_path / "results", tmp_path / "out"
    cfg = config(seeds=[0])
    write_everything(results, cfg)
    predictions = results / "finetune" / "rte" / "pretrained" / "0" / "predictions.jsonl"
    rows = [("rte", i, i % 2, (i % 2) if i % 4 else 1 - i % 2) for i in range(400)]  # 75% right
    write_predictions(predictions, rows)
    record_beside(predictions, "metrics.json")
    render_report(cfg, results, out)
    cell = cells(out, "table5")[("ours: Transformer w/ aux LM (full)", "rte")]
    # sqrt(p (1 - p) / n) = sqrt(0.75 * 0.25 / 400) = 2.17 points: the bootstrap agrees to a tenth or two
    assert float(cell["se"]) == pytest.approx(2.2, abs=0.2) and " ± " in cell["text"]
    no_predictions = cells(out, "table5")[("ours: Transformer w/ aux LM (full)", "cola")]
    assert no_predictions["se"] == "" and " ± " not in no_predictions["text"]


def test_over_seeds_a_cell_counts_the_evaluation_examples_noise_beside_the_seeds_spread(tmp_path: Path) -> None:
    """Two seeds on the same 400 examples: their spread alone (sd / sqrt(2) = 1.0 point) would hide the examples'
    noise (2.2 and 1.5 points, shared by the seeds: their mean); the error is sqrt(1.0**2 + mean**2)."""
    from test_significance import write_predictions

    from gpt1.evaluation.metrics import bootstrap_se
    from gpt1.evaluation.significance import BOOTSTRAP_SEED, RESAMPLES

    results, out = tmp_path / "results", tmp_path / "out"
    cfg = config(seeds=[0, 1])
    write_everything(results, cfg)
    right_every = {0: 4, 1: 10}  # seed 0 wrong on every 4th example (75% right), seed 1 on every 10th (90%)
    errors = []
    for seed, accuracy in ((0, 0.74), (1, 0.76)):
        write_metrics(results, "rte", "pretrained", seed, values={"rte": {"accuracy": accuracy}})
        rows = [("rte", i, i % 2, (i % 2) if i % right_every[seed] else 1 - i % 2) for i in range(400)]
        predictions = results / "finetune" / "rte" / "pretrained" / str(seed) / "predictions.jsonl"
        write_predictions(predictions, rows)
        record_beside(predictions, "metrics.json")
        errors.append(100 * bootstrap_se("accuracy", [r[2] for r in rows], [r[3] for r in rows], RESAMPLES,
                                         BOOTSTRAP_SEED))
    render_report(cfg, results, out)
    cell = cells(out, "table5")[("ours: Transformer w/ aux LM (full)", "rte")]
    assert (cell["value"], cell["sd"]) == ("75.0", "1.4")
    assert errors[0] > errors[1] + 0.5  # the two seeds' errors differ: their mean is no max or min
    assert float(cell["se"]) == pytest.approx(math.sqrt(1.0 + ((errors[0] + errors[1]) / 2) ** 2), abs=0.06)


def test_table5s_average_counts_only_the_seeds_every_column_has(tmp_path: Path) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    cfg = config(seeds=[0, 1])
    write_everything(results, cfg)
    shutil.rmtree(results / "finetune" / "cola" / "pretrained" / "1")  # CoLA's seed 1 never ran
    render_report(cfg, results, out)
    table = cells(out, "table5")
    assert table[("ours: Transformer w/ aux LM (full)", "cola")]["seeds"] == "0"
    assert table[("ours: Transformer w/ aux LM (full)", "sst2")]["seeds"] == "0 1"
    assert table[("ours: Transformer w/ aux LM (full)", "avg")]["seeds"] == "0"


def test_heldout_summary_is_each_models_last_point_and_their_paired_difference(tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_analyses(results, (0,))
    summary = build_report(Plan.from_params(config(seeds=[0]).root), results).summary
    tokens = np.array(ARTICLE_TOKENS)
    gpt = heldout_rows("gpt", [1500], 0.0)
    loss = sum(r["nll"] for r in gpt) / tokens.sum()
    assert summary["heldout.gpt.loss"] == pytest.approx(loss, abs=1e-4)
    assert summary["heldout.gpt.perplexity"] == pytest.approx(math.exp(loss), abs=1e-3)
    assert summary["heldout.gpt.word_perplexity"] == pytest.approx(
        math.exp(sum(r["nll"] for r in gpt) / sum(r["words"] for r in gpt)), abs=1e-3)
    assert summary["heldout.gpt.loss_se"] > 0.05  # the articles differ by up to 0.9 nats
    # The LSTM is 0.5 nats worse on every article: paired, the articles' own difficulty drops out.
    assert summary["heldout.lstm_minus_gpt.loss"] == pytest.approx(0.5, abs=1e-4)
    assert summary["heldout.lstm_minus_gpt.loss_se"] < 1e-3 < summary["heldout.gpt.loss_se"]
    assert summary["heldout.lstm_minus_gpt.p"] < 0.01


def test_a_heldout_csv_whose_points_scored_other_articles_is_refused_naming_it(tmp_path: Path) -> None:
    from gpt1.report.inputs import HELDOUT_FIELDS as READ_FIELDS
    from gpt1.report.inputs import check_heldout

    assert tuple(READ_FIELDS) == HELDOUT_FIELDS  # what the report reads is what the stage writes
    rows = heldout_rows("gpt", [1, 50], 0.0)
    assert check_heldout(tmp_path / "heldout.csv", rows) == rows
    with pytest.raises(ReportError, match=r"heldout\.csv: its points did not score the same .*re-run gpt1 zeroshot"):
        check_heldout(tmp_path / "heldout.csv", rows[:-1])
    with pytest.raises(ReportError, match="or none"):
        check_heldout(tmp_path / "heldout.csv", [{**r, "scored_tokens": 0} for r in rows])


def test_curated_metrics_copy_and_average_summary_keys_and_leave_gaps_null():
    summary = {"pretrain.gpt.val_perplexity": 212.3496, "figure2_left.mnli.dev_accuracy": 40.0,
               "figure2_left.race.dev_accuracy": 27.75, "table4.glue_average.pretrained": 42.1506, "report.gaps": 3}
    metrics = curated_metrics(summary)
    assert list(metrics) == [*CURATED_METRICS, "gaps"]
    assert metrics["ppl_gpt"] == 212.3496 and metrics["glue"] == 42.1506 and metrics["layers"] == 33.875
    assert metrics["ppl_lstm"] is None and metrics["zs_gpt"] is None and metrics["gaps"] == 3
    assert metrics["heldout_gpt"] is None


def test_a_paper_yaml_without_the_papers_recipe_is_refused_naming_the_key(tmp_path: Path) -> None:
    import yaml

    from gpt1.report.tables import PAPER_FILE

    broken = yaml.safe_load(PAPER_FILE.read_text())
    del broken["setup"]["recipe"]["lr"]
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(broken, allow_unicode=True))
    with pytest.raises(ReportError, match=r"paper\.yaml: key 'setup\.recipe\.lr' is missing"):
        load_paper(path)


@pytest.mark.parametrize(("record", "change", "message"), [
    ("finetune_metrics", lambda d: d.pop("updates"), "key 'updates' is missing"),
    ("finetune_metrics", lambda d: d.update(update_count=d.pop("updates")), "key 'updates' is missing"),
    ("finetune_metrics", lambda d: d.update(wall_seconds=1.0), "key 'wall_seconds' is not declared"),
    ("finetune_metrics", lambda d: d["reports"]["rte"]["counts"].update(eval="200"),
     "key 'reports.rte.counts.eval' is '200', expected integer"),
])  # fmt: skip
def test_a_renamed_or_undeclared_key_fails_where_the_record_is_written(tmp_path: Path, record: str, change: Any,
                                                                       message: str) -> None:
    """gpt1/pipeline/records.py: a writer that renames, drops or adds a key, or changes its type, fails in one place,
    before the file exists, naming the key; the same file written by hand fails the reader the same way."""
    from gpt1.pipeline import records

    data = metrics_json("rte", "pretrained", 0)
    change(data)
    path = tmp_path / "metrics.json"
    with pytest.raises(ValueError, match=f"{path}: the finetune_metrics record .*: {message}"):
        records.write(record, path, data)
    assert not path.exists()
    write_sealed_json(path, data)
    with pytest.raises(records.RecordError, match=f"{path}: {message}.*re-run the finetune stage"):
        records.read(record, path)


# ---------------------------------------------------------------------------------------------------- samples


SAMPLES = {"snapshots": [0, -1], "prompts": ["Once upon a time", "Kemi mended the"], "length": 12,
           "temperature": 1.0, "top_k": 40, "seed": 3}


def samples_tree(results: Path, trained_gpt: Path, tokenizer: Path) -> Path:
    """results/pretrain/gpt and results/tokenizer as the pipeline lays them out (a finished tiny pre-training)."""
    import shutil

    shutil.copytree(trained_gpt, results / layout.pretrain_dir("gpt"))
    shutil.copytree(tokenizer, results / layout.TOKENIZER)
    return results


def samples_page(results: Path, out: Path, **settings: Any) -> tuple[str, str]:
    from gpt1.report.stage import write_report

    report = build_report(Plan.from_params(config().root), results, samples={**SAMPLES, **settings})
    write_report(report, out)
    return tuple((out / layout.table(layout.SAMPLES, fmt)).read_text() for fmt in ("md", "html"))


def test_the_page_of_samples_holds_one_block_per_chosen_snapshot_drawn_by_gpt1_sampling(
        tmp_path: Path, trained_gpt: Path, tiny_data: Any) -> None:
    from html import unescape

    from gpt1.data.tokenizer import GPT1Tokenizer
    from gpt1.evaluation.sampling import SampleSettings, sample_text
    from gpt1.modeling.checkpoints import iter_snapshots, load_pretrained

    results = samples_tree(tmp_path / "results", trained_gpt, tiny_data.tokenizer)
    md, page = samples_page(results, tmp_path / "a")
    snapshots = list(iter_snapshots(trained_gpt))
    first, last = snapshots[0][0], snapshots[-1][0]
    headings = [line for line in md.splitlines() if line.startswith("## ")]
    assert len(snapshots) == 3 and headings == [
        f"## Snapshot 0: after {first['step']} update{'s' * (first['step'] != 1)} ({first['tokens']:,} tokens), "
        f"validation loss {first['val_loss']:.2f} (perplexity {math.exp(first['val_loss']):,.1f})",
        f"## Snapshot 2: after {last['step']} updates ({last['tokens']:,} tokens), validation loss "
        f"{last['val_loss']:.2f} (perplexity {math.exp(last['val_loss']):,.1f})"]  # the first and the last, in order
    assert md.count("```text") == 2 * 2 and md.count("Prompt: “Kemi mended the”") == 2
    # the command that writes the last snapshot's first text again, and each snapshot's file under its heading
    paths = [str(path) for _, path in iter_snapshots(results / layout.pretrain_dir("gpt"))]
    assert (f"`gpt1 sample --model {paths[2]} --tokenizer {results / layout.TOKENIZER} --prompt \"Once upon a time\" "
            f"--length 12 --temperature 1 --top-k 40 --seed 3` writes the last one's first text again") in md
    assert [line for line in md.splitlines() if line.startswith("`") and line.endswith(".safetensors`")] == [
        f"`{paths[0]}`", f"`{paths[2]}`"]
    # each block is the text gpt1.evaluation.sampling draws from that snapshot (what `gpt1 sample` prints)
    tokenizer = GPT1Tokenizer.load(tiny_data.tokenizer)
    drawn = [sample_text(load_pretrained(snapshots[i][1])[0], tokenizer, prompt, SampleSettings(12, 1.0, 40, 3))
             for i in (0, 2) for prompt in SAMPLES["prompts"]]
    assert [unescape(block.split("</pre>")[0]) for block in page.split("<pre>")[1:]] == drawn
    assert drawn[0] != drawn[2]  # the first snapshot and the last write other text
    # the same seed: the same page; another seed: other text; a snapshot given twice, or as -1 and 2: once
    assert samples_page(results, tmp_path / "b", snapshots=[-1, 0, 2]) == (md, page)
    assert samples_page(results, tmp_path / "c", seed=4)[0] != md


def test_the_page_of_samples_says_what_is_missing_and_refuses_a_snapshot_that_is_not_there(
        tmp_path: Path, trained_gpt: Path, tiny_data: Any) -> None:
    md, page = samples_page(tmp_path / "empty", tmp_path / "a")
    index = tmp_path / "empty" / "pretrain" / "gpt" / "snapshots" / "index.json"
    assert f"- {index}: missing; not produced yet (run gpt1 pretrain --model gpt)" in md and str(index) in page
    results = samples_tree(tmp_path / "results", trained_gpt, tiny_data.tokenizer)
    with pytest.raises(ReportError, match=r"samples\.snapshots: 3, but .*index\.json holds 3 snapshots; give "
                                          r"indices from -3 to 2"):
        samples_page(results, tmp_path / "b", snapshots=[0, 3])
    with pytest.raises(ReportError, match=r"^samples\.prompts\[1\]: ' ' encodes to no tokens; give some text"):
        samples_page(results, tmp_path / "c", prompts=["Once upon a time", " "])
    assert not (tmp_path / "c").exists()
