"""`gpt1 report`: read every input, build the tables, the summary, the page of samples and the figures, write them
all together, and make the report's MLflow run the parent of this pipeline invocation's runs.

Inputs (all under RESULTS = results/<profile>, only for the lists of params.yaml):
  finetune/<task>/<variant>/<seed>/metrics.json    gpt1.stages.finetune   Tables 2-5
  finetune/<task>/<variant>/<seed>/predictions.jsonl                Table 5's paired tests
                                                                    (gpt1.evaluation.significance)
  analyses/layers/<task>/<seed>/layers.csv          gpt1.stages.layers     Figure 2 (left)
  analyses/zeroshot/<model>/zeroshot.csv            gpt1.stages.zeroshot   Figure 2 (right)
  analyses/zeroshot/<model>/heldout.csv             gpt1.stages.zeroshot   held-out perplexity (WikiText-2)
  pretrain/<model>/curves.csv                       gpt1.stages.pretrain   pre-training curves
  pretrain/gpt/snapshots/, tokenizer/               gpt1.stages.pretrain, gpt1.stages.bpe   the page of samples
Outputs (OUT = results/<profile>): OUT/tables/table{2,3,4,5}.{md,tex,csv,html}, OUT/tables/summary.json (every
number of the tables and figures), OUT/tables/samples.{md,html} (what the GPT writes at a few of its pre-training
snapshots: params.yaml's `samples` section, drawn by gpt1.evaluation.sampling), OUT/metrics.json (a curated few per
stage, for `dvc metrics` and `dvc exp show`) and OUT/figures/{figure2_left,figure2_right,pretraining}.{png,svg}, all
renamed into place together at the end. The paper's numbers come from gpt1/report/paper.yaml only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpt1.pipeline import layout
from gpt1.pipeline.files import staged_outputs, write_json
from gpt1.pipeline.plan import Plan
from gpt1.report.figures import (
    FIGURE_BUILDERS,
    ZEROSHOT_TASKS,
    layer_means,
    save_figure,
)
from gpt1.report.inputs import (
    Analyses,
    Finetuned,
    Gap,
    HeldoutPoint,
    collect_analyses,
    collect_finetune,
    gap_notes,
    heldout_points,
    mixed_numerics,
)
from gpt1.report.renderers import RENDERERS
from gpt1.report.samples import RENDERERS as SAMPLE_RENDERERS
from gpt1.report.samples import Samples, draw_samples, no_samples
from gpt1.report.tables import Table, build_tables, finetune_pairs, load_paper

if TYPE_CHECKING:
    from gpt1.pipeline.config import Config

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
    """The last point of each curve: dev accuracy with all layers, final zero-shot scores (each with its standard
    error, and with one seed the paired p-value against the curve's first point), final perplexity."""
    summary: dict[str, float] = {}
    for task, curve in layer_means(analyses).items():
        summary[f"figure2_left.{task}.dev_accuracy"] = _rounded(curve["dev"][-1])
        summary[f"figure2_left.{task}.dev_se"] = _rounded(curve["dev_se"][-1])
        seeds = analyses.layers[task]
        if len(seeds) == 1:
            last = max(next(iter(seeds.values())), key=lambda row: row["layers"])
            if last["p_vs_first"] is not None:
                summary[f"figure2_left.{task}.p_vs_first"] = _rounded(last["p_vs_first"])
    for model, rows in analyses.zeroshot.items():
        for task in ZEROSHOT_TASKS:
            task_rows = [r for r in rows if r["task"] == task]
            if task_rows:
                last = max(task_rows, key=lambda row: row["step"])
                summary[f"figure2_right.{model}.{task}.normalised"] = _rounded(last["normalised"])
                summary[f"figure2_right.{model}.{task}.normalised_se"] = _rounded(last["normalised_se"])
                if last["p_vs_first"] is not None:
                    summary[f"figure2_right.{model}.{task}.p_vs_first"] = _rounded(last["p_vs_first"])
    for model, rows in analyses.curves.items():
        perplexity = [r for r in rows if r["val_perplexity"] is not None]
        if perplexity:
            last = max(perplexity, key=lambda r: r["step"])
            summary[f"pretrain.{model}.val_perplexity"] = _rounded(last["val_perplexity"])
    return {**summary, **heldout_summary(analyses)}


def heldout_summary(analyses: Analyses) -> dict[str, float]:
    """Each model's held-out perplexity at its last point, and the LSTM's loss minus the GPT's on the same articles
    (the paired bootstrap over articles), where both are there and scored the same articles."""
    summary: dict[str, float] = {}
    last: dict[str, HeldoutPoint] = {}
    for model, rows in analyses.heldout.items():
        points = heldout_points(rows)
        if points:
            last[model] = points[-1]
            result = points[-1].result()
            for key in ("loss", "loss_se", "perplexity", "word_perplexity"):
                summary[f"heldout.{model}.{key}"] = _rounded(result[key])
    paired = last["lstm"].minus(last["gpt"]) if {"gpt", "lstm"} <= last.keys() else None
    if paired is not None:
        test, se = paired
        summary.update({"heldout.lstm_minus_gpt.loss": _rounded(test.difference),
                        "heldout.lstm_minus_gpt.loss_se": _rounded(se),
                        "heldout.lstm_minus_gpt.p": _rounded(test.p_value)})
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
    "heldout_gpt": ("heldout.gpt.perplexity",),
    "heldout_lstm": ("heldout.lstm.perplexity",),
}


