"""`mlflow ui` as a user sees it (docs/mlflow_ui.md): tools/mlflow_screens.py on a store this test makes, two pipelines
logged through gpt1.pipeline.tracking as the stages log them, the second with a changed setting (finetune.lr).

Needs Debian's `chromium` (skipped without it); starts `mlflow server` and the browser (about a minute each run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "mlflow_screens.py"
DOCS = REPO / "docs" / "mlflow_ui"
CHROMIUM = shutil.which("chromium")
EXPERIMENT = "gpt1"
# (pipeline id, the setting changed, its GLUE average)
PIPELINES = (("snakemake-20260101-090000-101", "finetune.lr=0.001", 61.5),
             ("snakemake-20260102-090000-202", "finetune.lr=0.0001", 64.25))

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium)"),
]


# The stage runs of a pipeline as the smoke profile names them: (stage, run name, the profile's section it logs,
# metrics at glue = 0), then the report. The numbers are made up, smoke-sized.
STAGES = (
    ("fetch", "fetch", "corpus", {"documents": 400, "text_bytes": 1.2e6}),
    ("clean", "clean", "corpus", {"train_documents": 380, "validation_documents": 20}),
    ("bpe", "bpe", "bpe", {"merges": 2000, "train_seconds": 3.1}),
    ("encode", "encode", "encode", {"train_tokens": 310_000, "validation_tokens": 16_000}),
    ("pretrain-gpt", "pretrain gpt", "pretrain", {"val_loss": 5.98, "val_perplexity": 396.0}),
    ("pretrain-lstm", "pretrain lstm", "pretrain", {"val_loss": 6.21, "val_perplexity": 498.0}),
    ("finetune", "finetune sst2 pretrained seed0", "finetune", {"sst2.accuracy": 0.0}),
    ("finetune", "finetune sst2 scratch seed0", "finetune", {"sst2.accuracy": -0.08}),
    ("finetune", "finetune rte pretrained seed0", "finetune", {"rte.accuracy": -0.1}),
    ("zeroshot", "zeroshot gpt", "zeroshot", {"sst2_normalised": 0.06, "cola_normalised": 0.01}),
)


def log_pipeline(setenv: Callable[[str, str], None], pipeline: str, override: str, glue: float) -> None:
    """The stage runs of one pipeline, then its report run, logged as the stages log them."""
    from gpt1.pipeline.config import load_config
    from gpt1.pipeline.plan import Plan
    from gpt1.pipeline.tracking import PIPELINE_RUN_ENV, nest_pipeline_runs, stage_run
    from gpt1.report.stage import report_metrics, report_params, report_run_name

    setenv(PIPELINE_RUN_ENV, pipeline)
    cfg = load_config(REPO / "params.yaml", "smoke", [override])
    for stage, name, section, metrics in STAGES:
        with stage_run(stage, cfg.profile, EXPERIMENT, {section: cfg.p[section]}, name=name) as run:
            run.log_metrics({key: value + glue / 100 if key.endswith("accuracy") else value
                             for key, value in metrics.items()})
    summary = {"pretrain.gpt.val_perplexity": 396.0, "pretrain.lstm.val_perplexity": 498.0,
               "table4.glue_average.pretrained": glue, "table4.glue_average.scratch": glue - 8.0,
               "figure2_right.gpt.sst2.normalised": 0.06, "report.gaps": 0}
    results = REPO / "results" / cfg.profile
    params = report_params(cfg, results, results, Plan.from_params(cfg.root))
    with stage_run("report", cfg.profile, EXPERIMENT, params, name=report_run_name()) as run:
        run.log_metrics(report_metrics(summary))
        nest_pipeline_runs(run.run_id)


def make_store(folder: Path, setenv: Callable[[str, str], None]) -> str:
    """A sqlite store under `folder` with PIPELINES logged into it; returns its URI."""
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    setenv("MLFLOW_TRACKING_URI", uri)
    for pipeline, override, glue in PIPELINES:
        log_pipeline(setenv, pipeline, override, glue)
    return uri


def screens(uri: str, out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), "--backend-store-uri", uri, "--out", str(out), *args],
                          capture_output=True, text=True, timeout=600)


def test_every_view_shows_the_pipelines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPT1_WRITE_MLFLOW_SCREENS=1: the screenshots go to docs/mlflow_ui/, which docs/mlflow_ui.md shows."""
    uri = make_store(tmp_path, monkeypatch.setenv)
    out = DOCS if os.environ.get("GPT1_WRITE_MLFLOW_SCREENS") == "1" else tmp_path / "shots"
    done = screens(uri, out)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert list(lines) == ["home", "experiment", "training", "runs", "reports", "compare"]
    assert "opens on its 'overview' tab" in lines["experiment"]  # MLflow 3.17, whatever the experiment's tags say
    assert "opens on 'runs', 2 rows" in lines["training"]  # the stages' runs folded under the two reports
    assert "grouped by gpt1.pipeline_run" in lines["runs"] and "in sight: ppl_gpt, ppl_lstm, glue" in lines["runs"]
    assert "2 rows" in lines["reports"]
    assert lines["compare"].startswith(f"{PIPELINES[1][0]} vs {PIPELINES[0][0]}, ")  # as the view lists them
    assert "parameters that differ: finetune.lr: 0.0001 -> 0.001 -> " in lines["compare"]  # that one alone
    assert sorted(p.name for p in out.iterdir()) == [
        "compare.png", "experiment.png", "home.png", "reports.png", "runs.png", "training.png"]


def test_a_view_that_shows_nothing_fails_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without its saved view (deleted in the UI, say) the address lands on the plain runs table: the tool says so."""
    from mlflow.tracking import MlflowClient

    from gpt1.pipeline.tracking import PIPELINES_VIEW, VIEW_TAG_PREFIX

    uri = make_store(tmp_path, monkeypatch.setenv)
    client = MlflowClient(uri)
    client.delete_experiment_tag(client.get_experiment_by_name(EXPERIMENT).experiment_id,
                                 VIEW_TAG_PREFIX + PIPELINES_VIEW)
    done = screens(uri, tmp_path / "shots", "--views", "runs", "--timeout", "10")
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stderr.strip()
    assert said.startswith("mlflow_screens: runs: the view is empty or wrong, it does not show "), said
    assert f"'Group: {PIPELINES[1][0]}'" in said and "gpt1 pipelines (the Views button says" in said
    assert said.endswith(f"({tmp_path / 'shots' / 'runs.png'})") and len(said.splitlines()) == 1
