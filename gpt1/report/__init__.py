"""The paper's Tables 2-5 and Figure 2 beside ours: read the stage outputs, build tables and figures, render them.

Inputs (all under RESULTS = results/<profile>, only for the lists of params.yaml):
  finetune/<task>/<variant>/<seed>/metrics.json    gpt1.finetune   Tables 2-5
  finetune/<task>/<variant>/<seed>/predictions.jsonl                Table 5's paired tests (gpt1.significance)
  analyses/layers/<task>/<seed>/layers.csv          gpt1.layers     Figure 2 (left)
  analyses/zeroshot/<model>/zeroshot.csv            gpt1.zeroshot   Figure 2 (right)
  pretrain/<model>/curves.csv                       gpt1.pretrain   pre-training curves
  pretrain/gpt/snapshots/, tokenizer/               gpt1.pretrain, gpt1.bpe   the page of samples
Outputs (OUT = results/<profile>): OUT/tables/table{2,3,4,5}.{md,tex,csv,html}, OUT/tables/summary.json (every
number of the tables and figures), OUT/tables/samples.{md,html} (what the GPT writes at a few of its pre-training
snapshots: params.yaml's `samples` section, drawn by gpt1.sampling), OUT/metrics.json (a curated few per stage, for
`dvc metrics` and `dvc exp show`) and OUT/figures/{figure2_left,figure2_right,pretraining}.{png,svg}, all renamed
into place together at the end. The paper's numbers come from gpt1/paper.yaml only.

Modules, each importing only those above it:
  numbers     rounding half up as the paper prints, exact means of printed numbers
  inputs      the plan (params.yaml's lists), gaps, reading and verifying the pipeline's outputs
  tables      the table model: paper.yaml's tables, our cells beside them, Table 5's paired tests
  renderers   a table as Markdown, LaTeX, CSV and HTML: its cells as pandas DataFrames, rendered by pandas
  figures     Figure 2 and the pre-training curves
  samples     the page of samples: the chosen snapshots continuing the prompts (gpt1.sampling; torch loads there only)
  stage       the summary, writing every output together, `report_stage` and its MLflow run
"""

from gpt1.errors import ReportError
from gpt1.report.figures import FIGURE_BUILDERS, FIGURES
from gpt1.report.inputs import read_finetune_metrics
from gpt1.report.numbers import paper_average, round_half_up
from gpt1.report.stage import (
    CURATED_METRICS,
    adopt_pipeline_runs,
    build_report,
    curated_metrics,
    declared_outputs,
    render_report,
    report_stage,
)
from gpt1.report.tables import load_paper

__all__ = [
    "CURATED_METRICS",
    "FIGURES",
    "FIGURE_BUILDERS",
    "ReportError",
    "adopt_pipeline_runs",
    "build_report",
    "curated_metrics",
    "declared_outputs",
    "load_paper",
    "paper_average",
    "read_finetune_metrics",
    "render_report",
    "report_stage",
    "round_half_up",
]