def curated_metrics(summary: Mapping[str, float]) -> dict[str, float | None]:
    """The few numbers per stage that `dvc metrics show`, `dvc metrics diff` and `dvc exp show` print."""
    curated: dict[str, float | None] = {}
    for name, keys in CURATED_METRICS.items():
        present = [summary[key] for key in keys if key in summary]
        curated[name] = _rounded(sum(present) / len(present)) if present else None
    curated["gaps"] = summary.get("report.gaps")
    return curated


# ---------------------------------------------------------------------------------------------------- the report


@dataclass
class ReportContents:
    """Everything the stage writes, built before anything is written."""

    tables: list[Table]
    analyses: Analyses
    finetuned: Finetuned
    summary: dict[str, float]
    samples: Samples  # the page of what the GPT writes at a few pre-training snapshots

    @property
    def gaps(self) -> list[Gap]:
        return [g for gaps in self.finetuned.gaps.values() for g in gaps] + [
            g for gaps in self.analyses.gaps.values() for g in gaps
        ]


def build_report(plan: Plan, results_dir: Path, paper: Mapping[str, Any] | None = None,
                 samples: Mapping[str, Any] | None = None) -> ReportContents:
    """Read and validate every input, build every table and, with `samples` (the profile's samples section), draw
    the page of samples; nothing is written (a malformed input fails here)."""
    paper = paper or load_paper()
    finetuned = collect_finetune(results_dir, plan, finetune_pairs(paper))
    analyses = collect_analyses(results_dir, plan)
    tables = build_tables(paper, finetuned, plan, results_dir)
    drawn = (no_samples("no samples settings were given") if samples is None else
             draw_samples(samples, results_dir / layout.pretrain_dir("gpt"), results_dir / layout.TOKENIZER))
    report = ReportContents(tables, analyses, finetuned, {}, drawn)
    report.summary = build_summary(tables, analyses, len(report.gaps))
    return report


def declared_outputs(out_dir: str | Path) -> list[Path]:
    """Every file the stage writes, in the order it writes them (the Snakemake rule and dvc.yaml list these)."""
    return [Path(out_dir) / path for path in layout.report_outputs()]


def write_report(report: ReportContents, out_dir: Path) -> list[Path]:
    """Render every output to temporary names and rename them all together at the end."""
    finals = declared_outputs(out_dir)
    with staged_outputs(*finals) as temps:
        temp_of = dict(zip(finals, temps, strict=True))
        for table in report.tables:
            for fmt, render in RENDERERS.items():
                temp_of[out_dir / layout.table(table.name, fmt)].write_text(render(table), encoding="utf-8")
        write_json(temp_of[out_dir / layout.TABLES / layout.SUMMARY], report.summary)
        for fmt, render in SAMPLE_RENDERERS.items():
            temp_of[out_dir / layout.table(layout.SAMPLES, fmt)].write_text(render(report.samples), encoding="utf-8")
        write_json(temp_of[out_dir / layout.METRICS], curated_metrics(report.summary), sort_keys=False)
        for name, build in FIGURE_BUILDERS.items():
            figure = build(report.analyses)
            for fmt in layout.FIGURE_FORMATS:
                save_figure(figure, temp_of[out_dir / layout.figure(name, fmt)], fmt)
    return finals


