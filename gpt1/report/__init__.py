"""The paper's Tables 2-5 and Figure 2 beside ours: read the stage outputs, build tables and figures, render them.

Inputs (all under RESULTS = results/<profile>, only for the lists of params.yaml):
  finetune/<task>/<variant>/<seed>/metrics.json    gpt1.stages.finetune   Tables 2-5
  finetune/<task>/<variant>/<seed>/predictions.jsonl                Table 5's paired tests
                                                                    (gpt1.evaluation.significance)
  analyses/layers/<task>/<seed>/layers.csv          gpt1.stages.layers     Figure 2 (left)
  analyses/zeroshot/<model>/zeroshot.csv            gpt1.stages.zeroshot   Figure 2 (right)
  pretrain/<model>/curves.csv                       gpt1.stages.pretrain   pre-training curves
  pretrain/gpt/snapshots/, tokenizer/               gpt1.stages.pretrain, gpt1.stages.bpe   the page of samples
Outputs (OUT = results/<profile>): OUT/tables/table{2,3,4,5}.{md,tex,csv,html}, OUT/tables/summary.json (every
number of the tables and figures), OUT/tables/samples.{md,html} (what the GPT writes at a few of its pre-training
snapshots: params.yaml's `samples` section, drawn by gpt1.evaluation.sampling), OUT/metrics.json (a curated few per
stage, for `dvc metrics` and `dvc exp show`) and OUT/figures/{figure2_left,figure2_right,pretraining}.{png,svg}, all
renamed into place together at the end. The paper's numbers come from gpt1/report/paper.yaml only.

Modules, each importing only those above it:
  numbers     rounding half up as the paper prints, exact means of printed numbers
  inputs      the runs the plan asks for (gpt1.pipeline.plan), gaps, reading and verifying the pipeline's outputs
  tables      the table model: paper.yaml's tables, our cells beside them, Table 5's paired tests
  renderers   a table as Markdown, LaTeX, CSV and HTML: its cells as pandas DataFrames, rendered by pandas
  figures     Figure 2 and the pre-training curves
  samples     the page of samples: the chosen snapshots continuing the prompts (gpt1.evaluation.sampling; torch
              loads there only)
  stage       the summary, writing every output together, `report_stage` and its MLflow run
  compare     `gpt1 compare`: two results trees cell by cell (a user's command, no stage)
"""

import importlib
from typing import Any

from gpt1.pipeline.errors import ReportError

# The package's names, each loaded from its module on first use (PEP 562): `gpt1.report.inputs` alone (gpt1 compare)
# does not load the stage, its figures and MLflow. Code that the workflow runs imports the modules themselves, so
# gpt1.pipeline.codedeps sees them.
_NAMES = {
    "CURATED_METRICS": "stage",
    "FIGURES": "figures",
    "FIGURE_BUILDERS": "figures",
    "build_report": "stage",
    "curated_metrics": "stage",
    "declared_outputs": "stage",
    "load_paper": "tables",
    "paper_average": "numbers",
    "read_finetune_metrics": "inputs",
    "render_report": "stage",
    "report_stage": "stage",
    "round_half_up": "numbers",
}
__all__ = ["ReportError", *_NAMES]


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