def render_report(cfg: Config, results_dir: str | Path, out_dir: str | Path) -> ReportContents:
    """The stage without MLflow: read RESULTS for cfg's lists, write OUT/tables and OUT/figures."""
    report = build_report(Plan.from_params(cfg.root), Path(results_dir), samples=cfg.section("samples"))
    write_report(report, Path(out_dir))
    return report


# ---------------------------------------------------------------------------------------------------- MLflow


def report_params(cfg: Config, results_dir: Path, out_dir: Path, plan: Plan) -> dict[str, Any]:
    """The report run's parameters: every setting of the profile (as the stages log their sections: `finetune.lr`,
    ...), so that comparing two pipelines' report runs in `mlflow ui` shows the settings that changed, then what the
    report read."""
    return {
        **cfg.p,
        "results_dir": str(results_dir),
        "out_dir": str(out_dir),
        "finetune_tasks": list(plan.finetune_tasks),
        "finetune_variants": list(plan.finetune_variants),
        "seeds": list(plan.seeds),
        "ablation_tasks": list(plan.ablation_tasks),
        "layer_transfer_tasks": list(plan.layer_transfer_tasks),
        "pretrain_models": list(plan.pretrain_models),
    }


def report_metrics(summary: Mapping[str, float]) -> dict[str, float]:
    """The report run's metrics: every number of the summary, and the curated few (those present) under the names
    `dvc metrics show` gives them, the columns of `mlflow ui`'s saved view (gpt1.pipeline.tracking.VIEW_METRICS)."""
    curated = {name: value for name, value in curated_metrics(summary).items() if value is not None}
    return {**summary, **curated}


def report_run_name() -> str:
    """"report <pipeline id>" ($GPT1_PIPELINE_RUN): which pipeline's report, and parent, a row of the runs is."""
    from gpt1.pipeline.tracking import pipeline_run_name

    pipeline = pipeline_run_name()
    return f"report {pipeline}" if pipeline else "report"


def report_stage(cfg: Config, results_dir: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """`gpt1 report`: Tables 2-5 (Markdown, LaTeX, CSV, HTML), summary.json, the page of samples and the figures under
    OUT, written together; one MLflow run holding them as artifacts, made the parent of this pipeline invocation's
    runs."""
    from gpt1.pipeline.tracking import nest_pipeline_runs, published_run, ui_line

    results_dir, out_dir = Path(results_dir), Path(out_dir)
    plan = Plan.from_params(cfg.root)
    # malformed inputs fail before a run is opened or a file written
    report = build_report(plan, results_dir, samples=cfg.section("samples"))
    for note in gap_notes(report.gaps):
        print(f"report: gap: {note}")
    mixed = mixed_numerics(report.finetuned)
    if mixed is not None:
        print(f"report: {mixed}")
    params = report_params(cfg, results_dir, out_dir, plan)
    with published_run("report", cfg, params, name=report_run_name()) as run:
        outputs = write_report(report, out_dir)
        run.log_metrics(report_metrics(report.summary))
        for path in outputs:
            run.log_output(path, path.parent.name)
        children = nest_pipeline_runs(run.run_id)
        run.set_tags({"gpt1.children": len(children), "gpt1.gaps": len(report.gaps)})
    print(f"report: {len(outputs)} files under {out_dir}; {len(report.gaps)} gaps; {len(children)} runs nested")
    print(f"report: {ui_line(run.experiment_id)}")
    return {
        "run_id": run.run_id,
        "outputs": [str(p) for p in outputs],
        "summary": report.summary,
        "gaps": [g.note for g in report.gaps],
        "children": children,
    }
